//! Starts a store under test as a child process — `rkube-store` or a real etcd 3.4 — on free
//! loopback ports with a temporary data dir, waits for `GET /health`, and kills it on drop.
//! Also the small HTTP helpers the suites share: raw POSTs, streamed lines, and normalization
//! of the parts of a response that legitimately differ between servers (cluster and member IDs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use rkube_daemon::port::free_port;

/// How long a server may take to answer `/health`.
const START_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Rkube,
    Etcd,
}

pub struct Server {
    pub url: String,
    pub http: reqwest::Client,
    child: Child,
    dir: tempfile::TempDir,
}

fn etcd_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RKUBE_ETCD_BIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    })
}

impl Server {
    /// Starts a fresh server, or `None` when the etcd variant is skipped (`RKUBE_SKIP_ETCD=1`).
    /// A missing etcd binary fails the test: CI installs it.
    pub async fn start(kind: Kind) -> Option<Server> {
        let etcd = match kind {
            Kind::Rkube => None,
            Kind::Etcd => {
                if std::env::var("RKUBE_SKIP_ETCD").as_deref() == Ok("1") {
                    eprintln!("RKUBE_SKIP_ETCD=1: skipping the etcd variant");
                    return None;
                }
                Some(etcd_binary().unwrap_or_else(|| {
                    panic!(
                        "etcd binary not found on PATH (install etcd 3.4, e.g. `apt-get install \
                         etcd-server`, or set RKUBE_ETCD_BIN); set RKUBE_SKIP_ETCD=1 to skip the \
                         etcd variants"
                    )
                }))
            }
        };
        // A port picked as free may be taken before the child binds it: retry a few times.
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(kind, etcd.as_deref()).await {
                Ok(s) => return Some(s),
                Err(e) => last = e,
            }
        }
        panic!("{kind:?} did not become ready: {last}");
    }

    async fn try_start(kind: Kind, etcd: Option<&Path>) -> Result<Server, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let data = dir.path().join("data");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.path().join("log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = match etcd {
            None => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_rkube-store"));
                c.arg("--listen-client-urls")
                    .arg(&url)
                    .arg("--data-dir")
                    .arg(&data)
                    .arg("--watch-progress-notify-interval")
                    .arg("1s")
                    .env("RUST_LOG", "warn");
                c
            }
            Some(bin) => {
                let peer = format!("http://127.0.0.1:{}", free_port());
                let mut c = Command::new(bin);
                c.arg("--name")
                    .arg("default")
                    .arg("--data-dir")
                    .arg(&data)
                    .arg("--listen-client-urls")
                    .arg(&url)
                    .arg("--advertise-client-urls")
                    .arg(&url)
                    .arg("--listen-peer-urls")
                    .arg(&peer)
                    .arg("--initial-advertise-peer-urls")
                    .arg(&peer)
                    .arg("--initial-cluster")
                    .arg(format!("default={peer}"))
                    .arg("--experimental-watch-progress-notify-interval")
                    .arg("1s");
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let http = reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let mut server = Server {
            url,
            http,
            child,
            dir,
        };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "{kind:?} exited with {status}; log:\n{}",
                    server.log()
                ));
            }
            let ok = server
                .http
                .get(format!("{}/health", server.url))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(r) = ok {
                if r.status() == 200 && r.text().await.unwrap_or_default().contains("true") {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no healthy /health in time; log:\n{}",
                    server.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// A gRPC channel to the server (HTTP/2 in the clear, as etcd's clients dial `http://`).
    pub async fn grpc(&self) -> tonic::transport::Channel {
        tonic::transport::Endpoint::from_shared(self.url.clone())
            .expect("a valid URL")
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("gRPC connect to {}: {e}", self.url))
    }

    /// `127.0.0.1:PORT`: the endpoint as etcdctl 3.4 must be given it for its per-endpoint
    /// commands (with a scheme it sends `http://…` as the HTTP/2 `:authority`, which is not
    /// an authority; HTTP/2 servers other than grpc-go's refuse the request).
    pub fn host_port(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// POSTs a raw body; returns the status and the body text.
    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.text().await.expect("read body"))
    }

    /// POSTs a body written with the `expand` template syntax; returns status and normalized
    /// body.
    pub async fn call(&self, path: &str, template: &str) -> (u16, String) {
        let (status, body) = self.post(path, expand(template)).await;
        (status, normalize(&body))
    }

    /// A call that must succeed; returns the normalized body.
    pub async fn ok(&self, path: &str, template: &str) -> String {
        let (status, body) = self.call(path, template).await;
        assert_eq!(status, 200, "POST {path} {template}: {body}");
        body
    }

    /// A call whose normalized body must equal `want` (a template) with status 200.
    pub async fn expect(&self, path: &str, template: &str, want: &str) {
        let body = self.ok(path, template).await;
        assert_eq!(body, expand(want), "POST {path} {template}");
    }

    /// A call that must fail with etcd's error JSON.
    pub async fn expect_err(&self, path: &str, template: &str, status: u16, code: i32, msg: &str) {
        let (got_status, body) = self.post(path, expand(template)).await;
        assert_eq!(
            (got_status, body.as_str()),
            (status, error_body(msg, code).as_str()),
            "POST {path} {template}"
        );
    }

    /// Opens a streaming POST (`/v3/watch`, `/v3/lease/keepalive`) with a complete body.
    pub async fn stream(&self, path: &str, body: impl Into<reqwest::Body>) -> Lines {
        let client = reqwest::Client::builder()
            .http1_only()
            .build()
            .expect("stream client");
        let r = client
            .post(format!("{}{path}", self.url))
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        Lines {
            status: r.status().as_u16(),
            body: r.bytes_stream().boxed(),
            buf: BytesMut::new(),
            done: false,
        }
    }

    /// A watch stream whose body is the given requests, one template per line.
    pub async fn watch(&self, requests: &[&str]) -> Lines {
        let body: String = requests.iter().map(|r| expand(r) + "\n").collect();
        let lines = self.stream("/v3/watch", body).await;
        assert_eq!(lines.status, 200);
        lines
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of a streamed response.
pub struct Lines {
    pub status: u16,
    body: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    buf: BytesMut,
    done: bool,
}

/// How long a stream may take to produce an expected line.
pub const LINE_DEADLINE: Duration = Duration::from_secs(10);

impl Lines {
    /// The next line (normalized), or `None` if the stream ended or `wait` passed first.
    pub async fn next_within(&mut self, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1);
                let text = String::from_utf8_lossy(&line[..pos]).to_string();
                if text.trim().is_empty() {
                    continue;
                }
                return Some(normalize(&text));
            }
            if self.done {
                if self.buf.is_empty() {
                    return None;
                }
                let rest = self.buf.split();
                return Some(normalize(&String::from_utf8_lossy(&rest)));
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Some(Err(_))) | Ok(None) => self.done = true,
            }
        }
    }

    /// The next line; panics if none arrives within `LINE_DEADLINE`.
    pub async fn next(&mut self) -> String {
        self.next_within(LINE_DEADLINE)
            .await
            .expect("a stream line within the deadline")
    }

    /// The next line must equal the template `want`.
    pub async fn expect(&mut self, want: &str) {
        let got = self.next().await;
        assert_eq!(got, expand(want));
    }

    /// Asserts that nothing more arrives within a short quiet period.
    pub async fn expect_quiet(&mut self, wait: Duration) {
        if let Some(line) = self.next_within(wait).await {
            panic!("unexpected stream line: {line}");
        }
    }

    /// The whole remaining body, for streams that end (keepalive).
    pub async fn rest(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = self.next_within(LINE_DEADLINE).await {
            out.push(l);
        }
        assert!(self.done, "stream did not end within the deadline");
        out
    }
}

