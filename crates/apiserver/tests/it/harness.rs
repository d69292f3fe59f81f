//! Test clusters: storage (rkube-store in-process, or a real etcd 3.4 child process) plus an
//! in-process rkube-apiserver on 127.0.0.1:0, and small HTTP helpers.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use rkube_daemon::port::free_port;
use rkube_daemon::ShutdownToken;
use serde_json::Value;
use tokio::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Rkube,
    Etcd,
}

/// A storage server for a test; stopped when dropped.
pub enum Storage {
    Rkube {
        _dir: tempfile::TempDir,
        shutdown: ShutdownToken,
    },
    Etcd {
        _dir: tempfile::TempDir,
        _child: tokio::process::Child,
    },
}

pub struct Cluster {
    pub base: String,
    pub http: reqwest::Client,
    pub storage_url: String,
    api_shutdown: ShutdownToken,
    storage: Storage,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Storage::Rkube { shutdown, .. } = self {
            shutdown.cancel();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.api_shutdown.cancel();
        if let Storage::Rkube { shutdown, .. } = &self.storage {
            shutdown.cancel();
        }
    }
}

/// Runs an apiserver in-process on 127.0.0.1:0 and waits until `/readyz` answers 200.
async fn start_apiserver(cfg: rkube_apiserver::Config) -> (String, ShutdownToken) {
    start_apiserver_as(cfg, None).await
}

/// The same, polling `/readyz` with a bearer token.
pub async fn start_apiserver_as(
    mut cfg: rkube_apiserver::Config,
    token: Option<&str>,
) -> (String, ShutdownToken) {
    cfg.storage_timeout = Duration::from_secs(60);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = ShutdownToken::new();
    let running = tokio::spawn(rkube_apiserver::run(cfg, listener, stop.clone()));
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let mut probe = http.get(format!("{base}/readyz"));
        if let Some(t) = token {
            probe = probe.bearer_auth(t);
        }
        if let Ok(r) = probe.send().await {
            if r.status() == 200 {
                return (base, stop);
            }
        }
        if running.is_finished() {
            panic!("apiserver stopped at startup: {:?}", running.await);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "apiserver not ready within 90s (a busy machine starting etcd)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
}

pub fn etcd_bin() -> Option<String> {
    if std::env::var("RKUBE_SKIP_ETCD").is_ok_and(|v| v == "1") {
        return None;
    }
    let bin = std::env::var("RKUBE_ETCD_BIN").unwrap_or_else(|_| "etcd".into());
    let found = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "etcd not found ({bin}); install etcd-server (scripts/test.sh does) or set RKUBE_SKIP_ETCD=1");
    Some(bin)
}

