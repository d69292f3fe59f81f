//! The small health + `/metrics` HTTP server every component runs beside its main work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::metrics::Registry;
use crate::ShutdownToken;

/// Readiness flag flipped by the component once it has synced.
#[derive(Clone, Default)]
pub struct Ready(Arc<AtomicBool>);

impl Ready {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct HealthState {
    registry: Arc<Registry>,
    ready: Ready,
}

/// Routes `/healthz`, `/livez`, `/readyz` and `/metrics`; mergeable into a component's own router.
pub fn router(registry: Arc<Registry>, ready: Ready) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(HealthState { registry, ready })
}

async fn readyz(State(s): State<HealthState>) -> (StatusCode, &'static str) {
    if s.ready.get() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics(State(s): State<HealthState>) -> ([(&'static str, &'static str); 1], String) {
    (
        [("content-type", "text/plain; version=0.0.4")],
        s.registry.render(),
    )
}

/// Serves the health router until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    ready: Ready,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    axum::serve(crate::nodelay(listener), router(registry, ready))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// What every component process starts with: a metrics registry (with the process's RSS), a
/// readiness flag, and the health/metrics server on `listener` running until `shutdown`.
pub struct Served {
    pub metrics: Arc<Registry>,
    pub ready: Ready,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Served {
    /// Stops the process (cancels `shutdown`) and waits for the server to finish.
    pub async fn stop(self, shutdown: &ShutdownToken) {
        shutdown.cancel();
        let _ = self.task.await;
    }
}

pub fn spawn(listener: TcpListener, shutdown: ShutdownToken) -> Served {
    let metrics = Registry::new();
    metrics.gauge_fn(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        &[],
        || crate::metrics::process_rss_bytes() as f64,
    );
    let ready = Ready::default();
    let task = tokio::spawn(serve(listener, metrics.clone(), ready.clone(), shutdown));
    Served {
        metrics,
        ready,
        task,
    }
}
