//! Node lifecycle: a node whose kubelet stops heartbeating (its Lease in `kube-node-lease` and
//! its Ready condition) for `--node-monitor-grace-period` gets its conditions set to Unknown and
//! the `node.kubernetes.io/unreachable` taints (`not-ready` for Ready=False); pods on a node with
//! NoExecute taints are evicted once their matching tolerations' `tolerationSeconds` run out
//! (immediately without one); the taints go when the node is Ready again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::events::object_ref;
use rkube_client::informer::index;
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error, Patch};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;

pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
const CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

fn ready_condition(n: &Node) -> Option<&NodeCondition> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The node's last sign of life: the later of its Lease renewal and its Ready heartbeat.
pub fn last_heartbeat(n: &Node, lease_renew: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    let hb = ready_condition(n)
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    hb.max(lease_renew)
}

/// Conditions set to Unknown when the heartbeat is older than `grace` (None: no change).
pub fn stale_conditions(
    n: &Node,
    lease_renew: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    grace: Duration,
) -> Option<Vec<NodeCondition>> {
    let grace = k8s_openapi::chrono::Duration::from_std(grace).ok()?;
    let created = n.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let (since, message) = match (ready_condition(n), last_heartbeat(n, lease_renew)) {
        (Some(c), _) if c.status == "Unknown" => return None,
        (Some(_), Some(hb)) => (hb, "Kubelet stopped posting node status."),
        _ => (
            lease_renew.or(created)?,
            "Kubelet never posted node status.",
        ),
    };
    if now - since <= grace {
        return None;
    }
    let mut conds: Vec<NodeCondition> = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for t in CONDITIONS {
        match conds.iter_mut().find(|c| c.type_ == t) {
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some(message.into());
                c.last_transition_time = Some(Time(now));
            }
            None => conds.push(NodeCondition {
                type_: t.into(),
                status: "Unknown".into(),
                reason: Some("NodeStatusNeverUpdated".into()),
                message: Some(message.into()),
                last_heartbeat_time: Some(Time(since)),
                last_transition_time: Some(Time(now)),
            }),
        }
    }
    Some(conds)
}

/// The node's taints with the lifecycle ones matching its Ready status (`None`: unchanged).
pub fn desired_taints(n: &Node, now: DateTime<Utc>) -> Option<Vec<Taint>> {
    let current: Vec<Taint> = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let want_key = match ready_condition(n).map(|c| c.status.as_str()) {
        Some("True") => None,
        Some("False") => Some(NOT_READY),
        Some(_) => Some(UNREACHABLE),
        None => return None,
    };
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| {
            (t.key != UNREACHABLE && t.key != NOT_READY) || Some(t.key.as_str()) == want_key
        })
        .cloned()
        .collect();
    if let Some(k) = want_key {
        for effect in ["NoSchedule", "NoExecute"] {
            if !out.iter().any(|t| t.key == k && t.effect == effect) {
                out.push(Taint {
                    key: k.into(),
                    effect: effect.into(),
                    value: None,
                    time_added: (effect == "NoExecute").then_some(Time(now)),
                });
            }
        }
    }
    (out != current).then_some(out)
}

