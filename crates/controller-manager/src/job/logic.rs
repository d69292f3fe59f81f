//! The Job controller's decisions, without I/O (upstream's `syncJob` and
//! `trackJobStatusAndRemoveFinalizers`): which finished pods to record as uncounted and then
//! release from the `batch.kubernetes.io/job-tracking` finalizer, the counts that follow, the
//! conditions (SuccessCriteriaMet → Complete, by completions or a `successPolicy`; FailureTarget
//! → Failed; Suspended), failed indexes under `backoffLimitPerIndex`, and which pods to create
//! (with their completion index, after a back-off per Job or per index) or delete, replacing
//! terminating pods at once or only once they failed (`podReplacementPolicy`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, PodFailurePolicy, UncountedTerminatedPods,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::pod::Pod;

use crate::replicaset::logic::is_ready;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
/// The failures of a pod's index before it (`backoffLimitPerIndex`), on the pod.
pub const INDEX_FAILURE_KEY: &str = "batch.kubernetes.io/job-index-failure-count";
/// Upstream's `DefaultJobPodFailureBackOff` and its cap.
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(360);
/// The most pods one sync creates (upstream's `MaxPodCreateDeletePerSync`).
pub const MAX_CREATE: usize = 500;

pub use crate::objects::Event;

/// What one sync does, in order: write `record` (the newly finished pods as uncounted), take
/// the finalizer off `finalize`, write `status`, delete `delete`, create one pod per `create`
/// entry (its completion index for Indexed Jobs).
#[derive(Debug, Default)]
pub struct Plan {
    pub record: Option<JobStatus>,
    pub finalize: Vec<Arc<Pod>>,
    pub status: JobStatus,
    pub delete: Vec<Arc<Pod>>,
    pub create: Vec<Option<i32>>,
    /// The failures so far of indexes created anew (`backoffLimitPerIndex`), for their pods'
    /// `job-index-failure-count` annotation.
    pub index_failures: BTreeMap<i32, i32>,
    pub requeue: Option<Duration>,
    pub events: Vec<Event>,
}

fn condition_true(status: &JobStatus, t: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == t && c.status == "True")
}

/// `Complete` or `Failed`, when the Job has finished.
pub fn finished(job: &Job) -> Option<&'static str> {
    let st = job.status.as_ref()?;
    ["Complete", "Failed"]
        .into_iter()
        .find(|t| condition_true(st, t))
}

/// When the Job finished (its Complete or Failed condition's transition).
pub fn finished_at(job: &Job) -> Option<DateTime<Utc>> {
    let t = finished(job)?;
    let st = job.status.as_ref()?;
    st.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == t)
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .or_else(|| st.completion_time.as_ref().map(|t| t.0))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn completion_index(p: &Pod) -> Option<i32> {
    let m = &p.metadata;
    m.annotations
        .as_ref()
        .and_then(|a| a.get(INDEX_KEY))
        .or_else(|| m.labels.as_ref().and_then(|l| l.get(INDEX_KEY)))
        .and_then(|v| v.parse().ok())
        .filter(|i| *i >= 0)
}

fn has_finalizer(p: &Pod) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

/// When the pod stopped: its containers' last finish, else its deletion, else `now`.
fn failed_at(p: &Pod, now: DateTime<Utc>) -> DateTime<Utc> {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
        .or(p.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .or_else(|| {
            let conds = p.status.as_ref()?.conditions.as_ref()?;
            conds
                .iter()
                .filter_map(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
                .max()
        })
        .or(p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now)
}

/// `1,3-5,7` ↔ the set of indexes (upstream's compressed interval list).
pub fn parse_indexes(s: &str, completions: i32) -> BTreeSet<i32> {
    index_ranges(s, completions)
        .into_iter()
        .flat_map(|(a, b)| a..=b)
        .collect()
}

/// The ranges `a-b,c` names, clipped to `[0, completions)`, without expanding them.
pub fn index_ranges(s: &str, completions: i32) -> Vec<(i32, i32)> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b) = (a.parse::<i32>().ok()?.max(0), b.parse::<i32>().ok()?);
            let b = b.min(completions.saturating_sub(1));
            (a <= b).then_some((a, b))
        })
        .collect()
}

pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end = it.next().unwrap_or(end);
        }
        // As upstream: a pair is written `1,2`, three or more `1-3`.
        parts.push(match end - start {
            0 => start.to_string(),
            1 => format!("{start},{end}"),
            _ => format!("{start}-{end}"),
        });
    }
    parts.join(",")
}

