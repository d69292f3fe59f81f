//! `rkube-controller-manager`: parses upstream-style flags and runs the controllers.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_daemon::init_tracing();
    let flags = rkube_controller_manager::cli::Flags::parse();
    rkube_controller_manager::cli::run(flags, rkube_daemon::shutdown_token()).await
}
