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

    /// Counts one request and observes its latency.
    pub fn observe_request(&self, method: &str, code: &str, seconds: f64) {
        self.registry
            .counter(
                "grpc_server_handled_total",
                "Requests by method and gRPC code.",
                &[("grpc_method", method), ("grpc_code", code)],
            )
            .inc();
        self.registry
            .histogram(
                "grpc_server_handling_seconds",
                "Request latency by method.",
                &[("grpc_method", method)],
                LATENCY_BUCKETS,
            )
            .observe(seconds);
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
