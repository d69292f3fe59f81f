//! The Deployment controller's decisions, without I/O: the pod-template hash, maxSurge and
//! maxUnavailable resolution, how far to scale the new and old ReplicaSets in a rolling update,
//! proportional scaling, history cleanup, and the Deployment's status and conditions.
//!
//! Counting is conservative so the rollout bounds hold for pods as observed, not just for
//! ReplicaSet specs: a set counts as `max(spec, status.replicas)` pods toward the surge limit and
//! `min(spec, status.availableReplicas)` toward availability.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::chrono::{DateTime, Utc};

use crate::replicaset::logic::REPLICA_FAILURE;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The revisions a set had before a rollback made it new again.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";

/// Annotations of a Deployment that are not copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Upstream's `rand.SafeEncodeString`: each byte mapped onto consonants and digits that cannot
/// spell words.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// FNV-1a, 32 bits, continuing from `h` (2166136261 to start).
pub fn fnv32a(data: &[u8], mut h: u32) -> u32 {
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

/// The `pod-template-hash`: FNV-32a over the template (its canonical JSON; upstream hashes a
/// Go dump of the struct, so values differ but the shape — 8–10 safe characters — is the same)
/// and the collision count, decimal, safe-encoded.
pub fn template_hash(t: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let json = serde_json::to_vec(t).expect("template serializes");
    let mut h = fnv32a(&json, 2_166_136_261);
    if let Some(c) = collision_count {
        h = fnv32a(&(c as u32).to_le_bytes(), h);
    }
    safe_encode(&h.to_string())
}

fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(m) = t.metadata.as_mut() {
        if let Some(l) = m.labels.as_mut() {
            l.remove(HASH_LABEL);
            if l.is_empty() {
                m.labels = None;
            }
        }
    }
    t
}

/// Templates equal apart from the `pod-template-hash` label.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

/// An int or a percentage of `total`, rounded up or down.
pub fn scaled_value(
    v: Option<&IntOrString>,
    total: i32,
    round_up: bool,
    default: &str,
) -> Result<i32, String> {
    let s = match v {
        Some(IntOrString::Int(i)) => return Ok(*i),
        Some(IntOrString::String(s)) => s.as_str(),
        None => default,
    };
    let pct: i64 = s
        .strip_suffix('%')
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
    let prod = pct * i64::from(total);
    Ok(if round_up {
        (prod + 99) / 100
    } else {
        prod / 100
    } as i32)
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

/// (maxSurge, maxUnavailable) as upstream's `ResolveFenceposts`: surge rounds up, unavailable
/// down, and both zero becomes unavailable 1.
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    if is_recreate(d) {
        return (0, 0);
    }
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let n = replicas(d);
    let surge = scaled_value(ru.and_then(|r| r.max_surge.as_ref()), n, true, "25%").unwrap_or(0);
    let unavail =
        scaled_value(ru.and_then(|r| r.max_unavailable.as_ref()), n, false, "25%").unwrap_or(0);
    if surge == 0 && unavail == 0 {
        return (0, 1);
    }
    (surge, unavail)
}

/// maxUnavailable, capped at the replica count.
pub fn max_unavailable(d: &Deployment) -> i32 {
    let n = replicas(d);
    if is_recreate(d) || n == 0 {
        return 0;
    }
    fenceposts(d).1.min(n)
}

pub fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

/// Pods the set may have: what it was asked for or what it still reports.
pub fn pod_count(rs: &ReplicaSet) -> i32 {
    spec_replicas(rs).max(status_replicas(rs))
}

/// Available pods the set will keep.
pub fn available(rs: &ReplicaSet) -> i32 {
    spec_replicas(rs).min(
        rs.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    )
}

pub fn revision(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

pub fn max_revision(sets: &[&ReplicaSet]) -> i64 {
    sets.iter().map(|rs| revision(rs)).max().unwrap_or(0)
}

/// Oldest first (creation time, then name).
pub fn sort_oldest_first(sets: &mut [&ReplicaSet]) {
    sets.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        ta.cmp(&tb).then(a.metadata.name.cmp(&b.metadata.name))
    });
}

