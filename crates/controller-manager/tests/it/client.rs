//! rkube-client's Reflector and leader election against a real apiserver (here because this
//! test binary already runs one): resume after an apiserver restart without a re-list, the
//! bookmark scenario (an idle filtered watch re-lists without bookmarks and not with them),
//! and two leader-elected controller-managers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use rkube_client::reflector::Options;
use rkube_client::{Api, Informer, ListParams, Patch, Stats};
use rkube_daemon::ShutdownToken;
use serde_json::json;

use crate::harness::{deployment, live_pods, wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap()
}

fn n(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_resumes_after_apiserver_restart_without_relisting() {
    let mut env = Env::start().await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("a", "n1")).await.unwrap();
    let stop = ShutdownToken::new();
    let opts = Options {
        min_watch_timeout: Duration::from_secs(300),
        ..Default::default()
    };
    let inf = Informer::with_options(Api::<Pod>::all(&env.client), ListParams::default(), opts);
    let stats: Arc<Stats> = inf.stats();
    let store = inf.spawn(stop.clone());
    store.wait_synced().await;
    pods.create(&pod("b", "n1")).await.unwrap();
    wait_for("b in the cache", T, || async {
        store.get("default/b").map(|_| ())
    })
    .await;

    env.restart_apiserver().await;
    pods.create(&pod("c", "n1")).await.unwrap();
    wait_for("c in the cache after the restart", T, || async {
        store.get("default/c").map(|_| ())
    })
    .await;
    assert_eq!(n(&stats.lists), 1, "only the initial list");
    assert_eq!(n(&stats.relists), 0);
    assert!(
        n(&stats.watches) >= 2,
        "the watch was re-opened: {}",
        n(&stats.watches)
    );
    assert_eq!(store.len(), 3);
    stop.cancel();
}

/// An informer on an idle node's pods (`spec.nodeName=idle`) while other pods churn, on an
/// apiserver whose history window is shorter than a watch's lifetime.
async fn idle_watch(
    bookmarks: bool,
) -> (
    Env,
    ShutdownToken,
    Arc<Stats>,
    Arc<std::sync::Mutex<String>>,
) {
    let env = Env::start_with(|c| {
        // Longer than the 2 s between a watch's last bookmark and its deadline, shorter than
        // the watch timeouts (3-6 s): a watch without bookmarks always falls out of history.
        c.cache.history_window = Duration::from_secs(3);
        c.cache.min_history = 10;
        c.cache.bookmark_interval = Duration::from_millis(500);
    })
    .await;
    let stop = ShutdownToken::new();
    let opts = Options {
        min_watch_timeout: Duration::from_secs(3),
        bookmarks,
        ..Default::default()
    };
    let inf = Informer::with_options(
        Api::<Pod>::all(&env.client),
        ListParams::default().fields("spec.nodeName=idle"),
        opts,
    );
    let stats = inf.stats();
    let rv = inf.last_rv();
    inf.spawn(stop.clone()).wait_synced().await;
    (env, stop, stats, rv)
}

/// Creates a pod on another node per poll until `done`.
async fn churn_until(env: &Env, what: &str, done: impl Fn() -> bool) {
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let mut i = 0;
    wait_for(what, T, || {
        i += 1;
        let pods = pods.clone();
        let finished = done();
        async move {
            pods.create(&pod(&format!("busy-{i}"), "busy"))
                .await
                .unwrap();
            finished.then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_filtered_watch_with_bookmarks_never_relists() {
    let (env, stop, stats, rv) = idle_watch(true).await;
    let first: u64 = rv.lock().unwrap().parse().expect("list RV");
    // Three watches over a churning history that expires behind them.
    churn_until(&env, "three watches", || n(&stats.watches) >= 3).await;
    assert_eq!(
        n(&stats.relists),
        0,
        "bookmarks kept the idle watch's resourceVersion fresh: {stats:?}"
    );
    assert!(n(&stats.bookmarks) >= 1);
    assert_eq!(n(&stats.events), 0, "nothing happened on the idle node");
    let last: u64 = rv.lock().unwrap().parse().unwrap();
    assert!(last > first, "bookmarks advanced the RV: {first} -> {last}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_filtered_watch_without_bookmarks_relists_exactly_once_per_expiry() {
    let (env, stop, stats, _) = idle_watch(false).await;
    churn_until(&env, "a re-list", || n(&stats.relists) >= 1).await;
    // Quiet again: the re-listed RV is current, so later watches resume without listing.
    let w = n(&stats.watches);
    wait_for("two more watches", T, || async {
        (n(&stats.watches) >= w + 2).then_some(())
    })
    .await;
    assert_eq!(n(&stats.relists), 1, "{stats:?}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_acts_and_a_standby_takes_over_after_a_crash() {
    let env = Env::start().await;
    let cfg = |id: &str| {
        let mut c = env.cm_config();
        let mut s = rkube_client::leader::Settings::new("kube-controller-manager");
        s.identity = id.into();
        s.lease_duration = Duration::from_secs(3);
        s.renew_deadline = Duration::from_secs(2);
        s.retry_period = Duration::from_millis(200);
        c.leader = Some(s);
        c
    };
    let leases: Api<Lease> = Api::namespaced(&env.client, "kube-system");
    let holder = || async {
        leases
            .get_opt("kube-controller-manager")
            .await
            .ok()??
            .spec?
            .holder_identity
            .filter(|h| !h.is_empty())
    };
    // a starts first and leads; b waits.
    let (a_stop, a_addr) = env.start_cm(cfg("a")).await;
    wait_for("a holds the lease", T, || async {
        (holder().await.as_deref() == Some("a")).then_some(())
    })
    .await;
    let (b_stop, b_addr) = env.spawn_cm(cfg("b")).await;
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("le", 2, "nginx", 1, 0))
        .await
        .unwrap();
    wait_for("2 pods", T, || async {
        (live_pods(&env.client, "default", "app=le").await.len() == 2).then_some(())
    })
    .await;
    let http = reqwest::Client::new();
    let ready = |addr: String| {
        let http = http.clone();
        async move {
            http.get(format!("{addr}/readyz"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(ready(a_addr.clone()).await, 200);
    assert_ne!(
        ready(b_addr.clone()).await,
        200,
        "the standby runs no controllers"
    );
    assert_eq!(holder().await.as_deref(), Some("a"));

    // a crashes without releasing the lease: b takes over within the lease duration.
    a_stop.cancel_without_release();
    let t0 = tokio::time::Instant::now();
    wait_for("b holds the lease", T, || async {
        (holder().await.as_deref() == Some("b")).then_some(())
    })
    .await;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(3) + Duration::from_secs(2),
        "takeover took {took:?}"
    );
    deploys
        .patch("le", &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    wait_for("b acts: 3 pods", T, || async {
        (live_pods(&env.client, "default", "app=le").await.len() == 3).then_some(())
    })
    .await;
    b_stop.cancel();
}
