//! The pod garbage collector (upstream's `pod-garbage-collector`), every `period`: beyond
//! `--terminated-pod-gc-threshold` finished pods the oldest go; pods bound to a node that has
//! been gone for the quarantine time (checked live, not only in the cache) are marked Failed
//! with a `DisruptionTarget` condition and force-deleted, as are terminating pods never
//! scheduled and terminating pods on nodes tainted `node.kubernetes.io/out-of-service`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error, Patch};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;

/// Upstream's `gcCheckPeriod` and `quarantineTime`.
pub const PERIOD: Duration = Duration::from_secs(20);
pub const QUARANTINE: Duration = Duration::from_secs(40);
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Why a pod goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// One of the oldest finished pods beyond the threshold.
    Terminated,
    /// Bound to a node that no longer exists.
    Orphaned,
    /// Terminating and never scheduled.
    Unscheduled,
    /// Terminating on an out-of-service node.
    OutOfService,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// The pods to collect. `nodes`: the names in the cache; `missing`: names absent long
/// enough (and confirmed absent) to count as gone; `out_of_service`: tainted nodes.
pub fn decide(
    pods: &[Arc<Pod>],
    nodes: &HashSet<String>,
    missing: &HashSet<String>,
    out_of_service: &HashSet<String>,
    threshold: usize,
) -> Vec<(Arc<Pod>, Reason)> {
    let mut out = Vec::new();
    let mut finished: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    if threshold > 0 && finished.len() > threshold {
        finished.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.metadata.name.clone(),
            )
        });
        let n = finished.len() - threshold;
        out.extend(
            finished
                .into_iter()
                .take(n)
                .map(|p| (p.clone(), Reason::Terminated)),
        );
    }
    let taken: HashSet<&str> = out
        .iter()
        .filter_map(|(p, _)| p.metadata.uid.as_deref())
        .collect();
    let mut more = Vec::new();
    for p in pods {
        if p.metadata.uid.as_deref().is_some_and(|u| taken.contains(u)) {
            continue;
        }
        let node = node_of(p);
        let terminating = p.metadata.deletion_timestamp.is_some();
        if !node.is_empty() && !nodes.contains(node) && missing.contains(node) {
            more.push((p.clone(), Reason::Orphaned));
        } else if node.is_empty() && terminating {
            more.push((p.clone(), Reason::Unscheduled));
        } else if terminating
            && out_of_service.contains(node)
            && !matches!(phase(p), "Succeeded" | "Failed")
        {
            more.push((p.clone(), Reason::OutOfService));
        }
    }
    out.extend(more);
    out
}

pub struct PodGc {
    ctx: Arc<Ctx>,
    threshold: usize,
    period: Duration,
    quarantine: Duration,
    /// Node name → when the cache first lacked it.
    absent_since: Mutex<HashMap<String, Instant>>,
}

impl PodGc {
    pub fn new(
        ctx: Arc<Ctx>,
        threshold: usize,
        period: Duration,
        quarantine: Duration,
    ) -> Arc<Self> {
        Arc::new(PodGc {
            ctx,
            threshold,
            period,
            quarantine,
            absent_since: Mutex::default(),
        })
    }

    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        crate::worker::every(
            "pod-garbage-collector",
            self.period,
            shutdown,
            self.clone(),
            |me| async move { me.pass().await },
        );
    }

    async fn pass(&self) -> Result<(), Error> {
        let pods = self.ctx.pods.list();
        let nodes: HashSet<String> = self
            .ctx
            .nodes
            .list()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let out_of_service: HashSet<String> = self
            .ctx
            .nodes
            .list()
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE))
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        // Nodes pods name that the cache lacks: gone once absent for the quarantine time and
        // confirmed by a live read.
        let now = Instant::now();
        let wanted: HashSet<String> = pods
            .iter()
            .map(|p| node_of(p).to_string())
            .filter(|n| !n.is_empty() && !nodes.contains(n))
            .collect();
        let due: Vec<String> = {
            let mut absent = self.absent_since.lock().unwrap();
            absent.retain(|n, _| wanted.contains(n));
            for n in &wanted {
                absent.entry(n.clone()).or_insert(now);
            }
            absent
                .iter()
                .filter(|(_, t)| now.duration_since(**t) >= self.quarantine)
                .map(|(n, _)| n.clone())
                .collect()
        };
        let mut missing = HashSet::new();
        let node_api: Api<Node> = Api::all(&self.ctx.client);
        for n in due {
            if node_api.get_opt(&n).await?.is_none() {
                missing.insert(n);
            }
        }
        for (p, reason) in decide(&pods, &nodes, &missing, &out_of_service, self.threshold) {
            self.collect(&p, reason).await?;
        }
        Ok(())
    }

    async fn collect(&self, p: &Pod, reason: Reason) -> Result<(), Error> {
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);
        if reason != Reason::Terminated && !matches!(phase(p), "Succeeded" | "Failed") {
            // Upstream marks the pod Failed first, saying why.
            let now = rkube_client::now();
            let patch = json!({"metadata": {"uid": p.metadata.uid}, "status": {"phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                    "message": "PodGC: node no longer exists", "lastTransitionTime": now}]}});
            match api.patch_status(name, &Patch::Merge(patch)).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() || e.code() == Some(409) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        let dp = DeleteParams::with_uid(p.metadata.uid.as_deref().unwrap_or_default()).grace(0);
        match api.delete(name, &dp).await {
            Ok(_) => {
                tracing::info!(pod = %format!("{ns}/{name}"), ?reason, "pod collected");
                Ok(())
            }
            Err(e) if e.is_not_found() || e.code() == Some(409) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, created: &str, deleting: bool) -> Arc<Pod> {
        let mut v = json!({"metadata": {"name": name, "uid": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn oldest_finished_pods_beyond_the_threshold_and_orphans_go() {
        let pods = [
            pod("old", "n1", "Succeeded", "2026-01-01T00:00:00Z", false),
            pod("mid", "n1", "Failed", "2026-01-01T00:01:00Z", false),
            pod("new", "n1", "Succeeded", "2026-01-01T00:02:00Z", false),
            pod("running", "n1", "Running", "2026-01-01T00:00:00Z", false),
            pod("orphan", "gone", "Running", "2026-01-01T00:00:00Z", false),
            pod(
                "recent",
                "vanishing",
                "Running",
                "2026-01-01T00:00:00Z",
                false,
            ),
            pod("stuck", "", "Pending", "2026-01-01T00:00:00Z", true),
            pod("oos", "broken", "Running", "2026-01-01T00:00:00Z", true),
        ];
        let nodes: HashSet<String> = ["n1", "broken"].map(String::from).into();
        let missing: HashSet<String> = ["gone"].map(String::from).into();
        let oos: HashSet<String> = ["broken"].map(String::from).into();
        let got: Vec<(String, Reason)> = decide(&pods, &nodes, &missing, &oos, 1)
            .into_iter()
            .map(|(p, r)| (p.metadata.name.clone().unwrap(), r))
            .collect();
        assert_eq!(
            got,
            [
                ("old".into(), Reason::Terminated),
                ("mid".into(), Reason::Terminated),
                ("orphan".into(), Reason::Orphaned),
                ("stuck".into(), Reason::Unscheduled),
                ("oos".into(), Reason::OutOfService),
            ]
        );
        // Threshold 0: finished pods are kept (upstream's "disabled").
        assert!(decide(&pods, &nodes, &missing, &oos, 0)
            .iter()
            .all(|(_, r)| *r != Reason::Terminated));
    }
}
