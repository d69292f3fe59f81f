//! PodTopologySpread and InterPodAffinity, as upstream's plugins: what they need is computed
//! once per pod over the cache's pods (`prepare`, their PreFilter), then each node is checked
//! (`filter`) and scored (`score`). A pod with no spread constraints and no pod (anti-)affinity,
//! in a cluster where no pod has required anti-affinity, skips all of it.
//!
//! Namespaces of affinity terms: the term's `namespaces` and those its `namespaceSelector`
//! selects (an empty one: every namespace), else the pod's own.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use rkube_api::LabelSelector as Selector;
use rkube_client::pod::Pod;

use crate::cache::{required_terms, Cache, NodeInfo};
use crate::plugins::{labels, Reason};

pub const R_SPREAD: Reason = "node(s) didn't match pod topology spread constraints";
pub const R_SPREAD_LABEL: Reason =
    "node(s) didn't match pod topology spread constraints (missing required label)";
pub const R_AFFINITY: Reason = "node(s) didn't match pod affinity rules";
pub const R_ANTI_AFFINITY: Reason = "node(s) didn't match pod anti-affinity rules";
pub const R_EXISTING_ANTI: Reason = "node(s) didn't satisfy existing pods anti-affinity rules";

/// A selector as a term or constraint means it: absent selects nothing, empty everything; with
/// `match_label_keys` narrowed to the incoming pod's values of those keys.
fn parse(s: Option<&LabelSelector>, keys: &[String], pod: &Pod) -> Option<Selector> {
    let mut s = s?.clone();
    let own = pod.metadata.labels.as_ref();
    for k in keys {
        if let Some(v) = own.and_then(|l| l.get(k)) {
            s.match_labels
                .get_or_insert_with(Default::default)
                .insert(k.clone(), v.clone());
        }
    }
    Selector::from_api(&s).ok()
}

/// Names of the namespaces whose labels a selector matches.
pub type NamespacesOf<'a> = &'a dyn Fn(&Selector) -> Vec<String>;

/// The namespaces a term of a pod in `ns` looks at (`None`: all).
fn namespaces(t: &PodAffinityTerm, ns: &str, selected: NamespacesOf) -> Option<HashSet<String>> {
    let mut listed: HashSet<String> = t.namespaces.iter().flatten().cloned().collect();
    match &t.namespace_selector {
        None if listed.is_empty() => Some(HashSet::from([ns.to_string()])),
        None => Some(listed),
        Some(s) => {
            let sel = Selector::from_api(s).ok()?;
            if sel.is_empty() {
                return None;
            }
            listed.extend(selected(&sel));
            Some(listed)
        }
    }
}

/// A term made ready to match pods.
struct Term {
    key: String,
    selector: Option<Selector>,
    namespaces: Option<HashSet<String>>,
    weight: i64,
}

impl Term {
    fn new(t: &PodAffinityTerm, owner: &Pod, weight: i64, selected: NamespacesOf) -> Term {
        let ns = owner.metadata.namespace.as_deref().unwrap_or_default();
        Term {
            key: t.topology_key.clone(),
            selector: parse(
                t.label_selector.as_ref(),
                t.match_label_keys.as_deref().unwrap_or(&[]),
                owner,
            ),
            namespaces: namespaces(t, ns, selected),
            weight,
        }
    }

