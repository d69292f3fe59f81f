//! `rkube-store`: parses etcd-style flags and runs the store.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_daemon::init_tracing();
    let flags = rkube_store::cli::Flags::parse();
    rkube_store::cli::run(flags, rkube_daemon::shutdown_token()).await
}
