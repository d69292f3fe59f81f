//! The disruption controller (upstream's `disruption`): every PodDisruptionBudget's status —
//! expected, healthy and desired-healthy pods, the disruptions allowed, the
//! `DisruptionAllowed` condition, evictions recorded in `disruptedPods` (kept out of the
//! healthy count for two minutes or until the pod is gone) — which the apiserver's eviction
//! honours. `status_of` decides (pure).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::objects::labels_of;
use crate::worker::Reconciled;

/// How long an evicted pod stays out of the healthy count before it is gone.
const DISRUPTED_WINDOW_SECS: i64 = 120;

pub struct DisruptionController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

/// Whether the budget's selector picks `pod` (an empty selector picks every pod).
pub fn covers(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let Ok(v) = serde_json::to_value(sel) else {
        return false;
    };
    rkube_api::LabelSelector::from_json(&v).is_ok_and(|s| s.matches(&labels_of(&pod.metadata)))
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `n`, or `p%` of `of` rounded up.
fn scaled(v: &IntOrString, of: i64) -> i64 {
    match v {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            (p * of + 99) / 100
        }
    }
}

/// The budget's status over the pods of its namespace, at `now` (seconds since the epoch).
pub fn status_of(pdb: &PodDisruptionBudget, pods: &[Arc<Pod>], now: i64) -> Value {
    let covered: Vec<&Pod> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| covers(pdb, p))
        .collect();
    let disrupted: BTreeMap<String, String> = pdb
        .status
        .as_ref()
        .and_then(|s| s.disrupted_pods.as_ref())
        .map(|d| {
            d.iter()
                .filter(|(name, at)| {
                    let fresh = now - at.0.timestamp() < DISRUPTED_WINDOW_SECS;
                    let alive = covered.iter().any(|p| {
                        p.metadata.name.as_deref() == Some(name.as_str())
                            && p.metadata.deletion_timestamp.is_none()
                    });
                    fresh && alive
                })
                .map(|(k, v)| (k.clone(), v.0.to_rfc3339()))
                .collect()
        })
        .unwrap_or_default();
    let expected = covered.len() as i64;
    let healthy = covered
        .iter()
        .filter(|p| ready(p) && !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
        .count() as i64;
    let spec = pdb.spec.clone().unwrap_or_default();
    let desired = match (&spec.min_available, &spec.max_unavailable) {
        (Some(min), _) => scaled(min, expected),
        (None, Some(max)) => (expected - scaled(max, expected)).max(0),
        (None, None) => 0,
    };
    let allowed = (healthy - desired).max(0);
    let generation = pdb.metadata.generation.unwrap_or(0);
    let (st, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    json!({
        "observedGeneration": generation,
        "disruptedPods": disrupted,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": st, "reason": reason, "message": "",
                        "observedGeneration": generation}],
    })
}

/// A status without its condition timestamps, for comparing.
fn comparable(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(cs) = s.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in cs {
            if let Some(m) = c.as_object_mut() {
                m.remove("lastTransitionTime");
            }
        }
    }
    if s.get("disruptedPods")
        .is_some_and(|d| d.as_object().is_some_and(|m| m.is_empty()))
    {
        if let Some(m) = s.as_object_mut() {
            m.remove("disruptedPods");
        }
    }
    s
}

impl DisruptionController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(DisruptionController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("disruption"),
        });
        let q = c.queue.clone();
        ctx.pdbs.on_change(move |ch| {
            if let Change::Added(p) | Change::Updated { new: p, .. } = ch {
                q.add(key_of(&**p));
            }
        });
        let (q, weak) = (c.queue.clone(), Arc::downgrade(&ctx));
        ctx.pods.on_change(move |ch| {
            let Some(ctx) = weak.upgrade() else {
                return;
            };
            let pods: Vec<&Arc<Pod>> = match ch {
                Change::Added(p) | Change::Deleted(p) => vec![p],
                Change::Updated { old, new } => vec![old, new],
            };
            for pod in pods {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("");
                for pdb in ctx.pdbs.by_index(index::NAMESPACE, ns) {
                    if covers(&pdb, pod) {
                        q.add(key_of(&*pdb));
                    }
                }
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "disruption", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let Some(pdb) = self.ctx.pdbs.get(key) else {
            return Ok(None);
        };
        let pods = self.ctx.pods.by_index(index::NAMESPACE, ns);
        let now = rkube_client::now().timestamp();
        let mut want = status_of(&pdb, &pods, now);
        let current = serde_json::to_value(&pdb.status).unwrap_or(Value::Null);
        if comparable(&current) == comparable(&want) {
            // Disrupted pods age out: look again when the oldest would.
            return Ok(pdb
                .status
                .as_ref()
                .and_then(|s| s.disrupted_pods.as_ref())
                .filter(|d| !d.is_empty())
                .map(|_| std::time::Duration::from_secs(15)));
        }
        let stamp =
            rkube_client::now().to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true);
        let keep = current
            .pointer("/conditions/0")
            .filter(|c| c["status"] == want["conditions"][0]["status"])
            .and_then(|c| c.get("lastTransitionTime").cloned());
        want["conditions"][0]["lastTransitionTime"] = keep.unwrap_or(json!(stamp));
        let mut next = serde_json::to_value(&*pdb).expect("pdb");
        next["status"] = want;
        let next: PodDisruptionBudget =
            serde_json::from_value(next).map_err(|e| rkube_client::Error::Decode(e.to_string()))?;
        Api::<PodDisruptionBudget>::namespaced(&self.ctx.client, ns)
            .replace_status(name, &next)
            .await
            .map(|_| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "d", "labels": {"app": "web"}},
                "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn allowed_disruptions_follow_health() {
        let pdb: PodDisruptionBudget = serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "d", "generation": 2},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .unwrap();
        let pods = vec![
            pod("a", true),
            pod("b", true),
            pod("c", true),
            pod("d", false),
        ];
        let st = status_of(&pdb, &pods, 0);
        assert_eq!(
            (
                st["expectedPods"].clone(),
                st["currentHealthy"].clone(),
                st["desiredHealthy"].clone(),
                st["disruptionsAllowed"].clone()
            ),
            (json!(4), json!(3), json!(2), json!(1))
        );
        assert_eq!(st["observedGeneration"], 2);
        let pct: PodDisruptionBudget =
            serde_json::from_value(json!({"metadata": {"name": "b", "namespace": "d"},
            "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}))
            .unwrap();
        let st = status_of(&pct, &pods, 0);
        assert_eq!(
            (
                st["desiredHealthy"].clone(),
                st["disruptionsAllowed"].clone()
            ),
            (json!(2), json!(1))
        );
        assert_eq!(st["conditions"][0]["reason"], "SufficientPods");
    }
}