/// Rolling update: the new set's replicas after scaling up as far as maxSurge allows.
pub fn new_rs_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    let want = replicas(d);
    let cur = spec_replicas(new_rs);
    if is_recreate(d) {
        return want;
    }
    if cur >= want {
        return want;
    }
    let (surge, _) = fenceposts(d);
    let current: i32 = all.iter().map(|rs| pod_count(rs)).sum();
    let max_total = want + surge;
    if current >= max_total {
        return cur;
    }
    cur + (max_total - current).min(want - cur)
}

/// Rolling update: new replica counts for old sets (oldest first): first the unhealthy pods,
/// then as many available ones as minAvailable allows.
pub fn scale_down_old(
    d: &Deployment,
    new_rs: &ReplicaSet,
    old: &[&ReplicaSet],
) -> Vec<(String, i32)> {
    let mut old: Vec<&ReplicaSet> = old
        .iter()
        .copied()
        .filter(|rs| spec_replicas(rs) > 0)
        .collect();
    if old.is_empty() {
        return Vec::new();
    }
    sort_oldest_first(&mut old);
    let min_available = replicas(d) - max_unavailable(d);
    let all_pods: i32 = old.iter().map(|rs| pod_count(rs)).sum::<i32>() + pod_count(new_rs);
    let new_unavailable = spec_replicas(new_rs) - available(new_rs);
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut target: BTreeMap<String, i32> = BTreeMap::new();
    let spec = |rs: &ReplicaSet, t: &BTreeMap<String, i32>| {
        let name = rs.metadata.name.clone().unwrap_or_default();
        t.get(&name).copied().unwrap_or_else(|| spec_replicas(rs))
    };
    // Unhealthy replicas first.
    let mut cleaned = 0;
    for rs in &old {
        if cleaned >= max_scaled_down {
            break;
        }
        let s = spec(rs, &target);
        let unhealthy = s - available(rs);
        if unhealthy <= 0 {
            continue;
        }
        let n = unhealthy.min(max_scaled_down - cleaned);
        target.insert(rs.metadata.name.clone().unwrap_or_default(), s - n);
        cleaned += n;
    }
    // Then available ones, down to minAvailable.
    let avail: i32 = old
        .iter()
        .map(|rs| available(rs).min(spec(rs, &target)))
        .sum::<i32>()
        + available(new_rs);
    if avail > min_available {
        let mut left = avail - min_available;
        for rs in &old {
            if left <= 0 {
                break;
            }
            let s = spec(rs, &target);
            if s == 0 {
                continue;
            }
            let n = s.min(left);
            target.insert(rs.metadata.name.clone().unwrap_or_default(), s - n);
            left -= n;
        }
    }
    target
        .into_iter()
        .filter(|(name, n)| {
            old.iter()
                .any(|rs| rs.metadata.name.as_deref() == Some(name) && spec_replicas(rs) != *n)
        })
        .collect()
}

fn annotation_i32(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// The sets sized above zero.
pub fn active_sets<'a>(sets: &[&'a ReplicaSet]) -> Vec<&'a ReplicaSet> {
    sets.iter()
        .copied()
        .filter(|rs| spec_replicas(rs) > 0)
        .collect()
}

/// A scaling event: some active set was sized for a different replica count.
pub fn is_scaling_event(d: &Deployment, active: &[&ReplicaSet]) -> bool {
    let want = replicas(d);
    active
        .iter()
        .any(|rs| annotation_i32(rs, DESIRED_REPLICAS).is_some_and(|v| v != want))
}

