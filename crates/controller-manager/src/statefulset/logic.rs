//! The StatefulSet controller's decisions, without I/O (upstream's `updateStatefulSet`): pods
//! named by ordinal, created in order and only after their predecessors are Running and
//! Available (OrderedReady) or all at once (Parallel), condemned pods deleted from the highest
//! ordinal, failed pods recreated, a rolling update from the highest ordinal down to the
//! partition (one at a time, or within `maxUnavailable`), OnDelete left alone; each pod's
//! identity (hostname, subdomain, labels) and claims from `volumeClaimTemplates`, the claims'
//! owners from `persistentVolumeClaimRetentionPolicy`, and the status.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    self, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::pod::Pod;

use crate::history::HASH_LABEL;
use crate::replicaset::logic::{is_available, is_ready, until_available};

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The most pods one sync creates (Parallel; OrderedReady creates one).
pub const MAX_CREATE: usize = 500;

/// Why a pod goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Failed or Succeeded: recreated on a later sync.
    Finished,
    /// Its ordinal is past the replicas.
    ScaleDown,
    /// At an old revision, replaced by the rolling update.
    Update,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Ordinals to create, and whether at the update revision (else the current one).
    pub create: Vec<(i32, bool)>,
    pub delete: Vec<(Arc<Pod>, Why)>,
    pub status: StatefulSetStatus,
    /// Seconds until a ready pod becomes available (`minReadySeconds`), when that matters.
    pub requeue: Option<i64>,
}

/// The ordinal in a pod's name `<set>-<n>`, when the pod is named as the set's.
pub fn ordinal(set: &str, pod: &Pod) -> Option<i32> {
    let name = pod.metadata.name.as_deref()?;
    let n = name.strip_prefix(set)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn running_ready(p: &Pod) -> bool {
    phase(p) == "Running" && is_ready(p)
}

fn revision(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .map_or("", String::as_str)
}

fn spec(set: &StatefulSet) -> &StatefulSetSpec {
    static EMPTY: std::sync::OnceLock<StatefulSetSpec> = std::sync::OnceLock::new();
    set.spec
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(StatefulSetSpec::default))
}

/// First ordinal (`spec.ordinals.start`).
pub fn start(set: &StatefulSet) -> i32 {
    spec(set)
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .unwrap_or(0)
        .max(0)
}

pub fn replicas(set: &StatefulSet) -> i32 {
    spec(set).replicas.unwrap_or(1).max(0)
}

fn partition(set: &StatefulSet) -> Option<i32> {
    spec(set)
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()
        .map(|r| r.partition.unwrap_or(0))
}

fn on_delete(set: &StatefulSet) -> bool {
    spec(set)
        .update_strategy
        .as_ref()
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete")
}

