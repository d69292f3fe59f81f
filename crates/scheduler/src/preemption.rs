//! DefaultPreemption, without I/O: for a pod no node fits, the node where removing pods of
//! lower priority makes room (only for what removing pods can fix: resources, pod count,
//! host ports), with as few and as low-priority victims as possible — every lower-priority
//! pod is removed in simulation, then the highest-priority ones are given back while the pod
//! still fits (upstream's reprieve). PodDisruptionBudgets are honoured as upstream honours
//! them: victims whose eviction would exceed their budget's allowed disruptions are given
//! back first, and the node with the fewest such violations wins. Pods with
//! `preemptionPolicy: Never` preempt nothing.

use std::collections::HashMap;

use rkube_client::pod::Pod;

use crate::cache::{Cache, PodEntry};
use crate::plugins::{self, R_CPU, R_MEMORY, R_PODS, R_PORTS};

/// A PodDisruptionBudget as preemption weighs it.
#[derive(Clone, Debug)]
pub struct Budget {
    pub namespace: String,
    pub selector: rkube_api::LabelSelector,
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
}

impl Budget {
    fn covers(&self, e: &PodEntry) -> bool {
        // As upstream's `filterPodsWithPDBViolation`: an empty selector, or a pod without
        // labels, is covered by nothing.
        e.namespace() == self.namespace
            && !self.selector.is_empty()
            && !e.labels().is_empty()
            && self.selector.matches(e.labels())
    }
}

/// Which of `victims` (most important first) would exceed a budget if evicted: each budget's
/// allowed disruptions are used up in order (upstream's `filterPodsWithPDBViolation`).
fn violating(victims: &[(&String, &PodEntry)], budgets: &[Budget]) -> Vec<bool> {
    let mut left: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    victims
        .iter()
        .map(|(_, e)| {
            let mut violates = false;
            for (i, b) in budgets.iter().enumerate() {
                if b.covers(e) {
                    if left[i] <= 0 {
                        violates = true;
                    }
                    left[i] -= 1;
                }
            }
            violates
        })
        .collect()
}

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
pub fn plan(p: &Pod, cache: &Cache, budgets: &[Budget]) -> Option<Plan> {
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
    // (budget violations, highest victim priority, victims, node name): the smallest wins.
    let mut best: Option<(usize, i32, usize, String, Vec<String>)> = None;
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
        // Give back the most important first, those protected by a budget before the
        // others, keeping each that still leaves room.
        victims.sort_by_key(|(k, e)| (std::cmp::Reverse(e.priority), (*k).clone()));
        let violates = violating(victims, budgets);
        let order = (0..victims.len())
            .filter(|i| violates[*i])
            .chain((0..victims.len()).filter(|i| !violates[*i]));
        let mut evict = Vec::new();
        let mut violations = 0;
        for i in order {
            let (k, e) = victims[i];
            sim.add(e);
            if plugins::filter(p, &sim, &req).is_err() {
                sim.remove(e);
                evict.push(((*k).clone(), e.priority));
                violations += usize::from(violates[i]);
            }
        }
        let top = evict.iter().map(|(_, p)| *p).max().unwrap_or(i32::MIN);
        let candidate = (
            violations,
            top,
            evict.len(),
            name.clone(),
            evict.into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
        );
        if best.as_ref().is_none_or(|b| {
            (candidate.0, candidate.1, candidate.2, &candidate.3) < (b.0, b.1, b.2, &b.3)
        }) {
            best = Some(candidate);
        }
    }
    best.map(|(_, _, _, node, mut victims)| {
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

    fn plan_(p: &Pod, c: &Cache) -> Option<Plan> {
        plan(p, c, &[])
    }

    fn labelled(name: &str, cpu: &str, priority: i32, app: &str) -> Pod {
        let mut p = pod(name, cpu, priority, json!({}));
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    }

    #[test]
    fn disruption_budgets_steer_the_victims() {
        let mut c = Cache::default();
        c.set_node(node("a"));
        c.set_node(node("b"));
        // a: two 1-cpu pods of a protected app; b: two 1-cpu pods of priority 20.
        c.add_pod("d/a1", &Arc::new(labelled("a1", "1", 10, "db")), "a");
        c.add_pod("d/a2", &Arc::new(labelled("a2", "1", 10, "db")), "a");
        c.add_pod("d/b1", &Arc::new(labelled("b1", "1", 20, "web")), "b");
        c.add_pod("d/b2", &Arc::new(labelled("b2", "1", 20, "web")), "b");
        let budget = |allowed| Budget {
            namespace: "d".into(),
            selector: rkube_api::LabelSelector::parse("app=db").unwrap(),
            allowed,
        };
        let p = pod("p", "1", 100, json!({}));
        // Without a budget the lower-priority pods on a go.
        assert_eq!(plan(&p, &c, &[]).unwrap().node, "a");
        // With no disruption allowed for them, b's pods go instead, despite their priority.
        assert_eq!(
            plan(&p, &c, &[budget(0)]),
            Some(Plan {
                node: "b".into(),
                victims: vec!["d/b2".into()]
            })
        );
        // One disruption allowed: a again, within the budget.
        assert_eq!(plan(&p, &c, &[budget(1)]).unwrap().node, "a");
        // Another namespace's budget protects nothing here.
        let mut other = budget(0);
        other.namespace = "e".into();
        assert_eq!(plan(&p, &c, &[other]).unwrap().node, "a");
    }

    #[test]
    fn the_fewest_lowest_priority_victims_make_room() {
        let mut c = Cache::default();
        c.set_node(node("a"));
        c.set_node(node("b"));
        // a: two 1-cpu pods of priority 10 and 5; b: one 2-cpu pod of priority 100.
        c.add_pod("d/a1", &Arc::new(pod("a1", "1", 10, json!({}))), "a");
        c.add_pod("d/a2", &Arc::new(pod("a2", "1", 5, json!({}))), "a");
        c.add_pod("d/b1", &Arc::new(pod("b1", "2", 100, json!({}))), "b");
        // A 1-cpu pod of priority 50 evicts only the priority-5 pod on a.
        assert_eq!(
            plan_(&pod("p", "1", 50, json!({})), &c),
            Some(Plan {
                node: "a".into(),
                victims: vec!["d/a2".into()]
            })
        );
        // A 2-cpu pod of priority 200: both of a's (highest victim 10) beat b's (100).
        assert_eq!(
            plan_(&pod("p", "2", 200, json!({})), &c),
            Some(Plan {
                node: "a".into(),
                victims: vec!["d/a1".into(), "d/a2".into()]
            })
        );
        // Nothing of lower priority, or not allowed to preempt: no plan.
        assert_eq!(plan_(&pod("p", "1", 1, json!({})), &c), None);
        assert_eq!(
            plan_(&pod("p", "1", 50, json!({"preemptionPolicy": "Never"})), &c),
            None
        );
        // What removing pods cannot fix (a node selector) is no candidate.
        assert_eq!(
            plan_(
                &pod("p", "1", 50, json!({"nodeSelector": {"disk": "ssd"}})),
                &c
            ),
            None
        );
    }
}
