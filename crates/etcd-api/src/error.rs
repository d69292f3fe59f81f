//! `EtcdError`: what a call to etcd can fail with, and the decoding of etcd's error JSON.

use crate::types::ErrorBody;

/// gRPC status codes that etcd puts in the `code` field of its error JSON.
pub mod grpc_code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const NOT_FOUND: i32 = 5;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const UNAVAILABLE: i32 = 14;
}

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd answered with its error JSON.
    #[error("{message}")]
    Api {
        status: u16,
        code: i32,
        message: String,
    },
    /// No endpoint could be reached, or the connection broke.
    #[error("etcd transport error: {0}")]
    Transport(String),
    /// The response was not the JSON we expected.
    #[error("etcd response could not be decoded: {0}")]
    Decode(String),
}

impl EtcdError {
    pub fn message(&self) -> String {
        self.to_string()
    }
    /// `etcdserver: mvcc: required revision has been compacted`
    pub fn is_compacted(&self) -> bool {
        matches!(self, EtcdError::Api { message, .. } if message.contains("required revision has been compacted"))
    }
    /// `etcdserver: mvcc: required revision is a future revision`
    pub fn is_future_revision(&self) -> bool {
        matches!(self, EtcdError::Api { message, .. } if message.contains("required revision is a future revision"))
    }
    pub fn is_lease_not_found(&self) -> bool {
        matches!(self, EtcdError::Api { message, .. } if message.contains("requested lease not found"))
    }
    pub fn is_transport(&self) -> bool {
        matches!(self, EtcdError::Transport(_))
    }
}

impl From<reqwest::Error> for EtcdError {
    fn from(e: reqwest::Error) -> Self {
        EtcdError::Transport(e.to_string())
    }
}

pub(crate) fn api_error(status: u16, body: &[u8]) -> EtcdError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) if !e.message.is_empty() || !e.error.is_empty() => EtcdError::Api {
            status,
            code: e.code,
            message: if e.message.is_empty() {
                e.error
            } else {
                e.message
            },
        },
        _ => EtcdError::Api {
            status,
            code: 0,
            message: format!("HTTP {status}: {}", String::from_utf8_lossy(body).trim()),
        },
    }
}
