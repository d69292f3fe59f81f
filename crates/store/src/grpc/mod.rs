//! etcd's gRPC API on the store (`etcdserverpb.KV`, `Watch`, `Lease`, `Cluster`,
//! `Maintenance`): tonic services over the same typed calls as the JSON gateway
//! (`crate::service`), mounted in the same router, so one port serves gRPC over HTTP/2 and
//! the gateway over HTTP/1.1 as etcd's does. Messages are converted at the edge
//! (`rkube_etcd_api::pb::convert`); watch events are encoded once per event for every gRPC
//! watcher (`crate::watch::event`).

mod kv;
mod lease;
mod maintenance;
mod watch;

pub use maintenance::SNAPSHOTS_AT_ONCE;

use std::future::Future;
use std::time::Instant;

use rkube_etcd_api::pb;

use crate::error::StoreError;
use crate::http::GRPC_OVERHEAD;
use crate::service::App;

/// The gRPC services as routes to merge into the store's router. Requests larger than
/// `--max-request-bytes` + 512 KiB are refused as etcd's gRPC server refuses them.
pub fn routes(app: &App) -> axum::Router {
    let max = app.max_request_bytes + GRPC_OVERHEAD;
    tonic::service::Routes::new(
        pb::kv_server::KvServer::new(kv::Kv(app.clone())).max_decoding_message_size(max),
    )
    .add_service(
        pb::lease_server::LeaseServer::new(lease::Lease(app.clone()))
            .max_decoding_message_size(max),
    )
    .add_service(
        pb::cluster_server::ClusterServer::new(maintenance::Cluster(app.clone()))
            .max_decoding_message_size(max),
    )
    .add_service(
        pb::maintenance_server::MaintenanceServer::new(maintenance::Maintenance(app.clone()))
            .max_decoding_message_size(max),
    )
    .add_service(watch::WatchService::new(app.clone(), max))
    .into_axum_router()
    .layer(axum::middleware::map_response(etcd_answer))
}

/// tonic refuses an oversized request with OutOfRange in its own words; etcd's gRPC server
/// (grpc-go) with ResourceExhausted and `grpc: received message larger than max (N vs. M)`.
/// Clients see etcd's.
///
/// Every gRPC answer also carries `x-rkube-store` (see `rkube_etcd_api::grpc`).
async fn etcd_answer(mut resp: axum::response::Response) -> axum::response::Response {
    resp.headers_mut().insert(
        rkube_etcd_api::grpc::RKUBE_STORE_HEADER,
        axum::http::HeaderValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    let Some(status) = tonic::Status::from_header_map(resp.headers()) else {
        return resp;
    };
    let Some(rest) = status
        .message()
        .strip_prefix("Error, decoded message length too large: found ")
    else {
        return resp;
    };
    let numbers: Vec<&str> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    if status.code() != tonic::Code::OutOfRange || numbers.len() != 2 {
        return resp;
    }
    let etcd = tonic::Status::resource_exhausted(format!(
        "grpc: received message larger than max ({} vs. {})",
        numbers[0], numbers[1]
    ));
    let _ = etcd.add_header(resp.headers_mut());
    resp
}

/// Runs one unary call, counts it under etcd's gRPC metric names, and converts its result.
async fn unary<T, U>(
    app: &App,
    path: &str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<tonic::Response<U>, tonic::Status>
where
    U: From<T>,
{
    let started = Instant::now();
    let result = call.await;
    let code = result.as_ref().err().map_or(0, StoreError::grpc_code);
    app.mvcc
        .metrics
        .observe_request(path, code, started.elapsed().as_secs_f64());
    result
        .map(|v| tonic::Response::new(v.into()))
        .map_err(|e| e.to_status())
}
