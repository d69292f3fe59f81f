//! Process plumbing shared by every rkube binary: tracing setup, the one shutdown path,
//! Go-style duration flags, and a tiny Prometheus registry with its health/metrics server.
//! It owns no component logic.

pub mod duration;
pub mod health;
pub mod metrics;
pub mod shutdown;

pub use duration::{parse_duration, GoDuration};
pub use shutdown::{shutdown_token, ShutdownToken};

/// Installs the global tracing subscriber. `RUST_LOG` selects levels (default `info`).
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A listener whose accepted connections have `TCP_NODELAY` set: watch streams and small
/// replies must not wait for Nagle's algorithm (tens of milliseconds with delayed ACKs).
pub fn nodelay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<
    tokio::net::TcpListener,
    impl FnMut(&mut tokio::net::TcpStream) + Send + 'static,
> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    })
}