/// Proportional scaling of the active sets when the replica count changes mid-rollout
/// (upstream's `scale`): the difference is shared by each set's share of the old size; the
/// rounding leftover goes to the largest set. Returns new sizes by name.
pub fn proportional_sizes(
    d: &Deployment,
    active: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
) -> Vec<(String, i32)> {
    let want = replicas(d);
    let name = |rs: &ReplicaSet| rs.metadata.name.clone().unwrap_or_default();
    if active.len() <= 1 {
        let target = active.first().copied().or(new_rs);
        return match target {
            Some(rs) if spec_replicas(rs) != want => vec![(name(rs), want)],
            _ => Vec::new(),
        };
    }
    let (surge, _) = fenceposts(d);
    let allowed = if want > 0 { want + surge } else { 0 };
    let current: i32 = active.iter().map(|rs| spec_replicas(rs)).sum();
    let to_add = allowed - current;
    if to_add == 0 {
        return Vec::new();
    }
    let mut sets: Vec<&ReplicaSet> = active.to_vec();
    // Larger first; ties: newer first when growing, older first when shrinking.
    sets.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        spec_replicas(b).cmp(&spec_replicas(a)).then(if to_add > 0 {
            tb.cmp(&ta)
        } else {
            ta.cmp(&tb)
        })
    });
    let d_status_replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let mut added = 0;
    let mut sizes: Vec<(String, i32)> = Vec::new();
    for rs in &sets {
        let annotated = annotation_i32(rs, MAX_REPLICAS)
            .filter(|v| *v > 0)
            .unwrap_or(d_status_replicas);
        let fraction = if annotated <= 0 {
            0
        } else {
            let new_size = (f64::from(spec_replicas(rs)) * f64::from(allowed)
                / f64::from(annotated))
            .round() as i32;
            new_size - spec_replicas(rs)
        };
        let left = to_add - added;
        let p = if to_add > 0 {
            fraction.min(left)
        } else {
            fraction.max(left)
        };
        added += p;
        sizes.push((name(rs), spec_replicas(rs) + p));
    }
    if let Some(first) = sizes.first_mut() {
        first.1 = (first.1 + to_add - added).max(0);
    }
    sizes
}

/// Annotations a set of this deployment should carry; `None` when nothing changes.
pub fn set_annotations(
    d: &Deployment,
    rs: &ReplicaSet,
    new_revision: i64,
    is_new: bool,
) -> Option<BTreeMap<String, String>> {
    let mut a = rs.metadata.annotations.clone().unwrap_or_default();
    let before = a.clone();
    if is_new {
        revise(d, &mut a, new_revision);
    }
    let (surge, _) = fenceposts(d);
    a.insert(DESIRED_REPLICAS.into(), replicas(d).to_string());
    a.insert(MAX_REPLICAS.into(), (replicas(d) + surge).to_string());
    (a != before).then_some(a)
}

/// An existing new set's annotations brought in step with its Deployment, its replica
/// annotations left as they are (upstream's `SetNewReplicaSetAnnotations` for a set that
/// exists, as paused and scaling syncs call it): `None` when nothing changes.
pub fn revised_annotations(
    d: &Deployment,
    rs: &ReplicaSet,
    new_revision: i64,
) -> Option<BTreeMap<String, String>> {
    let mut a = rs.metadata.annotations.clone().unwrap_or_default();
    let before = a.clone();
    revise(d, &mut a, new_revision);
    (a != before).then_some(a)
}

/// How long `revision-history` may grow (upstream's `maxRevHistoryLengthInChars`).
const REVISION_HISTORY_CHARS: usize = 2000;

