//! Filter and score plugins, pure functions of a pod and a node's cached state. Filters return
//! upstream's reason strings (they make up the `FailedScheduling` message); scores are 0–100
//! after normalisation and are weighted as upstream's defaults.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
pub use rkube_api::nodeaffinity::term_matches;
use rkube_api::taints::tolerated;
use rkube_client::pod::Pod;

use crate::cache::{host_ports, NodeInfo, OwnerKey};
use crate::resources::{pod_requests, Resources};

/// Why a node does not fit.
pub type Reason = &'static str;

pub const R_NODE_NAME: Reason = "node(s) didn't match the requested node name";
pub const R_UNSCHEDULABLE: Reason = "node(s) were unschedulable";
pub const R_AFFINITY: Reason = "node(s) didn't match Pod's node affinity/selector";
pub const R_PORTS: Reason = "node(s) didn't have free ports for the requested pod ports";
pub const R_CPU: Reason = "Insufficient cpu";
pub const R_MEMORY: Reason = "Insufficient memory";
pub const R_PODS: Reason = "Too many pods";
pub const R_NOT_READY: Reason = "node(s) were not ready";
pub const R_VOLUME_AFFINITY: Reason = "node(s) had volume node affinity conflict";

pub fn labels(info: &NodeInfo) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    info.node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn taints(info: &NodeInfo) -> &[Taint] {
    info.node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

fn tolerations(p: &Pod) -> &[Toleration] {
    p.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// Every filter in upstream's order (NodeUnschedulable, NodeName, readiness, TaintToleration,
/// NodeAffinity, NodePorts, NodeResourcesFit); the first failure's reasons.
pub fn filter(p: &Pod, info: &NodeInfo, req: &Resources) -> Result<(), Vec<Reason>> {
    let spec = p.spec.as_ref();
    let name = info.name();
    // NodeUnschedulable (tolerated by the matching NoSchedule toleration).
    if info.unschedulable {
        let t = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            value: None,
            time_added: None,
        };
        if !tolerated(tolerations(p), &t) {
            return Err(vec![R_UNSCHEDULABLE]);
        }
    }
    // NodeName.
    if let Some(n) = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        if n != name {
            return Err(vec![R_NODE_NAME]);
        }
    }
    // Readiness: the Ready condition must be True.
    if !info.ready {
        return Err(vec![R_NOT_READY]);
    }
    // TaintToleration: NoSchedule and NoExecute taints must be tolerated.
    if let Some(t) = taints(info).iter().find(|t| {
        (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(tolerations(p), t)
    }) {
        return Err(vec![taint_reason(t)]);
    }
    // NodeSelector and required NodeAffinity.
    if let Some(spec) = spec {
        if !rkube_api::nodeaffinity::required_matches(
            spec.node_selector.as_ref(),
            spec.affinity.as_deref(),
            labels(info),
            name,
        ) {
            return Err(vec![R_AFFINITY]);
        }
    }
    // NodePorts.
    for hp in host_ports(p) {
        let wildcard = hp.1 == "0.0.0.0";
        let clash = info
            .ports
            .keys()
            .any(|u| u.0 == hp.0 && u.2 == hp.2 && (wildcard || u.1 == "0.0.0.0" || u.1 == hp.1));
        if clash {
            return Err(vec![R_PORTS]);
        }
    }
    // NodeResourcesFit: every shortage is a reason.
    let a = &info.allocatable;
    let used = &info.requested;
    let mut reasons = Vec::new();
    if used.pods + 1 > a.pods {
        reasons.push(R_PODS);
    }
    if req.milli_cpu > 0 && used.milli_cpu + req.milli_cpu > a.milli_cpu {
        reasons.push(R_CPU);
    }
    if req.memory > 0 && used.memory + req.memory > a.memory {
        reasons.push(R_MEMORY);
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

/// `node(s) had untolerated taint {key: value}`: one leaked copy per distinct taint.
fn taint_reason(t: &Taint) -> &'static str {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let msg = format!(
        "node(s) had untolerated taint {{{}: {}}}",
        t.key,
        t.value.as_deref().unwrap_or("")
    );
    let mut g = SEEN.lock().unwrap();
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(s) = map.get(&msg) {
        return s;
    }
    let leaked: &'static str = Box::leak(msg.clone().into_boxed_str());
    map.insert(msg, leaked);
    leaked
}

/// Upstream's default weights.
pub const W_LEAST_ALLOCATED: i64 = 1;
pub const W_BALANCED: i64 = 1;
pub const W_SPREAD: i64 = 2;
pub const W_TAINT: i64 = 3;
pub const W_AFFINITY: i64 = 2;
pub const W_TOPOLOGY_SPREAD: i64 = 2;
pub const W_POD_AFFINITY: i64 = 2;

/// Raw per-node scores, before normalisation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Raw {
    pub least_allocated: i64,
    pub balanced: i64,
    /// Pods of the same controller already on the node (fewer is better).
    pub same_owner: i64,
    /// Untolerated PreferNoSchedule taints (fewer is better).
    pub prefer_taints: i64,
    /// Sum of matching preferred node-affinity weights (more is better).
    pub affinity: i64,
    /// Pods matching soft spread constraints in the node's domains (fewer is better; `None`:
    /// the node lacks a constraint's key, the worst).
    pub topology_spread: Option<i64>,
    /// Preferred pod affinity minus anti-affinity weights of the node's domains.
    pub pod_affinity: i64,
}