/// The pod's conditions with Ready (and ContainersReady) turned False, if Ready was True.
pub fn not_ready_conditions(
    pod: &Pod,
    now: DateTime<Utc>,
) -> Option<Vec<k8s_openapi::api::core::v1::PodCondition>> {
    let mut conds = pod.status.as_ref()?.conditions.clone()?;
    let mut changed = false;
    for c in conds
        .iter_mut()
        .filter(|c| (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status == "True")
    {
        c.status = "False".into();
        c.reason = Some("NodeNotReady".into());
        c.message = Some("Node is not ready".into());
        c.last_transition_time = Some(Time(now));
        changed = true;
    }
    changed.then_some(conds)
}

/// When a pod on a node with these taints must go: `None` never, `Some(t)` at `t` (past = now).
pub fn eviction_time(pod: &Pod, taints: &[Taint], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let tols: Vec<Toleration> = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut at: Option<DateTime<Utc>> = None;
    let mut any = false;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        any = true;
        let matching: Vec<&Toleration> = tols
            .iter()
            .filter(|t| rkube_api::taints::tolerates(t, taint))
            .collect();
        if matching.is_empty() {
            return Some(now);
        }
        if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            continue; // tolerated forever
        }
        let secs = matching
            .iter()
            .filter_map(|t| t.toleration_seconds)
            .min()
            .unwrap_or(0)
            .max(0);
        let added = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
        let t = added + k8s_openapi::chrono::Duration::seconds(secs);
        at = Some(at.map_or(t, |a| a.min(t)));
    }
    if any {
        at
    } else {
        None
    }
}

pub struct NodeLifecycle {
    ctx: Arc<Ctx>,
    recorder: rkube_client::events::Recorder,
    grace: Duration,
    period: Duration,
}

