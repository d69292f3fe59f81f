//! The store's Prometheus metrics, under etcd's names where etcd has them: requests and
//! latency by method (`grpc_server_*`), commit (fsync) latency; group-commit batch sizes and
//! Txn shapes are rkube's own; revision, db size, keys and watchers are computed at scrape
//! time.

use std::sync::Arc;

use rkube_daemon::metrics::{Histogram, Registry, LATENCY_BUCKETS};

#[derive(Clone)]
pub struct StoreMetrics {
    pub registry: Arc<Registry>,
    pub commit_seconds: Histogram,
    pub batch_size: Histogram,
}

pub const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

impl StoreMetrics {
    pub fn new(registry: Arc<Registry>) -> Self {
        let commit_seconds = registry.histogram(
            "etcd_disk_backend_commit_duration_seconds",
            "Latency of one group commit (redb write transaction with fsync).",
            &[],
            LATENCY_BUCKETS,
        );
        let batch_size = registry.histogram(
            "rkube_store_backend_commit_batch_size",
            "Write requests applied per group commit.",
            &[],
            BATCH_BUCKETS,
        );
        StoreMetrics {
            registry,
            commit_seconds,
            batch_size,
        }
    }

    /// Counts one unary request (`kv/range`, `lease/grant`, …) and observes its latency,
    /// labelled as etcd's gRPC server labels it.
    pub fn observe_request(&self, path: &str, code: i32, seconds: f64) {
        let (service, method) = grpc_method(path);
        let labels = [
            ("grpc_type", "unary"),
            ("grpc_service", service),
            ("grpc_method", method),
        ];
        let mut handled = labels.to_vec();
        handled.push(("grpc_code", grpc_code_name(code)));
        self.registry
            .counter(
                "grpc_server_handled_total",
                "Requests completed, by method and gRPC code.",
                &handled,
            )
            .inc();
        self.registry
            .histogram(
                "grpc_server_handling_seconds",
                "Request latency by method.",
                &labels,
                LATENCY_BUCKETS,
            )
            .observe(seconds);
    }

    /// Counts a watch stream opened.
    pub fn watch_started(&self) {
        self.registry
            .counter(
                "grpc_server_started_total",
                "Streams started, by method.",
                &[
                    ("grpc_type", "bidi_stream"),
                    ("grpc_service", "etcdserverpb.Watch"),
                    ("grpc_method", "Watch"),
                ],
            )
            .inc();
    }

    /// Counts Txn requests by shape, so the apiserver's create (`If mod_revision==0 Then Put`)
    /// can be seen arriving.
    pub fn observe_txn_shape(&self, shape: &str) {
        self.registry
            .counter(
                "rkube_store_txn_total",
                "Txn requests by shape.",
                &[("shape", shape)],
            )
            .inc();
    }
}

/// etcd's gRPC service and method for a JSON gateway path.
fn grpc_method(path: &str) -> (&'static str, &'static str) {
    match path
        .strip_prefix("kv/")
        .filter(|p| p.starts_with("lease/"))
        .unwrap_or(path)
    {
        "kv/range" => ("etcdserverpb.KV", "Range"),
        "kv/put" => ("etcdserverpb.KV", "Put"),
        "kv/deleterange" => ("etcdserverpb.KV", "DeleteRange"),
        "kv/txn" => ("etcdserverpb.KV", "Txn"),
        "kv/compaction" => ("etcdserverpb.KV", "Compact"),
        "lease/grant" => ("etcdserverpb.Lease", "LeaseGrant"),
        "lease/revoke" => ("etcdserverpb.Lease", "LeaseRevoke"),
        "lease/timetolive" => ("etcdserverpb.Lease", "LeaseTimeToLive"),
        "lease/leases" => ("etcdserverpb.Lease", "LeaseLeases"),
        "lease/keepalive" => ("etcdserverpb.Lease", "LeaseKeepAlive"),
        "maintenance/status" => ("etcdserverpb.Maintenance", "Status"),
        "maintenance/alarm" => ("etcdserverpb.Maintenance", "Alarm"),
        "maintenance/hash" => ("etcdserverpb.Maintenance", "Hash"),
        "maintenance/hashkv" => ("etcdserverpb.Maintenance", "HashKV"),
        "maintenance/defragment" => ("etcdserverpb.Maintenance", "Defragment"),
        "cluster/member/list" => ("etcdserverpb.Cluster", "MemberList"),
        _ => ("etcdserverpb.Unknown", "Unknown"),
    }
}

/// gRPC's name for a status code (as `grpc_code` labels carry it).
fn grpc_code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "Canceled",
        "Unknown",
        "InvalidArgument",
        "DeadlineExceeded",
        "NotFound",
        "AlreadyExists",
        "PermissionDenied",
        "ResourceExhausted",
        "FailedPrecondition",
        "Aborted",
        "OutOfRange",
        "Unimplemented",
        "Internal",
        "Unavailable",
        "DataLoss",
        "Unauthenticated",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("Unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_labelled_as_etcds_grpc_server_labels_them() {
        assert_eq!(grpc_method("kv/range"), ("etcdserverpb.KV", "Range"));
        assert_eq!(
            grpc_method("kv/lease/revoke"),
            ("etcdserverpb.Lease", "LeaseRevoke")
        );
        assert_eq!(grpc_method("nonsense"), ("etcdserverpb.Unknown", "Unknown"));
        assert_eq!(grpc_code_name(0), "OK");
        assert_eq!(grpc_code_name(14), "Unavailable");
        assert_eq!(grpc_code_name(99), "Unknown");
        assert_eq!(grpc_code_name(-1), "Unknown");
        let m = StoreMetrics::new(Registry::new());
        m.observe_request("kv/txn", 9, 0.01);
        let text = m.registry.render();
        assert!(text.contains(r#"grpc_server_handled_total{grpc_type="unary",grpc_service="etcdserverpb.KV",grpc_method="Txn",grpc_code="FailedPrecondition"} 1"#), "{text}");
    }
}
