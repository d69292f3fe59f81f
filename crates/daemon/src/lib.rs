//! Process plumbing shared by every rkube binary: tracing setup, the one shutdown path,
//! Go-style duration flags, free loopback ports for child processes, and a tiny
//! Prometheus registry with its health/metrics server.
//! It owns no component logic.

pub mod duration;
pub mod health;
pub mod metrics;
pub mod port;
pub mod serve;
pub mod shutdown;
pub mod tls;

pub use duration::{parse_duration, GoDuration};

/// The leader-election flags of the controller-manager and the scheduler (upstream's names).
#[derive(clap::Args, Clone, Debug)]
pub struct LeaderFlags {
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    #[arg(long, default_value = "15s")]
    pub leader_elect_lease_duration: GoDuration,
    #[arg(long, default_value = "10s")]
    pub leader_elect_renew_deadline: GoDuration,
    #[arg(long, default_value = "2s")]
    pub leader_elect_retry_period: GoDuration,
}

impl LeaderFlags {
    /// (lease duration, renew deadline, retry period) when leader election is on.
    pub fn timing(
        &self,
    ) -> Option<(
        std::time::Duration,
        std::time::Duration,
        std::time::Duration,
    )> {
        self.leader_elect.then(|| {
            (
                self.leader_elect_lease_duration.into(),
                self.leader_elect_renew_deadline.into(),
                self.leader_elect_retry_period.into(),
            )
        })
    }
}
pub use shutdown::{shutdown_token, ShutdownToken};

/// Upstream's serving flags: a certificate and key for HTTPS, and a CA for client
/// certificates (the apiserver and the kubelet-agent, as kube-apiserver and kubelet name them).
#[derive(clap::Args, Clone, Debug)]
pub struct TlsFlags {
    /// Serve HTTPS with this PEM certificate (chain) ...
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// ... and its PEM private key.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<std::path::PathBuf>,
    /// Verify client certificates against this CA.
    #[arg(long, requires = "tls_cert_file")]
    pub client_ca_file: Option<std::path::PathBuf>,
}

impl TlsFlags {
    /// The files, when HTTPS is asked for (client certificates verified, not required).
    pub fn files(&self) -> Option<tls::TlsFiles> {
        Some(tls::TlsFiles {
            cert: self.tls_cert_file.clone()?,
            key: self.tls_private_key_file.clone()?,
            client_ca: self.client_ca_file.clone(),
            require_client_cert: false,
        })
    }
}

/// The HTTP front's limits as flags (`serve::Limits`), shared by the servers.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeFlags {
    /// Open connections the server accepts; more are closed at once.
    #[arg(long, default_value_t = 16_384)]
    pub max_connections: usize,
    /// Open connections one client address may hold.
    #[arg(long, default_value_t = 8_192)]
    pub max_connections_per_client: usize,
    /// A request's line and headers must arrive within this.
    #[arg(long, default_value = "15s")]
    pub http_header_read_timeout: GoDuration,
    /// A connection with no request in flight and nothing moving is closed after this (longer
    /// than clients keep idle pooled connections, 90 s for client-go and reqwest).
    #[arg(long, default_value = "120s")]
    pub http_idle_timeout: GoDuration,
    /// A response that cannot be written for this long (its client stopped reading) closes
    /// the connection.
    #[arg(long, default_value = "60s")]
    pub http_write_timeout: GoDuration,
}

impl ServeFlags {
    pub fn limits(&self) -> serve::Limits {
        serve::Limits {
            max_connections: self.max_connections.max(1),
            max_connections_per_ip: self.max_connections_per_client.max(1),
            header_read_timeout: self.http_header_read_timeout.into(),
            idle_timeout: self.http_idle_timeout.into(),
            write_timeout: self.http_write_timeout.into(),
            ..Default::default()
        }
    }
}

/// Installs the global tracing subscriber. `RUST_LOG` selects levels (default `info`).
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        // Colours for a terminal only: a log file (the cluster CLI's) gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
