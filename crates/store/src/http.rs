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
use rkube_etcd_api::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::*;
use crate::reqstream::RequestReader;
pub use crate::service::{App, ETCD_CLUSTER_VERSION, ETCD_VERSION};
use crate::{protosize, wire};

/// gRPC's receive limit is `--max-request-bytes` plus this overhead (etcd's `grpcOverheadBytes`).
pub const GRPC_OVERHEAD: usize = 512 * 1024;

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

/// A gRPC call (answered with gRPC statuses, not the gateway's JSON).
fn is_grpc(req: &Request) -> bool {
    req.headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
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
        if is_grpc(&req) {
            return tonic::Status::unauthenticated(msg).into_http();
        }
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
    // gRPC calls to services or methods the store does not serve (Auth, member changes).
    if is_grpc(&req) {
        let msg = format!("unknown method {}", req.uri().path());
        return tonic::Status::unimplemented(msg).into_http();
    }
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

/// A unary call on the gateway: its body parsed as the request (and held to the size gRPC
/// would accept), then the call itself.
async fn unary(app: &App, method: &str, body: Body) -> Result<Response, StoreError> {
    let bytes = read_body(body, app.max_request_bytes).await?;
    let max = app.max_request_bytes;
    match method {
        "kv/range" => {
            let req: RangeRequest = parse(&bytes)?;
            check_grpc_size(protosize::range(&req), max)?;
            Ok(json_response(&app.range(req).await?))
        }
        "kv/put" => {
            let req: PutRequest = parse(&bytes)?;
            check_grpc_size(protosize::put(&req), max)?;
            Ok(json_response(&app.put(req).await?))
        }
        "kv/deleterange" => {
            let req: DeleteRangeRequest = parse(&bytes)?;
            check_grpc_size(protosize::delete_range(&req), max)?;
            Ok(json_response(&app.delete_range(req).await?))
        }
        "kv/txn" => {
            let req: TxnRequest = parse(&bytes)?;
            check_grpc_size(protosize::txn(&req), max)?;
            Ok(json_response(&app.txn(req).await?))
        }
        "kv/compaction" => {
            let req: CompactionRequest = parse(&bytes)?;
            Ok(json_response(&app.compact(req).await?))
        }
        "lease/grant" => {
            let req: LeaseGrantRequest = parse(&bytes)?;
            Ok(json_response(&app.lease_grant(req).await?))
        }
        "lease/revoke" | "kv/lease/revoke" => {
            let req: LeaseIdRequest = parse(&bytes)?;
            Ok(json_response(&app.lease_revoke(req.id).await?))
        }
        "lease/timetolive" | "kv/lease/timetolive" => {
            let req: LeaseTimeToLiveRequest = parse(&bytes)?;
            Ok(json_response(&app.lease_time_to_live(req)))
        }
        "lease/leases" | "kv/lease/leases" => {
            let _: serde_json::Value = parse(&bytes)?;
            Ok(json_response(&app.lease_leases()))
        }
        "maintenance/status" => {
            let _: serde_json::Value = parse(&bytes)?;
            Ok(json_response(&app.status()))
        }
        // No alarms are ever raised; etcd answers an empty alarm list with a bare `{}`.
        "maintenance/alarm" => {
            let _: serde_json::Value = parse(&bytes)?;
            Ok(json_response(&serde_json::json!({})))
        }
        "maintenance/hash" => {
            let _: serde_json::Value = parse(&bytes)?;
            Ok(json_response(&app.hash()))
        }
        _ => Err(StoreError::UnknownPath),
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
            let resp = app.lease_keepalive(req.id);
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
