//! The flow control configuration (flowcontrol.apiserver.k8s.io/v1): upstream's default
//! FlowSchemas and PriorityLevelConfigurations as API objects — the mandatory `exempt` and
//! `catch-all` plus the suggested system, node-high, leader-election, workload-high,
//! workload-low and global-default — and the parsing of such objects (defaults or edited) into
//! what the dispatcher matches and counts with.

use rkube_api::authz::{Attributes, UserInfo};
use serde_json::{json, Value};

pub const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    User,
    Namespace,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Subject {
    User(String),
    Group(String),
    /// namespace, name (`*`: any in the namespace)
    ServiceAccount(String, String),
}

impl Subject {
    fn matches(&self, user: &UserInfo) -> bool {
        match self {
            Subject::User(n) => n == "*" || user.name == *n,
            Subject::Group(g) => g == "*" || user.in_group(g),
            Subject::ServiceAccount(ns, name) => user
                .name
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(n, a)| n == ns && (name == "*" || a == name)),
        }
    }
}

/// One resource rule (verbs × groups × resources, in namespaces or at the cluster scope) or
/// non-resource rule (verbs × URLs); `*` matches anything.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    Resource {
        verbs: Vec<String>,
        groups: Vec<String>,
        resources: Vec<String>,
        cluster_scope: bool,
        namespaces: Vec<String>,
    },
    NonResource {
        verbs: Vec<String>,
        urls: Vec<String>,
    },
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

impl Rule {
    fn matches(&self, a: &Attributes) -> bool {
        match self {
            Rule::Resource {
                verbs,
                groups,
                resources,
                cluster_scope,
                namespaces,
            } => {
                a.resource_request
                    && has(verbs, &a.verb)
                    && has(groups, &a.api_group)
                    && has(resources, &a.resource)
                    && if a.namespace.is_empty() {
                        *cluster_scope
                    } else {
                        has(namespaces, &a.namespace)
                    }
            }
            Rule::NonResource { verbs, urls } => {
                !a.resource_request
                    && has(verbs, &a.verb)
                    && urls.iter().any(|u| {
                        u == "*"
                            || *u == a.path
                            || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
                    })
            }
        }
    }
}

/// A `PolicyRulesWithSubjects`: any subject and any rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub subjects: Vec<Subject>,
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FlowSchema {
    pub name: String,
    pub uid: String,
    pub precedence: u32,
    pub level: String,
    pub distinguisher: Option<By>,
    pub policies: Vec<Policy>,
}

impl FlowSchema {
    pub fn matches(&self, user: &UserInfo, a: &Attributes) -> bool {
        self.policies.iter().any(|p| {
            p.subjects.iter().any(|s| s.matches(user)) && p.rules.iter().any(|r| r.matches(a))
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    pub name: String,
    pub uid: String,
    pub exempt: bool,
    pub shares: u32,
    pub queues: usize,
    pub hand_size: usize,
    /// 0 with `limitResponse: Reject`: nothing waits.
    pub queue_length_limit: usize,
}

/// A stable UID for a built-in object (the same on every apiserver), used until the object
/// is stored with its own.
fn uid(kind: &str, name: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in kind.bytes().chain(name.bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    let g: u64 = h.rotate_left(17) ^ 0x9e3779b97f4a7c15;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        g & 0xfff,
        g >> 16
    )
}

fn metadata(name: &str) -> Value {
    json!({"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}})
}

/// A PriorityLevelConfiguration: exempt, or limited with (queues, hand size, queue length
/// limit), or limited rejecting what it cannot run (`queues` 0).
fn level_object(name: &str, shares: u32, lendable: u32, queuing: Option<(u32, u32, u32)>) -> Value {
    let spec = match (name, queuing) {
        ("exempt", _) => json!({"type": "Exempt",
            "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}),
        (_, Some((queues, hand, limit))) => json!({"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares, "lendablePercent": lendable,
            "limitResponse": {"type": "Queue",
                "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": limit}}}}),
        (_, None) => json!({"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares, "lendablePercent": lendable,
            "limitResponse": {"type": "Reject"}}}),
    };
    json!({"apiVersion": API_VERSION, "kind": "PriorityLevelConfiguration",
        "metadata": metadata(name), "spec": spec})
}

fn users(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"kind": "User", "user": {"name": n}}))
        .collect()
}

fn groups(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"kind": "Group", "group": {"name": n}}))
        .collect()
}

fn resource_rule(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": api_groups, "resources": resources,
        "clusterScope": true, "namespaces": ["*"]})
}