/// Copies the Deployment's annotations (but those in `NOT_COPIED`) and raises the revision to
/// `new_revision` when lower; a revision it replaces is kept in `revision-history` (a rollback
/// to this set), the oldest dropped first beyond `REVISION_HISTORY_CHARS`.
fn revise(d: &Deployment, a: &mut BTreeMap<String, String>, new_revision: i64) {
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if !NOT_COPIED.contains(&k.as_str()) {
            a.insert(k.clone(), v.clone());
        }
    }
    let old = a.get(REVISION).cloned();
    let Ok(old_revision) = old.as_deref().map_or(Ok(0), str::parse::<i64>) else {
        return; // not a number: left as it is, as upstream's
    };
    if old_revision >= new_revision {
        return;
    }
    a.insert(REVISION.into(), new_revision.to_string());
    let Some(old) = old else { return };
    let mut kept: Vec<String> = a
        .get(REVISION_HISTORY)
        .map(|h| {
            h.split(',')
                .filter(|r| !r.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    kept.push(old);
    let mut joined = kept.join(",");
    while joined.len() > REVISION_HISTORY_CHARS {
        kept.remove(0); // the last one (a parsed i64) always fits
        joined = kept.join(",");
    }
    a.insert(REVISION_HISTORY.into(), joined);
}

/// Old sets to delete beyond `revisionHistoryLimit` (upstream's `cleanupDeployment`): of the
/// sets not being deleted, as many as exceed the limit, oldest revisions first — each only if
/// it is empty and settled (one that is not is skipped, not replaced by a newer one).
pub fn history_to_delete(d: &Deployment, old: &[&ReplicaSet]) -> Vec<String> {
    let limit = d
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let mut alive: Vec<&ReplicaSet> = old
        .iter()
        .copied()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .collect();
    let Some(over) = alive.len().checked_sub(limit).filter(|n| *n > 0) else {
        return Vec::new();
    };
    alive.sort_by_key(|rs| revision(rs));
    alive[..over]
        .iter()
        .filter(|rs| {
            spec_replicas(rs) == 0
                && status_replicas(rs) == 0
                && rs.status.as_ref().and_then(|s| s.observed_generation) >= rs.metadata.generation
        })
        .map(|rs| rs.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn condition<'a>(s: &'a DeploymentStatus, t: &str) -> Option<&'a DeploymentCondition> {
    s.conditions.as_ref()?.iter().find(|c| c.type_ == t)
}

/// Sets a condition; the transition time moves only when the status flips.
pub fn set_condition(
    s: &mut DeploymentStatus,
    t: &str,
    status: &str,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) {
    let conds = s.conditions.get_or_insert_with(Vec::new);
    match conds.iter_mut().find(|c| c.type_ == t) {
        Some(c)
            if c.status == status
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message.as_str()) => {}
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(Time(now));
            }
            c.status = status.into();
            c.reason = Some(reason.into());
            c.message = Some(message);
            c.last_update_time = Some(Time(now));
        }
        None => conds.push(DeploymentCondition {
            type_: t.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_update_time: Some(Time(now)),
            last_transition_time: Some(Time(now)),
        }),
    }
}

/// Replica counts and the Available condition (upstream's `calculateStatus`).
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let mut s = d.status.clone().unwrap_or_default();
    let actual: i32 = all.iter().map(|rs| status_replicas(rs)).sum();
    let ready: i32 = all
        .iter()
        .map(|rs| {
            rs.status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0)
        })
        .sum();
    let avail: i32 = all
        .iter()
        .map(|rs| {
            rs.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
        })
        .sum();
    let total: i32 = all.iter().map(|rs| spec_replicas(rs)).sum();
    s.observed_generation = d.metadata.generation;
    s.replicas = Some(actual);
    s.updated_replicas = Some(new_rs.map(status_replicas).unwrap_or(0));
    s.ready_replicas = Some(ready);
    s.available_replicas = Some(avail);
    s.unavailable_replicas = Some((total - avail).max(0));
    if avail >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut s,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
        );
    } else {
        set_condition(
            &mut s,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        );
    }
    s
}

/// Complete: every replica updated and available, nothing old left, generation observed.
pub fn is_complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let n = replicas(d);
    s.updated_replicas == Some(n)
        && s.replicas == Some(n)
        && s.available_replicas == Some(n)
        && s.observed_generation >= d.metadata.generation
}

/// Progress since the last status: more updated/ready/available pods or fewer old ones.
pub fn is_progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let old_old = old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0);
    let new_old = new.replicas.unwrap_or(0) - new.updated_replicas.unwrap_or(0);
    new.updated_replicas > old.updated_replicas
        || new_old < old_old
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