/// The plan for `set` over the pods it controls; `current`/`update`: the names of its
/// current and update revisions; `claim_terminating(ord)`: a claim of that ordinal is being
/// deleted or is stale (`claim_is_stale`: its pod waits).
pub fn plan(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    current: &str,
    update: &str,
    collision_count: i32,
    claim_terminating: impl Fn(i32) -> bool,
    now: DateTime<Utc>,
) -> Plan {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let spec = spec(set);
    // In i64: `ordinals.start` + `replicas` may pass i32::MAX.
    let (start, count) = (i64::from(start(set)), i64::from(replicas(set)));
    let mrs = spec.min_ready_seconds.unwrap_or(0);
    // The replicas present, by index (ordinal − start); the work below is bounded by the pods
    // there are (and MAX_CREATE), never by `replicas`.
    let mut slots: BTreeMap<i64, &Arc<Pod>> = BTreeMap::new();
    let mut condemned: Vec<(i32, &Arc<Pod>)> = Vec::new();
    for p in pods {
        match ordinal(name, p) {
            Some(o) if i64::from(o) >= start && i64::from(o) - start < count => {
                slots.insert(i64::from(o) - start, p);
            }
            Some(o) => condemned.push((o, p)),
            None => {}
        }
    }
    condemned.sort_by_key(|(o, _)| Reverse(*o));
    let available = |p: &Pod| running_ready(p) && !terminating(p) && is_available(p, mrs, now);
    // Whether the first unavailable pod, by ordinal, is condemned pod `o`: every replica is
    // there and available, and no lower condemned pod is unavailable.
    let replicas_available = slots.len() as i64 == count && slots.values().all(|p| available(p));
    let first_unavailable: Option<i32> = replicas_available
        .then(|| {
            condemned
                .iter()
                .rev()
                .find(|(_, p)| !available(p))
                .map(|(o, _)| *o)
        })
        .flatten();

    let mut plan = Plan {
        status: status(
            set,
            &slots,
            &condemned,
            current,
            update,
            collision_count,
            now,
        ),
        requeue: pods
            .iter()
            .filter_map(|p| until_available(p, mrs, now))
            .min(),
        ..Plan::default()
    };
    if set.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let monotonic = spec.pod_management_policy.as_deref() != Some("Parallel");
    // Below the partition (counted from `ordinals.start`), a new pod gets the current revision.
    let at_update = |idx: i64| match partition(set) {
        _ if on_delete(set) => true,
        Some(p) => idx >= i64::from(p),
        None => {
            idx >= i64::from(
                set.status
                    .as_ref()
                    .map_or(0, |s| s.current_replicas.unwrap_or(0)),
            )
        }
    };

    // The replicas, in order; in OrderedReady the first that is not yet Running and
    // Available stops the sync. At most MAX_CREATE pods are created per sync.
    let mut idx = 0;
    while idx < count && plan.create.len() < MAX_CREATE {
        let Ok(ord) = i32::try_from(start + idx) else {
            break;
        };
        let blocked = match slots.get(&idx) {
            Some(p) if matches!(phase(p), "Failed" | "Succeeded") => {
                if !terminating(p) {
                    plan.delete.push(((*p).clone(), Why::Finished));
                }
                true
            }
            None => {
                if !claim_terminating(ord) {
                    plan.create.push((ord, at_update(idx)));
                }
                true
            }
            Some(p) => terminating(p) || !running_ready(p) || !is_available(p, mrs, now),
        };
        if blocked && monotonic {
            return plan;
        }
        idx += 1;
    }

    // Condemned pods, from the highest ordinal; OrderedReady deletes one at a time, only while
    // every other pod is available.
    for (o, p) in &condemned {
        if terminating(p) {
            if monotonic {
                return plan;
            }
            continue;
        }
        if monotonic && !available(p) && first_unavailable != Some(*o) {
            return plan;
        }
        plan.delete.push(((*p).clone(), Why::ScaleDown));
        if monotonic {
            return plan;
        }
    }
    if !plan.delete.is_empty() || !plan.create.is_empty() {
        // Parallel: scaling goes first; the update waits for the next sync.
        return plan;
    }
    if on_delete(set) {
        return plan;
    }

    // The rolling update: from the highest ordinal down to the partition, replacing pods at an
    // old revision while at most `maxUnavailable` (default 1) are unavailable.
    let min = i64::from(partition(set).unwrap_or(0).max(0));
    let max_unavailable = spec
        .update_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.as_ref());
    if let Some(mu) = max_unavailable {
        let allowed = i64::from(crate::daemonset::logic::scaled(Some(mu), count as i32, 1).max(1));
        let unavailable = count - slots.values().filter(|p| available(p)).count() as i64;
        let mut budget = (allowed - unavailable).max(0);
        for p in slots.range(min..).rev().map(|(_, p)| p) {
            if budget == 0 {
                break;
            }
            if revision(p) != update && !terminating(p) {
                plan.delete.push(((*p).clone(), Why::Update));
                budget -= 1;
            }
        }
    } else {
        for target in (min..count).rev() {
            let Some(p) = slots.get(&target) else { break };
            if revision(p) != update && !terminating(p) {
                plan.delete.push(((*p).clone(), Why::Update));
                break;
            }
            if !available(p) {
                break;
            }
        }
    }
    plan.status.current_replicas = Some(
        plan.status.current_replicas.unwrap_or(0)
            - plan
                .delete
                .iter()
                .filter(|(p, _)| revision(p) == current)
                .count() as i32,
    );
    plan
}

