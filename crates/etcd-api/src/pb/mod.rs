//! etcd's v3 gRPC API: the prost messages and tonic stubs generated from `proto/etcd.proto`
//! (`etcdserverpb`), and the one conversion between them and the JSON-gateway types.

pub mod convert;
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod etcdserverpb;

pub use etcdserverpb::*;
