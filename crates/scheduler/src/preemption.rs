//! DefaultPreemption, without I/O: for a pod no node fits, the node where removing pods of
//! lower priority makes room (only for what removing pods can fix: resources, pod count,
//! host ports), with as few and as low-priority victims as possible — every lower-priority
//! pod is removed in simulation, then the highest-priority ones are given back while the pod
//! still fits (upstream's reprieve). Pods with `preemptionPolicy: Never` preempt nothing.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use crate::cache::{Cache, PodEntry};
use crate::plugins::{self, R_CPU, R_MEMORY, R_PODS, R_PORTS};

/// Where the pod goes once `victims` (`namespace/name` keys) are gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub node: String,
    pub victims: Vec<String>,
}

fn priority(p: &Pod) -> i32 {
    p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Whether `p` may preempt at all.
pub fn may_preempt(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) != Some("Never")
}

/// A lower-priority pod on `node` that is already terminating: a preemption there is in
/// progress and the pod waits for it rather than preempting more.
pub fn in_progress(p: &Pod, cache: &Cache, node: &str) -> bool {
    let prio = priority(p);
    cache
        .entries()
        .any(|e| e.node == node && e.terminating && e.priority < prio)
}

/// The node and victims for `p`, or `None` when removing lower-priority pods helps nowhere.
pub fn plan(p: &Pod, cache: &Cache) -> Option<Plan> {
    if !may_preempt(p) {
        return None;
    }
    let prio = priority(p);
    let (req, _) = plugins::requests(p);
    let mut lower: HashMap<&str, Vec<(&String, &PodEntry)>> = HashMap::new();
    for (k, e) in cache.keyed_entries() {
        if e.priority < prio && !e.terminating {
            lower.entry(e.node.as_str()).or_default().push((k, e));
        }
    }
    let resolvable = [R_CPU, R_MEMORY, R_PODS, R_PORTS];
    // (highest victim priority, victims, node name): the smallest wins.
    let mut best: Option<(i32, usize, String, Vec<String>)> = None;
    for (name, info) in &cache.nodes {
        match plugins::filter(p, info, &req) {
            Err(rs) if rs.iter().all(|r| resolvable.contains(r)) => {}
            _ => continue,
        }
        let Some(victims) = lower.get_mut(name.as_str()) else {
            continue;
        };
        let mut sim = info.clone();
        for (_, e) in victims.iter() {
            sim.remove(e);
        }
        if plugins::filter(p, &sim, &req).is_err() {
            continue;
        }
        // Give back the most important first, keeping each that still leaves room.
        victims.sort_by_key(|(k, e)| (std::cmp::Reverse(e.priority), (*k).clone()));
        let mut evict = Vec::new();
        for (k, e) in victims.iter() {
            sim.add(e);
            if plugins::filter(p, &sim, &req).is_err() {
                sim.remove(e);
                evict.push(((*k).clone(), e.priority));
            }
        }
        let top = evict.iter().map(|(_, p)| *p).max().unwrap_or(i32::MIN);
        let candidate = (
            top,
            evict.len(),
            name.clone(),
            evict.into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
        );
        if best
            .as_ref()
            .is_none_or(|b| (candidate.0, candidate.1, &candidate.2) < (b.0, b.1, &b.2))
        {
            best = Some(candidate);
        }
    }
    best.map(|(_, _, node, mut victims)| {
        victims.sort();
        Plan { node, victims }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"},
                    "conditions": [{"type": "Ready", "status": "True"}]}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, cpu: &str, priority: i32, extra: serde_json::Value) -> Pod {
        let mut spec = json!({"priority": priority, "containers": [{"name": "c", "image": "i",
            "resources": {"requests": {"cpu": cpu}}}]});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d"}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn the_fewest_lowest_priority_victims_make_room() {
        let mut c = Cache::default();
        c.set_node(node("a"));
        c.set_node(node("b"));
        // a: two 1-cpu pods of priority 10 and 5; b: one 2-cpu pod of priority 100.
        c.add_pod("d/a1", &pod("a1", "1", 10, json!({})), "a");
        c.add_pod("d/a2", &pod("a2", "1", 5, json!({})), "a");
        c.add_pod("d/b1", &pod("b1", "2", 100, json!({})), "b");
        // A 1-cpu pod of priority 50 evicts only the priority-5 pod on a.
        assert_eq!(
            plan(&pod("p", "1", 50, json!({})), &c),
            Some(Plan {
                node: "a".into(),
                victims: vec!["d/a2".into()]
            })
        );
        // A 2-cpu pod of priority 200: both of a's (highest victim 10) beat b's (100).
        assert_eq!(
            plan(&pod("p", "2", 200, json!({})), &c),
            Some(Plan {
                node: "a".into(),
                victims: vec!["d/a1".into(), "d/a2".into()]
            })
        );
        // Nothing of lower priority, or not allowed to preempt: no plan.
        assert_eq!(plan(&pod("p", "1", 1, json!({})), &c), None);
        assert_eq!(
            plan(&pod("p", "1", 50, json!({"preemptionPolicy": "Never"})), &c),
            None
        );
        // What removing pods cannot fix (a node selector) is no candidate.
        assert_eq!(
            plan(
                &pod("p", "1", 50, json!({"nodeSelector": {"disk": "ssd"}})),
                &c
            ),
            None
        );
    }
}