fn condition(
    t: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> JobCondition {
    JobCondition {
        type_: t.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Sets condition `t` (a new transition only when its status changes).
fn set_condition(st: &mut JobStatus, c: JobCondition) {
    let conds = st.conditions.get_or_insert_with(Vec::new);
    match conds.iter_mut().find(|x| x.type_ == c.type_) {
        Some(x) if x.status == c.status => {}
        Some(x) => *x = c,
        None => conds.push(c),
    }
}

/// The first rule of `policy` a failed pod matches: its action and, for the Job's condition,
/// upstream's message (`podFailurePolicy`: exit codes other than 0 of its containers, or its
/// conditions).
pub fn failure_rule(policy: &PodFailurePolicy, p: &Pod) -> Option<(&'static str, String)> {
    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let status = p.status.as_ref()?;
    let statuses: Vec<_> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    for (i, r) in policy.rules.iter().enumerate() {
        let action = match r.action.as_str() {
            "FailJob" => "FailJob",
            "Ignore" => "Ignore",
            "Count" => "Count",
            "FailIndex" => "FailIndex",
            _ => continue,
        };
        if let Some(codes) = &r.on_exit_codes {
            let hit = statuses
                .iter()
                .filter(|c| codes.container_name.as_ref().is_none_or(|n| *n == c.name))
                .find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let inside = codes.values.contains(&code);
                    let matched = code != 0 && (inside == (codes.operator == "In"));
                    matched.then(|| (c.name.clone(), code))
                });
            if let Some((container, code)) = hit {
                return Some((action, format!("Container {container} for pod {ns}/{name} failed with exit code {code} matching {action} rule at index {i}")));
            }
        } else if let Some(patterns) = &r.on_pod_conditions {
            let conds = status.conditions.as_deref().unwrap_or(&[]);
            let hit = patterns.iter().find(|pc| {
                conds
                    .iter()
                    .any(|c| c.type_ == pc.type_ && c.status == pc.status)
            });
            if let Some(pc) = hit {
                return Some((
                    action,
                    format!(
                        "Pod {ns}/{name} has condition {} matching {action} rule at index {i}",
                        pc.type_
                    ),
                ));
            }
        }
    }
    None
}

/// Failures per index under `backoffLimitPerIndex`, from the pods still there: each pod carries
/// its index's failures before it; a failed pod adds one unless a pod failure policy ignores
/// it. An index fails past the limit, or at once by a `FailIndex` rule.
#[derive(Debug, Default)]
struct IndexFailures {
    count: BTreeMap<i32, i32>,
    last: BTreeMap<i32, DateTime<Utc>>,
    failed: BTreeSet<i32>,
}

fn index_failures(
    pods: &[Arc<Pod>],
    policy: Option<&PodFailurePolicy>,
    limit: i32,
    completions: i32,
    now: DateTime<Utc>,
) -> IndexFailures {
    let mut out = IndexFailures::default();
    for p in pods {
        let Some(i) = completion_index(p).filter(|i| *i < completions) else {
            continue;
        };
        let before = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INDEX_FAILURE_KEY))
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(0)
            .max(0);
        let mut count = before;
        if phase(p) == "Failed" {
            match policy.and_then(|pol| failure_rule(pol, p)).map(|r| r.0) {
                Some("Ignore") => {}
                Some("FailIndex") => {
                    count = count.saturating_add(1);
                    out.failed.insert(i);
                }
                _ => count = count.saturating_add(1),
            }
            let at = failed_at(p, now);
            let last = out.last.entry(i).or_insert(at);
            *last = (*last).max(at);
        }
        let c = out.count.entry(i).or_insert(0);
        *c = (*c).max(count);
        if *c > limit {
            out.failed.insert(i);
        }
    }
    out
}

/// The first `successPolicy` rule the succeeded indexes meet: upstream's message.
pub fn success_rule(
    policy: &k8s_openapi::api::batch::v1::SuccessPolicy,
    completions: i32,
    completed: &BTreeSet<i32>,
) -> Option<String> {
    if completed.is_empty() {
        return None;
    }
    policy.rules.iter().enumerate().find_map(|(i, r)| {
        let met = match (&r.succeeded_indexes, r.succeeded_count) {
            (Some(idx), count) => {
                // Counted over the ranges: `0-2147483647` is never expanded.
                let required = index_ranges(idx, completions);
                let size: i64 = required
                    .iter()
                    .map(|(a, b)| i64::from(*b) - i64::from(*a) + 1)
                    .sum();
                let done = completed
                    .iter()
                    .filter(|i| required.iter().any(|(a, b)| (a..=b).contains(i)))
                    .count() as i64;
                size > 0 && count.map_or(done == size, |c| done >= i64::from(c))
            }
            (None, Some(c)) => completed.len() as i32 >= c,
            (None, None) => false,
        };
        met.then(|| format!("Matched rules at index {i}"))
    })
}

/// The backoff before the next pod after `failures` failures (10 s, 20 s, 40 s … 6 min).
pub fn backoff(base: Duration, failures: i32) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    (base * 2u32.saturating_pow((failures - 1).min(10) as u32)).min(BACKOFF_MAX.max(base))
}

