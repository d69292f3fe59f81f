//! rkube-store: an etcd v3 compatible key-value server (gRPC API and JSON gateway) on redb.
//!
//! Layout: `apply` is the MVCC core (pure, synchronous), `index` the in-memory key index,
//! `backend` the redb file, `writer` the group-commit thread, `mvcc` the shared state and read
//! path, `watch` the hub and streams, `lease` the lessor, `service` the calls themselves,
//! `http` (the JSON gateway) and `grpc` the two wire fronts on one port, `error` the one
//! conversion to etcd's error JSON and gRPC statuses.

pub mod apply;
pub mod backend;
pub mod cli;
pub mod error;
pub mod grpc;
pub mod http;
pub mod index;
pub mod keyrange;
pub mod lease;
pub mod metrics;
pub mod mvcc;
pub mod protosize;
pub mod record;
pub mod reqstream;
pub mod service;
pub mod snapshot;
pub mod validate;
pub mod watch;
pub mod watch_stream;
pub mod wire;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rkube_daemon::metrics::{process_rss_bytes, Registry};
use rkube_daemon::ShutdownToken;
use tokio::net::TcpListener;

use crate::apply::WriteOp;
use crate::mvcc::Mvcc;

/// redb's page cache in MiB unless configured. Reads are rare here (the index answers
/// revisions, and the apiserver's watch cache the reads), so the cache mostly holds pages just
/// written: at 64 MiB it was half the store's memory with 10k pods, and 16 MiB measured the
/// same write, range and end-to-end rates (the OS page cache keeps the file either way).
pub const DEFAULT_CACHE_MB: usize = 16;

/// Validated configuration of one store process.
#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Keep everything in memory (redb's in-memory backend) and ignore `data_dir`: a store
    /// for tests, gone with the process.
    pub ephemeral: bool,
    /// Periodic compaction keeps this much history; zero disables it.
    pub auto_compaction_retention: Duration,
    /// Interval of progress notifications to watches that asked; zero disables them.
    pub watch_progress_notify_interval: Duration,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    /// redb page cache size (`DEFAULT_CACHE_MB`).
    pub cache_bytes: usize,
    /// Queued messages per watch stream before its slowest watcher is cancelled.
    pub watch_buffer: usize,
    /// The smallest TTL a lease gets.
    pub min_lease_ttl: i64,
    /// Watchers the store holds at once; more are refused.
    pub max_watchers: usize,
    /// Watchers one watch stream may hold.
    pub max_watchers_per_stream: usize,
    /// HTTPS, and client certificates as etcd's `--client-cert-auth` (`--cert-file`,
    /// `--key-file`, `--trusted-ca-file`).
    pub tls: Option<rkube_daemon::tls::TlsFiles>,
    /// What clients may hold (connections, timeouts).
    pub limits: rkube_daemon::serve::Limits,
    /// Only client certificates with this common name may use the store (etcd's
    /// `--client-cert-allowed-cn`): every component's certificate comes from the same CA, and
    /// only the apiserver may touch storage.
    pub client_cert_allowed_cn: Option<String>,
}

impl Config {
    pub fn new(data_dir: PathBuf) -> Self {
        Config {
            data_dir,
            ephemeral: false,
            auto_compaction_retention: Duration::ZERO,
            watch_progress_notify_interval: Duration::from_secs(600),
            max_request_bytes: 1536 * 1024,
            max_txn_ops: 128,
            cache_bytes: DEFAULT_CACHE_MB * 1024 * 1024,
            watch_buffer: 1024,
            min_lease_ttl: 2,
            max_watchers: 100_000,
            max_watchers_per_stream: 10_000,
            tls: None,
            limits: Default::default(),
            client_cert_allowed_cn: None,
        }
    }
}

/// Serves the store on `listener` until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    let registry = Registry::new();
    let metrics = metrics::StoreMetrics::new(registry.clone());
    let cfg = config.clone();
    let mvcc = tokio::task::spawn_blocking(move || {
        let dir = (!cfg.ephemeral).then_some(cfg.data_dir.as_path());
        Mvcc::open(dir, cfg.cache_bytes, cfg.min_lease_ttl, metrics)
    })
    .await??;
    register_gauges(&registry, &mvcc);
    let writer = writer::Writer::start(mvcc.clone());

    tokio::spawn(expire_leases(
        mvcc.clone(),
        writer.clone(),
        shutdown.clone(),
    ));
    if !config.watch_progress_notify_interval.is_zero() {
        tokio::spawn(progress_notify(
            mvcc.clone(),
            config.watch_progress_notify_interval,
            shutdown.clone(),
        ));
    }
    if !config.auto_compaction_retention.is_zero() {
        tokio::spawn(auto_compact(
            mvcc.clone(),
            writer.clone(),
            config.auto_compaction_retention,
            shutdown.clone(),
        ));
    }

    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let app = service::App {
        mvcc: mvcc.clone(),
        writer,
        max_request_bytes: config.max_request_bytes,
        max_txn_ops: config.max_txn_ops,
        watch: Arc::new(watch_stream::WatchConfig {
            buffer: config.watch_buffer,
            max_watchers: config.max_watchers,
            max_watchers_per_stream: config.max_watchers_per_stream,
        }),
        shutdown: shutdown.clone(),
        client_urls: vec![format!("{scheme}://{}", listener.local_addr()?)],
        snapshots: Arc::new(tokio::sync::Semaphore::new(grpc::SNAPSHOTS_AT_ONCE)),
        snapshot_dir: if config.ephemeral {
            std::env::temp_dir()
        } else {
            config.data_dir.clone()
        },
    };
    tracing::info!(addr = %listener.local_addr()?, data_dir = %config.data_dir.display(), ephemeral = config.ephemeral, "rkube-store serving");
    // gRPC is HTTP/2: offered by ALPN over TLS (and read from h2c's preface in the clear).
    let tls = config
        .tls
        .as_ref()
        .map(rkube_daemon::tls::server_config)
        .transpose()?
        .map(|c| {
            let mut c = (*c).clone();
            c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Arc::new(c)
        });
    let limits = rkube_daemon::serve::Limits {
        http2: true,
        ..config.limits.clone()
    };
    // An empty name allows nothing in particular (etcd ignores the flag when it is empty).
    let allowed_cn = config
        .client_cert_allowed_cn
        .clone()
        .filter(|c| !c.is_empty());
    let router = grpc::routes(&app).fallback_service(http::router(app));
    let router = match allowed_cn {
        None => router,
        Some(cn) => router.layer(axum::middleware::from_fn(move |req, next| {
            http::require_cn(cn.clone(), req, next)
        })),
    };
    rkube_daemon::serve::serve(listener, tls, router, http::identify(), limits, shutdown).await?;
    tracing::info!("rkube-store stopped");
    Ok(())
}

