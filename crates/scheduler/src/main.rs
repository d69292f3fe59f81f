//! `rkube-scheduler`: parses upstream-style flags and runs the scheduler.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_daemon::init_tracing();
    let flags = rkube_scheduler::cli::Flags::parse();
    rkube_scheduler::cli::run(flags, rkube_daemon::shutdown_token()).await
}
