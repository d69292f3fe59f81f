//! Upstream's default flow control configuration (flowcontrol.apiserver.k8s.io/v1): the
//! mandatory `exempt` and `catch-all` plus the suggested schemas and levels — system,
//! node-high, leader-election, workload-high, workload-low, global-default — with their
//! concurrency shares and queuing parameters.

use rkube_api::authz::{Attributes, UserInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    User,
    Namespace,
}

#[derive(Clone, Debug)]
pub enum Subject {
    User(&'static str),
    Group(&'static str),
}

impl Subject {
    fn matches(&self, user: &UserInfo) -> bool {
        match self {
            Subject::User("*") => true,
            Subject::User(n) => user.name == *n,
            Subject::Group(g) => user.in_group(g),
        }
    }
}

/// What a rule covers: resource requests (verbs × groups × resources; `*` for any) or
/// non-resource URLs.
#[derive(Clone, Debug)]
pub struct Rule {
    pub verbs: &'static [&'static str],
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub urls: &'static [&'static str],
}

const ANY: &[&str] = &["*"];

impl Rule {
    fn matches(&self, a: &Attributes) -> bool {
        let has = |list: &[&str], v: &str| list.iter().any(|x| *x == "*" || *x == v);
        if !has(self.verbs, &a.verb) {
            return false;
        }
        if a.resource_request {
            has(self.groups, &a.api_group) && has(self.resources, &a.resource)
        } else {
            self.urls.iter().any(|u| {
                *u == "*"
                    || *u == a.path
                    || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
            })
        }
    }
}

#[derive(Clone, Debug)]
pub struct FlowSchema {
    pub name: String,
    pub uid: String,
    pub precedence: u32,
    pub level: String,
    pub distinguisher: Option<By>,
    pub subjects: Vec<Subject>,
    pub rules: Vec<Rule>,
}

impl FlowSchema {
    pub fn matches(&self, user: &UserInfo, a: &Attributes) -> bool {
        self.subjects.iter().any(|s| s.matches(user)) && self.rules.iter().any(|r| r.matches(a))
    }
}

#[derive(Clone, Debug)]
pub struct Level {
    pub name: String,
    pub uid: String,
    pub exempt: bool,
    pub shares: u32,
    pub queues: usize,
    pub hand_size: usize,
    pub queue_length_limit: usize,
}

/// A stable UID for a built-in object (the same on every apiserver).
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

fn level(name: &str, exempt: bool, shares: u32, queues: usize, hand: usize, limit: usize) -> Level {
    Level {
        name: name.into(),
        uid: uid("PriorityLevelConfiguration", name),
        exempt,
        shares,
        queues,
        hand_size: hand,
        queue_length_limit: limit,
    }
}

fn schema(
    name: &str,
    precedence: u32,
    level: &str,
    by: Option<By>,
    subjects: Vec<Subject>,
    rules: Vec<Rule>,
) -> FlowSchema {
    FlowSchema {
        name: name.into(),
        uid: uid("FlowSchema", name),
        precedence,
        level: level.into(),
        distinguisher: by,
        subjects,
        rules,
    }
}

fn resources(
    verbs: &'static [&'static str],
    groups: &'static [&'static str],
    resources: &'static [&'static str],
) -> Rule {
    Rule {
        verbs,
        groups,
        resources,
        urls: &[],
    }
}

fn everything() -> Vec<Rule> {
    vec![Rule {
        verbs: ANY,
        groups: ANY,
        resources: ANY,
        urls: ANY,
    }]
}

/// The FlowSchemas (by precedence) and the priority levels (catch-all last).
pub fn configuration() -> (Vec<FlowSchema>, Vec<Level>) {
    use Subject::*;
    let levels = vec![
        level("exempt", true, 0, 0, 0, 0),
        level("system", false, 30, 64, 6, 50),
        level("node-high", false, 40, 64, 6, 50),
        level("leader-election", false, 10, 16, 4, 50),
        level("workload-high", false, 40, 128, 6, 50),
        level("workload-low", false, 100, 128, 6, 50),
        level("global-default", false, 20, 128, 6, 50),
        level("catch-all", false, 5, 1, 1, 10),
    ];
    let mut schemas = vec![
        schema(
            "exempt",
            1,
            "exempt",
            None,
            vec![Group("system:masters")],
            everything(),
        ),
        schema(
            "probes",
            2,
            "exempt",
            None,
            vec![
                Group("system:unauthenticated"),
                Group("system:authenticated"),
            ],
            vec![Rule {
                verbs: &["get"],
                groups: &[],
                resources: &[],
                urls: &["/healthz", "/readyz", "/livez"],
            }],
        ),
        schema(
            "system-leader-election",
            100,
            "leader-election",
            Some(By::User),
            vec![
                User("system:kube-controller-manager"),
                User("system:kube-scheduler"),
            ],
            vec![resources(
                &["get", "create", "update"],
                &["coordination.k8s.io"],
                &["leases"],
            )],
        ),
        schema(
            "system-node-high",
            400,
            "node-high",
            Some(By::User),
            vec![Group("system:nodes")],
            vec![
                resources(ANY, &[""], &["nodes"]),
                resources(ANY, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        schema(
            "system-nodes",
            500,
            "system",
            Some(By::User),
            vec![Group("system:nodes")],
            everything(),
        ),
        schema(
            "kube-controller-manager",
            800,
            "workload-high",
            Some(By::Namespace),
            vec![User("system:kube-controller-manager")],
            everything(),
        ),
        schema(
            "kube-scheduler",
            800,
            "workload-high",
            Some(By::Namespace),
            vec![User("system:kube-scheduler")],
            everything(),
        ),
        schema(
            "service-accounts",
            9000,
            "workload-low",
            Some(By::User),
            vec![Group("system:serviceaccounts")],
            everything(),
        ),
        schema(
            "global-default",
            9900,
            "global-default",
            Some(By::User),
            vec![
                Group("system:unauthenticated"),
                Group("system:authenticated"),
            ],
            everything(),
        ),
        schema(
            "catch-all",
            10000,
            "catch-all",
            Some(By::User),
            vec![User("*")],
            everything(),
        ),
    ];
    schemas.sort_by_key(|s| s.precedence);
    (schemas, levels)
}