/// Gauges under etcd's own names where etcd has one (dashboards and alerts written for etcd
/// read them unchanged); a single member is always the leader.
fn register_gauges(registry: &Registry, mvcc: &Arc<Mvcc>) {
    for name in ["etcd_server_has_leader", "etcd_server_is_leader"] {
        registry.gauge_fn(
            name,
            "Whether the member has (is) a leader: always, alone.",
            &[],
            || 1.0,
        );
    }
    let m = mvcc.clone();
    registry.gauge_fn(
        "etcd_debugging_mvcc_current_revision",
        "The current revision.",
        &[],
        move || m.current_rev() as f64,
    );
    let m = mvcc.clone();
    registry.gauge_fn(
        "etcd_debugging_mvcc_compact_revision",
        "The compacted revision.",
        &[],
        move || m.state.read().unwrap().compact_rev as f64,
    );
    let m = mvcc.clone();
    registry.gauge_fn(
        "etcd_debugging_mvcc_keys_total",
        "Keys that currently exist or have history.",
        &[],
        move || m.state.read().unwrap().index.len() as f64,
    );
    let m = mvcc.clone();
    registry.gauge_fn(
        "etcd_mvcc_db_total_size_in_bytes",
        "Size of the redb file.",
        &[],
        move || m.backend.size() as f64,
    );
    let m = mvcc.clone();
    registry.gauge_fn(
        "etcd_debugging_mvcc_watcher_total",
        "Open watches.",
        &[],
        move || m.hub.watcher_count() as f64,
    );
    let m = mvcc.clone();
    registry.gauge_fn("rkube_store_leases", "Granted leases.", &[], move || {
        m.lessor.lock().unwrap().len() as f64
    });
    registry.gauge_fn(
        "process_resident_memory_bytes",
        "Resident set size.",
        &[],
        || process_rss_bytes() as f64,
    );
}

/// Revokes expired leases through the writer, so their keys' deletion is a normal revision.
async fn expire_leases(mvcc: Arc<Mvcc>, writer: writer::Writer, shutdown: ShutdownToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let expired = mvcc
            .lessor
            .lock()
            .unwrap()
            .expired(tokio::time::Instant::now());
        for id in expired {
            match writer.submit(WriteOp::LeaseRevoke(id)).await {
                Ok(_) => tracing::debug!(lease = id, "lease expired"),
                Err(error::StoreError::LeaseNotFound) => {}
                Err(e) => tracing::warn!(lease = id, error = %e, "revoking expired lease failed"),
            }
        }
    }
}

async fn progress_notify(mvcc: Arc<Mvcc>, every: Duration, shutdown: ShutdownToken) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => mvcc.hub.progress_tick(),
        }
    }
}

/// etcd's periodic compaction: every tenth of the retention (at most hourly), compact to the
/// revision that was current one retention ago.
async fn auto_compact(
    mvcc: Arc<Mvcc>,
    writer: writer::Writer,
    retention: Duration,
    shutdown: ShutdownToken,
) {
    let every = (retention / 10).clamp(Duration::from_millis(100), Duration::from_secs(3600));
    let mut samples: std::collections::VecDeque<(tokio::time::Instant, i64)> = Default::default();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = tokio::time::Instant::now();
        samples.push_back((now, mvcc.current_rev()));
        let mut target = None;
        while let Some((t, rev)) = samples.front().copied() {
            if now.duration_since(t) >= retention {
                target = Some(rev);
                samples.pop_front();
            } else {
                break;
            }
        }
        let Some(rev) = target else { continue };
        let compacted = mvcc.state.read().unwrap().compact_rev;
        if rev <= compacted {
            continue;
        }
        match writer.submit(WriteOp::Compact(rev)).await {
            Ok(_) => tracing::info!(revision = rev, "auto compaction finished"),
            Err(e) => tracing::warn!(revision = rev, error = %e, "auto compaction failed"),
        }
    }
}