/// Sets Progressing after a sync (upstream's `syncRolloutStatus`); returns when to look again
/// for the progress deadline, if the rollout is still going.
pub fn progressing(
    d: &Deployment,
    new_status: &mut DeploymentStatus,
    new_rs: Option<&ReplicaSet>,
    now: DateTime<Utc>,
) -> Option<i64> {
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let deadline = d
        .spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .unwrap_or(600);
    if paused {
        return None;
    }
    let rs_name = new_rs
        .and_then(|rs| rs.metadata.name.clone())
        .unwrap_or_default();
    let old = d.status.clone().unwrap_or_default();
    if is_complete(d, new_status) {
        set_condition(
            new_status,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            now,
        );
        return None;
    }
    if is_progressing(&old, new_status) {
        let msg = format!("ReplicaSet \"{rs_name}\" is progressing.");
        let conds = new_status.conditions.get_or_insert_with(Vec::new);
        match conds.iter_mut().find(|c| c.type_ == "Progressing") {
            Some(c) if c.status == "True" => {
                c.reason = Some("ReplicaSetUpdated".into());
                c.message = Some(msg);
                c.last_update_time = Some(Time(now));
            }
            _ => set_condition(
                new_status,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                msg,
                now,
            ),
        }
        return Some(i64::from(deadline));
    }
    // A rollout starts (the last one had completed): its deadline counts from now, as upstream's
    // NewReplicaSetCreated / FoundNewReplicaSet reset it; a completed condition never times out.
    let current_reason = condition(new_status, "Progressing").and_then(|c| c.reason.clone());
    if current_reason.as_deref() == Some("NewReplicaSetAvailable") || current_reason.is_none() {
        set_condition(
            new_status,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{rs_name}\" is progressing."),
            now,
        );
        return Some(i64::from(deadline));
    }
    let last = condition(new_status, "Progressing")
        .and_then(|c| c.last_update_time.as_ref())
        .map(|t| t.0);
    if let Some(last) = last {
        let since = (now - last).num_seconds();
        let timed_out = condition(new_status, "Progressing").and_then(|c| c.reason.as_deref())
            == Some("ProgressDeadlineExceeded");
        if since >= i64::from(deadline) {
            if !timed_out {
                set_condition(
                    new_status,
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
                    now,
                );
            }
            return None;
        }
        return Some(i64::from(deadline) - since + 1);
    }
    Some(i64::from(deadline))
}