impl NodeLifecycle {
    pub fn new(ctx: Arc<Ctx>, grace: Duration, period: Duration) -> Arc<Self> {
        Arc::new(NodeLifecycle {
            recorder: ctx.recorder.for_component("node-controller"),
            ctx,
            grace,
            period,
        })
    }

    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        crate::worker::every(
            "nodelifecycle",
            self.period,
            shutdown,
            self.clone(),
            |me| async move { me.monitor().await },
        );
    }

    /// Upstream's `MarkPodsNotReady`: the pods of a node that stopped reporting are no longer
    /// Ready (so Services and `kubectl get` stop counting them).
    async fn mark_pods_not_ready(&self, node: &str, now: DateTime<Utc>) -> Result<(), Error> {
        for pod in self.ctx.pods.by_index(index::NODE_NAME, node) {
            let Some(conds) = not_ready_conditions(&pod, now) else {
                continue;
            };
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pname = pod.metadata.name.clone().unwrap_or_default();
            let patch = Patch::Merge(
                json!({"metadata": {"uid": pod.metadata.uid}, "status": {"conditions": conds}}),
            );
            match Api::<Pod>::namespaced(&self.ctx.client, &ns)
                .patch_status(&pname, &patch)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.code() == Some(409) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn monitor(&self) -> Result<(), Error> {
        let now = rkube_client::now();
        let nodes_api: Api<Node> = Api::all(&self.ctx.client);
        for node in self.ctx.nodes.list() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let renew = self
                .ctx
                .node_leases
                .get_in("kube-node-lease", &name)
                .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
            let mut node = (*node).clone();
            if let Some(conds) = stale_conditions(&node, renew, now, self.grace) {
                tracing::info!(node = %name, "node stopped heartbeating; conditions set to Unknown");
                // The resourceVersion makes it a precondition: a heartbeat that just arrived wins.
                let rv = node.metadata.resource_version.clone();
                let patch = Patch::Merge(
                    json!({"metadata": {"resourceVersion": rv}, "status": {"conditions": conds}}),
                );
                match nodes_api.patch_status(&name, &patch).await {
                    Ok(n) => node = n,
                    Err(e) if e.is_not_found() || e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
                self.recorder.normal(
                    object_ref(&node),
                    "NodeNotReady",
                    format!("Node {name} status is now: NodeNotReady"),
                );
                self.mark_pods_not_ready(&name, now).await?;
            }
            if let Some(taints) = desired_taints(&node, now) {
                node.spec.get_or_insert_with(Default::default).taints = Some(taints);
                match nodes_api.replace(&name, &node).await {
                    Ok(n) => node = n,
                    Err(e) if e.is_not_found() || e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
            }
            let taints: Vec<Taint> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            if !taints.iter().any(|t| t.effect == "NoExecute") {
                continue;
            }
            for pod in self.ctx.pods.by_index(index::NODE_NAME, &name) {
                if pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if eviction_time(&pod, &taints, now).is_some_and(|t| t <= now) {
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    let pname = pod.metadata.name.clone().unwrap_or_default();
                    tracing::info!(node = %name, pod = %pname, "evicting pod from tainted node");
                    self.recorder.normal(
                        object_ref(&*pod),
                        "TaintManagerEviction",
                        format!("Marking for deletion Pod {ns}/{pname}"),
                    );
                    let dp =
                        DeleteParams::with_uid(pod.metadata.uid.as_deref().unwrap_or_default());
                    match Api::<Pod>::namespaced(&self.ctx.client, &ns)
                        .delete(&pname, &dp)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if e.is_not_found() || e.code() == Some(409) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, hb: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": hb, "lastTransitionTime": hb}]}
        }))
        .unwrap()
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn stale_heartbeat_turns_unknown_after_grace() {
        let n = node("True", "2026-01-01T00:00:00Z");
        let grace = Duration::from_secs(40);
        assert!(stale_conditions(&n, None, t("2026-01-01T00:00:39Z"), grace).is_none());
        // A fresh lease keeps it alive even with an old Ready heartbeat.
        assert!(stale_conditions(
            &n,
            Some(t("2026-01-01T00:00:30Z")),
            t("2026-01-01T00:01:00Z"),
            grace
        )
        .is_none());
        let conds = stale_conditions(&n, None, t("2026-01-01T00:00:41Z"), grace).unwrap();
        assert_eq!(conds.len(), 4);
        assert!(conds.iter().all(|c| c.status == "Unknown"));
        assert_eq!(conds[0].reason.as_deref(), Some("NodeStatusUnknown"));
    }

    #[test]
    fn taints_follow_readiness() {
        let now = t("2026-01-01T00:01:00Z");
        let n = node("Unknown", "2026-01-01T00:00:00Z");
        let taints = desired_taints(&n, now).unwrap();
        assert_eq!(taints.len(), 2);
        assert!(taints.iter().all(|t| t.key == UNREACHABLE));
        let mut back = node("True", "2026-01-01T00:01:00Z");
        back.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(taints),
            ..Default::default()
        });
        assert_eq!(desired_taints(&back, now), Some(vec![]));
        assert_eq!(
            desired_taints(&node("True", "2026-01-01T00:00:00Z"), now),
            None
        );
    }

    #[test]
    fn pods_of_a_silent_node_turn_not_ready() {
        let now = t("2026-01-01T00:01:00Z");
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": []}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}})).unwrap();
        let conds = not_ready_conditions(&pod, now).unwrap();
        let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("NodeNotReady"))
        );
        assert_eq!(
            conds
                .iter()
                .find(|c| c.type_ == "PodScheduled")
                .unwrap()
                .status,
            "True"
        );
        let mut done = pod.clone();
        done.status.as_mut().unwrap().conditions = Some(conds);
        assert!(
            not_ready_conditions(&done, now).is_none(),
            "already not ready: no write"
        );
    }

    #[test]
    fn eviction_honours_toleration_seconds() {
        let now = t("2026-01-01T00:00:10Z");
        let taint = Taint {
            key: UNREACHABLE.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(t("2026-01-01T00:00:00Z"))),
        };
        let pod = |tols: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"spec": {"containers": [], "tolerations": tols}}))
                .unwrap()
        };
        assert_eq!(
            eviction_time(&pod(json!([])), std::slice::from_ref(&taint), now),
            Some(now)
        );
        let p = pod(
            json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]),
        );
        assert_eq!(
            eviction_time(&p, std::slice::from_ref(&taint), now),
            Some(t("2026-01-01T00:05:00Z"))
        );
        let p = pod(json!([{"operator": "Exists"}]));
        assert_eq!(eviction_time(&p, std::slice::from_ref(&taint), now), None);
    }
}
