//! The ReplicaSet controller's decisions, without I/O: which pods count, how many to create or
//! which to delete (upstream's deletion ranking), slow-start batch sizes, and the status with
//! its `ReplicaFailure` condition.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::pod::Pod;

use crate::objects::labels_of;

/// The most pods one sync creates or deletes (upstream's `burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// Not terminal and not being deleted.
pub fn is_active(p: &Pod) -> bool {
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    phase != "Succeeded" && phase != "Failed" && p.metadata.deletion_timestamp.is_none()
}

/// When the pod's Ready condition turned True, if it is True.
pub fn ready_since(p: &Pod) -> Option<Option<DateTime<Utc>>> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

pub fn is_ready(p: &Pod) -> bool {
    ready_since(p).is_some()
}

/// Ready for at least `min_ready_seconds`.
pub fn is_available(p: &Pod, min_ready_seconds: i32, now: DateTime<Utc>) -> bool {
    match ready_since(p) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(t)) => {
            t + k8s_openapi::chrono::Duration::seconds(i64::from(min_ready_seconds)) <= now
        }
    }
}

/// Seconds until a ready pod becomes available, when that is still ahead.
pub fn until_available(p: &Pod, min_ready_seconds: i32, now: DateTime<Utc>) -> Option<i64> {
    let t = ready_since(p)??;
    let at = t + k8s_openapi::chrono::Duration::seconds(i64::from(min_ready_seconds));
    (min_ready_seconds > 0 && at > now).then(|| (at - now).num_seconds() + 1)
}

/// What to do about the replica count.
#[derive(Debug, PartialEq, Eq)]
pub enum Diff {
    Create(usize),
    /// Pods to delete, most deletable first.
    Delete(Vec<String>),
    None,
}

/// Compares active owned pods with the desired count (capped at `BURST_REPLICAS` per sync).
pub fn diff(desired: i32, active: &[Arc<Pod>]) -> Diff {
    let have = active.len() as i64;
    let want = i64::from(desired.max(0));
    match have.cmp(&want) {
        Ordering::Less => Diff::Create(((want - have) as usize).min(BURST_REPLICAS)),
        Ordering::Greater => {
            let n = ((have - want) as usize).min(BURST_REPLICAS);
            let mut ranked: Vec<Arc<Pod>> = active.to_vec();
            rank_for_deletion(&mut ranked);
            Diff::Delete(
                ranked
                    .iter()
                    .take(n)
                    .map(|p| p.metadata.name.clone().unwrap_or_default())
                    .collect(),
            )
        }
        Ordering::Equal => Diff::None,
    }
}

fn phase_rank(p: &Pod) -> u8 {
    match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 3,
    }
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

fn node(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Upstream's `ActivePodsWithRanks` order, most deletable first: unassigned before assigned;
/// Pending before Unknown before Running; not ready before ready; more pods of the set on the
/// same node before fewer; ready for less time before longer; more restarts before fewer;
/// newer before older.
pub fn rank_for_deletion(pods: &mut [Arc<Pod>]) {
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in pods.iter() {
        if !node(p).is_empty() {
            *per_node.entry(node(p).to_string()).or_default() += 1;
        }
    }
    let colocated = |p: &Pod| per_node.get(node(p)).copied().unwrap_or(0);
    pods.sort_by(|a, b| {
        let (a, b) = (&**a, &**b);
        node(a)
            .is_empty()
            .cmp(&node(b).is_empty())
            .reverse()
            .then(phase_rank(a).cmp(&phase_rank(b)))
            .then(is_ready(a).cmp(&is_ready(b)))
            .then(colocated(b).cmp(&colocated(a)))
            .then_with(|| {
                // Ready more recently first (only meaningful when both are ready).
                let ta = ready_since(a).flatten();
                let tb = ready_since(b).flatten();
                tb.cmp(&ta)
            })
            .then(restarts(b).cmp(&restarts(a)))
            .then_with(|| {
                let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
                let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
                tb.cmp(&ta)
            })
    });
}

/// Slow start: batches of 1, 2, 4, … summing to `n`, so a failing create stops early.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut size) = (n, 1usize);
    while left > 0 {
        let b = size.min(left);
        out.push(b);
        left -= b;
        size *= 2;
    }
    out
}