fn everything(subjects: Vec<Value>) -> Value {
    json!({"subjects": subjects,
        "resourceRules": [resource_rule(&["*"], &["*"], &["*"])],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]})
}

fn schema_object(
    name: &str,
    precedence: u32,
    level: &str,
    by: Option<&str>,
    rules: Vec<Value>,
) -> Value {
    let mut spec = json!({"matchingPrecedence": precedence,
        "priorityLevelConfiguration": {"name": level}, "rules": rules});
    if let Some(by) = by {
        spec["distinguisherMethod"] = json!({ "type": by });
    }
    json!({"apiVersion": API_VERSION, "kind": "FlowSchema", "metadata": metadata(name), "spec": spec})
}

/// Upstream's default PriorityLevelConfigurations.
pub fn level_objects() -> Vec<Value> {
    vec![
        level_object("exempt", 0, 0, None),
        level_object("system", 30, 33, Some((64, 6, 50))),
        level_object("node-high", 40, 25, Some((64, 6, 50))),
        level_object("leader-election", 10, 0, Some((16, 4, 50))),
        level_object("workload-high", 40, 50, Some((128, 6, 50))),
        level_object("workload-low", 100, 90, Some((128, 6, 50))),
        level_object("global-default", 20, 50, Some((128, 6, 50))),
        level_object("catch-all", 5, 0, None),
    ]
}

/// Upstream's default FlowSchemas.
pub fn schema_objects() -> Vec<Value> {
    let everyone = || groups(&["system:unauthenticated", "system:authenticated"]);
    vec![
        schema_object(
            "exempt",
            1,
            "exempt",
            None,
            vec![everything(groups(&["system:masters"]))],
        ),
        schema_object(
            "probes",
            2,
            "exempt",
            None,
            vec![json!({"subjects": everyone(),
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}]})],
        ),
        schema_object(
            "system-leader-election",
            100,
            "leader-election",
            Some("ByUser"),
            vec![
                json!({"subjects": users(&["system:kube-controller-manager", "system:kube-scheduler"]),
                "resourceRules": [resource_rule(&["get", "create", "update"], &["coordination.k8s.io"], &["leases"])]}),
            ],
        ),
        schema_object(
            "system-node-high",
            400,
            "node-high",
            Some("ByUser"),
            vec![json!({"subjects": groups(&["system:nodes"]),
                "resourceRules": [resource_rule(&["*"], &[""], &["nodes"]),
                    resource_rule(&["*"], &["coordination.k8s.io"], &["leases"])]})],
        ),
        schema_object(
            "system-nodes",
            500,
            "system",
            Some("ByUser"),
            vec![everything(groups(&["system:nodes"]))],
        ),
        schema_object(
            "kube-controller-manager",
            800,
            "workload-high",
            Some("ByNamespace"),
            vec![everything(users(&["system:kube-controller-manager"]))],
        ),
        schema_object(
            "kube-scheduler",
            800,
            "workload-high",
            Some("ByNamespace"),
            vec![everything(users(&["system:kube-scheduler"]))],
        ),
        schema_object(
            "service-accounts",
            9000,
            "workload-low",
            Some("ByUser"),
            vec![everything(groups(&["system:serviceaccounts"]))],
        ),
        schema_object(
            "global-default",
            9900,
            "global-default",
            Some("ByUser"),
            vec![everything(everyone())],
        ),
        schema_object(
            "catch-all",
            10000,
            "catch-all",
            Some("ByUser"),
            vec![everything(groups(&["*"]))],
        ),
    ]
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    items(v, key)
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn object_uid(obj: &Value, kind: &str, name: &str) -> String {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map_or_else(|| uid(kind, name), str::to_string)
}

/// The array at `key` (empty when absent).
fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A `PolicyRulesWithSubjects` object.
fn parse_policy(p: &Value) -> Policy {
    let subjects = items(p, "subjects")
        .iter()
        .filter_map(parse_subject)
        .collect();
    let resource_rules = items(p, "resourceRules").iter().map(|r| Rule::Resource {
        verbs: strings(r, "verbs"),
        groups: strings(r, "apiGroups"),
        resources: strings(r, "resources"),
        cluster_scope: r
            .get("clusterScope")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        namespaces: strings(r, "namespaces"),
    });
    let url_rules = items(p, "nonResourceRules")
        .iter()
        .map(|r| Rule::NonResource {
            verbs: strings(r, "verbs"),
            urls: strings(r, "nonResourceURLs"),
        });
    Policy {
        subjects,
        rules: resource_rules.chain(url_rules).collect(),
    }
}

