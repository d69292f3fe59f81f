//! `rkube-store`'s command line (etcd-style flags) and how it becomes a `Config`; the `rkube-store` binary and `rkube store` share it.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rkube_daemon::GoDuration;

#[derive(Parser, Debug)]
#[command(
    name = "rkube-store",
    version,
    about = "An etcd v3 compatible key-value store on redb"
)]
pub struct Flags {
    /// URL to serve clients on (the first of a comma-separated list is used).
    #[arg(
        long,
        env = "RKUBE_STORE_LISTEN_CLIENT_URLS",
        default_value = "http://127.0.0.1:2379"
    )]
    listen_client_urls: String,
    /// Directory holding the database file.
    #[arg(
        long,
        env = "RKUBE_STORE_DATA_DIR",
        default_value = "default.rkube-store"
    )]
    data_dir: PathBuf,
    /// History to keep: a Go duration ("5m") or a bare number of hours ("1"), as etcd's
    /// periodic mode; 0 disables automatic compaction.
    #[arg(long, default_value = "0")]
    auto_compaction_retention: String,
    /// Keep the data in memory only (nothing written to --data-dir; gone when the process
    /// exits): a store for tests.
    #[arg(long)]
    ephemeral: bool,
    /// Interval of progress notifications to watches that requested them.
    #[arg(long, default_value = "10m")]
    watch_progress_notify_interval: GoDuration,
    /// Largest accepted request, in bytes.
    #[arg(long, default_value_t = 1536 * 1024)]
    max_request_bytes: usize,
    /// Most operations in one Txn.
    #[arg(long, default_value_t = 128)]
    max_txn_ops: usize,
    /// redb page cache in MiB.
    #[arg(long, default_value_t = crate::DEFAULT_CACHE_MB)]
    cache_size_mb: usize,
    #[command(flatten)]
    serve: rkube_daemon::ServeFlags,
    /// Serve HTTPS with this certificate (then --listen-client-urls are https:// URLs).
    #[arg(long)]
    cert_file: Option<PathBuf>,
    /// The certificate's private key.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Verify client certificates against this CA.
    #[arg(long)]
    trusted_ca_file: Option<PathBuf>,
    /// Only client certificates with this common name may use the store.
    #[arg(long)]
    client_cert_allowed_cn: Option<String>,
    /// Require a client certificate signed by --trusted-ca-file (etcd's flag).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    client_cert_auth: bool,
}

fn parse_retention(s: &str) -> anyhow::Result<Duration> {
    if let Ok(hours) = s.trim().parse::<f64>() {
        anyhow::ensure!(
            hours >= 0.0,
            "--auto-compaction-retention must not be negative"
        );
        return Ok(Duration::from_secs_f64(hours * 3600.0));
    }
    rkube_daemon::parse_duration(s).map_err(|e| anyhow::anyhow!("--auto-compaction-retention: {e}"))
}

/// The address of the first client URL, which must be https:// exactly when TLS is on.
fn listen_addr(urls: &str, tls: bool) -> anyhow::Result<String> {
    let first = urls.split(',').next().unwrap_or_default().trim();
    let scheme = if tls { "https://" } else { "http://" };
    let addr = first.strip_prefix(scheme).with_context(|| {
        format!("--listen-client-urls must be {scheme} URLs here, got {first:?}")
    })?;
    Ok(addr.trim_end_matches('/').to_string())
}

/// Runs the component as its binary does with these flags, until `shutdown`.
pub async fn run(flags: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let mut config = crate::Config::new(flags.data_dir);
    config.ephemeral = flags.ephemeral;
    config.auto_compaction_retention = parse_retention(&flags.auto_compaction_retention)?;
    config.watch_progress_notify_interval = flags.watch_progress_notify_interval.into();
    config.max_request_bytes = flags.max_request_bytes;
    config.max_txn_ops = flags.max_txn_ops;
    config.cache_bytes = flags.cache_size_mb * 1024 * 1024;
    config.limits = flags.serve.limits();
    config.tls = match (&flags.cert_file, &flags.key_file) {
        (Some(cert), Some(key)) => Some(rkube_daemon::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: flags.trusted_ca_file.clone(),
            require_client_cert: flags.client_cert_auth,
        }),
        (None, None) => None,
        _ => anyhow::bail!("--cert-file and --key-file go together"),
    };
    anyhow::ensure!(
        !flags.client_cert_auth || flags.trusted_ca_file.is_some(),
        "--client-cert-auth needs --trusted-ca-file"
    );
    anyhow::ensure!(
        flags.client_cert_allowed_cn.is_none() || flags.client_cert_auth,
        "--client-cert-allowed-cn needs --client-cert-auth"
    );
    config.client_cert_allowed_cn = flags.client_cert_allowed_cn;
    let addr = listen_addr(&flags.listen_client_urls, config.tls.is_some())?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    crate::run(config, listener, shutdown).await
}
