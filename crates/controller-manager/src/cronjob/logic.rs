//! The CronJob controller's decisions, without I/O (upstream's `syncCronJob`): the active list
//! kept to running Jobs, the most recent missed schedule in the CronJob's time zone, whether
//! to start a Job for it (`startingDeadlineSeconds`, `concurrencyPolicy`), which Jobs to
//! delete (Replace, history limits) and when to look again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::chrono::{DateTime, Offset, TimeZone, Utc};
use rkube_api::cron::Schedule;

use crate::job::logic::finished;

pub const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Beyond this many missed start times, upstream warns (and still starts the latest).
pub const MAX_MISSED: usize = 100;

pub use crate::objects::Event;

#[derive(Debug, Default)]
pub struct Plan {
    pub status: CronJobStatus,
    pub create: Option<Job>,
    /// Jobs to delete (in the background): replaced, or past the history limits.
    pub delete: Vec<Arc<Job>>,
    pub events: Vec<Event>,
    pub requeue: Option<Duration>,
}

/// The zone's UTC offset (seconds) at an instant; `None` for a zone the database lacks.
pub fn zone(tz: Option<&str>) -> Option<Box<dyn Fn(i64) -> i64 + Send + Sync>> {
    match tz {
        None | Some("UTC" | "Etc/UTC") => Some(Box::new(|_| 0)),
        Some(name) => {
            let tz: chrono_tz::Tz = name.parse().ok()?;
            Some(Box::new(move |t| {
                tz.offset_from_utc_datetime(
                    &DateTime::from_timestamp(t, 0)
                        .unwrap_or_default()
                        .naive_utc(),
                )
                .fix()
                .local_minus_utc() as i64
            }))
        }
    }
}

fn ev(warning: bool, reason: &'static str, message: String) -> Event {
    Event {
        warning,
        reason,
        message,
    }
}

