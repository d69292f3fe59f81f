//! `EtcdClient`: the async HTTP client for the etcd v3 JSON API, with endpoint failover.
//! It works the same against rkube-store and against a real etcd cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::api_error;
pub use crate::error::{grpc_code, EtcdError};
use crate::types::*;
use crate::watch::{self, WatchReceiver, WatchSender};

#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

/// Called after every unary call with the API path, its latency and whether it succeeded.
pub type CallObserver = Arc<dyn Fn(&str, Duration, bool) + Send + Sync>;

struct Inner {
    observer: Option<CallObserver>,
    http: reqwest::Client,
    /// Streams get their own client without a total timeout.
    stream_http: reqwest::Client,
    endpoints: Vec<String>,
    current: AtomicUsize,
}

/// TLS to https:// endpoints (upstream's `--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile`): the CA to verify the servers with, and the client certificate to present.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// PEM CA bundle.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate followed by its key.
    pub identity_pem: Option<Vec<u8>>,
}

impl ClientTls {
    fn apply(&self, mut b: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, EtcdError> {
        let bad = |what: &str, e: reqwest::Error| EtcdError::Transport(format!("{what}: {e}"));
        b = b.use_rustls_tls();
        if let Some(ca) = &self.ca_pem {
            for c in reqwest::Certificate::from_pem_bundle(ca).map_err(|e| bad("etcd CA", e))? {
                b = b.add_root_certificate(c);
            }
        }
        if let Some(id) = &self.identity_pem {
            b = b.identity(
                reqwest::Identity::from_pem(id).map_err(|e| bad("etcd client certificate", e))?,
            );
        }
        Ok(b)
    }
}

impl EtcdClient {
    /// `endpoints` are base URLs such as `http://127.0.0.1:2379`; calls fail over between them.
    pub fn new(endpoints: &[String]) -> Result<Self, EtcdError> {
        Self::with_tls(endpoints, None)
    }