/// Upstream's `updateStatus` then `completeRollingUpdate`.
fn status(
    set: &StatefulSet,
    slots: &BTreeMap<i64, &Arc<Pod>>,
    condemned: &[(i32, &Arc<Pod>)],
    current: &str,
    update: &str,
    collision_count: i32,
    now: DateTime<Utc>,
) -> StatefulSetStatus {
    let mrs = spec(set).min_ready_seconds.unwrap_or(0);
    let (mut replicas, mut ready, mut available, mut at_current, mut at_update) = (0, 0, 0, 0, 0);
    for p in slots.values().chain(condemned.iter().map(|(_, p)| p)) {
        replicas += 1;
        if running_ready(p) {
            ready += 1;
            if is_available(p, mrs, now) {
                available += 1;
            }
        }
        if !terminating(p) {
            if revision(p) == current {
                at_current += 1;
            }
            if revision(p) == update {
                at_update += 1;
            }
        }
    }
    let mut s = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas,
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        current_replicas: Some(at_current),
        updated_replicas: Some(at_update),
        current_revision: Some(current.to_string()),
        update_revision: Some(update.to_string()),
        collision_count: Some(collision_count),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    if !on_delete(set) && at_update == replicas && ready == replicas {
        s.current_replicas = Some(at_update);
        s.current_revision = Some(update.to_string());
    }
    s
}

/// The claim name of template `claim` for ordinal `ord`: `<claim>-<set>-<ord>`.
pub fn claim_name(claim: &str, set: &str, ord: i32) -> String {
    format!("{claim}-{set}-{ord}")
}

/// Pod `ord` of `set` from `template` at `revision` (upstream's `newVersionedStatefulSetPod`):
/// its name, hostname and subdomain, its labels, and a volume per claim template.
pub fn pod_for(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ord: i32) -> v1::Pod {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let name = format!("{set_name}-{ord}");
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.insert(HASH_LABEL.into(), revision.into());
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ord.to_string());
    let mut pod_spec = template.spec.clone().unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    pod_spec.subdomain = spec(set).service_name.clone().filter(|s| !s.is_empty());
    let mut volumes = pod_spec.volumes.take().unwrap_or_default();
    for c in spec(set).volume_claim_templates.iter().flatten() {
        let cname = c.metadata.name.clone().unwrap_or_default();
        volumes.retain(|v| v.name != cname);
        volumes.push(Volume {
            name: cname.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&cname, &set_name, ord),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    pod_spec.volumes = Some(volumes).filter(|v| !v.is_empty());
    v1::Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![crate::objects::controller_of(
                "apps/v1",
                "StatefulSet",
                &set.metadata,
            )]),
            ..Default::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

/// The identity labels a set's pod lacks or has wrong (`statefulset.kubernetes.io/pod-name`,
/// `apps.kubernetes.io/pod-index`), as upstream's `identityMatches`/`updateIdentity` repair
/// them; `None` when they are right or the pod is not named as one of the set's.
pub fn identity_repair(set_name: &str, pod: &Pod) -> Option<BTreeMap<String, String>> {
    let ord = ordinal(set_name, pod)?;
    let name = pod.metadata.name.as_deref()?;
    let labels = pod.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let mut fix = BTreeMap::new();
    if get(POD_NAME_LABEL) != Some(name) {
        fix.insert(POD_NAME_LABEL.to_string(), name.to_string());
    }
    let index = ord.to_string();
    if get(POD_INDEX_LABEL) != Some(index.as_str()) {
        fix.insert(POD_INDEX_LABEL.to_string(), index);
    }
    (!fix.is_empty()).then_some(fix)
}

/// The names of the claims pod `ord` mounts (without building the claims).
pub fn claim_names(set: &StatefulSet, ord: i32) -> impl Iterator<Item = String> + '_ {
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    spec(set)
        .volume_claim_templates
        .iter()
        .flatten()
        .map(move |t| {
            claim_name(
                t.metadata.name.as_deref().unwrap_or_default(),
                set_name,
                ord,
            )
        })
}