/// The header string with normalized IDs, as `normalize` leaves it.
pub fn header(rev: i64) -> String {
    format!(r#"{{"cluster_id":"C","member_id":"M","revision":"{rev}","raft_term":"2"}}"#)
}

pub fn b64(s: &[u8]) -> String {
    STANDARD.encode(s)
}

/// etcd's error JSON, exactly as it is written.
pub fn error_body(msg: &str, code: i32) -> String {
    let m = serde_json::to_string(msg).unwrap();
    format!(r#"{{"error":{m},"message":{m},"code":{code}}}"#)
}

/// Expands a JSON template: `H(n)` becomes a normalized header at revision `n`, and
/// `` `text` `` becomes the JSON string of `text` in base64 (escapes: `\0` is a zero byte).
pub fn expand(t: &str) -> String {
    let mut out = String::with_capacity(t.len() + 32);
    let mut rest = t;
    loop {
        let h = rest.find("H(");
        let b = rest.find('`');
        match (h, b) {
            (Some(h), b) if b.is_none_or(|b| h < b) => {
                out.push_str(&rest[..h]);
                let close = rest[h..].find(')').expect("closing ) of H(") + h;
                let n: i64 = rest[h + 2..close].parse().expect("H(<number>)");
                out.push_str(&header(n));
                rest = &rest[close + 1..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                let close = rest[b + 1..].find('`').expect("closing backtick") + b + 1;
                let raw = rest[b + 1..close].replace("\\0", "\0");
                out.push('"');
                out.push_str(&b64(raw.as_bytes()));
                out.push('"');
                rest = &rest[close + 1..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Replaces the cluster and member IDs (which differ per server) with `C` and `M`.
pub fn normalize(body: &str) -> String {
    let mut s = body.to_string();
    for (field, with) in [("\"cluster_id\":\"", "C"), ("\"member_id\":\"", "M")] {
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find(field) {
            let start = i + field.len();
            out.push_str(&rest[..start]);
            let end = rest[start..].find('"').map(|e| e + start).unwrap_or(start);
            out.push_str(with);
            rest = &rest[end..];
        }
        out.push_str(rest);
        s = out;
    }
    s
}

/// Parses JSON (for the fields whose values are not deterministic, such as lease IDs).
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}
