//! The DaemonSet controller's decisions, without I/O: which nodes should run the daemon pod
//! (nodeSelector, required node affinity, taints against the template's tolerations plus the
//! ones every daemon pod gets), which pods to create (one per node, bound to it by a
//! `metadata.name` node-affinity term) or delete (misscheduled, duplicates, failed, and old
//! templates within `maxUnavailable` on RollingUpdate, or once the new pod beside them is
//! available with `maxSurge`), and the status.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, PodSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_api::taints::tolerated;
use rkube_client::pod::Pod;

use crate::replicaset::logic::{is_available, is_ready};

use crate::history::HASH_LABEL;

pub const GENERATION_LABEL: &str = "pod-template-generation";

/// The tolerations upstream adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`).
pub fn daemon_tolerations(spec: &PodSpec) -> Vec<Toleration> {
    let mut out = spec.tolerations.clone().unwrap_or_default();
    let mut add = |key: &str, effect: &str| {
        if !out
            .iter()
            .any(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect))
        {
            out.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some(effect.into()),
                ..Default::default()
            });
        }
    };
    add("node.kubernetes.io/not-ready", "NoExecute");
    add("node.kubernetes.io/unreachable", "NoExecute");
    add("node.kubernetes.io/disk-pressure", "NoSchedule");
    add("node.kubernetes.io/memory-pressure", "NoSchedule");
    add("node.kubernetes.io/pid-pressure", "NoSchedule");
    add("node.kubernetes.io/unschedulable", "NoSchedule");
    if spec.host_network == Some(true) {
        add("node.kubernetes.io/network-unavailable", "NoSchedule");
    }
    out
}

/// (should run a new pod, may keep a running one) on `node` (upstream's
/// `NodeShouldRunDaemonPod`): NoSchedule taints stop new pods, NoExecute ones both. `tols`:
/// `daemon_tolerations(spec)`.
pub fn should_run(spec: &PodSpec, tols: &[Toleration], node: &Node) -> (bool, bool) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let empty = Default::default();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if !rkube_api::nodeaffinity::required_matches(
        spec.node_selector.as_ref(),
        spec.affinity.as_ref(),
        labels,
        name,
    ) {
        return (false, false);
    }
    let taints: &[Taint] = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    let untolerated = |effect: &str| {
        taints
            .iter()
            .any(|t| t.effect == effect && !tolerated(tols, t))
    };
    let keep = !untolerated("NoExecute");
    (keep && !untolerated("NoSchedule"), keep)
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn hash_of(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .map(String::as_str)
}

/// `maxUnavailable` (or `maxSurge`) against `desired`: a number, or a percentage (at most
/// 100) rounded up.
pub fn scaled(v: Option<&IntOrString>, desired: i32, default: i32) -> i32 {
    match v {
        None => default,
        Some(IntOrString::Int(n)) => (*n).max(0),
        Some(IntOrString::String(s)) => s
            .trim_end_matches('%')
            .parse::<i64>()
            .map(|p| ((p.clamp(0, 100) * i64::from(desired) + 99) / 100) as i32)
            .unwrap_or(default),
    }
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Nodes that get a new pod.
    pub create: Vec<String>,
    pub delete: Vec<Arc<Pod>>,
    pub status: DaemonSetStatus,
}

