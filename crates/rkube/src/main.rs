//! `rkube`: every rkube program in one binary. `rkube server` runs a whole cluster in this
//! process; `rkube store|apiserver|controller-manager|scheduler|kubelet-agent|pki` run one
//! component with the same flags as its own binary; `rkube envtest-assets DIR` writes a
//! drop-in for controller-runtime's envtest binaries, which run `rkube envtest …`.

use clap::{Parser, Subcommand};

/// mimalloc, as the apiserver's own binary (rkube-alloc says why): in one process the
/// apiserver's allocations dominate.
#[global_allocator]
static ALLOCATOR: rkube_alloc::MiMalloc = rkube_alloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "rkube",
    version,
    about = "rkube: a Kubernetes control plane in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at startup; the apiserver's many flags make its variant large.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run a whole cluster (store, apiserver, controllers, scheduler, simulated nodes) in
    /// this process.
    Server(rkube::server::Flags),
    /// Run rkube-store (etcd v3 compatible storage).
    Store(rkube_store::cli::Flags),
    /// Run rkube-apiserver.
    Apiserver(rkube_apiserver::cli::Flags),
    /// Run rkube-controller-manager.
    ControllerManager(rkube_controller_manager::cli::Flags),
    /// Run rkube-scheduler.
    Scheduler(rkube_scheduler::cli::Flags),
    /// Run rkube-kubelet-agent (simulated nodes).
    KubeletAgent(rkube_kubelet_agent::cli::Flags),
    /// Write the cluster's certificates and kubeconfigs (rkube-pki).
    Pki(rkube_apiserver::cli::PkiFlags),
    /// Write a KUBEBUILDER_ASSETS directory for controller-runtime's envtest.
    EnvtestAssets(rkube::envtest::AssetsFlags),
    /// Clusters in the background: create, list, start, stop, delete, kubeconfig, logs.
    #[command(subcommand)]
    Cluster(rkube::ctl::ClusterCmd),
    /// A cluster's simulated nodes.
    #[command(subcommand)]
    Nodes(rkube::ctl::NodesCmd),
    /// Save a cluster's store to a file, or restore it from one.
    #[command(subcommand)]
    Snapshot(rkube::ctl::SnapshotCmd),
    /// Write every change to a cluster's objects to a YAML stream until Ctrl-C.
    Record(rkube::ctl::RecordFlags),
    /// Play a recording into a cluster (owner references re-linked, time compressed).
    Replay(rkube::ctl::ReplayFlags),
    /// Serve the web view of a cluster on a loopback port, with the admin's credentials.
    Dashboard(rkube::ctl::dashboard::Flags),
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = if args.get(1).map(String::as_str) == Some("envtest") {
        // envtest's own flags, parsed by hand (`--help` included): see rkube::envtest.
        runtime(|| rkube::envtest::main(args[2..].to_vec()))
    } else {
        match Cli::parse().command {
            Command::Pki(f) => rkube_apiserver::cli::pki(f),
            Command::EnvtestAssets(f) => rkube::envtest::write_assets(&f).map(|written| {
                for p in written {
                    println!("{}", p.display());
                }
            }),
            Command::Cluster(c) => cli_runtime(rkube::ctl::cluster(c)),
            Command::Nodes(c) => cli_runtime(rkube::ctl::nodes(c)),
            Command::Snapshot(c) => cli_runtime(rkube::ctl::snapshot(c)),
            Command::Record(f) => cli_runtime(rkube::ctl::record(f)),
            Command::Replay(f) => cli_runtime(rkube::ctl::replay(f)),
            Command::Dashboard(f) => cli_runtime(rkube::ctl::dashboard::dashboard(f)),
            command => runtime(|| async move {
                let shutdown = rkube_daemon::shutdown_token();
                match command {
                    Command::Server(f) => rkube::server::run(f, shutdown).await,
                    Command::Store(f) => rkube_store::cli::run(f, shutdown).await,
                    Command::Apiserver(f) => rkube_apiserver::cli::run(f, shutdown).await,
                    Command::ControllerManager(f) => {
                        rkube_controller_manager::cli::run(f, shutdown).await
                    }
                    Command::Scheduler(f) => rkube_scheduler::cli::run(f, shutdown).await,
                    Command::KubeletAgent(f) => rkube_kubelet_agent::cli::run(f, shutdown).await,
                    Command::Pki(_)
                    | Command::EnvtestAssets(_)
                    | Command::Cluster(_)
                    | Command::Nodes(_)
                    | Command::Snapshot(_)
                    | Command::Record(_)
                    | Command::Replay(_)
                    | Command::Dashboard(_) => unreachable!("handled above"),
                }
            }),
        }
    };
    if let Err(e) = result {
        eprintln!("rkube: {e:#}");
        std::process::exit(1);
    }
}

/// Runs a CLI command (no tracing: its output is its progress lines) on a small runtime.
fn cli_runtime(f: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

/// Runs `f` on a multi-threaded runtime with tracing on stderr and the allocator's purger.
fn runtime<F, Fut>(f: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    rkube_daemon::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        rkube_alloc::start_purger();
        f().await
    })
}
