//! `rkube-controller-manager`'s command line and how it becomes a `Config`; the binary and `rkube controller-manager` share it.

use anyhow::Context;
use clap::Parser;
use rkube_client::ClientFlags;
use rkube_daemon::{GoDuration, LeaderFlags};

#[derive(Parser, Debug)]
#[command(
    name = "rkube-controller-manager",
    version,
    about = "The controller manager of rkube"
)]
pub struct Flags {
    #[command(flatten)]
    client: ClientFlags,
    /// Address for /healthz and /metrics.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: String,
    #[arg(long, default_value_t = 10257)]
    secure_port: u16,
    /// Controllers to run: `*` for all, `-name` to turn one off.
    #[arg(long, default_value = "*", value_delimiter = ',')]
    controllers: Vec<String>,
    #[command(flatten)]
    leader: LeaderFlags,
    #[arg(long, default_value_t = 5)]
    concurrent_deployment_syncs: usize,
    #[arg(long, default_value_t = 5)]
    concurrent_replicaset_syncs: usize,
    #[arg(long, default_value_t = 5)]
    concurrent_job_syncs: usize,
    /// Finished pods kept before the oldest are deleted; 0 keeps them all.
    #[arg(long, default_value_t = 12500)]
    terminated_pod_gc_threshold: usize,
    #[arg(long, default_value_t = 20)]
    concurrent_gc_syncs: usize,
    #[arg(long, default_value = "15s")]
    horizontal_pod_autoscaler_sync_period: GoDuration,
    #[arg(long, default_value = "40s")]
    node_monitor_grace_period: GoDuration,
    #[arg(long, default_value = "5s")]
    node_monitor_period: GoDuration,
    /// The CA bundle published to every namespace as the `kube-root-ca.crt` ConfigMap
    /// (default: the CA this client trusts the apiserver by).
    #[arg(long)]
    root_ca_file: Option<std::path::PathBuf>,
    /// The CA certificate (PEM) approved CertificateSigningRequests are signed with.
    #[arg(long, requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<std::path::PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<std::path::PathBuf>,
}

/// Runs the component as its binary does with these flags, until `shutdown`.
pub async fn run(f: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let client = f.client.config("rkube-controller-manager")?;
    let mut config = crate::Config::new(client);
    config.controllers = f.controllers;
    config.leader = f.leader.timing().map(|(lease, renew, retry)| {
        rkube_client::leader::Settings::timed("kube-controller-manager", lease, renew, retry)
    });
    config.deployment_workers = f.concurrent_deployment_syncs;
    config.replicaset_workers = f.concurrent_replicaset_syncs;
    config.gc_workers = f.concurrent_gc_syncs;
    config.job_workers = f.concurrent_job_syncs;
    config.terminated_pod_gc_threshold = f.terminated_pod_gc_threshold;
    config.hpa_sync_period = f.horizontal_pod_autoscaler_sync_period.into();
    config.node_monitor_grace_period = f.node_monitor_grace_period.into();
    config.node_monitor_period = f.node_monitor_period.into();
    config.root_ca = f
        .root_ca_file
        .as_deref()
        .map(std::fs::read_to_string)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--root-ca-file: {e}"))?;
    if let (Some(cert), Some(key)) = (&f.cluster_signing_cert_file, &f.cluster_signing_key_file) {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
        };
        config.signing = Some(crate::csrsigning::SigningCa {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        });
    }
    let addr = format!("{}:{}", f.bind_address, f.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    crate::run(config, listener, shutdown).await
}
