//! The one shutdown path: SIGINT or SIGTERM cancel a single token that every server selects on.

pub use tokio_util::sync::CancellationToken as ShutdownToken;

/// Returns a token cancelled on the first SIGINT or SIGTERM. A second signal exits at once,
/// so an operator is never stuck behind a drain that hangs.
pub fn shutdown_token() -> ShutdownToken {
    let token = ShutdownToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_signal().await;
        tracing::info!("shutdown signal received, draining");
        t.cancel();
        wait_signal().await;
        tracing::warn!("second shutdown signal, exiting immediately");
        std::process::exit(130);
    });
    token
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