/// The claims pod `ord` mounts (upstream's `getPersistentVolumeClaims`): each template named
/// for the ordinal, with the set's selector labels.
pub fn claims_for(set: &StatefulSet, ord: i32) -> Vec<PersistentVolumeClaim> {
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    let selector = spec(set).selector.match_labels.clone().unwrap_or_default();
    spec(set)
        .volume_claim_templates
        .iter()
        .flatten()
        .map(|t| {
            let mut c = t.clone();
            let cname = c.metadata.name.clone().unwrap_or_default();
            c.metadata = ObjectMeta {
                name: Some(claim_name(&cname, set_name, ord)),
                namespace: set.metadata.namespace.clone(),
                labels: {
                    let mut l = t.metadata.labels.clone().unwrap_or_default();
                    l.extend(selector.clone());
                    Some(l)
                },
                annotations: t.metadata.annotations.clone(),
                ..Default::default()
            };
            c.status = None;
            c
        })
        .collect()
}

fn reference(kind: &str, api_version: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

/// The owner references a claim of `pod` should carry under the set's retention policy
/// (upstream's `updateClaimOwnerRefForSetAndPod`): the set when `whenDeleted: Delete` (and the
/// pod is not condemned under `whenScaled: Delete`), the pod when it is condemned and
/// `whenScaled: Delete`. `None` when `existing` already says so; other owners are kept.
pub fn claim_owners(
    set: &StatefulSet,
    pod: &Pod,
    existing: &[OwnerReference],
) -> Option<Vec<OwnerReference>> {
    let policy = spec(set).persistent_volume_claim_retention_policy.as_ref();
    let delete = |p: Option<&String>| p.map(String::as_str) == Some("Delete");
    let when_deleted = delete(policy.and_then(|p| p.when_deleted.as_ref()));
    let when_scaled = delete(policy.and_then(|p| p.when_scaled.as_ref()));
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    let condemned =
        ordinal(set_name, pod).is_some_and(|o| o < start(set) || o - start(set) >= replicas(set));
    let (by_set, by_pod) = match (when_deleted, when_scaled) {
        (_, true) if condemned => (false, true),
        (d, _) => (d, false),
    };
    let set_uid = set.metadata.uid.as_deref().unwrap_or_default();
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    // The set's and the pod's references are rewritten; one to an earlier pod of the same
    // name is stale and goes.
    let mut out: Vec<OwnerReference> = existing
        .iter()
        .filter(|r| r.uid != set_uid && r.uid != pod_uid)
        .filter(|r| !(r.kind == "Pod" && r.name == pod_name))
        .cloned()
        .collect();
    if by_set {
        out.push(reference("StatefulSet", "apps/v1", &set.metadata));
    }
    if by_pod {
        out.push(reference("Pod", "v1", &pod.metadata));
    }
    let has = |uid: &str| existing.iter().any(|r| r.uid == uid);
    let same = has(set_uid) == by_set && has(pod_uid) == by_pod && out.len() == existing.len();
    (!same).then_some(out)
}

/// A claim is stale for pod `pod_name` about to be created when a pod of that name owned it
/// under `whenScaled: Delete` (upstream's `PodClaimIsStale`): the garbage collector is about
/// to delete it, so the new pod waits rather than mount it.
pub fn claim_is_stale(set: &StatefulSet, claim: &PersistentVolumeClaim, pod_name: &str) -> bool {
    let when_scaled = spec(set)
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_scaled.as_deref());
    claim.metadata.deletion_timestamp.is_some()
        || (when_scaled == Some("Delete")
            && claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.kind == "Pod" && r.name == pod_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_identity_labels_are_found() {
        let mut p = Pod::default();
        p.metadata.name = Some("web-2".into());
        p.metadata.labels = Some(
            [
                (POD_NAME_LABEL.to_string(), "web-2".to_string()),
                (POD_INDEX_LABEL.to_string(), "7".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            identity_repair("web", &p),
            Some([(POD_INDEX_LABEL.to_string(), "2".to_string())].into())
        );
        p.metadata.labels = None;
        assert_eq!(identity_repair("web", &p).map(|f| f.len()), Some(2));
        let fixed = pod_for(
            &StatefulSet {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            &PodTemplateSpec::default(),
            "r1",
            2,
        );
        let fixed = Pod::from_k8s(&fixed);
        assert_eq!(identity_repair("web", &fixed), None);
        assert_eq!(identity_repair("other", &fixed), None);
    }
    use serde_json::json;

    const T0: &str = "2026-01-01T00:00:00Z";

    fn now() -> DateTime<Utc> {
        T0.parse::<DateTime<Utc>>().unwrap() + k8s_openapi::chrono::Duration::seconds(100)
    }

    fn set(extra: serde_json::Value) -> StatefulSet {
        let mut v = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 2},
            "spec": {
                "replicas": 3, "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "volumeClaimTemplates": [{"metadata": {"name": "www"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
            }
        });
        json_patch_merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn json_patch_merge(target: &mut serde_json::Value, patch: serde_json::Value) {
        match (target, patch) {
            (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    json_patch_merge(t.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (t, p) => *t = p,
        }
    }

    /// Pod `ord` at `rev` in `phase`, ready or not, terminating or not.
    fn pod(ord: i32, rev: &str, phase: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("web-{ord}"), "uid": format!("pod-{ord}"), "labels": {HASH_LABEL: rev}},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": T0}]}
            }))
            .unwrap(),
        )
    }

    fn deleting(p: Arc<Pod>) -> Arc<Pod> {
        let mut p = (*p).clone();
        p.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        Arc::new(p)
    }

    fn run(s: &StatefulSet, pods: &[Arc<Pod>]) -> Plan {
        plan(s, pods, "r1", "r2", 0, |_| false, now())
    }

    fn deleted(p: &Plan) -> Vec<(String, Why)> {
        p.delete
            .iter()
            .map(|(p, w)| (p.metadata.name.clone().unwrap(), *w))
            .collect()
    }

    #[test]
    fn ordinals_parse_only_from_the_sets_own_names() {
        let named =
            |n: &str| -> Pod { serde_json::from_value(json!({"metadata": {"name": n}})).unwrap() };
        assert_eq!(ordinal("web", &named("web-0")), Some(0));
        assert_eq!(ordinal("web", &named("web-12")), Some(12));
        assert_eq!(ordinal("web", &named("webx-1")), None);
        assert_eq!(ordinal("web", &named("web-")), None);
        assert_eq!(ordinal("web", &named("web--1")), None);
        assert_eq!(ordinal("web", &named("web-a")), None);
    }

    #[test]
    fn ordered_ready_creates_one_pod_after_its_predecessors_are_ready() {
        let s = set(json!({}));
        let p = run(&s, &[]);
        assert_eq!(p.create, [(0, true)]);
        let p = run(&s, &[pod(0, "r2", "Pending", false)]);
        assert!(p.create.is_empty(), "web-0 is not ready yet");
        let p = run(&s, &[pod(0, "r2", "Running", true)]);
        assert_eq!(p.create, [(1, true)]);
        // A terminating predecessor blocks too.
        let p = run(&s, &[deleting(pod(0, "r2", "Running", true))]);
        assert!(p.create.is_empty());
        // minReadySeconds: ready at T0, available 30 s later; now is T0+100.
        let slow = set(json!({"spec": {"minReadySeconds": 300}}));
        let p = run(&slow, &[pod(0, "r2", "Running", true)]);
        assert!(p.create.is_empty());
        assert_eq!(p.requeue, Some(201));
        assert_eq!(p.status.ready_replicas, Some(1));
        assert_eq!(p.status.available_replicas, Some(0));
    }

    #[test]
    fn parallel_creates_all_and_ordinals_start_where_asked() {
        let s = set(json!({"spec": {"podManagementPolicy": "Parallel", "ordinals": {"start": 5}}}));
        let p = run(&s, &[]);
        assert_eq!(p.create, [(5, true), (6, true), (7, true)]);
        // Pods 0..2 are outside 5..8: condemned, deleted together.
        let p = run(
            &s,
            &[
                pod(0, "r2", "Running", true),
                pod(1, "r2", "Pending", false),
                pod(5, "r2", "Running", true),
                pod(6, "r2", "Running", true),
                pod(7, "r2", "Running", true),
            ],
        );
        assert_eq!(
            deleted(&p),
            [
                ("web-1".into(), Why::ScaleDown),
                ("web-0".into(), Why::ScaleDown)
            ]
        );
    }

    #[test]
    fn scale_down_goes_from_the_highest_ordinal_one_at_a_time() {
        let s = set(json!({"spec": {"replicas": 1}}));
        let all = [
            pod(0, "r2", "Running", true),
            pod(1, "r2", "Running", true),
            pod(2, "r2", "Running", true),
        ];
        let p = run(&s, &all);
        assert_eq!(deleted(&p), [("web-2".into(), Why::ScaleDown)]);
        assert_eq!(p.status.replicas, 3);
        // While web-2 terminates, web-1 waits.
        let p = run(
            &s,
            &[all[0].clone(), all[1].clone(), deleting(all[2].clone())],
        );
        assert!(p.delete.is_empty());
        // An unready replica blocks; an unready condemned pod that is the first unavailable
        // one may go.
        let p = run(
            &s,
            &[
                pod(0, "r2", "Running", false),
                all[1].clone(),
                all[2].clone(),
            ],
        );
        assert!(
            p.delete.is_empty(),
            "scale-down waits for web-0 to be healthy"
        );
        let p = run(
            &s,
            &[
                all[0].clone(),
                all[1].clone(),
                pod(2, "r2", "Running", false),
            ],
        );
        assert_eq!(deleted(&p), [("web-2".into(), Why::ScaleDown)]);
    }

    #[test]
    fn finished_pods_are_recreated() {
        let s = set(json!({}));
        let p = run(&s, &[pod(0, "r2", "Failed", false)]);
        assert_eq!(deleted(&p), [("web-0".into(), Why::Finished)]);
        assert!(p.create.is_empty());
        let p = run(&s, &[deleting(pod(0, "r2", "Succeeded", false))]);
        assert!(p.delete.is_empty() && p.create.is_empty());
    }

    #[test]
    fn rolling_update_replaces_from_the_top_down_to_the_partition() {
        let s = set(json!({}));
        let old = [
            pod(0, "r1", "Running", true),
            pod(1, "r1", "Running", true),
            pod(2, "r1", "Running", true),
        ];
        let p = run(&s, &old);
        assert_eq!(deleted(&p), [("web-2".into(), Why::Update)]);
        assert_eq!(p.status.current_replicas, Some(2));
        assert_eq!(p.status.updated_replicas, Some(0));
        assert_eq!(p.status.current_revision.as_deref(), Some("r1"));
        // The replacement must be available before the next goes.
        let p = run(
            &s,
            &[
                old[0].clone(),
                old[1].clone(),
                pod(2, "r2", "Running", false),
            ],
        );
        assert!(p.delete.is_empty() && p.create.is_empty());
        let p = run(
            &s,
            &[
                old[0].clone(),
                old[1].clone(),
                pod(2, "r2", "Running", true),
            ],
        );
        assert_eq!(deleted(&p), [("web-1".into(), Why::Update)]);
        // Done: the update revision becomes current.
        let new = [
            pod(0, "r2", "Running", true),
            pod(1, "r2", "Running", true),
            pod(2, "r2", "Running", true),
        ];
        let p = run(&s, &new);
        assert!(p.delete.is_empty());
        assert_eq!(p.status.current_revision.as_deref(), Some("r2"));
        assert_eq!(p.status.current_replicas, Some(3));
        assert_eq!(p.status.updated_replicas, Some(3));
        // A partition keeps the lower ordinals at the old revision, and recreates them there.
        let part = set(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}));
        let p = run(
            &part,
            &[
                old[0].clone(),
                old[1].clone(),
                pod(2, "r2", "Running", true),
            ],
        );
        assert!(p.delete.is_empty());
        assert_eq!(p.status.current_revision.as_deref(), Some("r1"));
        let p = run(&part, &[old[0].clone(), pod(2, "r2", "Running", true)]);
        assert_eq!(p.create, [(1, false)]);
        // OnDelete replaces nothing; a deleted pod comes back at the update revision.
        let od =
            set(json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
        let p = run(&od, &old);
        assert!(p.delete.is_empty());
        let p = run(&od, &[old[0].clone(), old[1].clone()]);
        assert_eq!(p.create, [(2, true)]);
    }

    #[test]
    fn max_unavailable_replaces_several_at_once() {
        let s = set(
            json!({"spec": {"replicas": 4, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}),
        );
        let old: Vec<_> = (0..4).map(|o| pod(o, "r1", "Running", true)).collect();
        let p = run(&s, &old);
        assert_eq!(
            deleted(&p),
            [("web-3".into(), Why::Update), ("web-2".into(), Why::Update)]
        );
        // OrderedReady waits for an unavailable replacement; Parallel lets one already
        // unavailable leave room for one more.
        let mut some = old.clone();
        some[3] = pod(3, "r2", "Running", false);
        assert!(run(&s, &some).delete.is_empty());
        let par = set(
            json!({"spec": {"replicas": 4, "podManagementPolicy": "Parallel", "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}),
        );
        let p = run(&par, &some);
        assert_eq!(deleted(&p), [("web-2".into(), Why::Update)]);
    }

    #[test]
    fn deleting_sets_and_stale_claims_only_report() {
        let mut s = set(json!({}));
        let p = plan(&s, &[], "r1", "r2", 0, |o| o == 0, now());
        assert!(p.create.is_empty(), "web-0 waits for its old claim to go");
        s.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        let p = run(&s, &[pod(0, "r2", "Failed", false)]);
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.status.observed_generation, Some(2));
        assert_eq!(p.status.replicas, 1);
    }

    #[test]
    fn pods_carry_identity_revision_and_claims() {
        let s = set(
            json!({"spec": {"template": {"spec": {"volumes": [{"name": "www", "emptyDir": {}}, {"name": "other", "emptyDir": {}}]}}}}),
        );
        let t = s.spec.as_ref().unwrap().template.clone();
        let p = pod_for(&s, &t, "web-abc", 2);
        assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
        let l = p.metadata.labels.as_ref().unwrap();
        assert_eq!(l["app"], "web");
        assert_eq!(l[HASH_LABEL], "web-abc");
        assert_eq!(l[POD_NAME_LABEL], "web-2");
        assert_eq!(l[POD_INDEX_LABEL], "2");
        let ps = p.spec.unwrap();
        assert_eq!(ps.hostname.as_deref(), Some("web-2"));
        assert_eq!(ps.subdomain.as_deref(), Some("web"));
        let vols = ps.volumes.unwrap();
        assert_eq!(
            vols.len(),
            2,
            "the template's www volume is replaced by the claim"
        );
        let www = vols.iter().find(|v| v.name == "www").unwrap();
        assert_eq!(
            www.persistent_volume_claim.as_ref().unwrap().claim_name,
            "www-web-2"
        );
        assert_eq!(p.metadata.owner_references.unwrap()[0].kind, "StatefulSet");
        let claims = claims_for(&s, 2);
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].metadata.name.as_deref(), Some("www-web-2"));
        assert_eq!(claims[0].metadata.labels.as_ref().unwrap()["app"], "web");
    }

    #[test]
    fn claim_owners_follow_the_retention_policy() {
        let policy = |d: &str, s: &str, replicas: i32| {
            set(
                json!({"spec": {"replicas": replicas, "persistentVolumeClaimRetentionPolicy": {"whenDeleted": d, "whenScaled": s}}}),
            )
        };
        let p1 = pod(1, "r", "Running", true);
        let uids = |v: Option<Vec<OwnerReference>>| {
            v.map(|v| v.iter().map(|r| r.uid.clone()).collect::<Vec<_>>())
        };
        // Retain/Retain: nothing to add, and no change when nothing is there.
        assert_eq!(
            uids(claim_owners(&policy("Retain", "Retain", 3), &p1, &[])),
            None
        );
        // Delete when the set goes: owned by the set.
        let by_set = claim_owners(&policy("Delete", "Retain", 3), &p1, &[]).unwrap();
        assert_eq!(by_set[0].uid, "set-uid");
        assert_eq!(
            claim_owners(&policy("Delete", "Retain", 3), &p1, &by_set),
            None
        );
        // Delete when scaled: a condemned pod (ordinal 1 with 1 replica) owns it instead.
        assert_eq!(
            uids(claim_owners(&policy("Delete", "Delete", 1), &p1, &by_set)),
            Some(vec!["pod-1".into()])
        );
        assert_eq!(
            uids(claim_owners(&policy("Retain", "Delete", 3), &p1, &by_set)),
            Some(vec![])
        );
        // Other owners stay.
        let mut other = by_set.clone();
        other[0].uid = "someone".into();
        assert_eq!(
            uids(claim_owners(&policy("Retain", "Retain", 3), &p1, &other)),
            None
        );
    }

    #[test]
    fn huge_replicas_and_ordinals_stay_bounded() {
        let s = set(
            json!({"spec": {"replicas": 2_000_000_000, "podManagementPolicy": "Parallel",
            "ordinals": {"start": i32::MAX - 5}}}),
        );
        let p = run(&s, &[]);
        assert_eq!(p.create.len(), 6, "ordinals stop at i32::MAX");
        let s =
            set(json!({"spec": {"replicas": 2_000_000_000, "podManagementPolicy": "Parallel"}}));
        assert_eq!(run(&s, &[]).create.len(), MAX_CREATE);
        let s = set(json!({"spec": {"replicas": 2_000_000_000}}));
        assert_eq!(run(&s, &[]).create, [(0, true)]);
    }

    #[test]
    fn the_partition_counts_from_the_first_ordinal() {
        let s = set(
            json!({"spec": {"ordinals": {"start": 3}, "podManagementPolicy": "Parallel",
            "updateStrategy": {"rollingUpdate": {"partition": 2}}}}),
        );
        let p = run(&s, &[pod(3, "r1", "Running", true)]);
        assert_eq!(p.create, [(4, false), (5, true)]);
    }

    #[test]
    fn a_claim_owned_by_an_earlier_pod_is_stale() {
        let claim = |owners: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(
                json!({"metadata": {"name": "www-web-2", "ownerReferences": owners}}),
            )
            .unwrap()
        };
        let scaled = set(
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Delete"}}}),
        );
        let old_pod = json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-2", "uid": "old"}]);
        assert!(claim_is_stale(&scaled, &claim(old_pod.clone()), "web-2"));
        assert!(!claim_is_stale(&scaled, &claim(json!([])), "web-2"));
        assert!(
            !claim_is_stale(&set(json!({})), &claim(old_pod.clone()), "web-2"),
            "Retain reuses it"
        );
        // A stale reference is dropped when the claim's owners are rewritten.
        let p2 = pod(2, "r", "Running", true);
        let refs: Vec<OwnerReference> = serde_json::from_value(old_pod).unwrap();
        assert_eq!(claim_owners(&set(json!({})), &p2, &refs), Some(vec![]));
    }
}
