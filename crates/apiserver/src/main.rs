//! `rkube-apiserver`: parses upstream-style flags and runs the API server.

use clap::Parser;

/// mimalloc (`rkube-alloc`): under load, glibc's malloc/free and its arena locks took about a
/// quarter of the apiserver's CPU; with mimalloc the 10k-pod end-to-end run needs ~30% less
/// apiserver CPU (docs/benchmarks.md). Only here: in the other components it cost more memory
/// than it saved time.
#[global_allocator]
static ALLOCATOR: rkube_alloc::MiMalloc = rkube_alloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    rkube_alloc::start_purger();
    rkube_daemon::init_tracing();
    let flags = rkube_apiserver::cli::Flags::parse();
    rkube_apiserver::cli::run(flags, rkube_daemon::shutdown_token()).await
}
