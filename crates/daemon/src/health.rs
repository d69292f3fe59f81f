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