pub async fn start_storage(backend: Backend) -> Option<(Storage, String)> {
    match backend {
        Backend::Rkube => {
            let dir = tempfile::tempdir().unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr: SocketAddr = listener.local_addr().unwrap();
            let mut cfg = rkube_store::Config::new(dir.path().to_path_buf());
            cfg.watch_progress_notify_interval = Duration::from_millis(500);
            let shutdown = ShutdownToken::new();
            tokio::spawn(rkube_store::run(cfg, listener, shutdown.clone()));
            Some((
                Storage::Rkube {
                    _dir: dir,
                    shutdown,
                },
                format!("http://{addr}"),
            ))
        }
        Backend::Etcd => {
            let bin = etcd_bin()?;
            let dir = tempfile::tempdir().unwrap();
            let (port, peer) = (free_port(), free_port());
            let url = format!("http://127.0.0.1:{port}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new(bin)
                .args(["--data-dir", dir.path().to_str().unwrap()])
                .args([
                    "--listen-client-urls",
                    &url,
                    "--advertise-client-urls",
                    &url,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                ])
                .args([
                    "--initial-cluster",
                    &format!("default={peer_url}"),
                    "--name",
                    "default",
                ])
                .args(["--experimental-watch-progress-notify-interval", "500ms"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("start etcd");
            Some((
                Storage::Etcd {
                    _dir: dir,
                    _child: child,
                },
                url,
            ))
        }
    }
}

impl Cluster {
    /// `None` when the backend is skipped (etcd with RKUBE_SKIP_ETCD=1).
    pub async fn start(
        backend: Backend,
        tweak: impl FnOnce(&mut rkube_apiserver::Config),
    ) -> Option<Cluster> {
        let (storage, storage_url) = start_storage(backend).await?;
        let mut cfg = rkube_apiserver::Config::new(vec![storage_url.clone()]);
        // gRPC to both backends (`auto` would take rkube-store's gateway; the e2e suite and
        // the JSON cases in watch.rs run that).
        cfg.etcd_transport = rkube_apiserver::Transport::Grpc;
        cfg.cache.bookmark_interval = Duration::from_secs(1);
        cfg.disable_admission_plugins = without_controllers();
        tweak(&mut cfg);
        let (base, api_shutdown) = start_apiserver(cfg).await;
        Some(Cluster {
            base,
            http: reqwest::Client::new(),
            storage_url,
            api_shutdown,
            storage,
        })
    }

    /// Another apiserver on this cluster's storage, configured by `f`, ready once `/readyz`
    /// answers `token`'s bearer.
    pub async fn apiserver_with(
        &self,
        f: impl FnOnce(&mut rkube_apiserver::Config),
        token: Option<&str>,
    ) -> (String, ShutdownToken) {
        let mut cfg = rkube_apiserver::Config::new(vec![self.storage_url.clone()]);
        cfg.disable_admission_plugins = without_controllers();
        f(&mut cfg);
        start_apiserver_as(cfg, token).await
    }

    /// Another apiserver on this cluster's storage (HA, or a restart with an empty cache);
    /// cancel the token to stop it.
    pub async fn second_apiserver(&self) -> (String, ShutdownToken) {
        let mut cfg = rkube_apiserver::Config::new(vec![self.storage_url.clone()]);
        cfg.disable_admission_plugins = without_controllers();
        start_apiserver(cfg).await
    }

    pub async fn req(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(m, format!("{}{path}", self.base));
        if let Some(b) = body {
            r = r
                .header("content-type", content_type)
                .body(serde_json::to_vec(b).unwrap());
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.req("GET", path, None, "").await
    }
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.req("POST", path, Some(body), "application/json").await
    }
    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.req("PUT", path, Some(body), "application/json").await
    }
    pub async fn merge_patch(&self, path: &str, body: &Value) -> (u16, Value) {
        self.req("PATCH", path, Some(body), "application/merge-patch+json")
            .await
    }
    pub async fn delete(&self, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.req("DELETE", path, body, "application/json").await
    }

    /// Opens a watch; events are read with `Watch::next`.
    pub async fn watch(&self, path: &str) -> Watch {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        Watch {
            status: resp.status().as_u16(),
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
        }
    }
}

pub struct Watch {
    pub status: u16,
    body: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
}

impl Watch {
    /// The next event, or `None` if the stream ended or `timeout` passed.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).expect("event JSON"));
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Skips events until one satisfies `pred`, within `timeout`.
    pub async fn until(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(ev) if pred(&ev) => return ev,
                Some(_) => continue,
                None => panic!("no matching watch event within {timeout:?}"),
            }
        }
    }
}

pub fn pod(name: &str, labels: Value) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.14.2"}]}
    })
}

pub fn rv_of(v: &Value) -> u64 {
    v.pointer("/metadata/resourceVersion")
        .and_then(|r| r.as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Defines a case run against rkube-store and against a real etcd 3.4.
#[macro_export]
macro_rules! cases {
    ($($name:ident, $rkube:ident, $etcd:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $rkube() {
            if let Some(c) = $crate::harness::Cluster::start($crate::harness::Backend::Rkube, |_| {}).await {
                $name(&c).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $etcd() {
            if let Some(c) = $crate::harness::Cluster::start($crate::harness::Backend::Etcd, |_| {}).await {
                $name(&c).await;
            }
        }
    )*};
}

/// The admission plugins that need a controller-manager's objects, off in these clusters that
/// run none (as envtest does): ServiceAccount refuses pods until the namespace's `default`
/// account exists. A test's tweak may turn it back on.
pub fn without_controllers() -> Vec<String> {
    vec!["ServiceAccount".into()]
}
