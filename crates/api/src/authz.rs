//! Who asks and what for: the user of a request, its authorization attributes, RBAC rule and
//! subject matching, the Node authorizer's rules, and upstream's 403 message — as pure
//! functions over JSON objects (Roles, ClusterRoles, bindings, pods).

use serde_json::Value;

use crate::status::{ApiError, GroupResource};

/// An authenticated (or anonymous) user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const AUTHENTICATED: &str = "system:authenticated";
pub const MASTERS: &str = "system:masters";
pub const NODES: &str = "system:nodes";

impl UserInfo {
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS.into(),
            uid: String::new(),
            groups: vec![UNAUTHENTICATED.into()],
        }
    }

    /// An authenticated user: `system:authenticated` is added to its groups.
    pub fn authenticated(name: &str, uid: &str, mut groups: Vec<String>) -> Self {
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        UserInfo {
            name: name.into(),
            uid: uid.into(),
            groups,
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node a kubelet identity (`system:node:<name>` in `system:nodes`) stands for.
    pub fn node_name(&self) -> Option<&str> {
        if !self.in_group(NODES) {
            return None;
        }
        self.name.strip_prefix("system:node:")
    }
}

/// What a request does, as authorizers see it (upstream's `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The URL path (for non-resource requests).
    pub path: String,
}

impl Attributes {
    /// `pods` or `pods/log`.
    pub fn resource_and_sub(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Says nothing: the next authorizer decides (denied if none does).
    NoOpinion(String),
    Deny(String),
}

fn has(list: Option<&Value>, want: &str) -> bool {
    list.and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(want)))
}

fn empty(list: Option<&Value>) -> bool {
    list.and_then(Value::as_array).is_none_or(|l| l.is_empty())
}

/// Whether one RBAC `PolicyRule` allows the request.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = rule.get("verbs");
    if !(has(verbs, &a.verb) || has(verbs, "*")) {
        return false;
    }
    if !a.resource_request {
        let Some(urls) = rule.get("nonResourceURLs").and_then(Value::as_array) else {
            return false;
        };
        return urls.iter().filter_map(Value::as_str).any(|u| {
            u == "*" || u == a.path || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
        });
    }
    let groups = rule.get("apiGroups");
    if !(has(groups, &a.api_group) || has(groups, "*")) {
        return false;
    }
    let resources = rule.get("resources");
    let combined = a.resource_and_sub();
    let resource_ok = has(resources, &combined)
        || has(resources, "*")
        || (a.subresource.is_empty() && has(resources, &a.resource))
        || (!a.subresource.is_empty() && has(resources, &format!("*/{}", a.subresource)));
    if !resource_ok {
        return false;
    }
    let names = rule.get("resourceNames");
    empty(names) || (!a.name.is_empty() && has(names, &a.name))
}

/// Whether a binding's subject is this user.
pub fn subject_matches(subject: &Value, user: &UserInfo, binding_namespace: &str) -> bool {
    let s = |k: &str| subject.get(k).and_then(Value::as_str).unwrap_or("");
    match s("kind") {
        "User" => s("name") == user.name,
        "Group" => user.in_group(s("name")),
        "ServiceAccount" => {
            let ns = if s("namespace").is_empty() {
                binding_namespace
            } else {
                s("namespace")
            };
            user.name == format!("system:serviceaccount:{ns}:{}", s("name"))
        }
        _ => false,
    }
}

/// Whether any subject of a (Cluster)RoleBinding is this user.
pub fn binding_applies(binding: &Value, user: &UserInfo) -> bool {
    let ns = binding
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    binding
        .get("subjects")
        .and_then(Value::as_array)
        .is_some_and(|subs| subs.iter().any(|s| subject_matches(s, user, ns)))
}