    fn matches(&self, ns: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.as_ref().is_none_or(|n| n.contains(ns))
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

struct Spread {
    key: String,
    max_skew: i64,
    hard: bool,
    min_domains: usize,
    /// Matching pods per domain value, every eligible domain present.
    counts: HashMap<String, i64>,
    /// 1 when the incoming pod matches its own constraint.
    own: i64,
}

/// What the filters and scores need for one pod.
#[derive(Default)]
pub struct State {
    spread: Vec<Spread>,
    /// Required affinity: the term and the domains holding a matching pod.
    affinity: Vec<(Term, HashSet<String>)>,
    /// No pod anywhere matches the affinity terms, and the pod matches them itself: the first
    /// of its group may go anywhere.
    affinity_free: bool,
    /// Required anti-affinity: the domains holding a matching pod.
    anti: Vec<(String, HashSet<String>)>,
    /// Domains (key, value) where an existing pod's required anti-affinity forbids this pod.
    existing_anti: HashSet<(String, String)>,
    /// Preferred terms: the weight each domain adds (anti-affinity subtracts).
    preferred: Vec<(String, HashMap<String, i64>)>,
}

/// The state for `p`, or `None` when neither plugin has anything to say about it.
pub fn prepare(p: &Pod, cache: &Cache, selected: NamespacesOf) -> Option<State> {
    let spec = p.spec.as_ref()?;
    let constraints: &[TopologySpreadConstraint] =
        spec.topology_spread_constraints.as_deref().unwrap_or(&[]);
    let (aff, anti) = required_terms(p);
    let a = spec.affinity.as_ref();
    let pref_aff = a
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default();
    let pref_anti = a
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default();
    let nothing = constraints.is_empty()
        && aff.is_empty()
        && anti.is_empty()
        && pref_aff.is_empty()
        && pref_anti.is_empty()
        && cache.anti_pods().next().is_none();
    if nothing {
        return None;
    }
    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
    let own_labels = p.metadata.labels.clone().unwrap_or_default();
    let node_label = |node: &str, key: &str| -> Option<String> {
        cache
            .nodes
            .get(node)
            .and_then(|i| labels(i).get(key).cloned())
    };
    let mut st = State::default();

    // PodTopologySpread: domains of eligible nodes (with the key, and admitting the pod by
    // its node selector and required node affinity), matching pods counted per domain.
    for c in constraints {
        let Some(sel) = parse(
            c.label_selector.as_ref(),
            c.match_label_keys.as_deref().unwrap_or(&[]),
            p,
        ) else {
            continue;
        };
        let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
        let mut counts: HashMap<String, i64> = HashMap::new();
        let mut eligible: HashSet<&str> = HashSet::new();
        for (name, info) in &cache.nodes {
            let l = labels(info);
            let Some(v) = l.get(&c.topology_key) else {
                continue;
            };
            if honor_affinity
                && !rkube_api::nodeaffinity::required_matches(
                    spec.node_selector.as_ref(),
                    spec.affinity.as_deref(),
                    l,
                    name,
                )
            {
                continue;
            }
            eligible.insert(name);
            counts.entry(v.clone()).or_insert(0);
        }
        for e in cache.entries() {
            if e.terminating
                || e.namespace() != ns
                || !eligible.contains(e.node.as_str())
                || !sel.matches(e.labels())
            {
                continue;
            }
            if let Some(v) = node_label(&e.node, &c.topology_key) {
                *counts.entry(v).or_insert(0) += 1;
            }
        }
        st.spread.push(Spread {
            key: c.topology_key.clone(),
            max_skew: i64::from(c.max_skew.max(1)),
            hard: c.when_unsatisfiable == "DoNotSchedule",
            min_domains: c.min_domains.unwrap_or(1).max(1) as usize,
            counts,
            own: i64::from(sel.matches(&own_labels)),
        });
    }

    // InterPodAffinity.
    let aff: Vec<Term> = aff.iter().map(|t| Term::new(t, p, 0, selected)).collect();
    let anti: Vec<Term> = anti.iter().map(|t| Term::new(t, p, 0, selected)).collect();
    let mut preferred: Vec<Term> = pref_aff
        .iter()
        .map(|w| Term::new(&w.pod_affinity_term, p, i64::from(w.weight), selected))
        .collect();
    preferred.extend(
        pref_anti
            .iter()
            .map(|w| Term::new(&w.pod_affinity_term, p, -i64::from(w.weight), selected)),
    );
    let mut aff_domains: Vec<HashSet<String>> = vec![HashSet::new(); aff.len()];
    let mut anti_domains: Vec<HashSet<String>> = vec![HashSet::new(); anti.len()];
    let mut pref_domains: Vec<HashMap<String, i64>> = vec![HashMap::new(); preferred.len()];
    let mut any_affinity_match = false;
    if !(aff.is_empty() && anti.is_empty() && preferred.is_empty()) {
        for e in cache.entries() {
            // A pod counts for the required affinity only when it matches every term.
            if !aff.is_empty() && aff.iter().all(|t| t.matches(e.namespace(), e.labels())) {
                any_affinity_match = true;
                for (t, d) in aff.iter().zip(aff_domains.iter_mut()) {
                    if let Some(v) = node_label(&e.node, &t.key) {
                        d.insert(v);
                    }
                }
            }
            for (t, d) in anti.iter().zip(anti_domains.iter_mut()) {
                if t.matches(e.namespace(), e.labels()) {
                    if let Some(v) = node_label(&e.node, &t.key) {
                        d.insert(v);
                    }
                }
            }
            for (t, d) in preferred.iter().zip(pref_domains.iter_mut()) {
                if t.matches(e.namespace(), e.labels()) {
                    if let Some(v) = node_label(&e.node, &t.key) {
                        *d.entry(v).or_insert(0) += t.weight;
                    }
                }
            }
        }
    }
    st.affinity_free =
        !any_affinity_match && !aff.is_empty() && aff.iter().all(|t| t.matches(ns, &own_labels));
    st.affinity = aff.into_iter().zip(aff_domains).collect();
    st.anti = anti.into_iter().map(|t| t.key).zip(anti_domains).collect();
    st.preferred = preferred
        .into_iter()
        .map(|t| t.key)
        .zip(pref_domains)
        .collect();

    // Existing pods' required anti-affinity that this pod would violate.
    for (e, terms) in cache.anti_pods() {
        for t in terms {
            let owner_ns = e.namespace();
            let term = Term {
                key: t.topology_key.clone(),
                selector: parse(t.label_selector.as_ref(), &[], p),
                namespaces: namespaces(t, owner_ns, selected),
                weight: 0,
            };
            if term.matches(ns, &own_labels) {
                if let Some(v) = node_label(&e.node, &term.key) {
                    st.existing_anti.insert((term.key, v));
                }
            }
        }
    }
    Some(st)
}

/// Whether `info` passes both plugins' filters.
pub fn filter(st: &State, info: &NodeInfo) -> Result<(), Reason> {
    let l = labels(info);
    for s in st.spread.iter().filter(|s| s.hard) {
        let Some(v) = l.get(&s.key) else {
            return Err(R_SPREAD_LABEL);
        };
        let min = if s.counts.len() < s.min_domains {
            0
        } else {
            s.counts.values().copied().min().unwrap_or(0)
        };
        let here = s.counts.get(v).copied().unwrap_or(0);
        if here + s.own - min > s.max_skew {
            return Err(R_SPREAD);
        }
    }
    // InterPodAffinity's order: the pod's affinity, its anti-affinity, then existing pods'.
    for (t, domains) in &st.affinity {
        // The first of a self-affine group still needs every topology key on the node.
        let ok = match l.get(&t.key) {
            None => false,
            Some(v) => st.affinity_free || domains.contains(v),
        };
        if !ok {
            return Err(R_AFFINITY);
        }
    }
    for (key, domains) in &st.anti {
        if l.get(key).is_some_and(|v| domains.contains(v)) {
            return Err(R_ANTI_AFFINITY);
        }
    }
    if st.existing_anti.iter().any(|(k, v)| l.get(k) == Some(v)) {
        return Err(R_EXISTING_ANTI);
    }
    Ok(())
}

/// (matching pods in the node's domains for soft spread constraints — fewer is better;
/// `None` when the node lacks one of their keys, which scores worst — and the preferred pod
/// (anti-)affinity weight of its domains — more is better).
pub fn score(st: &State, info: &NodeInfo) -> (Option<i64>, i64) {
    let l = labels(info);
    let spread = st
        .spread
        .iter()
        .filter(|s| !s.hard)
        .map(|s| l.get(&s.key).map(|v| s.counts.get(v).copied().unwrap_or(0)))
        .sum();
    let affinity = st
        .preferred
        .iter()
        .map(|(key, w)| l.get(key).and_then(|v| w.get(v)).copied().unwrap_or(0))
        .sum();
    (spread, affinity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, zone: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name, "zone": zone}}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, app: &str, spec: serde_json::Value) -> Pod {
        let mut s = json!({"containers": [{"name": "c", "image": "i"}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d",
            "labels": {"app": app}}, "spec": s}))
        .unwrap()
    }

    /// Nodes a, b (zone x) and c (zone y), with `placed` pods (name, app, node).
    fn cache(placed: &[(&str, &str, &str)]) -> Cache {
        let mut c = Cache::default();
        for (n, z) in [("a", "x"), ("b", "x"), ("c", "y")] {
            c.set_node(node(n, z));
        }
        for (name, app, n) in placed {
            c.add_pod(
                &format!("d/{name}"),
                &Arc::new(pod(name, app, json!({}))),
                n,
            );
        }
        c
    }

    fn verdicts(p: &Pod, c: &Cache) -> Vec<Result<(), Reason>> {
        let st = prepare(p, c, &|_| Vec::new()).expect("something to check");
        ["a", "b", "c"]
            .iter()
            .map(|n| filter(&st, &c.nodes[*n]))
            .collect()
    }

    #[test]
    fn nothing_to_do_costs_nothing() {
        assert!(prepare(
            &pod("p", "web", json!({})),
            &cache(&[("w", "web", "a")]),
            &|_| Vec::new()
        )
        .is_none());
    }

    #[test]
    fn spread_skew_min_domains_and_soft_scores() {
        let c = cache(&[("w1", "web", "a"), ("w2", "web", "b"), ("o", "other", "c")]);
        let hard = |extra: serde_json::Value| {
            let mut con = json!({"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}});
            for (k, v) in extra.as_object().unwrap() {
                con[k] = v.clone();
            }
            pod("p", "web", json!({"topologySpreadConstraints": [con]}))
        };
        // Zone x holds 2, y none: only y keeps the skew within 1.
        assert_eq!(
            verdicts(&hard(json!({})), &c),
            [Err(R_SPREAD), Err(R_SPREAD), Ok(())]
        );
        // maxSkew 3 lets zone x in too (2 + 1 − 0 ≤ 3).
        assert_eq!(
            verdicts(&hard(json!({"maxSkew": 3})), &c),
            [Ok(()), Ok(()), Ok(())]
        );
        // One in each zone: any node keeps the skew; with more domains wanted than exist, the
        // global minimum counts as 0 and none does.
        let c2 = cache(&[("w1", "web", "a"), ("w2", "web", "c")]);
        assert_eq!(verdicts(&hard(json!({})), &c2), [Ok(()), Ok(()), Ok(())]);
        assert_eq!(
            verdicts(&hard(json!({"minDomains": 3})), &c2),
            [Err(R_SPREAD), Err(R_SPREAD), Err(R_SPREAD)]
        );
        // Soft: fewer matching pods in the domain score better.
        let soft = pod(
            "p",
            "web",
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]}),
        );
        let st = prepare(&soft, &c, &|_| Vec::new()).unwrap();
        assert_eq!(score(&st, &c.nodes["a"]).0, Some(2));
        assert_eq!(score(&st, &c.nodes["c"]).0, Some(0));
        assert_eq!(filter(&st, &c.nodes["a"]), Ok(()));
    }

    #[test]
    fn affinity_anti_affinity_and_existing_pods() {
        let c = cache(&[("db", "db", "a")]);
        let term = |app: &str, key: &str| json!([{"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]);
        let near = pod(
            "p",
            "web",
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("db", "zone")}}}),
        );
        assert_eq!(verdicts(&near, &c), [Ok(()), Ok(()), Err(R_AFFINITY)]);
        let away = pod(
            "p",
            "web",
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("db", "zone")}}}),
        );
        assert_eq!(
            verdicts(&away, &c),
            [Err(R_ANTI_AFFINITY), Err(R_ANTI_AFFINITY), Ok(())]
        );
        // Another namespace's pods do not count unless the term names it.
        let mut other_ns = near.clone();
        other_ns.metadata.namespace = Some("e".into());
        assert_eq!(
            verdicts(&other_ns, &c),
            [Err(R_AFFINITY), Err(R_AFFINITY), Err(R_AFFINITY)]
        );
        // A namespaceSelector brings the namespaces it selects in.
        let mut selecting = other_ns.clone();
        selecting.spec.as_mut().unwrap().affinity = serde_json::from_value(json!({"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "db"}},
                "topologyKey": "zone", "namespaceSelector": {"matchLabels": {"team": "data"}}}]}}))
        .unwrap();
        let st = prepare(&selecting, &c, &|sel| {
            let l = [("team".to_string(), "data".to_string())].into();
            if sel.matches(&l) {
                vec!["d".into()]
            } else {
                vec![]
            }
        })
        .unwrap();
        assert_eq!(filter(&st, &c.nodes["a"]), Ok(()));
        assert_eq!(filter(&st, &c.nodes["c"]), Err(R_AFFINITY));
        // The first of a self-affine group may go anywhere.
        let group = pod(
            "p",
            "db2",
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("db2", "zone")}}}),
        );
        assert_eq!(verdicts(&group, &c), [Ok(()), Ok(()), Ok(())]);
        // An existing pod's anti-affinity keeps matching pods out of its domain.
        let mut c = cache(&[]);
        let loner = pod(
            "loner",
            "loner",
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term("web", "kubernetes.io/hostname")}}}),
        );
        c.add_pod("d/loner", &Arc::new(loner.clone()), "b");
        assert_eq!(
            verdicts(&pod("p", "web", json!({})), &c),
            [Ok(()), Err(R_EXISTING_ANTI), Ok(())]
        );
        // Preferred terms weigh domains.
        let c = cache(&[("db", "db", "a")]);
        let pref = pod(
            "p",
            "web",
            json!({"affinity": {
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": term("db", "zone")[0]}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 4, "podAffinityTerm": term("db", "kubernetes.io/hostname")[0]}]}}}),
        );
        let st = prepare(&pref, &c, &|_| Vec::new()).unwrap();
        let w: Vec<i64> = ["a", "b", "c"]
            .iter()
            .map(|n| score(&st, &c.nodes[*n]).1)
            .collect();
        assert_eq!(w, [6, 10, 0]);
    }
}
