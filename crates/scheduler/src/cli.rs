//! `rkube-scheduler`'s command line and how it becomes a `Config`; the `rkube-scheduler` binary and `rkube scheduler` share it.

use anyhow::Context;
use clap::Parser;
use rkube_client::ClientFlags;
use rkube_daemon::LeaderFlags;

#[derive(Parser, Debug)]
#[command(name = "rkube-scheduler", version, about = "The scheduler of rkube")]
pub struct Flags {
    #[command(flatten)]
    client: ClientFlags,
    /// Address for /healthz and /metrics.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: String,
    #[arg(long, default_value_t = 10259)]
    secure_port: u16,
    #[command(flatten)]
    leader: LeaderFlags,
    /// Percentage of nodes to find feasible before scoring; 0 picks it from the cluster size.
    #[arg(long, default_value_t = 0)]
    percentage_of_nodes_to_score: u32,
    /// Events per second; over it events are dropped. 0 = unlimited.
    #[arg(long, default_value_t = 50.0)]
    event_qps: f32,
    #[arg(long, default_value_t = 100)]
    event_burst: u32,
}

/// Runs the component as its binary does with these flags, until `shutdown`.
pub async fn run(f: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let mut config = crate::Config::new(f.client.config("rkube-scheduler")?);
    config.leader = f.leader.timing().map(|(lease, renew, retry)| {
        rkube_client::leader::Settings::timed("kube-scheduler", lease, renew, retry)
    });
    config.percentage_of_nodes_to_score = f.percentage_of_nodes_to_score;
    config.event_qps = f.event_qps;
    config.event_burst = f.event_burst;
    let addr = format!("{}:{}", f.bind_address, f.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    crate::run(config, listener, shutdown).await
}
