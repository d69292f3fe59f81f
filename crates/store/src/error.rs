//! `StoreError`: every failure the store reports, and the one place it becomes etcd's error JSON
//! (`{"error","message","code"}` with the gRPC code, and the HTTP status etcd's gateway uses).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rkube_etcd_api::client::grpc_code;
use rkube_etcd_api::ErrorBody;

pub const ERR_EMPTY_KEY: &str = "etcdserver: key is not provided";
pub const ERR_KEY_NOT_FOUND: &str = "etcdserver: key not found";
pub const ERR_VALUE_PROVIDED: &str = "etcdserver: value is provided";
pub const ERR_LEASE_PROVIDED: &str = "etcdserver: lease is provided";
pub const ERR_TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub const ERR_DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
pub const ERR_REQUEST_TOO_LARGE: &str = "etcdserver: request is too large";

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// gRPC InvalidArgument: malformed input or a request etcd refuses to apply.
    #[error("{0}")]
    InvalidArgument(String),
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    /// A request larger than the gRPC receive limit (`--max-request-bytes` + 512 KiB).
    #[error("grpc: received message larger than max ({0} vs. {1})")]
    MessageTooLarge(usize, usize),
    #[error("Not Found")]
    UnknownPath,
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    #[error("etcdserver: server stopped")]
    Stopped,
    /// A limit on what clients may hold (leases, watchers): gRPC ResourceExhausted.
    #[error("{0}")]
    Exhausted(String),
    /// A malformed message on a streaming endpoint (gRPC Unknown, HTTP 500 on etcd's gateway).
    #[error("{0}")]
    StreamDecode(String),
    /// Disk or internal failure; logged once where it is turned into a response.
    #[error("etcdserver: {0}")]
    Internal(String),
}

impl StoreError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        StoreError::InvalidArgument(msg.into())
    }

    /// The gRPC code etcd reports.
    pub fn grpc_code(&self) -> i32 {
        match self {
            StoreError::InvalidArgument(_) => grpc_code::INVALID_ARGUMENT,
            StoreError::Compacted | StoreError::FutureRevision | StoreError::LeaseTtlTooLarge => {
                grpc_code::OUT_OF_RANGE
            }
            StoreError::LeaseNotFound | StoreError::UnknownPath => grpc_code::NOT_FOUND,
            StoreError::LeaseExists => grpc_code::FAILED_PRECONDITION,
            StoreError::MessageTooLarge(..) | StoreError::Exhausted(_) => 8,
            StoreError::MethodNotAllowed => 12,
            StoreError::Stopped => grpc_code::UNAVAILABLE,
            StoreError::StreamDecode(_) => 2,
            StoreError::Internal(_) => 13,
        }
    }

    /// The HTTP status etcd's grpc-gateway maps the gRPC code to.
    pub fn http_status(&self) -> StatusCode {
        StatusCode::from_u16(rkube_etcd_api::grpc::http_status(self.grpc_code()))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The gRPC status etcd's gRPC server answers with.
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(tonic::Code::from(self.grpc_code()), self.to_string())
    }

    pub fn body(&self) -> ErrorBody {
        let msg = self.to_string();
        ErrorBody {
            error: msg.clone(),
            message: msg,
            code: self.grpc_code(),
        }
    }
}

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        StoreError::Internal(e.to_string())
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Internal(e.to_string()) }
        }
    )*};
}
from_redb!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::DatabaseError
);

impl IntoResponse for StoreError {
    fn into_response(self) -> Response {
        if matches!(self, StoreError::Internal(_)) {
            tracing::error!(error = %self, "request failed");
        }
        let status = self.http_status();
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        (status, [("content-type", "application/json")], body).into_response()
    }
}