    /// A client of https:// endpoints with `tls` (plain http:// endpoints need none).
    pub fn with_tls(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Self, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::Transport("no etcd endpoints given".into()));
        }
        let mut http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(30));
        let mut stream_http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(3))
            .http1_only();
        if let Some(tls) = tls {
            http = tls.apply(http)?;
            stream_http = tls.apply(stream_http)?;
        }
        let (http, stream_http) = (http.build()?, stream_http.build()?);
        let endpoints = endpoints
            .iter()
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .collect();
        Ok(EtcdClient {
            inner: Arc::new(Inner {
                observer: None,
                http,
                stream_http,
                endpoints,
                current: AtomicUsize::new(0),
            }),
        })
    }

    /// A client that reports every unary call's latency to `observer` (for metrics).
    pub fn with_observer(&self, observer: CallObserver) -> Self {
        let i = &self.inner;
        EtcdClient {
            inner: Arc::new(Inner {
                observer: Some(observer),
                http: i.http.clone(),
                stream_http: i.stream_http.clone(),
                endpoints: i.endpoints.clone(),
                current: AtomicUsize::new(i.current.load(Ordering::Relaxed)),
            }),
        }
    }

    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    fn endpoint_order(&self) -> impl Iterator<Item = (usize, &str)> {
        let n = self.inner.endpoints.len();
        let start = self.inner.current.load(Ordering::Relaxed) % n;
        (0..n).map(move |i| {
            let idx = (start + i) % n;
            (idx, self.inner.endpoints[idx].as_str())
        })
    }

    /// POSTs `req` to `path`, failing over to the next endpoint on connection errors
    /// (which guarantee the request was not delivered) and on `Unavailable`.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
    ) -> Result<Resp, EtcdError> {
        let started = std::time::Instant::now();
        let r = self.call_inner(path, req).await;
        if let Some(o) = &self.inner.observer {
            o(path, started.elapsed(), r.is_ok());
        }
        r
    }

    async fn call_inner<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        req: &Req,
    ) -> Result<Resp, EtcdError> {
        let body = serde_json::to_vec(req).map_err(|e| EtcdError::Decode(e.to_string()))?;
        let mut last = None;
        for (idx, ep) in self.endpoint_order() {
            let result = self
                .inner
                .http
                .post(format!("{ep}{path}"))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            match result {
                Ok(resp) => {
                    self.inner.current.store(idx, Ordering::Relaxed);
                    return decode_response(resp).await;
                }
                Err(e) if e.is_connect() => {
                    tracing::debug!(endpoint = ep, error = %e, "etcd endpoint unreachable, trying next");
                    last = Some(EtcdError::from(e));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.unwrap_or_else(|| EtcdError::Transport("no endpoint".into())))
    }

    pub async fn range(&self, req: &RangeRequest) -> Result<RangeResponse, EtcdError> {
        self.call("/v3/kv/range", req).await
    }
    pub async fn put(&self, req: &PutRequest) -> Result<PutResponse, EtcdError> {
        self.call("/v3/kv/put", req).await
    }
    pub async fn delete_range(
        &self,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, EtcdError> {
        self.call("/v3/kv/deleterange", req).await
    }
    pub async fn txn(&self, req: &TxnRequest) -> Result<TxnResponse, EtcdError> {
        self.call("/v3/kv/txn", req).await
    }
    pub async fn compact(&self, req: &CompactionRequest) -> Result<CompactionResponse, EtcdError> {
        self.call("/v3/kv/compaction", req).await
    }
    pub async fn lease_grant(
        &self,
        req: &LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, EtcdError> {
        self.call("/v3/lease/grant", req).await
    }
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, EtcdError> {
        self.call("/v3/lease/revoke", &LeaseIdRequest { id }).await
    }
    pub async fn lease_time_to_live(
        &self,
        req: &LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, EtcdError> {
        self.call("/v3/lease/timetolive", req).await
    }
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse, EtcdError> {
        self.call("/v3/lease/leases", &serde_json::json!({})).await
    }
    pub async fn status(&self) -> Result<StatusResponse, EtcdError> {
        self.call("/v3/maintenance/status", &serde_json::json!({}))
            .await
    }

    /// One keepalive round trip on `/v3/lease/keepalive` (a one-message stream).
    pub async fn lease_keep_alive_once(
        &self,
        id: i64,
    ) -> Result<LeaseKeepAliveResponse, EtcdError> {
        let body = serde_json::to_vec(&LeaseIdRequest { id })
            .map_err(|e| EtcdError::Decode(e.to_string()))?;
        let ep = self
            .endpoint_order()
            .next()
            .map(|(_, e)| e.to_string())
            .unwrap_or_default();
        let resp = self
            .inner
            .http
            .post(format!("{ep}/v3/lease/keepalive"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if status != 200 {
            return Err(api_error(status, first.as_bytes()));
        }
        let line: StreamLine<LeaseKeepAliveResponse> =
            serde_json::from_str(first).map_err(|e| EtcdError::Decode(format!("{e}: {first}")))?;
        match (line.result, line.error) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) => Err(EtcdError::Api {
                status,
                code: e.code,
                message: e.message,
            }),
            _ => Err(EtcdError::Decode(format!(
                "empty keepalive response: {first}"
            ))),
        }
    }

    /// Opens a watch stream carrying `requests` (usually one create). Works on rkube-store and
    /// on etcd; to stop the watches, drop the receiver (which closes the connection).
    pub async fn watch(&self, requests: Vec<WatchRequest>) -> Result<WatchReceiver, EtcdError> {
        Ok(self.open_watch(requests, false).await?.1)
    }

    /// A full-duplex watch stream: more creates, cancels and progress requests go through the
    /// returned sender while responses arrive. rkube-store supports this; etcd's HTTP gateway
    /// buffers responses until the request body ends, so use `watch` there.
    pub async fn watch_duplex(
        &self,
        requests: Vec<WatchRequest>,
    ) -> Result<(WatchSender, WatchReceiver), EtcdError> {
        let (tx, rx) = self.open_watch(requests, true).await?;
        Ok((tx.expect("duplex watch has a sender"), rx))
    }

    async fn open_watch(
        &self,
        requests: Vec<WatchRequest>,
        duplex: bool,
    ) -> Result<(Option<WatchSender>, WatchReceiver), EtcdError> {
        let mut last = None;
        for (idx, ep) in self.endpoint_order() {
            match watch::open(&self.inner.stream_http, ep, requests.clone(), duplex).await {
                Ok(pair) => {
                    self.inner.current.store(idx, Ordering::Relaxed);
                    return Ok(pair);
                }
                Err(e) if e.is_transport() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| EtcdError::Transport("no endpoint".into())))
    }
}

async fn decode_response<Resp: DeserializeOwned>(
    resp: reqwest::Response,
) -> Result<Resp, EtcdError> {
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?;
    if status != 200 {
        return Err(api_error(status, &bytes));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        EtcdError::Decode(format!(
            "{e}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))
    })
}
