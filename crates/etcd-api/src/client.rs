//! `EtcdClient`: the async client for etcd's v3 API, with endpoint failover, over either
//! transport — gRPC (what Kubernetes speaks to etcd: HTTP/2, protobuf, full-duplex watches
//! with progress requests) or the JSON gateway (HTTP/1.1). It works the same against
//! rkube-store and against a real etcd cluster; callers see the same types either way.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::api_error;
pub use crate::error::{grpc_code, EtcdError};
use crate::grpc::{self, CALL_TIMEOUT};
use crate::pb;
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
    transport: Transport,
    endpoints: Vec<String>,
    current: AtomicUsize,
}

#[derive(Clone)]
enum Transport {
    Json {
        http: reqwest::Client,
        stream_http: reqwest::Client,
    },
    /// Each endpoint's connections, in `endpoints`' order.
    Grpc(Arc<Vec<grpc::Pool>>),
}

/// What one endpoint says of itself.
#[derive(Clone, Debug)]
pub struct EndpointStatus {
    pub version: String,
    pub rkube_store: bool,
}

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
            .http1_only()
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
        Ok(Self::build(
            endpoints,
            Transport::Json { http, stream_http },
        ))
    }

    /// A client speaking etcd's gRPC API (HTTP/2; `https://` endpoints use `tls`).
    pub fn grpc(endpoints: &[String], tls: Option<&ClientTls>) -> Result<Self, EtcdError> {
        let endpoints = clean(endpoints);
        if endpoints.is_empty() {
            return Err(EtcdError::Transport("no etcd endpoints given".into()));
        }
        let pools = grpc::pools(
            &endpoints,
            tls.and_then(|t| t.ca_pem.as_deref()),
            tls.and_then(|t| t.identity_pem.as_deref()),
        )?;
        Ok(Self::build(&endpoints, Transport::Grpc(Arc::new(pools))))
    }

    fn build(endpoints: &[String], transport: Transport) -> Self {
        EtcdClient {
            inner: Arc::new(Inner {
                observer: None,
                transport,
                endpoints: clean(endpoints),
                current: AtomicUsize::new(0),
            }),
        }
    }

    /// Whether calls go over gRPC (else the JSON gateway).
    pub fn is_grpc(&self) -> bool {
        matches!(self.inner.transport, Transport::Grpc(_))
    }

    pub fn with_observer(&self, observer: CallObserver) -> Self {
        let i = &self.inner;
        EtcdClient {
            inner: Arc::new(Inner {
                observer: Some(observer),
                transport: i.transport.clone(),
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
    /// One unary call, on whichever transport: `path` is its gateway path (and its name for
    /// the observer), `rpc` the same call over gRPC.
    async fn call<Req, Resp, P, Q, F, Fut>(
        &self,
        path: &str,
        req: &Req,
        rpc: F,
    ) -> Result<Resp, EtcdError>
    where
        Req: Serialize + Clone + Into<P>,
        P: Clone,
        Resp: DeserializeOwned + From<Q>,
        F: Fn(Channel, P) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Q>, tonic::Status>>,
    {
        let started = std::time::Instant::now();
        let r = match &self.inner.transport {
            Transport::Json { http, .. } => self.call_json(http, path, req).await,
            Transport::Grpc(pools) => self.call_grpc(pools, req.clone().into(), rpc).await,
        };
        if let Some(o) = &self.inner.observer {
            o(path, started.elapsed(), r.is_ok());
        }
        r
    }

    /// Tries each endpoint from the current one; only a call that reached no server moves on.
    async fn call_grpc<P, Q, Resp, F, Fut>(
        &self,
        pools: &[grpc::Pool],
        req: P,
        rpc: F,
    ) -> Result<Resp, EtcdError>
    where
        P: Clone,
        Resp: From<Q>,
        F: Fn(Channel, P) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Q>, tonic::Status>>,
    {
        let mut last = None;
        let n = pools.len();
        let mut req = Some(req);
        for (attempt, (idx, _)) in self.endpoint_order().enumerate() {
            // The request moves into the last attempt; earlier ones send a copy.
            let this = if attempt + 1 == n {
                req.take()
            } else {
                req.clone()
            };
            let Some(this) = this else { break };
            match tokio::time::timeout(CALL_TIMEOUT, rpc(pools[idx].pick(), this)).await {
                Ok(Ok(resp)) => {
                    self.inner.current.store(idx, Ordering::Relaxed);
                    return Ok(resp.into_inner().into());
                }
                Ok(Err(s)) if grpc::unreached(&s) => {
                    tracing::debug!(endpoint = self.inner.endpoints[idx], error = %s, "etcd endpoint unreachable, trying next");
                    last = Some(grpc::status_error(s));
                }
                Ok(Err(s)) => return Err(grpc::status_error(s)),
                Err(_) => {
                    return Err(EtcdError::Transport(format!(
                        "no answer from {} in {CALL_TIMEOUT:?}",
                        self.inner.endpoints[idx]
                    )))
                }
            }
        }
        Err(last.unwrap_or_else(|| EtcdError::Transport("no endpoint".into())))
    }

    async fn call_json<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        http: &reqwest::Client,
        path: &str,
        req: &Req,
    ) -> Result<Resp, EtcdError> {
        let body = serde_json::to_vec(req).map_err(|e| EtcdError::Decode(e.to_string()))?;
        let mut last = None;
        for (idx, ep) in self.endpoint_order() {
            let result = http
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
        self.call("/v3/kv/range", req, |c, r: pb::RangeRequest| async move {
            pb::kv_client::KvClient::new(c)
                .max_decoding_message_size(grpc::MAX_RESPONSE)
                .range(r)
                .await
        })
        .await
    }
    pub async fn put(&self, req: &PutRequest) -> Result<PutResponse, EtcdError> {
        self.call("/v3/kv/put", req, |c, r: pb::PutRequest| async move {
            pb::kv_client::KvClient::new(c)
                .max_decoding_message_size(grpc::MAX_RESPONSE)
                .put(r)
                .await
        })
        .await
    }
    pub async fn delete_range(
        &self,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, EtcdError> {
        self.call(
            "/v3/kv/deleterange",
            req,
            |c, r: pb::DeleteRangeRequest| async move {
                pb::kv_client::KvClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .delete_range(r)
                    .await
            },
        )
        .await
    }
    pub async fn txn(&self, req: &TxnRequest) -> Result<TxnResponse, EtcdError> {
        self.call("/v3/kv/txn", req, |c, r: pb::TxnRequest| async move {
            pb::kv_client::KvClient::new(c)
                .max_decoding_message_size(grpc::MAX_RESPONSE)
                .txn(r)
                .await
        })
        .await
    }
    pub async fn compact(&self, req: &CompactionRequest) -> Result<CompactionResponse, EtcdError> {
        self.call(
            "/v3/kv/compaction",
            req,
            |c, r: pb::CompactionRequest| async move {
                pb::kv_client::KvClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .compact(r)
                    .await
            },
        )
        .await
    }
    pub async fn lease_grant(
        &self,
        req: &LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, EtcdError> {
        self.call(
            "/v3/lease/grant",
            req,
            |c, r: pb::LeaseGrantRequest| async move {
                pb::lease_client::LeaseClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .lease_grant(r)
                    .await
            },
        )
        .await
    }
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, EtcdError> {
        let req = LeaseIdRequest { id };
        self.call(
            "/v3/lease/revoke",
            &req,
            |c, r: pb::LeaseRevokeRequest| async move {
                pb::lease_client::LeaseClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .lease_revoke(r)
                    .await
            },
        )
        .await
    }
    pub async fn lease_time_to_live(
        &self,
        req: &LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, EtcdError> {
        self.call(
            "/v3/lease/timetolive",
            req,
            |c, r: pb::LeaseTimeToLiveRequest| async move {
                pb::lease_client::LeaseClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .lease_time_to_live(r)
                    .await
            },
        )
        .await
    }
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse, EtcdError> {
        self.call(
            "/v3/lease/leases",
            &Empty {},
            |c, r: pb::LeaseLeasesRequest| async move {
                pb::lease_client::LeaseClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .lease_leases(r)
                    .await
            },
        )
        .await
    }
    pub async fn status(&self) -> Result<StatusResponse, EtcdError> {
        self.call(
            "/v3/maintenance/status",
            &Empty {},
            |c, r: pb::StatusRequest| async move {
                pb::maintenance_client::MaintenanceClient::new(c)
                    .max_decoding_message_size(grpc::MAX_RESPONSE)
                    .status(r)
                    .await
            },
        )
        .await
    }

    /// Each endpoint's server version, and whether it is rkube-store (which marks its gRPC
    /// responses with `x-rkube-store`), in `endpoints`' order (gRPC only).
    pub async fn endpoint_statuses(&self) -> Vec<Result<EndpointStatus, EtcdError>> {
        let Transport::Grpc(pools) = &self.inner.transport else {
            return vec![Err(EtcdError::Transport(
                "endpoint statuses need the gRPC transport".into(),
            ))];
        };
        let mut out = Vec::with_capacity(pools.len());
        for pool in pools.iter() {
            let mut m = pb::maintenance_client::MaintenanceClient::new(pool.pick())
                .max_decoding_message_size(grpc::MAX_RESPONSE);
            let call = m.status(pb::StatusRequest {});
            out.push(match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(r)) => Ok(EndpointStatus {
                    rkube_store: r.metadata().contains_key(grpc::RKUBE_STORE_HEADER),
                    version: r.into_inner().version,
                }),
                Ok(Err(s)) => Err(grpc::status_error(s)),
                Err(_) => Err(EtcdError::Transport("no status in 30 s".into())),
            });
        }
        out
    }

    pub async fn lease_keep_alive_once(
        &self,
        id: i64,
    ) -> Result<LeaseKeepAliveResponse, EtcdError> {
        let http = match &self.inner.transport {
            Transport::Json { http, .. } => http,
            Transport::Grpc(pools) => {
                let ch = pools[self.inner.current.load(Ordering::Relaxed) % pools.len()].pick();
                return grpc::keep_alive_once(ch, id).await;
            }
        };
        let body = serde_json::to_vec(&LeaseIdRequest { id })
            .map_err(|e| EtcdError::Decode(e.to_string()))?;
        let ep = self
            .endpoint_order()
            .next()
            .map(|(_, e)| e.to_string())
            .unwrap_or_default();
        let resp = http
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
    /// returned sender while responses arrive. gRPC and rkube-store's gateway support this;
    /// etcd's HTTP gateway buffers responses until the request body ends (use `watch` there).
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
            let opened = match &self.inner.transport {
                Transport::Json { stream_http, .. } => {
                    watch::open(stream_http, ep, requests.clone(), duplex).await
                }
                Transport::Grpc(pools) => {
                    watch::open_grpc(pools[idx].pick(), requests.clone()).await
                }
            };
            match opened {
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

/// Requests without fields (`{}` on the gateway).
#[derive(Clone, Serialize)]
struct Empty {}

impl From<Empty> for pb::LeaseLeasesRequest {
    fn from(_: Empty) -> Self {
        pb::LeaseLeasesRequest {}
    }
}

impl From<Empty> for pb::StatusRequest {
    fn from(_: Empty) -> Self {
        pb::StatusRequest {}
    }
}

fn clean(endpoints: &[String]) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| e.trim().trim_end_matches('/').to_string())
        .filter(|e| !e.is_empty())
        .collect()
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
