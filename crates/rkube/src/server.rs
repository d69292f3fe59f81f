//! `rkube server`: a whole cluster in one process (k3s-style) until SIGINT or SIGTERM, with the
//! admin kubeconfig written to a file or printed for a test fixture to read.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::cluster::{Cluster, Options};

#[derive(clap::Args, Debug, Clone)]
pub struct Flags {
    /// Simulated nodes (0 for none).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// The nodes' name, or their prefix (`<prefix>-0` …) with more than one.
    #[arg(long, default_value = "rkube-node")]
    node_name: String,
    /// Keep the store in memory and the certificates in a temporary directory: nothing
    /// survives the process (for tests).
    #[arg(long, conflicts_with = "data_dir")]
    ephemeral: bool,
    /// Where the store and certificates live (default: ~/.local/share/rkube/server).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Plain HTTP, anonymous access and AlwaysAllow, instead of HTTPS with client
    /// certificates, Node+RBAC, NodeRestriction and priority and fairness.
    #[arg(long)]
    insecure: bool,
    /// The apiserver's address (`0.0.0.0` for every interface: then name the addresses
    /// clients use with `--tls-san`, as the serving certificate covers 127.0.0.1 only).
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: std::net::IpAddr,
    /// More IP addresses or DNS names for the apiserver's serving certificate.
    #[arg(long, value_delimiter = ',', conflicts_with = "insecure", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    tls_san: Vec<String>,
    /// The apiserver's port (0: any free port; the kubeconfig says which).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Controllers to run: `*` for all, `-name` to turn one off.
    #[arg(long, default_value = "*", value_delimiter = ',')]
    controllers: Vec<String>,
    /// Run no controller-manager (an API-only cluster, as envtest's).
    #[arg(long)]
    no_controller_manager: bool,
    /// Run no scheduler (pods stay Pending unless a test binds them).
    #[arg(long)]
    no_scheduler: bool,
    /// `fast`, `realistic`, or a YAML/JSON stages file for the simulated containers.
    #[arg(long, default_value = "fast")]
    stages: String,
    /// Write the admin kubeconfig here once ready.
    #[arg(long)]
    write_kubeconfig: Option<PathBuf>,
    /// Print the admin kubeconfig to stdout once ready, ending with a `...` line (YAML's
    /// end of document): the only thing ever written to stdout.
    #[arg(long)]
    print_kubeconfig: bool,
    /// Give up if the cluster is not ready this long after starting.
    #[arg(long, default_value = "60s")]
    ready_timeout: rkube_daemon::GoDuration,
}

impl Flags {
    pub fn options(&self) -> anyhow::Result<Options> {
        let data_dir = if self.ephemeral {
            None
        } else {
            Some(match &self.data_dir {
                Some(d) => d.clone(),
                None => {
                    let home = std::env::var_os("HOME")
                        .context("--data-dir or --ephemeral is needed when HOME is unset")?;
                    PathBuf::from(home).join(".local/share/rkube/server")
                }
            })
        };
        Ok(Options {
            nodes: self.nodes,
            node_prefix: self.node_name.clone(),
            controllers: (!self.no_controller_manager).then(|| self.controllers.clone()),
            scheduler: !self.no_scheduler,
            secure: !self.insecure,
            data_dir,
            api_addr: SocketAddr::new(self.bind_address, self.port),
            tls_sans: self.tls_san.clone(),
            stages: rkube_kubelet_agent::stages::Stages::load(&self.stages)
                .map_err(|e| anyhow::anyhow!("--stages: {e}"))?,
            ready_timeout: self.ready_timeout.into(),
            apiserver_tweaks: Vec::new(),
        })
    }
}

/// Runs the cluster until `shutdown`; an error if it could not start or a component failed.
pub async fn run(flags: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let opts = flags.options()?;
    let mut cluster = tokio::select! {
        c = Cluster::start(opts) => c?,
        _ = shutdown.cancelled() => return Ok(()),
    };
    if let Some(path) = &flags.write_kubeconfig {
        cluster.write_kubeconfig(path)?;
    }
    if flags.print_kubeconfig {
        let mut out = std::io::stdout().lock();
        out.write_all(cluster.kubeconfig.as_bytes())?;
        out.write_all(b"...\n")?;
        out.flush()?;
    }
    eprintln!(
        "rkube: ready in {} ms: {} with {} node(s){}",
        cluster.startup.as_millis(),
        cluster.server,
        cluster.nodes.len(),
        match &flags.write_kubeconfig {
            Some(p) => format!("; kubeconfig {}", p.display()),
            None => String::new(),
        }
    );
    tokio::select! {
        _ = shutdown.cancelled() => {
            cluster.shutdown(Duration::from_secs(10)).await;
            eprintln!("rkube: stopped");
            Ok(())
        }
        (name, result) = cluster.next_exit() => {
            let why = match result {
                Ok(()) => "without an error".to_string(),
                Err(e) => format!("{e:#}"),
            };
            cluster.shutdown(Duration::from_secs(10)).await;
            anyhow::bail!("{name} exited: {why}")
        }
    }
}