/// The plan for `ds` over the cluster's `nodes` and the pods it controls; `hash`: its update
/// revision's hash (what its up-to-date pods are labelled with).
pub fn plan(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    hash: &str,
    now: DateTime<Utc>,
) -> Plan {
    let spec = ds.spec.clone().unwrap_or_default();
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let tols = daemon_tolerations(&pod_spec);
    let mrs = spec.min_ready_seconds.unwrap_or(0);
    let mut by_node: HashMap<&str, Vec<&Arc<Pod>>> = HashMap::new();
    let mut plan = Plan::default();
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if phase(p) == "Failed" {
            plan.delete.push(p.clone()); // replaced on a later sync
            continue;
        }
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .or_else(|| target_node(p))
            .unwrap_or("");
        by_node.entry(node).or_default().push(p);
    }
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let ru = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let desired_nodes = nodes
        .iter()
        .filter(|n| should_run(&pod_spec, &tols, n).0)
        .count() as i32;
    let max_surge = if rolling {
        scaled(ru.and_then(|r| r.max_surge.as_ref()), desired_nodes, 0)
    } else {
        0
    };
    let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) =
        (0, 0, 0, 0, 0, 0);
    // Old pods by node that RollingUpdate may replace: (available?, pod).
    let mut old: Vec<(bool, Arc<Pod>)> = Vec::new();
    // maxSurge: nodes whose available old pod may get a new one beside it, and how many
    // nodes are surging already.
    let (mut surge_candidates, mut surging) = (Vec::new(), 0);
    for n in nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let (run, keep) = should_run(&pod_spec, &tols, n);
        let mut here: Vec<&Arc<Pod>> = by_node.remove(name).unwrap_or_default();
        here.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
        if run {
            desired += 1;
        }
        if !keep {
            plan.delete.extend(here.iter().map(|p| (*p).clone()));
            continue;
        }
        if !run && !here.is_empty() {
            misscheduled += 1;
            continue; // NoSchedule taint after the fact: it may stay
        }
        if !run {
            continue;
        }
        let Some(first) = here.first() else {
            plan.create.push(name.to_string());
            continue;
        };
        // The node's status counts go by its oldest pod, as upstream's.
        current += 1;
        if is_ready(first) {
            ready += 1;
        }
        if is_available(first, mrs, now) {
            available += 1;
        }
        if hash_of(first) == Some(hash) {
            updated += 1;
        }
        if max_surge == 0 {
            // One pod per node: the oldest stays, the rest go.
            plan.delete.extend(here[1..].iter().map(|p| (*p).clone()));
            if hash_of(first) != Some(hash) {
                old.push((is_available(first, mrs, now), (*first).clone()));
            }
            continue;
        }
        // Surging: at most the oldest new and the oldest old pod stay.
        let (mut new_pod, mut old_pod) = (None, None);
        for p in &here {
            let slot = if hash_of(p) == Some(hash) {
                &mut new_pod
            } else {
                &mut old_pod
            };
            if slot.is_none() {
                *slot = Some(*p);
            } else {
                plan.delete.push((*p).clone());
            }
        }
        match (new_pod, old_pod) {
            (Some(new), Some(old)) => {
                if !is_ready(old) || is_available(new, mrs, now) {
                    plan.delete.push(old.clone());
                } else {
                    surging += 1;
                }
            }
            (None, Some(old)) if !is_available(old, mrs, now) => {
                plan.create.push(name.to_string());
            }
            (None, Some(_)) => surge_candidates.push(name.to_string()),
            _ => {}
        }
    }
    // Pods on nodes that no longer exist.
    for (_, ps) in by_node {
        plan.delete.extend(ps.into_iter().cloned());
    }
    let room = usize::try_from(max_surge - surging).unwrap_or(0);
    plan.create.extend(surge_candidates.into_iter().take(room));
    if rolling && !old.is_empty() {
        let max_unavailable =
            scaled(ru.and_then(|r| r.max_unavailable.as_ref()), desired, 1).max(1);
        let unavailable = desired - available;
        // Unavailable old pods cost nothing; available ones within the budget.
        let mut budget = (max_unavailable - unavailable).max(0);
        old.sort_by_key(|(avail, _)| *avail);
        for (avail, p) in old {
            if !avail {
                plan.delete.push(p);
            } else if budget > 0 {
                budget -= 1;
                plan.delete.push(p);
            }
        }
    }
    plan.status = DaemonSetStatus {
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
        current_number_scheduled: current,
        desired_number_scheduled: desired,
        number_available: Some(available),
        number_misscheduled: misscheduled,
        number_ready: ready,
        number_unavailable: Some(desired - available).filter(|n| *n > 0),
        observed_generation: ds.metadata.generation,
        updated_number_scheduled: Some(updated),
    };
    plan
}