/// The Node authorizer: a kubelet (`system:node:<name>`) may read and write its own Node and
/// Lease, the pods bound to it (and their status), create events, and read what every node
/// reads; the Secrets, PersistentVolumeClaims and service-account tokens its pods use;
/// anything else about other nodes is denied. `pod_node` looks up a pod's `spec.nodeName`
/// (None: no such pod); `pods_on(namespace, node)` lists the node's pods in a namespace.
/// Requests from other users get no opinion.
pub fn node_decision(
    user: &UserInfo,
    a: &Attributes,
    pod_node: impl Fn(&str, &str) -> Option<String>,
    pods_on: impl Fn(&str, &str) -> Vec<Value>,
) -> Decision {
    let Some(node) = user.node_name() else {
        return Decision::NoOpinion(String::new());
    };
    if !a.resource_request {
        return Decision::NoOpinion(String::new());
    }
    let read = matches!(a.verb.as_str(), "get" | "list" | "watch");
    let deny = |why: String| Decision::Deny(why);
    match (a.api_group.as_str(), a.resource.as_str()) {
        ("", "nodes") => {
            if a.verb == "create" || (read && a.name.is_empty()) || a.name == node {
                Decision::Allow
            } else {
                deny(format!("node '{node}' cannot {} node '{}'", a.verb, a.name))
            }
        }
        ("coordination.k8s.io", "leases") => {
            if a.namespace == "kube-node-lease"
                && (a.name == node
                    || (a.verb == "create" && a.name.is_empty())
                    || (read && a.name.is_empty()))
            {
                Decision::Allow
            } else {
                deny(format!(
                    "node '{node}' cannot {} lease '{}/{}'",
                    a.verb, a.namespace, a.name
                ))
            }
        }
        ("", "pods") => {
            if read && a.name.is_empty() {
                // Lists and watches: kubelets select their own pods by spec.nodeName.
                return Decision::Allow;
            }
            match pod_node(&a.namespace, &a.name) {
                Some(n) if n == node => Decision::Allow,
                _ => deny(format!(
                    "no relationship found between node '{node}' and this object"
                )),
            }
        }
        ("", "secrets" | "persistentvolumeclaims") if a.verb == "get" && !a.name.is_empty() => {
            let uses = pods_on(&a.namespace, node)
                .iter()
                .any(|p| pod_uses(p, &a.resource, &a.name));
            if uses {
                Decision::Allow
            } else {
                // As upstream: no opinion, so that RBAC may still grant it.
                Decision::NoOpinion(format!(
                    "no relationship found between node '{node}' and this object"
                ))
            }
        }
        ("", "serviceaccounts") if a.subresource == "token" && a.verb == "create" => {
            let uses = pods_on(&a.namespace, node).iter().any(|p| {
                p.pointer("/spec/serviceAccountName")
                    .and_then(Value::as_str)
                    == Some(a.name.as_str())
            });
            if uses {
                Decision::Allow
            } else {
                // As upstream: no opinion, so that RBAC may still grant it.
                Decision::NoOpinion(format!(
                    "no relationship found between node '{node}' and this object"
                ))
            }
        }
        ("", "events") | ("events.k8s.io", "events") => Decision::Allow,
        ("", "services") | ("", "namespaces") | ("", "configmaps") if read => Decision::Allow,
        _ => Decision::NoOpinion(String::new()),
    }
}

/// Whether a pod refers to Secret or PersistentVolumeClaim `name` (volumes, projected
/// sources, env and envFrom of every container, image pull secrets).
pub fn pod_uses(pod: &Value, resource: &str, name: &str) -> bool {
    let s = |v: Option<&Value>| v.and_then(Value::as_str) == Some(name);
    let spec = &pod["spec"];
    let volumes = spec["volumes"].as_array().into_iter().flatten();
    if resource == "persistentvolumeclaims" {
        return volumes
            .clone()
            .any(|v| s(v.pointer("/persistentVolumeClaim/claimName")));
    }
    let in_volume = volumes.clone().any(|v| {
        s(v.pointer("/secret/secretName"))
            || v.pointer("/projected/sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|src| s(src.pointer("/secret/name")))
    });
    let containers = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec[k].as_array().into_iter().flatten());
    let in_env = containers.clone().any(|c| {
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| s(e.pointer("/valueFrom/secretKeyRef/name")))
            || c["envFrom"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| s(e.pointer("/secretRef/name")))
    });
    let pull = spec["imagePullSecrets"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| s(r.get("name")));
    in_volume || in_env || pull
}

/// The string lists of a PolicyRule field.
fn strings(rule: &Value, field: &str) -> Vec<String> {
    crate::meta::string_list(rule.get(field))
}

/// One broken-down rule: one verb on one group/resource (and at most one name), or one verb
/// on one URL (upstream's `BreakdownRule`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SubRule {
    group: Option<String>,
    resource: Option<String>,
    name: Option<String>,
    url: Option<String>,
    verb: String,
}

