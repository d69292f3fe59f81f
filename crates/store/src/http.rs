//! The HTTP front of rkube-store: etcd's v3 JSON gateway paths, body limits and JSON parsing
//! with etcd's error wording, and the plain `/health`, `/version` and `/metrics` endpoints.

use std::sync::Arc;
use std::time::Instant as StdInstant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use rkube_daemon::ShutdownToken;
use rkube_etcd_api::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::apply::{WriteOp, WriteResult};
use crate::error::*;
use crate::mvcc::Mvcc;
use crate::reqstream::RequestReader;
use crate::watch_stream::WatchConfig;
use crate::writer::Writer;
use crate::{protosize, validate, wire};

/// The etcd version this API level corresponds to (what `/version` and status report).
pub const ETCD_VERSION: &str = "3.4.23";
pub const ETCD_CLUSTER_VERSION: &str = "3.4.0";

/// gRPC's receive limit is `--max-request-bytes` plus this overhead (etcd's `grpcOverheadBytes`).
const GRPC_OVERHEAD: usize = 512 * 1024;

#[derive(Clone)]
pub struct App {
    pub mvcc: Arc<Mvcc>,
    pub writer: Writer,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub watch: Arc<WatchConfig>,
    pub shutdown: ShutdownToken,
}

pub fn router(app: App) -> Router {
    Router::new()
        .fallback(any(dispatch))
        .layer(DefaultBodyLimit::disable())
        .with_state(app)
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [
            ("content-type", "text/plain; charset=utf-8"),
            ("x-content-type-options", "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The API paths etcd 3.4's gateway serves under `/v3/` (and `/v3beta/`).
const API_PATHS: &[&str] = &[
    "kv/range",
    "kv/put",
    "kv/deleterange",
    "kv/txn",
    "kv/compaction",
    "watch",
    "lease/grant",
    "lease/revoke",
    "kv/lease/revoke",
    "lease/keepalive",
    "lease/timetolive",
    "kv/lease/timetolive",
    "lease/leases",
    "kv/lease/leases",
    "maintenance/status",
    "maintenance/alarm",
    "maintenance/hash",
];

/// `/health` as etcd's: `{"health":"true"}` when the writer thread is alive and keeping up
/// and a read of the database succeeds; 503 with `"health":"false"` and the reason otherwise.
fn health(app: &App) -> Response {
    let probe = app.writer.health().and_then(|()| {
        app.mvcc
            .range(&RangeRequest {
                key: b"health".to_vec(),
                count_only: true,
                ..Default::default()
            })
            .map(|_| ())
            .map_err(|e| format!("a read failed: {e}"))
    });
    let (status, body) = match probe {
        // etcd 3.4's exact body (the conformance suite compares it).
        Ok(()) => (StatusCode::OK, r#"{"health":"true"}"#.to_string()),
        Err(why) => {
            tracing::warn!(reason = %why, "unhealthy");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"health": "false", "reason": why}).to_string(),
            )
        }
    };
    (
        status,
        [("content-type", "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Who connected: the common name of a verified client certificate.
#[derive(Clone, Debug)]
pub struct Client {
    pub addr: std::net::SocketAddr,
    pub cn: Option<String>,
}

/// Identifies each connection by its client certificate's common name.
pub fn identify() -> rkube_daemon::serve::Identify<Client> {
    Arc::new(|addr, certs| Client {
        addr,
        cn: certs
            .and_then(|c| c.first())
            .and_then(rkube_daemon::tls::subject)
            .map(|(cn, _)| cn),
    })
}

/// Refuses requests whose client certificate does not have the allowed common name (etcd's
/// `--client-cert-allowed-cn`), with gRPC's Unauthenticated.
pub async fn require_cn(allowed: String, req: Request, next: axum::middleware::Next) -> Response {
    let cn = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Client>>()
        .and_then(|c| c.0.cn.clone());
    if cn.as_deref() != Some(allowed.as_str()) {
        let msg = format!(
            "etcdserver: client certificate common name {:?} is not allowed",
            cn.unwrap_or_default()
        );
        let body = serde_json::json!({"error": msg, "message": msg, "code": 16});
        return (
            StatusCode::UNAUTHORIZED,
            [("content-type", "application/json")],
            body.to_string(),
        )
            .into_response();
    }
    next.run(req).await
}

/// Routes requests the way etcd's HTTP mux does, including its 404 and 405 bodies.
async fn dispatch(State(app): State<App>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let get = req.method() == Method::GET;
    match path.as_str() {
        "/health" | "/version" | "/metrics" if !get => {
            return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n")
        }
        "/health" => return health(&app),
        "/version" => {
            let body = format!(
                r#"{{"etcdserver":"{ETCD_VERSION}","etcdcluster":"{ETCD_CLUSTER_VERSION}"}}"#
            );
            return ([("content-type", "application/json")], body).into_response();
        }
        "/metrics" => {
            return (
                [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                app.mvcc.metrics.registry.render(),
            )
                .into_response();
        }
        _ => {}
    }
    let Some(rest) = path
        .strip_prefix("/v3/")
        .or_else(|| path.strip_prefix("/v3beta/"))
    else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    let Some(method) = API_PATHS.iter().find(|p| **p == rest) else {
        return text(StatusCode::NOT_FOUND, "Not Found\n");
    };
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    }
    let body = req.into_body();
    match *method {
        "watch" => {
            app.mvcc.metrics.watch_started();
            crate::watch_stream::handle(
                app.mvcc.clone(),
                app.watch.clone(),
                app.shutdown.clone(),
                body,
            )
            .await
        }
        "lease/keepalive" => keepalive(app, body).await,
        m => {
            let started = StdInstant::now();
            let path = m.to_string();
            let result = unary(&app, m, body).await;
            let code = match &result {
                Ok(_) => 0,
                Err(e) => e.grpc_code(),
            };
            app.mvcc
                .metrics
                .observe_request(&path, code, started.elapsed().as_secs_f64());
            match result {
                Ok(r) => r,
                Err(e) => e.into_response(),
            }
        }
    }
}

fn json_response<T: Serialize>(v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(b) => ([("content-type", "application/json")], b).into_response(),
        Err(e) => StoreError::Internal(e.to_string()).into_response(),
    }
}

async fn read_body(body: Body, max_request_bytes: usize) -> Result<Bytes, StoreError> {
    // JSON with base64 is ~4/3 of the protobuf size; anything far past that cannot fit.
    let hard = (max_request_bytes + GRPC_OVERHEAD) * 3 / 2 + 64 * 1024;
    use rkube_daemon::serve::BodyError;
    rkube_daemon::serve::read_body(body, hard)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => {
                StoreError::MessageTooLarge(hard, max_request_bytes + GRPC_OVERHEAD)
            }
            // A body that does not arrive in time (or breaks off) is etcd's "unexpected EOF".
            BodyError::Timeout | BodyError::Broken(_) => StoreError::invalid("unexpected EOF"),
        })
}

/// gRPC's receive limit on a request's protobuf size (`--max-request-bytes` + 512 KiB).
fn check_grpc_size(size: usize, max: usize) -> Result<(), StoreError> {
    if size > max + GRPC_OVERHEAD {
        return Err(StoreError::MessageTooLarge(size, max + GRPC_OVERHEAD));
    }
    Ok(())
}

/// etcd's limit on the raft proposal carrying a write (`--max-request-bytes`).
fn check_raft_size(field: u32, size: usize, max: usize) -> Result<(), StoreError> {
    if protosize::raft(field, size) > max {
        return Err(StoreError::invalid(ERR_REQUEST_TOO_LARGE));
    }
    Ok(())
}

/// Decodes a unary request body as etcd's gateway does: only the first JSON value counts,
/// an empty body or `null` is an empty message, and errors use Go's wording.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    let empty =
        || serde_json::from_slice::<T>(b"{}").map_err(|e| StoreError::invalid(e.to_string()));
    let Some(start) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
        return empty();
    };
    let slice = &bytes[start..];
    if slice.starts_with(b"null") {
        return empty();
    }
    if let Some(msg) = wire::non_object(slice) {
        return Err(StoreError::invalid(msg));
    }
    let mut it = serde_json::Deserializer::from_slice(slice).into_iter::<T>();
    match it.next() {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(wire::json_error(&e, slice)),
        None => empty(),
    }
}

