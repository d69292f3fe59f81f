//! The conformance suite: exact observable behaviour of etcd 3.4's JSON gateway (status codes
//! and response bodies, with only cluster/member IDs normalized), asserted against both
//! rkube-store and a real etcd.
//!
//! Known, accepted differences that are deliberately not asserted here:
//! - HTTP header details: `Grpc-Metadata-*` headers, CORS headers, and etcd's
//!   chunked-with-`Trailer` framing of gRPC errors (rkube sends the same JSON with a
//!   Content-Length).
//! - etcd's HTTP/1.1 half-duplex watch gateway: etcd answers nothing until the request body
//!   ends and hangs on bodies holding no answerable request (empty, `{}`, unknown cancel);
//!   rkube answers full-duplex streams immediately. Tests send complete bodies and never
//!   exercise the hangs.

mod grpc;
mod kv;
mod lease;
mod misc;
mod txn;
mod watch;

/// `name => name_rkube, name_etcd;` turns the async fn `name(&Server)` into two tests.
macro_rules! cases {
    ($($case:ident => $rkube:ident, $etcd:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $rkube() {
            if let Some(s) = $crate::harness::Server::start($crate::harness::Kind::Rkube).await {
                $case(&s).await;
            }
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $etcd() {
            if let Some(s) = $crate::harness::Server::start($crate::harness::Kind::Etcd).await {
                $case(&s).await;
            }
        }
    )*};
}
pub(crate) use cases;

/// A KeyValue as etcd writes it (zero fields omitted, in proto field order).
pub fn kv(key: &str, create: i64, modr: i64, version: i64, value: &str) -> String {
    kvl(key, create, modr, version, value, 0)
}

/// A KeyValue with a lease.
pub fn kvl(key: &str, create: i64, modr: i64, version: i64, value: &str, lease: i64) -> String {
    use crate::harness::b64;
    let mut s = format!(
        r#"{{"key":"{}","create_revision":"{create}","mod_revision":"{modr}","version":"{version}""#,
        b64(key.as_bytes())
    );
    if !value.is_empty() {
        s.push_str(&format!(r#","value":"{}""#, b64(value.as_bytes())));
    }
    if lease != 0 {
        s.push_str(&format!(r#","lease":"{lease}""#));
    }
    s.push('}');
    s
}

/// A DELETE event's kv: only the key and the deletion revision.
pub fn dkv(key: &str, modr: i64) -> String {
    format!(
        r#"{{"key":"{}","mod_revision":"{modr}"}}"#,
        crate::harness::b64(key.as_bytes())
    )
}