/// The raw scores of `p` on `info`.
pub fn raw_scores(p: &Pod, owner: Option<OwnerKey>, info: &NodeInfo, nonzero: &Resources) -> Raw {
    let a = &info.allocatable;
    let cpu = info.nonzero.milli_cpu + nonzero.milli_cpu;
    let mem = info.nonzero.memory + nonzero.memory;
    let least = |req: i64, cap: i64| {
        if cap <= 0 || req > cap {
            0
        } else {
            (cap - req) * 100 / cap
        }
    };
    let least_allocated = (least(cpu, a.milli_cpu) + least(mem, a.memory)) / 2;
    let frac = |req: i64, cap: i64| {
        if cap <= 0 {
            1.0
        } else {
            (req as f64 / cap as f64).min(1.0)
        }
    };
    let (fc, fm) = (frac(cpu, a.milli_cpu), frac(mem, a.memory));
    let balanced = ((1.0 - (fc - fm).abs() / 2.0) * 100.0) as i64;
    let same_owner = owner
        .and_then(|o| info.owners.get(&o).copied())
        .unwrap_or(0) as i64;
    let prefer_taints = taints(info)
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(tolerations(p), t))
        .count() as i64;
    let l = labels(info);
    let affinity = p
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|prefs| {
            prefs
                .iter()
                .filter(|pt| term_matches(&pt.preference, l, info.name()))
                .map(|pt| i64::from(pt.weight))
                .sum()
        })
        .unwrap_or(0);
    Raw {
        least_allocated,
        balanced,
        same_owner,
        prefer_taints,
        affinity,
        topology_spread: Some(0),
        pod_affinity: 0,
    }
}

/// Weighted totals after normalising each plugin over the candidate nodes.
pub fn totals(raws: &[Raw]) -> Vec<i64> {
    let max_owner = raws.iter().map(|r| r.same_owner).max().unwrap_or(0);
    let max_taint = raws.iter().map(|r| r.prefer_taints).max().unwrap_or(0);
    let max_aff = raws.iter().map(|r| r.affinity).max().unwrap_or(0);
    let reverse = |v: i64, max: i64| if max == 0 { 100 } else { (max - v) * 100 / max };
    let max_spread = raws
        .iter()
        .filter_map(|r| r.topology_spread)
        .max()
        .unwrap_or(0);
    let (min_pa, max_pa) = (
        raws.iter().map(|r| r.pod_affinity).min().unwrap_or(0),
        raws.iter().map(|r| r.pod_affinity).max().unwrap_or(0),
    );
    raws.iter()
        .map(|r| {
            let spread = reverse(r.same_owner, max_owner);
            let taint = reverse(r.prefer_taints, max_taint);
            let aff = if max_aff == 0 {
                0
            } else {
                r.affinity * 100 / max_aff
            };
            let topology = r.topology_spread.map_or(0, |v| reverse(v, max_spread));
            let pod_aff = if max_pa == min_pa {
                0
            } else {
                (r.pod_affinity - min_pa) * 100 / (max_pa - min_pa)
            };
            r.least_allocated * W_LEAST_ALLOCATED
                + topology * W_TOPOLOGY_SPREAD
                + pod_aff * W_POD_AFFINITY
                + r.balanced * W_BALANCED
                + spread * W_SPREAD
                + taint * W_TAINT
                + aff * W_AFFINITY
        })
        .collect()
}

