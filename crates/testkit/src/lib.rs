//! Test support for the components' tests: rkube-store and rkube-apiserver in-process on
//! 127.0.0.1:0 (`Env`), a fake kubelet that marks pods Running and Ready, a deadline-bounded
//! `wait_for`, and fixtures. Components start their own process logic on top.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkube_client::{Api, Client, ListParams, Patch};
use rkube_daemon::ShutdownToken;
use serde_json::json;

pub struct Env {
    pub client: Client,
    pub base: String,
    pub storage_url: String,
    api_stop: ShutdownToken,
    store_stop: ShutdownToken,
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.api_stop.cancel();
        self.store_stop.cancel();
    }
}

pub async fn start_apiserver(mut cfg: rkube_apiserver::Config) -> (String, ShutdownToken) {
    cfg.storage_timeout = Duration::from_secs(20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = ShutdownToken::new();
    tokio::spawn(rkube_apiserver::run(cfg, listener, stop.clone()));
    wait_ready(&base).await;
    (base, stop)
}

/// Waits until `<base>/readyz` answers 200.
pub async fn wait_ready(base: &str) {
    let http = reqwest::Client::new();
    wait_for(&format!("{base} ready"), Duration::from_secs(30), || {
        let http = http.clone();
        let url = format!("{base}/readyz");
        async move {
            http.get(url)
                .send()
                .await
                .ok()
                .filter(|r| r.status() == 200)
                .map(|_| ())
        }
    })
    .await;
}

/// The admission plugins that need a controller-manager's objects, off in a cluster that runs
/// none (as envtest does): ServiceAccount, which refuses pods until the namespace's `default`
/// account exists. A test's tweak may turn it back on.
pub fn without_controllers() -> Vec<String> {
    vec!["ServiceAccount".into()]
}

impl Env {
    pub async fn start() -> Env {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut rkube_apiserver::Config)) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let storage_url = format!("http://{}", listener.local_addr().unwrap());
        let mut cfg = rkube_store::Config::new(dir.path().to_path_buf());
        cfg.watch_progress_notify_interval = Duration::from_millis(500);
        let store_stop = ShutdownToken::new();
        tokio::spawn(rkube_store::run(cfg, listener, store_stop.clone()));
        let mut acfg = rkube_apiserver::Config::new(vec![storage_url.clone()]);
        acfg.cache.bookmark_interval = Duration::from_secs(1);
        acfg.disable_admission_plugins = without_controllers();
        tweak(&mut acfg);
        let (base, api_stop) = start_apiserver(acfg).await;
        Env {
            client: Client::for_server(&base),
            base,
            storage_url,
            api_stop,
            store_stop,
            _dir: dir,
        }
    }

    /// Stops the apiserver and starts a new one (empty watch cache) on the same address.
    pub async fn restart_apiserver(&mut self) {
        self.api_stop.cancel();
        let addr = self.base.trim_start_matches("http://").to_string();
        let listener = loop {
            // The old server releases its port when its accept loop ends.
            match tokio::net::TcpListener::bind(&addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await, // polling interval
            }
        };
        let mut cfg = rkube_apiserver::Config::new(vec![self.storage_url.clone()]);
        cfg.cache.bookmark_interval = Duration::from_secs(1);
        cfg.storage_timeout = Duration::from_secs(20);
        cfg.disable_admission_plugins = without_controllers();
        let stop = ShutdownToken::new();
        tokio::spawn(rkube_apiserver::run(cfg, listener, stop.clone()));
        self.api_stop = stop;
        wait_ready(&self.base).await;
    }

    /// A fake kubelet: every pod in `ns` that is not yet Running gets phase Running and
    /// Ready=True, until the token is cancelled.
    pub fn fake_kubelet(&self, ns: &str) -> ShutdownToken {
        let stop = ShutdownToken::new();
        let api: Api<Pod> = Api::namespaced(&self.client, ns);
        let s = stop.clone();
        tokio::spawn(async move {
            while !s.is_cancelled() {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for p in list.items {
                        let running =
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                        if running || p.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let now = rkube_client::now().to_rfc3339();
                        let patch = json!({"status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
                        let _ = api
                            .patch_status(p.metadata.name.as_deref().unwrap(), &Patch::Merge(patch))
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
            }
        });
        stop
    }
}

pub use rkube_client::wait::wait_for;

/// Pods in `ns` matching `labels` that are not being deleted.
pub async fn live_pods(client: &Client, ns: &str, labels: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    api.list(&ListParams::default().labels(labels))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub fn deployment(
    name: &str,
    replicas: i32,
    image: &str,
    surge: i32,
    unavailable: i32,
) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": 80}]}]}
            }
        }
    }))
    .unwrap()
}

/// The first Event in `ns` that satisfies `pred`, waiting for it.
pub async fn find_event(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&k8s_openapi::api::core::v1::Event) -> bool,
) -> k8s_openapi::api::core::v1::Event {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, ns);
    let pred = &pred;
    wait_for(what, Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(pred)
        }
    })
    .await
}