/// The condition a set carries while creating or deleting its pods fails.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// The status for the pods the set owns (active ones, as counted before this sync created or
/// deleted any), at `now`. `failure` is the error of this sync's creations or deletions, if
/// any failed: it sets `ReplicaFailure` (reason `FailedCreate` or `FailedDelete`, kept with
/// its first message while failures go on), and a sync without one removes it, as upstream's
/// `calculateStatus` — a sync that did not manage pods (creations still expected) included.
pub fn status(
    rs: &ReplicaSet,
    owned_active: &[Arc<Pod>],
    now: DateTime<Utc>,
    failure: Option<&str>,
) -> ReplicaSetStatus {
    let spec = rs.spec.as_ref();
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let template_labels = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let fully = owned_active
        .iter()
        .filter(|p| {
            let l = labels_of(&p.metadata);
            template_labels.iter().all(|(k, v)| l.get(k) == Some(v))
        })
        .count();
    let ready = owned_active.iter().filter(|p| is_ready(p)).count();
    let available = owned_active
        .iter()
        .filter(|p| is_available(p, min_ready, now))
        .count();
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions = old.conditions;
    let failing = conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == REPLICA_FAILURE);
    match failure {
        Some(message) if !failing => {
            let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
            let reason = match (owned_active.len() as i64).cmp(&i64::from(desired)) {
                Ordering::Less => Some("FailedCreate".into()),
                Ordering::Greater => Some("FailedDelete".into()),
                Ordering::Equal => None,
            };
            conditions
                .get_or_insert_with(Vec::new)
                .push(ReplicaSetCondition {
                    type_: REPLICA_FAILURE.into(),
                    status: "True".into(),
                    reason,
                    message: Some(message.into()),
                    last_transition_time: Some(Time(now)),
                });
        }
        None if failing => {
            if let Some(c) = conditions.as_mut() {
                c.retain(|c| c.type_ != REPLICA_FAILURE);
            }
            conditions = conditions.filter(|c| !c.is_empty());
        }
        _ => {}
    }
    ReplicaSetStatus {
        replicas: owned_active.len() as i32,
        fully_labeled_replicas: Some(fully as i32),
        ready_replicas: Some(ready as i32),
        available_replicas: Some(available as i32),
        observed_generation: rs.metadata.generation,
        conditions,
        terminating_replicas: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use serde_json::json;

    fn pod(name: &str, node: &str, phase: &str, ready: Option<&str>, created: &str) -> Arc<Pod> {
        let mut conds = vec![];
        if let Some(t) = ready {
            conds.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": t}));
        }
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": created},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase, "conditions": conds}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn diff_creates_and_caps_at_burst() {
        assert_eq!(diff(3, &[]), Diff::Create(3));
        assert_eq!(diff(1000, &[]), Diff::Create(500));
        let p = pod("a", "n", "Running", None, "2026-01-01T00:00:00Z");
        assert_eq!(diff(1, &[p]), Diff::None);
    }

    #[test]
    fn deletion_ranking_follows_upstream() {
        let t = "2026-01-01T00:00:00Z";
        let pods = vec![
            pod(
                "running-ready-old",
                "n1",
                "Running",
                Some("2026-01-01T00:01:00Z"),
                t,
            ),
            pod(
                "running-ready-new",
                "n2",
                "Running",
                Some("2026-01-01T00:05:00Z"),
                t,
            ),
            pod("running-notready", "n3", "Running", None, t),
            pod("pending-assigned", "n4", "Pending", None, t),
            pod("unassigned", "", "Pending", None, t),
        ];
        match diff(0, &pods) {
            Diff::Delete(names) => assert_eq!(
                names,
                [
                    "unassigned",
                    "pending-assigned",
                    "running-notready",
                    "running-ready-new",
                    "running-ready-old"
                ]
            ),
            other => panic!("{other:?}"),
        }
        // Same state: the newer pod goes first; more pods on one node go first.
        let pods = vec![
            pod("older", "a", "Running", None, "2026-01-01T00:00:00Z"),
            pod("newer", "b", "Running", None, "2026-01-01T00:09:00Z"),
        ];
        assert_eq!(diff(1, &pods), Diff::Delete(vec!["newer".into()]));
        let pods = vec![
            pod("alone", "a", "Running", None, t),
            pod("crowded1", "b", "Running", None, t),
            pod("crowded2", "b", "Running", None, t),
        ];
        match diff(2, &pods) {
            Diff::Delete(n) => assert!(n[0].starts_with("crowded"), "{n:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn slow_start_doubles() {
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
        assert_eq!(slow_start_batches(1), [1]);
        assert!(slow_start_batches(0).is_empty());
    }

    #[test]
    fn availability_waits_min_ready_seconds() {
        let now: DateTime<Utc> = "2026-01-01T00:00:10Z".parse().unwrap();
        let p = pod(
            "a",
            "n",
            "Running",
            Some("2026-01-01T00:00:05Z"),
            "2026-01-01T00:00:00Z",
        );
        assert!(is_available(&p, 0, now));
        assert!(is_available(&p, 5, now));
        assert!(!is_available(&p, 6, now));
        assert_eq!(until_available(&p, 8, now), Some(4));
        assert!(!is_active(&pod(
            "d",
            "n",
            "Succeeded",
            None,
            "2026-01-01T00:00:00Z"
        )));
    }

    #[test]
    fn a_failed_sync_sets_replica_failure_and_a_clean_one_removes_it() {
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "rs", "generation": 1},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}}
        }))
        .unwrap();
        let t0 = "2026-01-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let t1 = t0 + k8s_openapi::chrono::Duration::seconds(5);
        let two = vec![
            pod("p1", "n", "Running", None, "2026-01-01T00:00:00Z"),
            pod("p2", "n", "Running", None, "2026-01-01T00:00:00Z"),
        ];
        let quota = "pods \"rs-x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2";

        let failed = status(&rs, &two, t0, Some(quota));
        let c = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str()),
            ("ReplicaFailure", "True")
        );
        assert_eq!(c.reason.as_deref(), Some("FailedCreate"));
        assert_eq!(c.message.as_deref(), Some(quota));
        assert_eq!(c.last_transition_time, Some(Time(t0)));

        // Failing on: the first condition stays as it was.
        let again = ReplicaSet {
            status: Some(failed.clone()),
            ..rs.clone()
        };
        let still = status(&again, &two, t1, Some("another error"));
        assert_eq!(still.conditions, failed.conditions);

        // Too many pods and a failed deletion: FailedDelete.
        let one = ReplicaSet {
            spec: rs.spec.clone().map(|s| ReplicaSetSpec {
                replicas: Some(1),
                ..s
            }),
            ..rs.clone()
        };
        let del = status(&one, &two, t0, Some("boom"));
        assert_eq!(
            del.conditions.unwrap()[0].reason.as_deref(),
            Some("FailedDelete")
        );

        // A sync without failure removes it, and leaves no empty list behind.
        let clean = status(&again, &two, t1, None);
        assert_eq!(clean.conditions, None);
        assert_eq!(status(&rs, &two, t1, None).conditions, None);
    }
}
