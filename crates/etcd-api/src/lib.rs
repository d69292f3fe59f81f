//! etcd's v3 API: the wire types exactly as etcd's gRPC gateway maps them to JSON, the gRPC
//! messages and stubs (`pb`) with the conversion between the two, and an async client
//! (`EtcdClient`) that speaks either transport to rkube-store or to a real etcd cluster.
//!
//! Wire conventions (see `shared/reference/etcd-v3-json-api.md`): bytes are base64, int64 are JSON
//! strings on output and strings or numbers on input, zero values are omitted on output, output
//! uses proto field names and input accepts proto or lowerCamel names, enums are strings.

pub mod client;
pub mod codec;
pub mod error;
pub mod fuzz;
pub mod grpc;
pub mod pb;
pub mod types;
pub mod watch;

pub use client::{ClientTls, EndpointStatus, EtcdClient, EtcdError};
pub use types::*;
pub use watch::{WatchReceiver, WatchSender};