fn job_ref(j: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: j.metadata.name.clone(),
        namespace: j.metadata.namespace.clone(),
        uid: j.metadata.uid.clone(),
        resource_version: j.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// The Job started for `scheduled`: named `<cronjob>-<minutes since the epoch>`.
pub fn job_for(cj: &CronJob, scheduled: DateTime<Utc>, offset: i64) -> Job {
    let name = cj.metadata.name.clone().unwrap_or_default();
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    let local = scheduled.with_timezone(
        &k8s_openapi::chrono::FixedOffset::east_opt(offset as i32).unwrap_or(Utc.fix()),
    );
    annotations.insert(SCHEDULED_AT.into(), local.to_rfc3339());
    Job {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{}", scheduled.timestamp().div_euclid(60))),
            namespace: cj.metadata.namespace.clone(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![crate::objects::controller_of(
                "batch/v1",
                "CronJob",
                &cj.metadata,
            )]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    }
}

fn secs(d: i64) -> k8s_openapi::chrono::Duration {
    k8s_openapi::chrono::Duration::seconds(d)
}

/// The plan for `cj` over the Jobs it controls (`jobs`) at `now`.
pub fn plan(cj: &CronJob, jobs: &[Arc<Job>], now: DateTime<Utc>) -> Plan {
    let spec = cj.spec.clone().unwrap_or_default();
    let mut st = cj.status.clone().unwrap_or_default();
    let mut plan = Plan::default();
    let name = |j: &Job| j.metadata.name.clone().unwrap_or_default();

    // 1. The active list: Jobs that still run. Finished ones are seen once.
    let was_active: Vec<String> = st
        .active
        .iter()
        .flatten()
        .filter_map(|r| r.name.clone())
        .collect();
    let mut active = Vec::new();
    for j in jobs {
        match finished(j) {
            None => {
                // A running Job it did not start (`kubectl create job --from`): taken into
                // the active list, with upstream's warning. Its own Jobs carry their schedule
                // (a cached status may not list one just created yet).
                let scheduled = j
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(SCHEDULED_AT));
                if !was_active.contains(&name(j)) && !scheduled {
                    plan.events.push(ev(
                        true,
                        "UnexpectedJob",
                        format!(
                            "Saw a job that the controller did not create or forgot: {}",
                            name(j)
                        ),
                    ));
                }
                active.push(job_ref(j))
            }
            Some(cond) => {
                if was_active.contains(&name(j)) {
                    plan.events.push(ev(
                        false,
                        "SawCompletedJob",
                        format!("Saw completed job: {}, condition: {cond}", name(j)),
                    ));
                }
                if cond == "Complete" {
                    let done = j.status.as_ref().and_then(|s| s.completion_time.clone());
                    if done.as_ref().map(|t| t.0) > st.last_successful_time.as_ref().map(|t| t.0) {
                        st.last_successful_time = done;
                    }
                }
            }
        }
    }
    for gone in was_active
        .iter()
        .filter(|n| !jobs.iter().any(|j| name(j) == **n))
    {
        plan.events.push(ev(
            false,
            "MissingJob",
            format!("Active job went missing: {gone}"),
        ));
    }
    active.sort_by(|a, b| a.name.cmp(&b.name));
    st.active = (!active.is_empty()).then_some(active.clone());

    // 2. History limits: the oldest finished Jobs beyond them go.
    for (cond, limit) in [
        ("Complete", spec.successful_jobs_history_limit.unwrap_or(3)),
        ("Failed", spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let mut done: Vec<&Arc<Job>> = jobs
            .iter()
            .filter(|j| finished(j) == Some(cond) && j.metadata.deletion_timestamp.is_none())
            .collect();
        done.sort_by_key(|j| {
            let s = j.status.as_ref();
            (
                s.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
                j.metadata.creation_timestamp.as_ref().map(|t| t.0),
                name(j),
            )
        });
        let excess = done.len().saturating_sub(limit.max(0) as usize);
        plan.delete.extend(done.into_iter().take(excess).cloned());
    }

    if cj.metadata.deletion_timestamp.is_some() {
        plan.status = st;
        return plan;
    }
    let Some(offset) = zone(spec.time_zone.as_deref()) else {
        plan.events.push(ev(
            true,
            "UnknownTimeZone",
            format!(
                "invalid timeZone: {:?}: unknown time zone {}",
                spec.time_zone.clone().unwrap_or_default(),
                spec.time_zone.clone().unwrap_or_default()
            ),
        ));
        plan.status = st;
        return plan;
    };
    if spec.suspend == Some(true) {
        plan.status = st;
        return plan;
    }
    let schedule = match Schedule::parse(&spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            plan.events.push(ev(
                true,
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", spec.schedule),
            ));
            plan.status = st;
            return plan;
        }
    };

    // 3. The most recent start time that was missed.
    let created = cj
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let mut earliest = st
        .last_schedule_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(created);
    if let Some(d) = spec.starting_deadline_seconds {
        earliest = earliest.max(now - secs(d));
    }
    let (last, missed) = schedule.last_between(
        earliest.timestamp(),
        now.timestamp(),
        MAX_MISSED + 1,
        &*offset,
    );
    let next = schedule
        .next_after_in(now.timestamp(), 5 * 366 * 86_400, &*offset)
        .map(|t| {
            Duration::from_secs((t - now.timestamp()).max(0) as u64) + Duration::from_millis(100)
        });
    plan.requeue = next;
    let Some(scheduled) = last.and_then(|t| DateTime::from_timestamp(t, 0)) else {
        plan.status = st;
        return plan;
    };
    if missed > MAX_MISSED {
        plan.events.push(ev(
            true,
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into(),
        ));
    }
    if let Some(d) = spec.starting_deadline_seconds {
        if scheduled + secs(d) < now {
            plan.events.push(ev(
                true,
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    scheduled.to_rfc3339()
                ),
            ));
            plan.status = st;
            return plan;
        }
    }
    let job = job_for(cj, scheduled, offset(scheduled.timestamp()));
    if jobs.iter().any(|j| j.metadata.name == job.metadata.name) {
        // Already started for this time (an earlier status write may have been lost).
        if st
            .last_schedule_time
            .as_ref()
            .is_none_or(|t| t.0 < scheduled)
        {
            st.last_schedule_time = Some(Time(scheduled));
        }
        plan.status = st;
        return plan;
    }
    match spec.concurrency_policy.as_deref().unwrap_or("Allow") {
        "Forbid" if !active.is_empty() => {
            plan.status = st;
            return plan;
        }
        "Replace" => {
            for r in &active {
                if let Some(j) = jobs.iter().find(|j| j.metadata.name == r.name) {
                    if !plan.delete.iter().any(|d| Arc::ptr_eq(d, j)) {
                        plan.delete.push(j.clone());
                    }
                }
            }
            active.clear();
        }
        _ => {}
    }
    active.push(job_ref(&job));
    st.active = Some(active);
    st.last_schedule_time = Some(Time(scheduled));
    plan.create = Some(job);
    plan.status = st;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn cronjob(spec: serde_json::Value, status: serde_json::Value) -> CronJob {
        let mut spec = spec;
        spec["jobTemplate"] =
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"template": {}}});
        serde_json::from_value(
            json!({"metadata": {"name": "nightly", "namespace": "ns", "uid": "cu",
            "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn job(name: &str, cond: Option<&str>) -> Arc<Job> {
        let conds = cond
            .map(|c| json!([{"type": c, "status": "True"}]))
            .unwrap_or(json!([]));
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                "status": {"conditions": conds, "completionTime": "2026-01-01T01:00:00Z",
                    "startTime": format!("2026-01-01T00:{:02}:00Z", name.len())}}))
            .unwrap(),
        )
    }

    #[test]
    fn fires_for_the_latest_missed_time_once() {
        let cj = cronjob(json!({"schedule": "*/5 * * * *"}), json!({}));
        let now = at("2026-01-01T00:12:30Z");
        let p = plan(&cj, &[], now);
        let j = p.create.expect("a job");
        // 00:10 is the most recent start time: 29453770 minutes since the epoch.
        assert_eq!(j.metadata.name.as_deref(), Some("nightly-29453770"));
        assert_eq!(
            j.metadata.annotations.unwrap()[SCHEDULED_AT],
            "2026-01-01T00:10:00+00:00"
        );
        assert_eq!(j.metadata.labels.unwrap()["app"], "x");
        assert_eq!(
            p.status.last_schedule_time,
            Some(Time(at("2026-01-01T00:10:00Z")))
        );
        assert_eq!(p.status.active.unwrap().len(), 1);
        assert_eq!(
            p.requeue,
            Some(Duration::from_millis(150_100)),
            "until 00:15"
        );
        // Already started: nothing new.
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *"}),
            json!({"lastScheduleTime": "2026-01-01T00:10:00Z"}),
        );
        assert!(plan(&cj, &[job("nightly-29453770", None)], now)
            .create
            .is_none());
    }

    #[test]
    fn policies_deadlines_and_zones() {
        let now = at("2026-01-01T00:12:30Z");
        let running = job("nightly-29453765", None);
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid"}),
            json!({"lastScheduleTime": "2026-01-01T00:05:00Z", "active": [{"name": "nightly-29453765"}]}),
        );
        assert!(
            plan(&cj, std::slice::from_ref(&running), now)
                .create
                .is_none(),
            "Forbid waits"
        );
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *", "concurrencyPolicy": "Replace"}),
            json!({"lastScheduleTime": "2026-01-01T00:05:00Z", "active": [{"name": "nightly-29453765"}]}),
        );
        let p = plan(&cj, std::slice::from_ref(&running), now);
        assert!(p.create.is_some());
        assert_eq!(p.delete.len(), 1, "the running one replaced");
        assert_eq!(p.status.active.unwrap().len(), 1);
        // Missed by more than the deadline: not started; the deadline's window is all it looks at.
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *", "startingDeadlineSeconds": 60}),
            json!({}),
        );
        let p = plan(&cj, &[], now);
        assert!(p.create.is_none());
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *", "startingDeadlineSeconds": 200}),
            json!({}),
        );
        assert!(
            plan(&cj, &[], now).create.is_some(),
            "00:10 is within 200 s"
        );
        // Suspended: nothing.
        let cj = cronjob(
            json!({"schedule": "*/5 * * * *", "suspend": true}),
            json!({}),
        );
        assert!(plan(&cj, &[], now).create.is_none());
        // In a zone: 9:00 in Kolkata is 03:30Z.
        let cj = cronjob(
            json!({"schedule": "0 9 * * *", "timeZone": "Asia/Kolkata"}),
            json!({}),
        );
        let p = plan(&cj, &[], at("2026-01-01T03:31:00Z"));
        let j = p.create.expect("fired at 09:00 IST");
        assert_eq!(
            j.metadata.annotations.unwrap()[SCHEDULED_AT],
            "2026-01-01T09:00:00+05:30"
        );
        let cj = cronjob(
            json!({"schedule": "0 9 * * *", "timeZone": "Mars/Olympus"}),
            json!({}),
        );
        assert_eq!(plan(&cj, &[], now).events[0].reason, "UnknownTimeZone");
    }

    #[test]
    fn finished_jobs_leave_the_active_list_and_old_ones_go() {
        let now = at("2026-01-01T00:12:30Z");
        let cj = cronjob(
            json!({"schedule": "@hourly", "successfulJobsHistoryLimit": 1}),
            json!({"lastScheduleTime": "2026-01-01T00:00:00Z", "active": [{"name": "b"}, {"name": "gone"}]}),
        );
        let jobs = [
            job("a", Some("Complete")),
            job("bb", Some("Complete")),
            job("b", Some("Complete")),
            job("f", Some("Failed")),
            job("manual", None),
        ];
        let p = plan(&cj, &jobs, now);
        let active: Vec<String> = p
            .status
            .active
            .iter()
            .flatten()
            .filter_map(|r| r.name.clone())
            .collect();
        assert_eq!(
            active,
            ["manual"],
            "a running Job it did not start joins the list"
        );
        let reasons: Vec<&str> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["SawCompletedJob", "UnexpectedJob", "MissingJob"]);
        assert!(p.status.last_successful_time.is_some());
        let deleted: Vec<String> = p
            .delete
            .iter()
            .map(|j| j.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            deleted,
            ["a", "b"],
            "the two oldest successes beyond a limit of 1"
        );
    }
}