async fn write(app: &App, op: WriteOp) -> Result<WriteResult, StoreError> {
    app.writer.submit(op).await
}

fn with_header(app: &App, h: &mut Option<ResponseHeader>) {
    let rev = h.as_ref().map(|h| h.revision).unwrap_or(0);
    *h = Some(app.mvcc.header(rev));
}

async fn unary(app: &App, method: &str, body: Body) -> Result<Response, StoreError> {
    let bytes = read_body(body, app.max_request_bytes).await?;
    let max = app.max_request_bytes;
    match method {
        "kv/range" => {
            let req: RangeRequest = parse(&bytes)?;
            check_grpc_size(protosize::range(&req), max)?;
            validate::check_range(&req)?;
            let mvcc = app.mvcc.clone();
            let resp =
                if req.count_only || req.limit > 0 && req.limit < 64 || req.range_end.is_empty() {
                    mvcc.range(&req)?
                } else {
                    tokio::task::spawn_blocking(move || mvcc.range(&req))
                        .await
                        .map_err(|e| StoreError::Internal(e.to_string()))??
                };
            Ok(json_response(&resp))
        }
        "kv/put" => {
            let req: PutRequest = parse(&bytes)?;
            let size = protosize::put(&req);
            check_grpc_size(size, max)?;
            validate::check_put(&req)?;
            check_raft_size(protosize::RAFT_PUT, size, max)?;
            let WriteResult::Put(mut resp) = write(app, WriteOp::Put(req)).await? else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "kv/deleterange" => {
            let req: DeleteRangeRequest = parse(&bytes)?;
            let size = protosize::delete_range(&req);
            check_grpc_size(size, max)?;
            validate::check_delete(&req)?;
            check_raft_size(protosize::RAFT_DELETE_RANGE, size, max)?;
            let WriteResult::DeleteRange(mut resp) = write(app, WriteOp::DeleteRange(req)).await?
            else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "kv/txn" => {
            let req: TxnRequest = parse(&bytes)?;
            let size = protosize::txn(&req);
            check_grpc_size(size, max)?;
            validate::check_txn(&req, app.max_txn_ops)?;
            if !validate::txn_is_read_only(&req) {
                check_raft_size(protosize::RAFT_TXN, size, max)?;
            }
            app.mvcc.metrics.observe_txn_shape(txn_shape(&req));
            let WriteResult::Txn(mut resp) = write(app, WriteOp::Txn(req)).await? else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "kv/compaction" => {
            let req: CompactionRequest = parse(&bytes)?;
            let WriteResult::Compact(mut resp) = write(app, WriteOp::Compact(req.revision)).await?
            else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "lease/grant" => {
            let req: LeaseGrantRequest = parse(&bytes)?;
            let WriteResult::LeaseGrant(mut resp) = write(app, WriteOp::LeaseGrant(req)).await?
            else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "lease/revoke" | "kv/lease/revoke" => {
            let req: LeaseIdRequest = parse(&bytes)?;
            let WriteResult::LeaseRevoke(mut resp) =
                write(app, WriteOp::LeaseRevoke(req.id)).await?
            else {
                unreachable!()
            };
            with_header(app, &mut resp.header);
            Ok(json_response(&resp))
        }
        "lease/timetolive" | "kv/lease/timetolive" => {
            let req: LeaseTimeToLiveRequest = parse(&bytes)?;
            let rev = app.mvcc.current_rev();
            let lessor = app.mvcc.lessor.lock().unwrap();
            let resp = match lessor.get(req.id) {
                Some(l) => LeaseTimeToLiveResponse {
                    header: Some(app.mvcc.header(rev)),
                    id: req.id,
                    ttl: l.remaining_secs(Instant::now()),
                    granted_ttl: l.ttl,
                    keys: if req.keys {
                        l.keys.iter().cloned().collect()
                    } else {
                        Vec::new()
                    },
                },
                None => LeaseTimeToLiveResponse {
                    header: Some(app.mvcc.header(rev)),
                    id: req.id,
                    ttl: -1,
                    ..Default::default()
                },
            };
            Ok(json_response(&resp))
        }
        "lease/leases" | "kv/lease/leases" => {
            let _: serde_json::Value = parse(&bytes)?;
            let rev = app.mvcc.current_rev();
            let ids = app.mvcc.lessor.lock().unwrap().ids();
            let resp = LeaseLeasesResponse {
                header: Some(app.mvcc.header(rev)),
                leases: ids.into_iter().map(|id| LeaseStatus { id }).collect(),
            };
            Ok(json_response(&resp))
        }
        "maintenance/status" => {
            let _: serde_json::Value = parse(&bytes)?;
            let rev = app.mvcc.current_rev();
            let size = app.mvcc.backend.size() as i64;
            let resp = StatusResponse {
                header: Some(app.mvcc.header(rev)),
                version: ETCD_VERSION.into(),
                db_size: size,
                leader: app.mvcc.member_id,
                raft_index: rev as u64,
                raft_term: crate::mvcc::RAFT_TERM,
                raft_applied_index: rev as u64,
                db_size_in_use: size,
            };
            Ok(json_response(&resp))
        }
        // No alarms are ever raised; etcd answers an empty alarm list with a bare `{}`.
        "maintenance/alarm" => {
            let _: serde_json::Value = parse(&bytes)?;
            Ok(json_response(&serde_json::json!({})))
        }
        "maintenance/hash" => {
            let _: serde_json::Value = parse(&bytes)?;
            let (rev, compact) = {
                let st = app.mvcc.state.read().unwrap();
                (st.current_rev, st.compact_rev)
            };
            // A digest of the revision state (etcd hashes its whole backend); it is only
            // compared between members, and we have one.
            let hash = (rev as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ compact as u64;
            let resp = HashResponse {
                header: Some(app.mvcc.header(rev)),
                hash: (hash >> 32) as u32 | 1,
            };
            Ok(json_response(&resp))
        }
        _ => Err(StoreError::UnknownPath),
    }
}

/// Classifies a Txn by the shapes the Kubernetes apiserver sends.
fn txn_shape(t: &TxnRequest) -> &'static str {
    let single_mod = t.compare.len() == 1
        && t.compare[0].target == CompareTarget::Mod
        && t.compare[0].result == CompareResult::Equal;
    let put_only = t.success.len() == 1 && t.success[0].request_put.is_some();
    let del_only = t.success.len() == 1 && t.success[0].request_delete_range.is_some();
    match (
        single_mod,
        t.compare.first().map(|c| c.mod_revision),
        put_only,
        del_only,
    ) {
        (true, Some(0), true, _) => "create",
        (true, Some(_), true, _) => "update",
        (true, Some(_), _, true) => "delete",
        _ => "other",
    }
}

/// `/v3/lease/keepalive`: one response line per request, until the request body ends. A
/// malformed first message is refused with 500 and gRPC code 2, as etcd's gateway does.
async fn keepalive(app: App, body: Body) -> Response {
    let mut reader = RequestReader::new(body);
    let first = match reader.next::<LeaseIdRequest>().await {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => return StoreError::StreamDecode(e.to_string()).into_response(),
        None => None,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut next = first;
        while let Some(req) = next {
            let ttl = app
                .mvcc
                .lessor
                .lock()
                .unwrap()
                .renew(req.id, Instant::now())
                .unwrap_or(0);
            let resp = LeaseKeepAliveResponse {
                header: Some(app.mvcc.header(app.mvcc.current_rev())),
                id: req.id,
                ttl,
            };
            let mut line = serde_json::to_string(&StreamLine {
                result: Some(resp),
                error: None,
            })
            .unwrap_or_default();
            line.push('\n');
            if tx.send(Bytes::from(line)).await.is_err() {
                return;
            }
            next = tokio::select! {
                _ = app.shutdown.cancelled() => return,
                r = reader.next::<LeaseIdRequest>() => match r {
                    Some(Ok(r)) => Some(r),
                    _ => None,
                }
            };
        }
    });
    wire::stream_response(rx)
}
