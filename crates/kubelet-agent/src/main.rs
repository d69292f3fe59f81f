//! `rkube-kubelet-agent`: parses kubelet-style flags and runs the simulated node(s).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_daemon::init_tracing();
    let flags = rkube_kubelet_agent::cli::Flags::parse();
    rkube_kubelet_agent::cli::run(flags, rkube_daemon::shutdown_token()).await
}
