//! NodeRestriction (`plugin/pkg/admission/noderestriction`): a kubelet
//! (`system:node:<name>` in `system:nodes`) may change only its own Node — not its taints,
//! and no labels outside the kubelet's own set — the status of pods bound to it (not their
//! labels), evict and delete only those pods, create only mirror pods for itself, and touch
//! only its own Lease. Messages are upstream's.

use rkube_api::authz::UserInfo;
use rkube_api::{meta, ApiError};
use serde_json::Value;

use super::forbidden;
use crate::registry::{Attributes, Operation};

/// Admits (or refuses) a write by a node. Other users pass. `pod` looks up a stored pod.
pub fn admit(
    user: &UserInfo,
    a: &Attributes<'_>,
    obj: &Value,
    old: Option<&Value>,
    pod: impl Fn(&str, &str) -> Option<Value>,
) -> Result<(), ApiError> {
    let Some(node) = user.node_name() else {
        return Ok(());
    };
    if !user.name.starts_with("system:node:") {
        return Ok(());
    }
    let name_of = |o: &Value| {
        let n = meta::name(o);
        if n.is_empty() {
            meta::meta_str(o, "generateName").to_string()
        } else {
            n.to_string()
        }
    };
    // On delete the object is the stored one; upstream names it "Unknown".
    let shown = match a.operation {
        Operation::Delete => "Unknown".to_string(),
        _ => name_of(obj),
    };
    let deny = |why: String| Err(forbidden(a, &shown, &why));
    let node_of = |o: &Value| {
        o.pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match (a.def.group, a.def.plural, a.subresource) {
        ("", "pods", None) => match a.operation {
            Operation::Create => {
                if !meta::annotations(obj).contains_key("kubernetes.io/config.mirror") {
                    return deny(format!("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only create mirror pods"));
                }
                if node_of(obj) != node {
                    return deny(format!(
                        "node \"{node}\" can only create pods with spec.nodeName set to itself"
                    ));
                }
                let owners = obj
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if owners.len() > 1 {
                    return deny(format!("node \"{node}\" can only create pods with a single owner reference set to itself"));
                }
                let Some(owner) = owners.first() else {
                    return deny(format!(
                        "node \"{node}\" can only create pods with an owner reference set to itself"
                    ));
                };
                if !crate::kinds::node::is_owner_ref_to(owner, node) {
                    return deny(format!(
                        "node \"{node}\" can only create pods with an owner reference set to itself"
                    ));
                }
                if owner.get("controller").and_then(Value::as_bool) != Some(true) {
                    return deny(format!("node \"{node}\" can only create pods with a controller owner reference set to itself"));
                }
                if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                    return deny(format!(
                        "node \"{node}\" must not set blockOwnerDeletion on an owner reference"
                    ));
                }
                Ok(())
            }
            Operation::Delete => {
                if node_of(obj) != node {
                    return deny(format!(
                        "node \"{node}\" can only delete pods with spec.nodeName set to itself"
                    ));
                }
                Ok(())
            }
            Operation::Update => deny(format!(
                "unexpected operation \"UPDATE\", node \"{node}\" can only create and delete mirror pods"
            )),
        },
        ("", "pods", Some("status")) => {
            let Some(old) = old.filter(|_| a.operation == Operation::Update) else {
                return deny(format!("unexpected operation {:?}", a.operation.as_str()));
            };
            if node_of(old) != node {
                return deny(format!("node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"));
            }
            if meta::labels(old) != meta::labels(obj) {
                return deny(format!(
                    "node \"{node}\" cannot update labels through pod status"
                ));
            }
            Ok(())
        }
        ("", "pods", Some("eviction")) => {
            if a.operation != Operation::Create {
                return deny(format!("unexpected operation {}", a.operation.as_str()));
            }
            match pod(a.namespace, a.name) {
                Some(p) if node_of(&p) == node => Ok(()),
                _ => deny(format!(
                    "node {node} can only evict pods with spec.nodeName set to itself"
                )),
            }
        }
        ("", "pods", Some(other)) => deny(format!(
            "unexpected pod subresource \"{other}\", only 'status' and 'eviction' are allowed"
        )),
        ("", "nodes", _) => {
            let target = if a.name.is_empty() { meta::name(obj) } else { a.name };
            if target != node {
                return deny(format!(
                    "node \"{node}\" is not allowed to modify node \"{target}\""
                ));
            }
            match (a.operation, old) {
                (Operation::Create, _) => {
                    let bad = forbidden_labels(&Value::Null, obj);
                    if !bad.is_empty() {
                        return deny(format!(
                            "node \"{node}\" is not allowed to set the following labels: {}",
                            bad.join(", ")
                        ));
                    }
                    Ok(())
                }
                (Operation::Update, Some(old)) => {
                    if old.pointer("/spec/taints") != obj.pointer("/spec/taints") {
                        return deny(format!("node \"{node}\" is not allowed to modify taints"));
                    }
                    let bad = forbidden_labels(old, obj);
                    if !bad.is_empty() {
                        return deny(format!(
                            "is not allowed to modify labels: {}",
                            bad.join(", ")
                        ));
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
        ("coordination.k8s.io", "leases", _) => {
            if a.namespace != "kube-node-lease" {
                return deny(
                    "can only access leases in the \"kube-node-lease\" system namespace".into(),
                );
            }
            let target = if a.operation == Operation::Create {
                meta::name(obj)
            } else {
                a.name
            };
            if target != node {
                return deny(
                    "can only access node lease with the same name as the requesting node".into(),
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Labels a kubelet may set on its Node (`kubeletapis.IsKubeletLabel`).
fn is_kubelet_label(key: &str) -> bool {
    const KUBELET_LABELS: [&str; 11] = [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let ns = key.split_once('/').map(|(n, _)| n).unwrap_or("");
    ["kubelet.kubernetes.io", "node.kubernetes.io"]
        .iter()
        .any(|d| ns == *d || ns.ends_with(&format!(".{d}")))
}

/// Whether a node may not add, change or remove the label `key` on itself.
fn label_forbidden(key: &str) -> bool {
    let Some((ns, _)) = key.split_once('/') else {
        return false;
    };
    let under = |d: &str| ns == d || ns.ends_with(&format!(".{d}"));
    if under("node-restriction.kubernetes.io") {
        return true;
    }
    (under("kubernetes.io") || under("k8s.io")) && !is_kubelet_label(key)
}

/// The labels added, changed or removed between `old` and `new` that a node may not touch,
/// sorted.
fn forbidden_labels(old: &Value, new: &Value) -> Vec<String> {
    let (before, after) = (meta::labels(old), meta::labels(new));
    let mut bad: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k) && label_forbidden(k))
        .cloned()
        .collect();
    bad.sort();
    bad.dedup();
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_user(n: &str) -> UserInfo {
        UserInfo::authenticated(&format!("system:node:{n}"), "", vec!["system:nodes".into()])
    }

    fn attrs<'a>(
        plural: &'static str,
        sub: Option<&'a str>,
        op: Operation,
        ns: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        let def = rkube_api::RESOURCES
            .iter()
            .find(|d| d.plural == plural)
            .unwrap();
        Attributes {
            operation: op,
            def,
            subresource: sub,
            namespace: ns,
            name,
            dry_run: false,
            verb: "update",
        }
    }

    #[test]
    fn a_node_changes_only_itself_and_its_pods() {
        let n1 = node_user("n1");
        let none = |_: &str, _: &str| None;
        let mine = json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}});
        let a = attrs("nodes", Some("status"), Operation::Update, "", "n1");
        assert!(admit(&n1, &a, &mine, Some(&mine), none).is_ok());
        let a = attrs("nodes", None, Operation::Update, "", "n2");
        let e = admit(&n1, &a, &mine, Some(&mine), none).unwrap_err();
        assert!(e
            .status()
            .message
            .contains("node \"n1\" is not allowed to modify node \"n2\""));
        // Labels outside the kubelet's set.
        let mut relabelled = mine.clone();
        relabelled["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("");
        let a = attrs("nodes", None, Operation::Update, "", "n1");
        let e = admit(&n1, &a, &relabelled, Some(&mine), none).unwrap_err();
        assert_eq!(
            e.status().message,
            "nodes \"n1\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane"
        );
        let mut own = mine.clone();
        own["metadata"]["labels"]["example.com/rack"] = json!("r1");
        own["metadata"]["labels"]["node.kubernetes.io/pool"] = json!("a");
        assert!(admit(&n1, &a, &own, Some(&mine), none).is_ok());
        let mut tainted = mine.clone();
        tainted["spec"] = json!({"taints": [{"key": "k", "effect": "NoSchedule"}]});
        assert!(admit(&n1, &a, &tainted, Some(&mine), none).is_err());
        // Pod status of its own pods, not others', and not their labels.
        let pod =
            json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"nodeName": "n1"}});
        let a = attrs("pods", Some("status"), Operation::Update, "d", "p");
        assert!(admit(&n1, &a, &pod, Some(&pod), none).is_ok());
        let mut other = pod.clone();
        other["spec"]["nodeName"] = json!("n2");
        assert!(admit(&n1, &a, &other, Some(&other), none).is_err());
        let mut relabelled = pod.clone();
        relabelled["metadata"]["labels"]["app"] = json!("y");
        let e = admit(&n1, &a, &relabelled, Some(&pod), none).unwrap_err();
        assert!(e
            .status()
            .message
            .contains("cannot update labels through pod status"));
        // Updating a pod itself: never.
        let a = attrs("pods", None, Operation::Update, "d", "p");
        assert!(admit(&n1, &a, &pod, Some(&pod), none).is_err());
        // Deleting: only its own.
        let a = attrs("pods", None, Operation::Delete, "d", "p");
        assert!(admit(&n1, &a, &pod, None, none).is_ok());
        let e = admit(&n1, &a, &other, None, none).unwrap_err();
        assert!(e
            .status()
            .message
            .starts_with("pods \"Unknown\" is forbidden"));
        // Leases: its own, in kube-node-lease.
        let lease = json!({"metadata": {"name": "n1"}});
        let a = attrs("leases", None, Operation::Update, "kube-node-lease", "n1");
        assert!(admit(&n1, &a, &lease, Some(&lease), none).is_ok());
        let a = attrs("leases", None, Operation::Update, "default", "n1");
        assert!(admit(&n1, &a, &lease, Some(&lease), none).is_err());
        // Other users are not this plugin's business.
        let admin = UserInfo::authenticated("admin", "", vec!["system:masters".into()]);
        let a = attrs("nodes", None, Operation::Update, "", "n2");
        assert!(admit(&admin, &a, &mine, Some(&mine), none).is_ok());
    }
}