/// Moves a ReplicaSet's `ReplicaFailure` condition onto the Deployment — the new set's first,
/// else an old set's — or removes the Deployment's when no set has one (upstream's
/// `getReplicaFailures` in `syncRolloutStatus`). A condition already there with the same status
/// and reason is kept as it is.
pub fn replica_failure(s: &mut DeploymentStatus, all: &[&ReplicaSet], new_rs: Option<&ReplicaSet>) {
    let failure = |rs: &ReplicaSet| {
        rs.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == REPLICA_FAILURE)
            .cloned()
    };
    let found = new_rs
        .and_then(failure)
        .or_else(|| all.iter().find_map(|rs| failure(rs)));
    let conds = s.conditions.get_or_insert_with(Vec::new);
    let current = conds.iter().position(|c| c.type_ == REPLICA_FAILURE);
    match (found, current) {
        (None, None) => {}
        (None, Some(i)) => {
            conds.remove(i);
        }
        (Some(f), Some(i)) if conds[i].status == f.status && conds[i].reason == f.reason => {}
        (Some(f), current) => {
            let since = current
                .map(|i| conds.remove(i))
                .filter(|c| c.status == f.status)
                .and_then(|c| c.last_transition_time)
                .or_else(|| f.last_transition_time.clone());
            conds.push(DeploymentCondition {
                type_: f.type_,
                status: f.status,
                reason: f.reason,
                message: f.message,
                last_update_time: f.last_transition_time,
                last_transition_time: since,
            });
        }
    }
    if conds.is_empty() {
        s.conditions = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(replicas: i32, surge: serde_json::Value, unavail: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "ns", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavail}},
                "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
        }))
        .unwrap()
    }

    fn rs(name: &str, created: &str, spec: i32, status: i32, avail: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created, "generation": 1},
            "spec": {"replicas": spec, "selector": {"matchLabels": {"app": "x"}}},
            "status": {"replicas": status, "availableReplicas": avail, "readyReplicas": avail, "observedGeneration": 1}
        }))
        .unwrap()
    }

    #[test]
    fn safe_encoding_and_hash_shape() {
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        let t: PodTemplateSpec =
            serde_json::from_value(json!({"metadata": {"labels": {"app": "x"}}})).unwrap();
        let h = template_hash(&t, None);
        assert!(
            (6..=10).contains(&h.len())
                && h.bytes()
                    .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
            "{h}"
        );
        assert_ne!(
            h,
            template_hash(&t, Some(1)),
            "collision count changes the hash"
        );
        assert_eq!(h, template_hash(&t, None), "stable");
        let mut with = t.clone();
        with.metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(HASH_LABEL.into(), h);
        assert!(equal_ignore_hash(&t, &with));
    }

    #[test]
    fn fenceposts_round_like_upstream() {
        assert_eq!(fenceposts(&deploy(10, json!("25%"), json!("25%"))), (3, 2));
        assert_eq!(fenceposts(&deploy(1, json!("25%"), json!("25%"))), (1, 0));
        assert_eq!(fenceposts(&deploy(3, json!(0), json!(0))), (0, 1));
        assert_eq!(fenceposts(&deploy(4, json!(2), json!("50%"))), (2, 2));
        assert!(scaled_value(Some(&IntOrString::String("x".into())), 4, true, "25%").is_err());
    }

    #[test]
    fn rolling_update_respects_surge_and_unavailable() {
        let d = deploy(3, json!(1), json!(0));
        let old = rs("old", "2026-01-01T00:00:00Z", 3, 3, 3);
        let new = rs("new", "2026-01-02T00:00:00Z", 0, 0, 0);
        // Up by the surge only.
        assert_eq!(new_rs_replicas(&d, &[&old, &new], &new), 1);
        let new = rs("new", "2026-01-02T00:00:00Z", 1, 1, 0);
        assert_eq!(
            new_rs_replicas(&d, &[&old, &new], &new),
            1,
            "no room: 4 pods already"
        );
        // Nothing old goes while the new pod is unavailable (maxUnavailable 0).
        assert!(scale_down_old(&d, &new, &[&old]).is_empty());
        let new = rs("new", "2026-01-02T00:00:00Z", 1, 1, 1);
        assert_eq!(scale_down_old(&d, &new, &[&old]), [("old".to_string(), 2)]);
        // Old set scaled but its pod not yet gone: still no room for the new set.
        let old2 = rs("old", "2026-01-01T00:00:00Z", 2, 3, 3);
        assert_eq!(new_rs_replicas(&d, &[&old2, &new], &new), 1);
        let old3 = rs("old", "2026-01-01T00:00:00Z", 2, 2, 2);
        assert_eq!(new_rs_replicas(&d, &[&old3, &new], &new), 2);
    }

    #[test]
    fn unhealthy_old_replicas_go_first() {
        let d = deploy(4, json!(0), json!(1));
        let old = rs("old", "2026-01-01T00:00:00Z", 4, 4, 2);
        let new = rs("new", "2026-01-02T00:00:00Z", 0, 0, 0);
        // 4 pods, 2 unavailable, minAvailable 3: one unhealthy pod may go (4 - 3), no
        // available one.
        assert_eq!(scale_down_old(&d, &new, &[&old]), [("old".to_string(), 3)]);
    }

    #[test]
    fn proportional_scaling_shares_the_difference() {
        let mut d = deploy(20, json!(3), json!(2));
        d.status = Some(DeploymentStatus {
            replicas: Some(13),
            ..Default::default()
        });
        let mut a = rs("a", "2026-01-01T00:00:00Z", 8, 8, 8);
        let mut b = rs("b", "2026-01-02T00:00:00Z", 5, 5, 0);
        for x in [&mut a, &mut b] {
            x.metadata.annotations = Some(
                [
                    (MAX_REPLICAS.to_string(), "13".to_string()),
                    (DESIRED_REPLICAS.to_string(), "10".to_string()),
                ]
                .into(),
            );
        }
        assert!(is_scaling_event(&d, &[&a, &b]));
        let sizes = proportional_sizes(&d, &[&a, &b], Some(&b));
        let total: i32 = sizes.iter().map(|s| s.1).sum();
        assert_eq!(total, 23, "{sizes:?}");
        assert_eq!(sizes, [("a".to_string(), 14), ("b".to_string(), 9)]);
    }

    #[test]
    fn history_keeps_the_limit() {
        let mut d = deploy(1, json!(1), json!(0));
        d.spec.as_mut().unwrap().revision_history_limit = Some(1);
        let mut sets: Vec<ReplicaSet> = (1..=3)
            .map(|i| rs(&format!("r{i}"), "2026-01-01T00:00:00Z", 0, 0, 0))
            .collect();
        for (i, s) in sets.iter_mut().enumerate() {
            s.metadata.annotations = Some([(REVISION.to_string(), (i + 1).to_string())].into());
        }
        let refs: Vec<&ReplicaSet> = sets.iter().collect();
        assert_eq!(history_to_delete(&d, &refs), ["r1", "r2"]);
        // Upstream counts every old set toward the limit and skips one still holding pods:
        // r2 is over the limit with pods, r1 goes; with r1 holding pods instead, nothing goes.
        sets[1].spec.as_mut().unwrap().replicas = Some(3);
        let refs: Vec<&ReplicaSet> = sets.iter().collect();
        assert_eq!(history_to_delete(&d, &refs), ["r1"]);
        let mut d0 = d.clone();
        d0.spec.as_mut().unwrap().revision_history_limit = Some(2);
        sets[1].spec.as_mut().unwrap().replicas = Some(0);
        sets[0].spec.as_mut().unwrap().replicas = Some(3);
        let refs: Vec<&ReplicaSet> = sets.iter().collect();
        assert!(history_to_delete(&d0, &refs).is_empty());
    }

    #[test]
    fn status_and_conditions() {
        let d = deploy(2, json!(1), json!(0));
        let new = rs("new", "2026-01-02T00:00:00Z", 2, 2, 2);
        let now = rkube_client::now();
        let mut s = calculate_status(&d, &[&new], Some(&new), now);
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.available_replicas,
                s.unavailable_replicas
            ),
            (Some(2), Some(2), Some(2), Some(0))
        );
        assert_eq!(progressing(&d, &mut s, Some(&new), now), None);
        let p = condition(&s, "Progressing").unwrap();
        assert_eq!(
            (p.status.as_str(), p.reason.as_deref()),
            ("True", Some("NewReplicaSetAvailable"))
        );
        assert_eq!(
            p.message.as_deref(),
            Some("ReplicaSet \"new\" has successfully progressed.")
        );
        assert_eq!(
            condition(&s, "Available").unwrap().reason.as_deref(),
            Some("MinimumReplicasAvailable")
        );
    }

    #[test]
    fn a_new_rollout_after_a_completed_one_does_not_time_out_at_once() {
        let d = deploy(2, json!(1), json!(0));
        let now = rkube_client::now();
        let done = rs("new", "2026-01-02T00:00:00Z", 2, 2, 2);
        let mut s = calculate_status(&d, &[&done], Some(&done), now);
        progressing(&d, &mut s, Some(&done), now);
        // An hour later the template changes; nothing is updated yet on the first sync.
        let mut d2 = d.clone();
        d2.status = Some(s);
        d2.metadata.generation = Some(2);
        let later = now + k8s_openapi::chrono::Duration::seconds(3600);
        let mut s2 = calculate_status(&d2, &[&done], None, later);
        assert_eq!(progressing(&d2, &mut s2, None, later), Some(600));
        let p = condition(&s2, "Progressing").unwrap();
        assert_eq!(
            (p.status.as_str(), p.reason.as_deref()),
            ("True", Some("ReplicaSetUpdated"))
        );
    }

    #[test]
    fn a_replica_sets_failure_shows_on_the_deployment_until_it_clears() {
        let d = deploy(2, json!(1), json!(0));
        let now = rkube_client::now();
        let failing = |name: &str, message: &str| {
            let mut r = rs(name, "2026-01-02T00:00:00Z", 2, 1, 1);
            r.status.as_mut().unwrap().conditions = Some(vec![serde_json::from_value(json!({
                "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                "message": message, "lastTransitionTime": "2026-01-02T00:00:05Z"
            }))
            .unwrap()]);
            r
        };
        let old = failing("old", "old set's error");
        let new = failing("new", "exceeded quota");
        let mut s = calculate_status(&d, &[&old, &new], Some(&new), now);
        replica_failure(&mut s, &[&old, &new], Some(&new));
        let c = condition(&s, "ReplicaFailure").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            ("True", Some("FailedCreate"), Some("exceeded quota"))
        );
        assert_eq!(c.last_update_time, c.last_transition_time);
        assert!(
            condition(&s, "Available").is_some(),
            "other conditions stay"
        );

        // Without a failing new set, an old set's failure is shown.
        let fine = rs("new", "2026-01-02T00:00:00Z", 2, 2, 2);
        let mut s2 = calculate_status(&d, &[&old, &fine], Some(&fine), now);
        replica_failure(&mut s2, &[&old, &fine], Some(&fine));
        assert_eq!(
            condition(&s2, "ReplicaFailure").unwrap().message.as_deref(),
            Some("old set's error")
        );

        // Once no set fails, the condition goes.
        let mut d2 = d.clone();
        d2.status = Some(s);
        let mut s3 = calculate_status(&d2, &[&fine], Some(&fine), now);
        assert!(condition(&s3, "ReplicaFailure").is_some());
        replica_failure(&mut s3, &[&fine], Some(&fine));
        assert!(condition(&s3, "ReplicaFailure").is_none());
        assert!(condition(&s3, "Available").is_some());
    }

    #[test]
    fn a_set_made_new_again_keeps_its_old_revisions() {
        let mut d = deploy(2, json!(1), json!(0));
        d.metadata.annotations = Some(BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            (REVISION.to_string(), "2".to_string()),
        ]));
        let mut old = rs("old", "2026-01-01T00:00:00Z", 0, 0, 0);
        old.metadata.annotations = Some(BTreeMap::from([
            (REVISION.to_string(), "1".to_string()),
            (DESIRED_REPLICAS.to_string(), "5".to_string()),
        ]));
        let a = revised_annotations(&d, &old, 3).unwrap();
        assert_eq!(a[REVISION], "3");
        assert_eq!(a[REVISION_HISTORY], "1");
        assert_eq!(a["team"], "a", "the Deployment's annotations are copied");
        assert_eq!(a[DESIRED_REPLICAS], "5", "replica annotations left alone");
        // Made new again later: the history grows; a revision already as high is kept.
        old.metadata.annotations = Some(a);
        let a = revised_annotations(&d, &old, 5).unwrap();
        assert_eq!(
            (a[REVISION].as_str(), a[REVISION_HISTORY].as_str()),
            ("5", "1,3")
        );
        old.metadata.annotations = Some(a);
        assert_eq!(revised_annotations(&d, &old, 4), None);
        // A history at its limit drops its oldest revisions to take the next one.
        let long: Vec<String> = (1000..1400).map(|r| r.to_string()).collect();
        let mut full = old.metadata.annotations.clone().unwrap();
        full.insert(REVISION_HISTORY.into(), long.join(","));
        full.insert(REVISION.into(), "1400".into());
        old.metadata.annotations = Some(full);
        let a = revised_annotations(&d, &old, 1401).unwrap();
        let h = &a[REVISION_HISTORY];
        assert!(h.len() <= 2000 && h.ends_with(",1399,1400"), "{}", h.len());
        assert!(!h.starts_with("1000,"), "the oldest went first");
        // Not a number: left alone.
        old.metadata.annotations =
            Some(BTreeMap::from([(REVISION.to_string(), "abc".to_string())]));
        assert_eq!(
            revised_annotations(&deploy(2, json!(1), json!(0)), &old, 7),
            None
        );
    }
}