fn breakdown(rule: &Value) -> Vec<SubRule> {
    let verbs = strings(rule, "verbs");
    let names = strings(rule, "resourceNames");
    let mut out = Vec::new();
    for g in strings(rule, "apiGroups") {
        for r in strings(rule, "resources") {
            for v in &verbs {
                if names.is_empty() {
                    out.push(SubRule {
                        group: Some(g.clone()),
                        resource: Some(r.clone()),
                        name: None,
                        url: None,
                        verb: v.clone(),
                    });
                }
                for n in &names {
                    out.push(SubRule {
                        group: Some(g.clone()),
                        resource: Some(r.clone()),
                        name: Some(n.clone()),
                        url: None,
                        verb: v.clone(),
                    });
                }
            }
        }
    }
    for u in strings(rule, "nonResourceURLs") {
        for v in &verbs {
            out.push(SubRule {
                group: None,
                resource: None,
                name: None,
                url: Some(u.clone()),
                verb: v.clone(),
            });
        }
    }
    out
}

/// Upstream's `ruleCovers`: whether one of the user's rules grants a broken-down rule.
fn rule_covers(owner: &Value, sub: &SubRule) -> bool {
    let has = |field: &str, want: &str| strings(owner, field).iter().any(|x| x == want);
    let verbs = has("verbs", "*") || has("verbs", &sub.verb);
    let groups = sub
        .group
        .as_ref()
        .is_none_or(|g| has("apiGroups", "*") || has("apiGroups", g));
    let resources = sub.resource.as_ref().is_none_or(|r| {
        has("resources", "*")
            || has("resources", r)
            || r.split_once('/')
                .is_some_and(|(_, s)| has("resources", &format!("*/{s}")))
    });
    let urls = sub.url.as_ref().is_none_or(|u| {
        strings(owner, "nonResourceURLs")
            .iter()
            .any(|o| o == u || (o.ends_with('*') && u.starts_with(o.trim_end_matches('*'))))
    });
    let owner_names = strings(owner, "resourceNames");
    let names = match &sub.name {
        None => owner_names.is_empty(),
        Some(n) => owner_names.is_empty() || owner_names.contains(n),
    };
    verbs && groups && resources && urls && names
}

/// The rules of `requested` that `owner` does not grant, as upstream prints them
/// (`CompactString`, compacted by group/resource/name, sorted): empty when `owner` covers
/// them all (upstream's `Covers`).
pub fn uncovered(owner: &[Value], requested: &[Value]) -> Vec<String> {
    let mut missing: Vec<SubRule> = Vec::new();
    for rule in requested {
        for sub in breakdown(rule) {
            if !owner.iter().any(|o| rule_covers(o, &sub)) && !missing.contains(&sub) {
                missing.push(sub);
            }
        }
    }
    // Compact: one line per group/resource/name (or URL), verbs in the order found.
    let mut lines: Vec<(SubRule, Vec<String>)> = Vec::new();
    for m in missing {
        let key = SubRule {
            verb: String::new(),
            ..m.clone()
        };
        match lines.iter_mut().find(|(k, _)| *k == key && k.url.is_none()) {
            Some((_, verbs)) => verbs.push(m.verb),
            None => lines.push((key, vec![m.verb])),
        }
    }
    let quoted = |items: &[&str]| {
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out: Vec<String> = lines
        .into_iter()
        .map(|(k, verbs)| {
            let mut parts = Vec::new();
            if let Some(g) = &k.group {
                parts.push(format!("APIGroups:[{}]", quoted(&[g])));
            }
            if let Some(r) = &k.resource {
                parts.push(format!("Resources:[{}]", quoted(&[r])));
            }
            if let Some(u) = &k.url {
                parts.push(format!("NonResourceURLs:[{}]", quoted(&[u])));
            }
            if let Some(n) = &k.name {
                parts.push(format!("ResourceNames:[{}]", quoted(&[n])));
            }
            let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
            parts.push(format!("Verbs:[{}]", quoted(&verbs)));
            format!("{{{}}}", parts.join(", "))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Upstream's 403: `pods "p" is forbidden: User "x" cannot get resource "pods" in API group
/// "" in the namespace "default"` (with the authorizer's reason appended when it gave one).
pub fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    let suffix = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    if !a.resource_request {
        return ApiError::forbidden_path(format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"{suffix}",
            user.name, a.verb, a.path
        ));
    }
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let why = format!(
        "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {scope}{suffix}",
        user.name,
        a.verb,
        a.resource_and_sub(),
        a.api_group
    );
    ApiError::forbidden(
        &GroupResource::new(&a.api_group, &a.resource),
        &a.name,
        &why,
    )
}

#[cfg(test)]
mod tests;