/// The node a daemon pod not yet bound is meant for (its `metadata.name` affinity term).
pub fn target_node(p: &Pod) -> Option<&str> {
    let terms = &p
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields
            .iter()
            .flatten()
            .find(|f| f.key == "metadata.name" && f.operator == "In")
            .and_then(|f| f.values.as_ref()?.first().map(String::as_str))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints}}))
            .unwrap(),
        )
    }

    fn ds(template_spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "agent", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": template_spec}}}))
        .unwrap()
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Arc<Pod> {
        let conds = if ready {
            json!([{"type": "Ready", "status": "True"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {HASH_LABEL: hash},
                "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": "Running", "conditions": conds}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn one_pod_per_eligible_node() {
        let d = ds(json!({"containers": [], "nodeSelector": {"role": "worker"}}));
        let nodes = [
            node("w1", json!({"role": "worker"}), json!([])),
            node(
                "w2",
                json!({"role": "worker"}),
                json!([{"key": "dedicated", "effect": "NoSchedule"}]),
            ),
            node(
                "w3",
                json!({"role": "worker"}),
                json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
            ),
            node("cp", json!({"role": "control-plane"}), json!([])),
        ];
        let h = "h1";
        let p = plan(
            &d,
            &nodes,
            &[
                pod("a-1", "w1", h, true),
                pod("a-dup", "w1", h, true),
                pod("a-cp", "cp", h, true),
            ],
            h,
            rkube_client::now(),
        );
        assert_eq!(
            p.create,
            ["w3"],
            "w2's taint is not tolerated; not-ready is, by default"
        );
        let deleted: Vec<_> = p
            .delete
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            deleted.len(),
            2,
            "{deleted:?}: the duplicate and the pod on a non-worker"
        );
        assert!(deleted.contains(&"a-cp".to_string()));
        assert_eq!(
            (
                p.status.desired_number_scheduled,
                p.status.current_number_scheduled
            ),
            (2, 1)
        );
        assert_eq!(p.status.observed_generation, Some(2));
    }

    #[test]
    fn rolling_updates_replace_old_pods_within_max_unavailable() {
        let d = ds(json!({"containers": [{"name": "c", "image": "agent:2"}]}));
        let nodes: Vec<Arc<Node>> = (0..4)
            .map(|i| node(&format!("n{i}"), json!({}), json!([])))
            .collect();
        let pods: Vec<Arc<Pod>> = (0..4)
            .map(|i| pod(&format!("p{i}"), &format!("n{i}"), "old", true))
            .collect();
        let p = plan(&d, &nodes, &pods, "new", rkube_client::now());
        assert_eq!(p.delete.len(), 1, "maxUnavailable 1");
        assert_eq!(p.status.updated_number_scheduled, Some(0));
        // One node already without an available pod: nothing more goes.
        let mut pods = pods;
        pods[0] = pod("p0", "n0", "old", false);
        let p = plan(&d, &nodes, &pods, "new", rkube_client::now());
        assert_eq!(
            p.delete
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>(),
            ["p0"]
        );
        assert_eq!(scaled(Some(&IntOrString::String("25%".into())), 10, 1), 3);
    }

    #[test]
    fn max_surge_starts_new_pods_beside_old_ones() {
        let mut d = ds(json!({"containers": [{"name": "c", "image": "agent:2"}]}));
        d.spec.as_mut().unwrap().update_strategy = serde_json::from_value(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        )
        .unwrap();
        let nodes: Vec<Arc<Node>> = (0..3)
            .map(|i| node(&format!("n{i}"), json!({}), json!([])))
            .collect();
        let names = |v: &[Arc<Pod>]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        let old: Vec<Arc<Pod>> = (0..3)
            .map(|i| pod(&format!("o{i}"), &format!("n{i}"), "old", true))
            .collect();
        // One new pod beside an old one; none deleted yet.
        let p = plan(&d, &nodes, &old, "new", rkube_client::now());
        assert_eq!(p.create, ["n0"]);
        assert!(p.delete.is_empty());
        // While it is not ready, nothing more happens.
        let mut pods = old.clone();
        pods.push(pod("x0", "n0", "new", false));
        let p = plan(&d, &nodes, &pods, "new", rkube_client::now());
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.status.current_number_scheduled, 3);
        // Ready: the old pod there goes and the next node surges.
        pods[3] = pod("x0", "n0", "new", true);
        let p = plan(&d, &nodes, &pods, "new", rkube_client::now());
        assert_eq!(names(&p.delete), ["o0"]);
        assert_eq!(p.create, ["n1"]);
        // An unavailable old pod is replaced at once, beyond the surge.
        pods[1] = pod("o1", "n1", "old", false);
        let p = plan(&d, &nodes, &pods, "new", rkube_client::now());
        assert_eq!(p.create, ["n1", "n2"]);
    }
}