/// The sync's plan for `job` over its own pods (`pods`: those it controls). `releasing`: UIDs
/// of pods whose finalizer this controller already took off but whose update the cache has
/// not shown yet — counted already, so never again (upstream's finalizer expectations).
pub fn plan(
    job: &Job,
    pods: &[Arc<Pod>],
    now: DateTime<Utc>,
    backoff_base: Duration,
    releasing: &HashSet<String>,
) -> Plan {
    let spec = job.spec.clone().unwrap_or_default();
    let mut st = job.status.clone().unwrap_or_default();
    let mut plan = Plan::default();
    let done = finished(job);
    let suspended = spec.suspend == Some(true);
    let deleting = job.metadata.deletion_timestamp.is_some();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let failing_target = condition_true(&st, "FailureTarget");
    let success_target = condition_true(&st, "SuccessCriteriaMet");

    // 1. Finished pods still holding the finalizer become uncounted, then are released.
    let mut uncounted = st.uncounted_terminated_pods.clone().unwrap_or_default();
    let (mut unc_ok, mut unc_failed) = (
        uncounted.succeeded.clone().unwrap_or_default(),
        uncounted.failed.clone().unwrap_or_default(),
    );
    let mut completed = if indexed {
        parse_indexes(
            st.completed_indexes.as_deref().unwrap_or(""),
            completions.unwrap_or(0),
        )
    } else {
        BTreeSet::new()
    };
    let policy = spec.pod_failure_policy.as_ref();
    // `podReplacementPolicy: Failed`: only pods that reached Failed count as failures.
    let only_failed = spec.pod_replacement_policy.as_deref() == Some("Failed");
    let mut fail_job: Option<String> = None;
    let mut newly = false;
    let mut last_failure: Option<DateTime<Utc>> = None;
    for p in pods {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let terminal = matches!(phase(p), "Succeeded" | "Failed");
        let pod_deleting = p.metadata.deletion_timestamp.is_some();
        if phase(p) == "Failed" || (pod_deleting && phase(p) != "Succeeded") {
            let at = failed_at(p, now);
            last_failure = Some(last_failure.map_or(at, |l| l.max(at)));
        }
        if !has_finalizer(p) || releasing.contains(&uid) {
            continue;
        }
        if unc_ok.contains(&uid) || unc_failed.contains(&uid) {
            plan.finalize.push(p.clone());
            continue;
        }
        let succeeded = phase(p) == "Succeeded";
        // Once the Job is failing, every pod that has not succeeded counts as failed.
        // Pods stopped on success, or deleted while suspended, are not failures.
        // With a pod failure policy, or `podReplacementPolicy: Failed`, only terminal failures
        // count (upstream's `isPodFailed`).
        let failed = phase(p) == "Failed"
            || (policy.is_none()
                && !only_failed
                && pod_deleting
                && !succeeded
                && !suspended
                && !success_target)
            || (failing_target && !terminal);
        if done.is_some() || deleting {
            plan.finalize.push(p.clone());
        } else if succeeded {
            match (indexed, completion_index(p)) {
                (true, Some(i)) if completions.is_some_and(|c| i < c) => {
                    completed.insert(i);
                }
                _ => {}
            }
            unc_ok.push(uid);
            newly = true;
            plan.finalize.push(p.clone());
        } else if failed {
            let rule = policy
                .filter(|_| phase(p) == "Failed")
                .and_then(|pol| failure_rule(pol, p));
            match rule {
                Some(("Ignore", _)) => {} // released, never counted
                Some(("FailJob", message)) => {
                    fail_job.get_or_insert(message);
                    unc_failed.push(uid);
                }
                _ => unc_failed.push(uid),
            }
            newly = true;
            plan.finalize.push(p.clone());
        } else if pod_deleting {
            plan.finalize.push(p.clone());
        }
    }
    if indexed {
        let s = format_indexes(&completed);
        st.completed_indexes = (!s.is_empty()).then_some(s);
    }
    let per_index = spec.backoff_limit_per_index.filter(|_| indexed);
    let index_failed = per_index.map(|limit| {
        let mut f = index_failures(pods, policy, limit, completions.unwrap_or(0), now);
        f.failed.extend(parse_indexes(
            st.failed_indexes.as_deref().unwrap_or(""),
            completions.unwrap_or(0),
        ));
        // A completed index never fails afterwards.
        f.failed.retain(|i| !completed.contains(i));
        st.failed_indexes = Some(format_indexes(&f.failed));
        f
    });
    if newly {
        uncounted.succeeded = Some(unc_ok.clone());
        uncounted.failed = Some(unc_failed.clone());
        let mut rec = st.clone();
        rec.uncounted_terminated_pods = Some(uncounted);
        plan.record = Some(rec);
    }
    // After the finalizers come off, the uncounted pods are counted.
    let succeeded = st.succeeded.unwrap_or(0) + unc_ok.len() as i32;
    let failed = st.failed.unwrap_or(0) + unc_failed.len() as i32;
    st.succeeded = Some(succeeded);
    st.failed = Some(failed);
    st.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());

    let active: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| {
            !matches!(phase(p), "Succeeded" | "Failed") && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    let terminating = pods
        .iter()
        .filter(|p| {
            !matches!(phase(p), "Succeeded" | "Failed") && p.metadata.deletion_timestamp.is_some()
        })
        .count() as i32;
    st.active = Some(active.len() as i32);
    st.ready = Some(active.iter().filter(|p| is_ready(p)).count() as i32);
    st.terminating = Some(terminating);

    if done.is_some() || deleting {
        plan.status = st;
        return plan;
    }

    // 2. Has the Job reached its end?
    let ev = |warning, reason, message: &str| Event {
        warning,
        reason,
        message: message.into(),
    };
    let mut target: Option<(bool, &'static str, String)> = None; // (success, reason, message)
    if success_target {
        let c = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "SuccessCriteriaMet")
            .cloned()
            .unwrap_or_default();
        target = Some(if c.reason.as_deref() == Some("SuccessPolicy") {
            (true, "SuccessPolicy", c.message.unwrap_or_default())
        } else {
            (
                true,
                "CompletionsReached",
                "Reached expected number of succeeded pods".into(),
            )
        });
    } else if failing_target {
        let c = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "FailureTarget")
            .cloned()
            .unwrap_or_default();
        let (c, m) = (c.reason.unwrap_or_default(), c.message.unwrap_or_default());
        target = Some(if c == "PodFailurePolicy" {
            (false, "PodFailurePolicy", m)
        } else if c == "MaxFailedIndexesExceeded" || c == "FailedIndexes" {
            (
                false,
                if c == "FailedIndexes" {
                    "FailedIndexes"
                } else {
                    "MaxFailedIndexesExceeded"
                },
                m,
            )
        } else if c == "DeadlineExceeded" {
            (
                false,
                "DeadlineExceeded",
                "Job was active longer than specified deadline".into(),
            )
        } else {
            (
                false,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".into(),
            )
        });
    } else {
        let complete = if indexed {
            completions.is_some_and(|c| completed.len() as i32 >= c)
        } else {
            match completions {
                Some(c) => succeeded >= c,
                None => succeeded > 0 && active.is_empty(),
            }
        };
        let deadline_passed = !suspended
            && spec.active_deadline_seconds.is_some_and(|d| {
                st.start_time
                    .as_ref()
                    .is_some_and(|s| s.0 + k8s_openapi::chrono::Duration::seconds(d) <= now)
            });
        let by_policy = spec
            .success_policy
            .as_ref()
            .filter(|_| indexed)
            .and_then(|sp| success_rule(sp, completions.unwrap_or(0), &completed));
        let failed_indexes = index_failed.as_ref().map_or(0, |f| f.failed.len() as i32);
        if complete || by_policy.is_some() {
            let (reason, message) = match by_policy.filter(|_| !complete) {
                Some(m) => ("SuccessPolicy", m),
                None => (
                    "CompletionsReached",
                    "Reached expected number of succeeded pods".to_string(),
                ),
            };
            set_condition(
                &mut st,
                condition("SuccessCriteriaMet", true, reason, &message, now),
            );
            target = Some((true, reason, message));
        } else if let Some(message) = fail_job {
            target = Some((false, "PodFailurePolicy", message));
        } else if spec
            .max_failed_indexes
            .is_some_and(|m| failed_indexes > m && index_failed.is_some())
        {
            target = Some((
                false,
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes".into(),
            ));
        } else if failed_indexes > 0
            && completed.len() as i32 + failed_indexes >= completions.unwrap_or(0)
        {
            target = Some((false, "FailedIndexes", "Job has failed indexes".into()));
        } else if failed > spec.backoff_limit.unwrap_or(6) {
            target = Some((
                false,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".into(),
            ));
        } else if deadline_passed {
            target = Some((
                false,
                "DeadlineExceeded",
                "Job was active longer than specified deadline".into(),
            ));
        }
        if let Some((false, reason, message)) = &target {
            set_condition(
                &mut st,
                condition("FailureTarget", true, reason, message, now),
            );
        }
    }
    if let Some((success, reason, message)) = target {
        // Stop what still runs; finish once nothing does.
        plan.delete = active.iter().map(|p| (*p).clone()).collect();
        if active.is_empty() && terminating == 0 {
            if success {
                set_condition(&mut st, condition("Complete", true, reason, &message, now));
                st.completion_time = Some(Time(now));
                plan.events.push(ev(false, "Completed", "Job completed"));
            } else {
                set_condition(&mut st, condition("Failed", true, reason, &message, now));
                plan.events.push(ev(true, reason, &message));
            }
        }
        plan.status = st;
        return plan;
    }

    // 3. Suspended: nothing runs, and the deadline restarts on resume.
    if suspended {
        plan.delete = active.iter().map(|p| (*p).clone()).collect();
        if !condition_true(&st, "Suspended") {
            set_condition(
                &mut st,
                condition("Suspended", true, "JobSuspended", "Job suspended", now),
            );
            plan.events.push(ev(false, "Suspended", "Job suspended"));
        }
        st.start_time = None;
        plan.status = st;
        return plan;
    }
    if condition_true(&st, "Suspended") {
        set_condition(
            &mut st,
            condition("Suspended", false, "JobResumed", "Job resumed", now),
        );
        plan.events.push(ev(false, "Resumed", "Job resumed"));
    }
    if st.start_time.is_none() {
        st.start_time = Some(Time(now));
    }
    if let Some(d) = spec.active_deadline_seconds {
        let start = st.start_time.as_ref().map(|t| t.0).unwrap_or(now);
        let left = (start + k8s_openapi::chrono::Duration::seconds(d) - now)
            .to_std()
            .unwrap_or_default();
        plan.requeue = Some(left + Duration::from_millis(10));
    }

    // 4. Pods to create or delete.
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let wait_after = |at: DateTime<Utc>, failures: i32| {
        let ready_at =
            at + k8s_openapi::chrono::Duration::from_std(backoff(backoff_base, failures)).ok()?;
        (ready_at - now).to_std().ok().filter(|d| !d.is_zero())
    };
    // Per index, each index backs off on its own failures.
    let mut wait = match &index_failed {
        Some(_) => None,
        None => last_failure.and_then(|at| wait_after(at, failed)),
    };
    // `podReplacementPolicy: Failed`: a terminating pod holds its place until it has failed.
    let holding: Vec<&Arc<Pod>> = if spec.pod_replacement_policy.as_deref() == Some("Failed") {
        pods.iter()
            .filter(|p| {
                !matches!(phase(p), "Succeeded" | "Failed")
                    && p.metadata.deletion_timestamp.is_some()
            })
            .collect()
    } else {
        Vec::new()
    };
    if indexed {
        let c = completions.unwrap_or(0);
        let failed_set = index_failed.as_ref().map(|f| &f.failed);
        let mut running: BTreeSet<i32> =
            holding.iter().filter_map(|p| completion_index(p)).collect();
        for p in &active {
            match completion_index(p) {
                // Duplicates, completed, failed or out-of-range indexes: not needed.
                Some(i)
                    if i < c
                        && !completed.contains(&i)
                        && !failed_set.is_some_and(|f| f.contains(&i))
                        && running.insert(i) => {}
                _ => plan.delete.push((*p).clone()),
            }
        }
        let room = (parallelism as usize).saturating_sub(running.len());
        // Only as many pending indexes as may start now are looked at: `completions` may be
        // large.
        let mut pending: Vec<i32> = Vec::new();
        for i in 0..c {
            if pending.len() >= room.min(MAX_CREATE) {
                break;
            }
            if completed.contains(&i) || running.contains(&i) {
                continue;
            }
            if let Some(f) = &index_failed {
                if f.failed.contains(&i) {
                    continue;
                }
                let count = f.count.get(&i).copied().unwrap_or(0);
                if let Some(w) = f.last.get(&i).and_then(|at| wait_after(*at, count)) {
                    wait = Some(wait.map_or(w, |x: Duration| x.min(w)));
                    continue;
                }
                if count > 0 {
                    plan.index_failures.insert(i, count);
                }
            }
            pending.push(i);
        }
        if wait.is_none() || index_failed.is_some() {
            plan.create = pending
                .into_iter()
                .take(room.min(MAX_CREATE))
                .map(Some)
                .collect();
        }
        let created: BTreeSet<i32> = plan.create.iter().flatten().copied().collect();
        plan.index_failures.retain(|i, _| created.contains(i));
    } else {
        let want = match completions {
            Some(c) => parallelism.min((c - succeeded).max(0)),
            None if succeeded > 0 => active.len() as i32,
            None => parallelism,
        } as usize;
        if active.len() > want {
            // Not-ready and newest first, as upstream's ranking for excess pods.
            let mut excess: Vec<&Arc<Pod>> = active.clone();
            excess.sort_by_key(|p| {
                (
                    is_ready(p),
                    std::cmp::Reverse(p.metadata.creation_timestamp.as_ref().map(|t| t.0)),
                )
            });
            plan.delete = excess
                .into_iter()
                .take(active.len() - want)
                .cloned()
                .collect();
        } else if wait.is_none() {
            let missing = want.saturating_sub(active.len() + holding.len());
            plan.create = vec![None; missing.min(MAX_CREATE)];
        }
    }
    if let Some(w) = wait {
        plan.requeue = Some(plan.requeue.map_or(w, |r| r.min(w)));
    }
    plan.status = st;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value, status: serde_json::Value) -> Job {
        serde_json::from_value(
            json!({"metadata": {"name": "j", "namespace": "ns", "uid": "ju"},
            "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn pod(name: &str, phase: &str, index: Option<i32>, finalizer: bool) -> Arc<Pod> {
        let mut ann = serde_json::Map::new();
        if let Some(i) = index {
            ann.insert(INDEX_KEY.into(), json!(i.to_string()));
        }
        let fins: Vec<&str> = if finalizer {
            vec![TRACKING_FINALIZER]
        } else {
            vec![]
        };
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": name, "uid": format!("u-{name}"),
                "annotations": ann, "finalizers": fins}, "status": {"phase": phase}}),
            )
            .unwrap(),
        )
    }

    fn cond<'a>(st: &'a JobStatus, t: &str) -> Option<&'a JobCondition> {
        st.conditions.iter().flatten().find(|c| c.type_ == t)
    }

    #[test]
    fn a_new_job_starts_parallelism_pods_and_records_its_start() {
        let now = rkube_client::now();
        let j = job(
            json!({"completions": 5, "parallelism": 2, "template": {}}),
            json!({}),
        );
        let p = plan(&j, &[], now, BACKOFF_BASE, &HashSet::new());
        assert_eq!(p.create, vec![None, None]);
        assert_eq!(p.status.start_time, Some(Time(now)));
        assert_eq!((p.status.active, p.status.succeeded), (Some(0), Some(0)));
        // 4 done: only one more is needed though two may run.
        let j = job(
            json!({"completions": 5, "parallelism": 2}),
            json!({"succeeded": 4}),
        );
        assert_eq!(
            plan(&j, &[], now, BACKOFF_BASE, &HashSet::new())
                .create
                .len(),
            1
        );
    }

    #[test]
    fn finished_pods_are_recorded_then_released_then_counted() {
        let now = rkube_client::now();
        let j = job(
            json!({"completions": 2, "parallelism": 2}),
            json!({"startTime": now}),
        );
        let pods = [
            pod("a", "Succeeded", None, true),
            pod("b", "Running", None, true),
        ];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        let rec = p.record.expect("recorded first");
        assert_eq!(
            rec.uncounted_terminated_pods.unwrap().succeeded.unwrap(),
            ["u-a"]
        );
        assert_eq!(p.finalize.len(), 1);
        assert_eq!(p.status.succeeded, Some(1));
        assert_eq!(p.status.active, Some(1));
        assert!(p.create.is_empty(), "one running, one left to do");
        // A crash after the record: the uncounted pod is released and counted, not twice.
        let j = job(
            json!({"completions": 2, "parallelism": 2}),
            json!({"startTime": now, "uncountedTerminatedPods": {"succeeded": ["u-a"]}}),
        );
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        assert!(p.record.is_none());
        assert_eq!(p.finalize.len(), 1);
        assert_eq!(p.status.succeeded, Some(1));
    }

    #[test]
    fn enough_successes_complete_the_job_once_nothing_runs() {
        let now = rkube_client::now();
        let j = job(
            json!({"completions": 1, "parallelism": 2}),
            json!({"startTime": now, "succeeded": 0}),
        );
        let pods = [
            pod("a", "Succeeded", None, true),
            pod("b", "Running", None, true),
        ];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        assert_eq!(
            cond(&p.status, "SuccessCriteriaMet").unwrap().status,
            "True"
        );
        assert!(cond(&p.status, "Complete").is_none(), "b still runs");
        assert_eq!(p.delete.len(), 1);
        let j = job(
            json!({"completions": 1, "parallelism": 2}),
            serde_json::to_value(&p.status).unwrap(),
        );
        let pods = [
            pod("a", "Succeeded", None, false),
            pod("b", "Succeeded", None, false),
        ];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        let c = cond(&p.status, "Complete").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some("CompletionsReached"))
        );
        assert!(p.status.completion_time.is_some());
        assert_eq!(p.events[0].reason, "Completed");
        let done = job(json!({}), serde_json::to_value(&p.status).unwrap());
        assert_eq!(finished(&done), Some("Complete"));
    }

    #[test]
    fn failures_back_off_and_then_exceed_the_limit() {
        let now = rkube_client::now();
        let j = job(
            json!({"completions": 1, "backoffLimit": 1}),
            json!({"startTime": now}),
        );
        let pods = [pod("a", "Failed", None, true)];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        assert_eq!(p.status.failed, Some(1));
        assert!(p.create.is_empty(), "backing off");
        assert!(p.requeue.unwrap() <= BACKOFF_BASE && p.requeue.unwrap() > Duration::from_secs(9));
        let later = now + k8s_openapi::chrono::Duration::seconds(11);
        let j = job(
            json!({"completions": 1, "backoffLimit": 1}),
            json!({"startTime": now, "failed": 1}),
        );
        let mut a = (*pod("a", "Failed", None, false)).clone();
        a.metadata.creation_timestamp = Some(Time(now));
        let pods = [Arc::new(a)];
        assert_eq!(
            plan(&j, &pods, later, BACKOFF_BASE, &HashSet::new())
                .create
                .len(),
            1
        );
        let pods = [
            pod("a", "Failed", None, false),
            pod("b", "Failed", None, true),
        ];
        let p = plan(&j, &pods, later, BACKOFF_BASE, &HashSet::new());
        let c = cond(&p.status, "Failed").expect("failed: nothing left running");
        assert_eq!(c.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(cond(&p.status, "FailureTarget").unwrap().status, "True");
        assert_eq!(backoff(BACKOFF_BASE, 3), Duration::from_secs(40));
        assert_eq!(backoff(BACKOFF_BASE, 30), BACKOFF_MAX);
    }

    #[test]
    fn indexed_jobs_run_each_index_once() {
        let now = rkube_client::now();
        let spec = json!({"completions": 5, "parallelism": 3, "completionMode": "Indexed"});
        let j = job(
            spec.clone(),
            json!({"startTime": now, "succeeded": 1, "completedIndexes": "1"}),
        );
        let pods = [
            pod("a", "Running", Some(0), true),
            pod("b", "Succeeded", Some(2), true),
            pod("dup", "Running", Some(0), true),
        ];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        assert_eq!(p.status.completed_indexes.as_deref(), Some("1,2"));
        assert_eq!(
            p.delete
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>(),
            ["dup"]
        );
        assert_eq!(
            p.create,
            [Some(3), Some(4)],
            "lowest pending indexes, up to parallelism"
        );
        assert_eq!(parse_indexes("0,2-4,9", 5), BTreeSet::from([0, 2, 3, 4]));
        assert_eq!(format_indexes(&BTreeSet::from([0, 2, 3, 4, 7])), "0,2-4,7");
        assert_eq!(format_indexes(&BTreeSet::from([0, 1, 5, 6])), "0,1,5,6");
        assert_eq!(
            parse_indexes("0-2147483647", 3).len(),
            3,
            "bounded by completions"
        );
    }

    #[test]
    fn suspend_stops_pods_and_resume_restarts_the_clock() {
        let now = rkube_client::now();
        let j = job(
            json!({"completions": 2, "suspend": true}),
            json!({"startTime": now}),
        );
        let pods = [pod("a", "Running", None, true)];
        let p = plan(&j, &pods, now, BACKOFF_BASE, &HashSet::new());
        assert_eq!(p.delete.len(), 1);
        assert!(p.status.start_time.is_none());
        assert_eq!(
            cond(&p.status, "Suspended").unwrap().reason.as_deref(),
            Some("JobSuspended")
        );
        let j = job(
            json!({"completions": 2, "parallelism": 2}),
            serde_json::to_value(&p.status).unwrap(),
        );
        let p = plan(&j, &[], now, BACKOFF_BASE, &HashSet::new());
        let c = cond(&p.status, "Suspended").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("JobResumed"))
        );
        assert_eq!(p.create.len(), 2);
        // The deadline: active longer than allowed → failing, pods stopped.
        let start = now - k8s_openapi::chrono::Duration::seconds(60);
        let j = job(
            json!({"completions": 2, "activeDeadlineSeconds": 30}),
            json!({"startTime": start}),
        );
        let p = plan(
            &j,
            &[pod("a", "Running", None, true)],
            now,
            BACKOFF_BASE,
            &HashSet::new(),
        );
        assert_eq!(
            cond(&p.status, "FailureTarget").unwrap().reason.as_deref(),
            Some("DeadlineExceeded")
        );
        assert_eq!(p.delete.len(), 1);
    }

    #[test]
    fn a_pod_failure_policy_ignores_or_fails_the_job() {
        let now = rkube_client::now();
        let spec = json!({"completions": 2, "backoffLimit": 6, "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}});
        let failed_with = |name: &str, code: i32, disrupted: bool| -> Arc<Pod> {
            let conds = if disrupted {
                json!([{"type": "DisruptionTarget", "status": "True"}])
            } else {
                json!([])
            };
            Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": name,
                "finalizers": [TRACKING_FINALIZER]},
                "status": {"phase": "Failed", "conditions": conds, "containerStatuses": [{"name": "main", "image": "x",
                    "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": code}}}]}})).unwrap())
        };
        let j = job(spec.clone(), json!({"startTime": now}));
        let p = plan(
            &j,
            &[failed_with("evicted", 137, true)],
            now,
            BACKOFF_BASE,
            &HashSet::new(),
        );
        assert_eq!(p.status.failed, Some(0), "ignored: not counted");
        assert_eq!(p.finalize.len(), 1, "but released");
        let p = plan(
            &j,
            &[failed_with("bad", 42, false)],
            now,
            BACKOFF_BASE,
            &HashSet::new(),
        );
        let c = cond(&p.status, "Failed").expect("failed at once");
        assert_eq!(c.reason.as_deref(), Some("PodFailurePolicy"));
        assert_eq!(
            c.message.as_deref(),
            Some("Container main for pod ns/bad failed with exit code 42 matching FailJob rule at index 1")
        );
        let p = plan(
            &j,
            &[failed_with("other", 1, false)],
            now,
            BACKOFF_BASE,
            &HashSet::new(),
        );
        assert_eq!(p.status.failed, Some(1));
        assert!(
            cond(&p.status, "Failed").is_none(),
            "counted against backoffLimit only"
        );
    }

    /// A finished pod of `index` (already released), its index's failures before it, and the
    /// exit code of its container `main`.
    fn ended(name: &str, phase: &str, index: i32, before: i32, code: i32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": name,
                "annotations": {INDEX_KEY: index.to_string(), INDEX_FAILURE_KEY: before.to_string()}},
                "status": {"phase": phase, "containerStatuses": [{"name": "main", "image": "x",
                    "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "finishedAt": "2026-01-01T00:00:00Z"}}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn a_success_policy_completes_an_indexed_job_early() {
        let now = rkube_client::now();
        let spec = json!({"completions": 5, "parallelism": 5, "completionMode": "Indexed",
            "successPolicy": {"rules": [{"succeededIndexes": "0,2", "succeededCount": 2}, {"succeededCount": 4}]}});
        let j = job(
            spec.clone(),
            json!({"startTime": now, "completedIndexes": "0,1", "succeeded": 2}),
        );
        let running = [
            pod("r2", "Running", Some(2), true),
            pod("r3", "Running", Some(3), true),
            pod("r4", "Running", Some(4), true),
        ];
        let p = plan(&j, &running, now, BACKOFF_BASE, &HashSet::new());
        assert!(
            cond(&p.status, "SuccessCriteriaMet").is_none(),
            "index 2 not yet"
        );
        let j = job(
            spec.clone(),
            json!({"startTime": now, "completedIndexes": "0,2", "succeeded": 2}),
        );
        let p = plan(&j, &running[1..], now, BACKOFF_BASE, &HashSet::new());
        let c = cond(&p.status, "SuccessCriteriaMet").expect("rule 0 met");
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some("SuccessPolicy"), Some("Matched rules at index 0"))
        );
        assert_eq!(p.delete.len(), 2, "the rest are stopped");
        assert!(cond(&p.status, "Complete").is_none(), "until they are gone");
        // Nothing runs any more: Complete, with the policy's reason.
        let j = job(spec, serde_json::to_value(&p.status).unwrap());
        let p = plan(&j, &[], now, BACKOFF_BASE, &HashSet::new());
        let c = cond(&p.status, "Complete").expect("complete");
        assert_eq!(c.reason.as_deref(), Some("SuccessPolicy"));
    }

    #[test]
    fn indexes_back_off_and_fail_on_their_own() {
        let now = rkube_client::now();
        let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "backoffLimitPerIndex": 1, "backoffLimit": 2147483647,
            "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [7]}}]}});
        let j = job(
            spec.clone(),
            json!({"startTime": now, "completedIndexes": "0", "succeeded": 1}),
        );
        // Index 1 failed once (its first failure, long ago): retried, its count carried on.
        let pods = [
            ended("a", "Failed", 1, 0, 1),
            pod("r2", "Running", Some(2), true),
        ];
        let p = plan(&j, &pods, now, Duration::ZERO, &HashSet::new());
        assert_eq!(p.create, [Some(1)]);
        assert_eq!(p.index_failures.get(&1), Some(&1));
        assert_eq!(p.status.failed_indexes.as_deref(), Some(""));
        // Its second failure passes the limit: index 1 failed, not retried.
        let pods = [
            ended("a", "Failed", 1, 0, 1),
            ended("b", "Failed", 1, 1, 1),
            pod("r2", "Running", Some(2), true),
        ];
        let p = plan(&j, &pods, now, Duration::ZERO, &HashSet::new());
        assert!(p.create.is_empty());
        assert_eq!(p.status.failed_indexes.as_deref(), Some("1"));
        assert!(
            cond(&p.status, "FailureTarget").is_none(),
            "index 2 still runs"
        );
        // Index 2 ends by FailIndex at its first failure: every index done, some failed.
        let pods = [
            ended("a", "Failed", 1, 0, 1),
            ended("b", "Failed", 1, 1, 1),
            ended("c", "Failed", 2, 0, 7),
        ];
        let p = plan(&j, &pods, now, Duration::ZERO, &HashSet::new());
        assert_eq!(p.status.failed_indexes.as_deref(), Some("1,2"));
        let c = cond(&p.status, "Failed").expect("failed");
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some("FailedIndexes"), Some("Job has failed indexes"))
        );
        // maxFailedIndexes stops the Job as soon as it is passed.
        let mut strict = spec;
        strict["maxFailedIndexes"] = json!(0);
        let j = job(strict, json!({"startTime": now}));
        let pods = [
            ended("c", "Failed", 2, 0, 7),
            pod("r0", "Running", Some(0), true),
        ];
        let p = plan(&j, &pods, now, Duration::ZERO, &HashSet::new());
        let c = cond(&p.status, "FailureTarget").expect("failing");
        assert_eq!(c.reason.as_deref(), Some("MaxFailedIndexesExceeded"));
        assert_eq!(p.delete.len(), 1);
    }

    #[test]
    fn replacement_waits_for_terminating_pods_when_asked() {
        let now = rkube_client::now();
        let mut gone = (*pod("t", "Running", None, true)).clone();
        gone.metadata.deletion_timestamp = Some(Time(now));
        let pods = [Arc::new(gone), pod("r", "Running", None, true)];
        let spec = |policy: &str| json!({"completions": 4, "parallelism": 2, "podReplacementPolicy": policy});
        let j = job(spec("TerminatingOrFailed"), json!({"startTime": now}));
        assert_eq!(
            plan(&j, &pods, now, Duration::ZERO, &HashSet::new())
                .create
                .len(),
            1
        );
        let j = job(spec("Failed"), json!({"startTime": now}));
        let p = plan(&j, &pods, now, Duration::ZERO, &HashSet::new());
        assert!(
            p.create.is_empty(),
            "the terminating pod still holds its place"
        );
        assert_eq!(p.status.terminating, Some(1));
    }
}