/// How many feasible nodes to find before scoring (upstream's adaptive
/// `percentageOfNodesToScore`: all below 100 nodes, else 50% − nodes/125, at least 5%, at least
/// 100 nodes). `configured` > 0 overrides the percentage.
pub fn nodes_to_find(total: usize, configured: u32) -> usize {
    if total < 100 {
        return total;
    }
    let pct = if configured > 0 && configured < 100 {
        configured as usize
    } else if configured >= 100 {
        return total;
    } else {
        (50usize.saturating_sub(total / 125)).max(5)
    };
    (total * pct / 100).max(100).min(total)
}

/// `0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.`
pub fn fit_error(total: usize, reasons: &BTreeMap<&'static str, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{total} nodes are available: {}.", parts.join(", "))
}

/// Requests of the pod (exact, and with scoring defaults).
pub fn requests(p: &Pod) -> (Resources, Resources) {
    pod_requests(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use serde_json::json;
    use std::sync::Arc;

    fn node(
        name: &str,
        cpu: &str,
        extra: serde_json::Value,
    ) -> Arc<k8s_openapi::api::core::v1::Node> {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "3"},
                "conditions": [{"type": "Ready", "status": "True"}]}
        });
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                let (a, b) = k.split_once('.').unwrap();
                n[a][b] = v.clone();
            }
        }
        Arc::new(serde_json::from_value(n).unwrap())
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "d"}, "spec": s}))
            .unwrap()
    }

    fn check(p: &Pod, n: Arc<k8s_openapi::api::core::v1::Node>) -> Result<(), Vec<Reason>> {
        let mut c = Cache::default();
        let name = n.metadata.name.clone().unwrap();
        c.set_node(n);
        filter(p, &c.nodes[&name], &requests(p).0)
    }

    #[test]
    fn resources_fit_counts_assigned_pods() {
        let mut c = Cache::default();
        c.set_node(node("n", "2", json!({})));
        let p = pod(json!({}));
        let r = requests(&p).0;
        assert!(filter(&p, &c.nodes["n"], &r).is_ok());
        c.assume("d/a", &Arc::new(p.clone()), "n");
        c.assume("d/b", &Arc::new(p.clone()), "n");
        assert_eq!(filter(&p, &c.nodes["n"], &r), Err(vec![R_CPU]));
        c.forget("d/b");
        assert!(filter(&p, &c.nodes["n"], &r).is_ok());
        c.assume("d/b", &Arc::new(p.clone()), "n");
        c.remove_pod("d/a");
        c.remove_pod("d/b");
        let tiny = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
        for k in ["x", "y", "z"] {
            c.assume(k, &Arc::new(tiny.clone()), "n");
        }
        assert_eq!(
            filter(&tiny, &c.nodes["n"], &requests(&tiny).0),
            Err(vec![R_PODS])
        );
    }

    #[test]
    fn selectors_affinity_taints_ports_and_readiness() {
        let p = pod(json!({"nodeSelector": {"disk": "ssd"}}));
        assert_eq!(check(&p, node("n", "4", json!({}))), Err(vec![R_AFFINITY]));
        assert!(check(
            &p,
            node("n", "4", json!({"metadata.labels": {"disk": "ssd"}}))
        )
        .is_ok());
        let p = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]}]}}}}),
        );
        assert!(check(
            &p,
            node("n", "4", json!({"metadata.labels": {"zone": "b"}}))
        )
        .is_ok());
        assert!(check(&p, node("special", "4", json!({}))).is_ok());
        assert_eq!(
            check(
                &p,
                node("n", "4", json!({"metadata.labels": {"zone": "c"}}))
            ),
            Err(vec![R_AFFINITY])
        );

        let tainted = node(
            "n",
            "4",
            json!({"spec.taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
        );
        assert_eq!(
            check(&pod(json!({})), tainted.clone()),
            Err(vec!["node(s) had untolerated taint {dedicated: gpu}"])
        );
        let tol = pod(
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}),
        );
        assert!(check(&tol, tainted).is_ok());
        assert_eq!(
            check(
                &pod(json!({})),
                node("n", "4", json!({"spec.unschedulable": true}))
            ),
            Err(vec![R_UNSCHEDULABLE])
        );
        let not_ready = node(
            "n",
            "4",
            json!({"status.conditions": [{"type": "Ready", "status": "Unknown"}]}),
        );
        assert_eq!(check(&pod(json!({})), not_ready), Err(vec![R_NOT_READY]));
        assert_eq!(
            check(
                &pod(json!({"nodeName": "other"})),
                node("n", "4", json!({}))
            ),
            Err(vec![R_NODE_NAME])
        );

        let mut c = Cache::default();
        c.set_node(node("n", "8", json!({})));
        let web = pod(
            json!({"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
        );
        c.assume("d/w1", &Arc::new(web.clone()), "n");
        assert_eq!(
            filter(&web, &c.nodes["n"], &requests(&web).0),
            Err(vec![R_PORTS])
        );
    }

    #[test]
    fn scores_prefer_emptier_balanced_spread_and_preferred_nodes() {
        let mut c = Cache::default();
        c.set_node(node("busy", "4", json!({})));
        c.set_node(node("idle", "4", json!({})));
        let p = pod(json!({}));
        c.assume("d/x", &Arc::new(p.clone()), "busy");
        let nz = requests(&p).1;
        let raws = [
            raw_scores(&p, OwnerKey::of(&p), &c.nodes["busy"], &nz),
            raw_scores(&p, OwnerKey::of(&p), &c.nodes["idle"], &nz),
        ];
        assert!(raws[1].least_allocated > raws[0].least_allocated);
        let t = totals(&raws);
        assert!(t[1] > t[0], "{t:?}");
        let pref = pod(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["busy"]}]}}]}}}),
        );
        let raws = [
            raw_scores(&pref, OwnerKey::of(&pref), &c.nodes["busy"], &nz),
            raw_scores(&pref, OwnerKey::of(&pref), &c.nodes["idle"], &nz),
        ];
        assert_eq!((raws[0].affinity, raws[1].affinity), (50, 0));
    }

    /// The spreading score counts the pod's controller's pods on each node, and forgets them
    /// as they go.
    #[test]
    fn pods_of_the_same_controller_are_counted_per_node() {
        let owned = |uid: &str| {
            let mut p = pod(json!({}));
            p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}))
            .unwrap()]);
            p
        };
        let mut c = Cache::default();
        c.set_node(node("a", "8", json!({})));
        c.set_node(node("b", "8", json!({})));
        let (mine, other) = (owned("uid-1"), owned("uid-2"));
        c.assume("d/1", &Arc::new(mine.clone()), "a");
        c.assume("d/2", &Arc::new(mine.clone()), "a");
        c.assume("d/3", &Arc::new(other.clone()), "b");
        let nz = requests(&mine).1;
        let same = |c: &Cache, n: &str| {
            raw_scores(&mine, OwnerKey::of(&mine), &c.nodes[n], &nz).same_owner
        };
        assert_eq!((same(&c, "a"), same(&c, "b")), (2, 0));
        assert_ne!(OwnerKey::of(&mine), OwnerKey::of(&other));
        assert_eq!(OwnerKey::of(&pod(json!({}))), None);
        c.forget("d/1");
        c.forget("d/2");
        assert_eq!(same(&c, "a"), 0);
        assert!(c.nodes["a"].owners.is_empty());
    }

    #[test]
    fn sampling_and_messages() {
        assert_eq!(nodes_to_find(50, 0), 50);
        assert_eq!(nodes_to_find(5000, 0), 500);
        assert_eq!(nodes_to_find(1000, 0), 420);
        assert_eq!(nodes_to_find(5000, 100), 5000);
        let mut r = BTreeMap::new();
        r.insert(R_CPU, 3);
        assert_eq!(
            fit_error(3, &r),
            "0/3 nodes are available: 3 Insufficient cpu."
        );
        r.insert(R_UNSCHEDULABLE, 1);
        assert_eq!(
            fit_error(4, &r),
            "0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient cpu."
        );
    }
}
