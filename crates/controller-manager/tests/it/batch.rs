//! The Job and CronJob controllers on a real store and apiserver, with the test playing the
//! kubelet (pod phases written by hand): every finished pod counted exactly once through the
//! tracking finalizer (also across a controller-manager restart), completion, failure past
//! the backoff limit, a CronJob firing when its clock reaches the schedule, and the pod
//! collector trimming finished pods and removing orphans.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use rkube_client::{Api, ListParams, Patch};
use serde_json::json;

use crate::harness::{wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);
const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

fn job(name: &str, spec: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn pods_of(api: &Api<Pod>, job: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap()
        .items
}

/// Ends a pod as a kubelet would: its terminal phase.
async fn finish(api: &Api<Pod>, p: &Pod, phase: &str) {
    let patch = json!({"status": {"phase": phase}});
    api.patch_status(p.metadata.name.as_deref().unwrap(), &Patch::Merge(patch))
        .await
        .unwrap();
}

fn has_condition(j: &Job, t: &str) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_count_each_pod_once_and_finish() {
    let env = Env::start().await;
    let (cm, _) = env.start_cm(env.cm_config()).await;
    let jobs: Api<Job> = Api::namespaced(&env.client, "default");
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    jobs.create(&job("work", json!({"completions": 3, "parallelism": 2})))
        .await
        .unwrap();
    let first = wait_for("two pods, each with the tracking finalizer", T, || async {
        let ps = pods_of(&pods, "work").await;
        (ps.len() == 2
            && ps.iter().all(|p| {
                p.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
            }))
        .then_some(ps)
    })
    .await;
    finish(&pods, &first[0], "Succeeded").await;
    wait_for("one success counted, a third pod started", T, || async {
        let j = jobs.get("work").await.ok()?;
        let ps = pods_of(&pods, "work").await;
        (j.status?.succeeded == Some(1) && ps.len() == 3).then_some(())
    })
    .await;
    // A restart between finishing pods must not count anything twice (one controller-manager
    // at a time, as leader election ensures).
    cm.stop().await;
    for p in pods_of(&pods, "work").await {
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded") {
            finish(&pods, &p, "Succeeded").await;
        }
    }
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let done = wait_for("the Job complete", T, || async {
        let j = jobs.get("work").await.ok()?;
        has_condition(&j, "Complete").then_some(j)
    })
    .await;
    let st = done.status.unwrap();
    assert_eq!(
        (st.succeeded, st.failed, st.active),
        (Some(3), Some(0), Some(0))
    );
    assert!(has_condition(
        &jobs.get("work").await.unwrap(),
        "SuccessCriteriaMet"
    ));
    assert!(st.completion_time.is_some() && st.start_time.is_some());
    wait_for("every finalizer released", T, || async {
        pods_of(&pods, "work")
            .await
            .iter()
            .all(|p| p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()))
            .then_some(())
    })
    .await;
    assert_eq!(
        pods_of(&pods, "work").await.len(),
        3,
        "no pod after completion"
    );

    // backoffLimit 0: the first failure fails the Job.
    jobs.create(&job("fragile", json!({"backoffLimit": 0})))
        .await
        .unwrap();
    let p = wait_for("its pod", T, || async {
        pods_of(&pods, "fragile").await.into_iter().next()
    })
    .await;
    finish(&pods, &p, "Failed").await;
    let failed = wait_for("the Job failed", T, || async {
        let j = jobs.get("fragile").await.ok()?;
        has_condition(&j, "Failed").then_some(j)
    })
    .await;
    let c = failed.status.as_ref().unwrap().conditions.as_ref().unwrap();
    let f = c.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(f.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(failed.status.unwrap().failed, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_fires_when_its_clock_reaches_the_schedule() {
    let env = Env::start().await;
    let shift = Arc::new(AtomicI64::new(0));
    let mut cfg = env.cm_config();
    let s = shift.clone();
    cfg.clock = Arc::new(move || {
        rkube_client::now() + k8s_openapi::chrono::Duration::seconds(s.load(Ordering::SeqCst))
    });
    let (_cm, _) = env.start_cm(cfg).await;
    let cronjobs: Api<CronJob> = Api::namespaced(&env.client, "default");
    let jobs: Api<Job> = Api::namespaced(&env.client, "default");
    // Yearly, at New Year in Tokyo.
    let cj: CronJob = serde_json::from_value(json!({"metadata": {"name": "newyear"}, "spec": {
        "schedule": "@yearly", "timeZone": "Asia/Tokyo",
        "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
            "containers": [{"name": "c", "image": "busybox"}]}}}}}}))
    .unwrap();
    let created = cronjobs.create(&cj).await.unwrap();
    let t0 = created.metadata.creation_timestamp.unwrap().0;
    // The next New Year in Tokyo, as UTC.
    let tokyo = k8s_openapi::chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let local = t0.with_timezone(&tokyo);
    let new_year = k8s_openapi::chrono::NaiveDate::from_ymd_opt(
        k8s_openapi::chrono::Datelike::year(&local) + 1,
        1,
        1,
    )
    .unwrap()
    .and_hms_opt(0, 0, 0)
    .unwrap()
    .and_local_timezone(tokyo)
    .unwrap()
    .with_timezone(&k8s_openapi::chrono::Utc);
    assert!(jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    // Move the clock past it; any change makes the controller look again.
    shift.store((new_year - t0).num_seconds() + 30, Ordering::SeqCst);
    cronjobs
        .patch(
            "newyear",
            &Patch::Merge(json!({"metadata": {"labels": {"nudge": "1"}}})),
        )
        .await
        .unwrap();
    let j = wait_for("the New Year job", T, || async {
        jobs.list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        j.metadata.name.unwrap(),
        format!("newyear-{}", new_year.timestamp() / 60)
    );
    assert!(
        j.metadata.annotations.unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"]
            .ends_with("T00:00:00+09:00")
    );
    let st = wait_for("the status", T, || async {
        let c = cronjobs.get("newyear").await.ok()?;
        c.status.filter(|s| s.last_schedule_time.is_some())
    })
    .await;
    assert_eq!(st.last_schedule_time.unwrap().0, new_year);
    assert_eq!(st.active.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_collector_trims_finished_pods_and_removes_orphans() {
    let env = Env::start().await;
    let mut cfg = env.cm_config();
    cfg.terminated_pod_gc_threshold = 2;
    cfg.podgc_period = Duration::from_millis(100);
    cfg.podgc_quarantine = Duration::from_millis(300);
    let (_cm, _) = env.start_cm(cfg).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let mk = |name: &str, node: &str| -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"nodeName": node,
            "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .unwrap()
    };
    // Three finished pods on a node that exists (a Node object only, no kubelet).
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(&env.client);
    nodes
        .create(&serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    for name in ["first", "second", "third"] {
        let p = pods.create(&mk(name, "n1")).await.unwrap();
        finish(&pods, &p, "Succeeded").await;
    }
    // One running pod on a node that never existed.
    pods.create(&mk("stray", "ghost")).await.unwrap();
    wait_for("the oldest finished pod and the orphan gone", T, || async {
        let names: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        (names.len() == 2
            && !names.contains(&"stray".to_string())
            && names.contains(&"third".to_string()))
        .then_some(())
    })
    .await;
}
