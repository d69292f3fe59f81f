//! The gRPC transport of `EtcdClient`: one lazily connected HTTP/2 channel per endpoint
//! (tonic; TLS with the same CA and client certificate as the JSON transport), keep-alive
//! pings as Kubernetes' etcd client sends them, and gRPC statuses turned into `EtcdError`.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::{grpc_code, EtcdError};

/// The response header rkube-store puts on its gRPC answers (its version): clients that
/// depend on rkube-store's behaviour where etcd versions differ (progress notifications in
/// order with events) can tell it from an etcd.
pub const RKUBE_STORE_HEADER: &str = "x-rkube-store";

/// The largest response a client takes (etcd's client: 2 GiB; tonic's default 4 MiB would
/// refuse a page of large objects or a replayed batch of events).
pub(crate) const MAX_RESPONSE: usize = i32::MAX as usize;

/// How long a unary call may take (the JSON transport's timeout).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections per endpoint: one HTTP/2 connection carries every call in one task on each
/// side, which limits a busy apiserver; calls and watches go round the connections.
const CONNECTIONS: usize = 4;

/// An endpoint's connections.
pub(crate) struct Pool {
    conns: Vec<Channel>,
    next: std::sync::atomic::AtomicUsize,
}

impl Pool {
    /// The connection for the next call.
    pub(crate) fn pick(&self) -> Channel {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.conns[i % self.conns.len()].clone()
    }
}

/// `CONNECTIONS` lazily connected channels per endpoint.
pub(crate) fn pools(
    endpoints: &[String],
    ca_pem: Option<&[u8]>,
    identity_pem: Option<&[u8]>,
) -> Result<Vec<Pool>, EtcdError> {
    let mut pools = Vec::with_capacity(endpoints.len());
    for _ in endpoints {
        pools.push(Pool {
            conns: Vec::with_capacity(CONNECTIONS),
            next: Default::default(),
        });
    }
    for _ in 0..CONNECTIONS {
        for (pool, ch) in pools
            .iter_mut()
            .zip(channels(endpoints, ca_pem, identity_pem)?)
        {
            pool.conns.push(ch);
        }
    }
    Ok(pools)
}

/// A channel per endpoint, connected on first use and reconnected by tonic after a failure.
/// `https://` endpoints are verified with `ca_pem` and shown `identity_pem` (a certificate
/// chain and its key in one PEM).
fn channels(
    endpoints: &[String],
    ca_pem: Option<&[u8]>,
    identity_pem: Option<&[u8]>,
) -> Result<Vec<Channel>, EtcdError> {
    endpoints
        .iter()
        .map(|url| {
            let bad = |e: tonic::transport::Error| {
                EtcdError::Transport(format!("etcd endpoint {url}: {e}"))
            };
            let mut ep = Endpoint::from_shared(url.clone())
                .map_err(bad)?
                .connect_timeout(Duration::from_secs(3))
                .tcp_nodelay(true)
                // kube-apiserver's etcd client: a ping after 30 s of silence, 10 s for its ack.
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(10))
                .keep_alive_while_idle(true)
                .initial_connection_window_size(8 << 20)
                .initial_stream_window_size(2 << 20);
            if url.starts_with("https://") {
                let mut cfg = ClientTlsConfig::new();
                if let Some(ca) = ca_pem {
                    cfg = cfg.ca_certificate(Certificate::from_pem(ca));
                }
                if let Some(id) = identity_pem {
                    cfg = cfg.identity(Identity::from_pem(id, id));
                }
                ep = ep.tls_config(cfg).map_err(bad)?;
            }
            Ok(ep.connect_lazy())
        })
        .collect()
}

/// The HTTP status etcd's gateway would have answered with (what `EtcdError::Api` carries
/// on either transport).
pub fn http_status(code: i32) -> u16 {
    match code {
        3 | 11 => 400,
        9 => 412,
        5 => 404,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500,
    }
}

/// A call that never reached the server (no connection could be made): the next endpoint
/// may take it, and for a write nothing was applied.
pub(crate) fn unreached(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unavailable && !s.message().starts_with("etcdserver:") && {
        let m = s.message().to_ascii_lowercase();
        m.contains("connect") || m.contains("dns")
    }
}

/// A status as `EtcdError`: Unavailable not from etcd itself (no connection, a broken one —
/// `unreached` among them) is a transport error; the rest are etcd's answers.
pub(crate) fn status_error(s: tonic::Status) -> EtcdError {
    let code = s.code() as i32;
    if code == grpc_code::UNAVAILABLE && !s.message().starts_with("etcdserver:") {
        return EtcdError::Transport(s.message().to_string());
    }
    EtcdError::Api {
        status: http_status(code),
        code,
        message: s.message().to_string(),
    }
}

/// One keep-alive over a short-lived LeaseKeepAlive stream. The request is queued before the
/// call: etcd sends the response headers with the first response.
pub(crate) async fn keep_alive_once(
    ch: Channel,
    id: i64,
) -> Result<crate::types::LeaseKeepAliveResponse, EtcdError> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.send(crate::pb::LeaseKeepAliveRequest { id }).await;
    let call = async {
        let mut responses = crate::pb::lease_client::LeaseClient::new(ch)
            .max_decoding_message_size(MAX_RESPONSE)
            .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        responses.message().await
    };
    let result = tokio::time::timeout(CALL_TIMEOUT, call).await;
    drop(tx);
    match result {
        Ok(Ok(Some(r))) => Ok(r.into()),
        Ok(Ok(None)) => Err(EtcdError::Decode(
            "the keep-alive stream ended without a response".into(),
        )),
        Ok(Err(s)) => Err(status_error(s)),
        Err(_) => Err(EtcdError::Transport(format!(
            "no keep-alive answer in {CALL_TIMEOUT:?}"
        ))),
    }
}