/// A subject (None: an unknown kind or a missing name).
fn parse_subject(s: &Value) -> Option<Subject> {
    let get = |ptr: &str| s.pointer(ptr).and_then(Value::as_str).map(str::to_string);
    match s.get("kind")?.as_str()? {
        "User" => Some(Subject::User(get("/user/name")?)),
        "Group" => Some(Subject::Group(get("/group/name")?)),
        "ServiceAccount" => Some(Subject::ServiceAccount(
            get("/serviceAccount/namespace")?,
            get("/serviceAccount/name")?,
        )),
        _ => None,
    }
}

/// A FlowSchema object as the dispatcher uses it (None: not one).
pub fn parse_schema(obj: &Value) -> Option<FlowSchema> {
    let name = obj.pointer("/metadata/name")?.as_str()?.to_string();
    let spec = obj.get("spec")?;
    let distinguisher = match spec
        .pointer("/distinguisherMethod/type")
        .and_then(Value::as_str)
    {
        Some("ByUser") => Some(By::User),
        Some("ByNamespace") => Some(By::Namespace),
        _ => None,
    };
    let policies = items(spec, "rules").iter().map(parse_policy).collect();
    Some(FlowSchema {
        uid: object_uid(obj, "FlowSchema", &name),
        precedence: spec
            .get("matchingPrecedence")
            .and_then(Value::as_u64)
            .unwrap_or(1000) as u32,
        level: spec
            .pointer("/priorityLevelConfiguration/name")?
            .as_str()?
            .to_string(),
        distinguisher,
        policies,
        name,
    })
}

/// A PriorityLevelConfiguration object as the dispatcher uses it (None: not one).
pub fn parse_level(obj: &Value) -> Option<Level> {
    let name = obj.pointer("/metadata/name")?.as_str()?.to_string();
    let spec = obj.get("spec")?;
    let uid = object_uid(obj, "PriorityLevelConfiguration", &name);
    if spec.get("type").and_then(Value::as_str) == Some("Exempt") {
        return Some(Level {
            name,
            uid,
            exempt: true,
            shares: 0,
            queues: 0,
            hand_size: 0,
            queue_length_limit: 0,
        });
    }
    let limited = spec.get("limited")?;
    // Bounded as upstream's validation bounds them, so a stored object can never make the
    // dispatcher overflow or allocate without limit.
    let num = |ptr: &str, default: u64, max: u64| {
        limited
            .pointer(ptr)
            .and_then(Value::as_u64)
            .unwrap_or(default)
            .min(max)
    };
    let queuing = limited
        .pointer("/limitResponse/type")
        .and_then(Value::as_str)
        == Some("Queue");
    let queues = if queuing {
        num("/limitResponse/queuing/queues", 64, 10_000).max(1) as usize
    } else {
        1
    };
    Some(Level {
        name,
        uid,
        exempt: false,
        shares: num("/nominalConcurrencyShares", 30, 1 << 20) as u32,
        queues,
        hand_size: if queuing {
            num("/limitResponse/queuing/handSize", 8, 64).clamp(1, queues as u64) as usize
        } else {
            1
        },
        queue_length_limit: if queuing {
            num("/limitResponse/queuing/queueLengthLimit", 50, 10_000) as usize
        } else {
            0
        },
    })
}

/// FlowSchemas (by precedence, then name) and levels from objects; the mandatory `exempt`
/// and `catch-all` of each kind are added from the defaults when absent, as upstream keeps
/// them.
pub fn from_objects(schemas: &[Value], levels: &[Value]) -> (Vec<FlowSchema>, Vec<Level>) {
    let mut s: Vec<FlowSchema> = schemas.iter().filter_map(parse_schema).collect();
    let mut l: Vec<Level> = levels.iter().filter_map(parse_level).collect();
    for mandatory in ["exempt", "catch-all"] {
        if !s.iter().any(|x| x.name == mandatory) {
            s.extend(
                schema_objects()
                    .iter()
                    .filter_map(parse_schema)
                    .filter(|x| x.name == mandatory),
            );
        }
        if !l.iter().any(|x| x.name == mandatory) {
            l.extend(
                level_objects()
                    .iter()
                    .filter_map(parse_level)
                    .filter(|x| x.name == mandatory),
            );
        }
    }
    // A schema naming a level that does not exist is dangling: upstream skips it.
    s.retain(|x| l.iter().any(|lv| lv.name == x.level));
    s.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    // catch-all last: the fallback for a schema naming a level that does not exist.
    l.sort_by_key(|x| x.name == "catch-all");
    (s, l)
}

/// Upstream's default configuration.
pub fn configuration() -> (Vec<FlowSchema>, Vec<Level>) {
    from_objects(&schema_objects(), &level_objects())
}
