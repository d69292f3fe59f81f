//! `rkube-kubelet-agent`'s command line (kubelet-style flags) and how it becomes a `Config`; the binary and `rkube kubelet-agent` share it.

use anyhow::Context;
use clap::Parser;
use rkube_client::ClientFlags;
use rkube_daemon::GoDuration;

#[derive(Parser, Debug)]
#[command(
    name = "rkube-kubelet-agent",
    version,
    about = "Simulated kubelet(s) of rkube"
)]
pub struct Flags {
    #[command(flatten)]
    client: ClientFlags,
    /// The node's name (default: the hostname); with --nodes N, the prefix of N names.
    #[arg(long)]
    node_name: Option<String>,
    /// How many nodes this process simulates.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// This process's first node index in the cluster: node i gets podCIDR 10.244.<index+i>.0/24.
    #[arg(long, default_value_t = 0)]
    node_index: usize,
    #[arg(long, default_value = "4")]
    cpu: String,
    #[arg(long, default_value = "8Gi")]
    memory: String,
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// `key=value,…` labels for the node(s).
    #[arg(long, default_value = "")]
    node_labels: String,
    /// `key[=value]:Effect,…` taints the node(s) register with.
    #[arg(long, default_value = "")]
    register_with_taints: String,
    #[arg(long, default_value = "10s")]
    node_status_update_frequency: GoDuration,
    #[arg(long, default_value = "40s")]
    node_lease_duration: GoDuration,
    /// `fast`, `realistic`, or a YAML/JSON stages file.
    #[arg(long, default_value = "fast")]
    stages: String,
    /// How long init containers and the containers of `restartPolicy: Never|OnFailure` pods
    /// run before exiting with 0 (default: the stages' `run`, 100ms in `fast`); the pod's
    /// `sim.rkube.io/run-duration` annotation overrides it.
    #[arg(long)]
    default_run_duration: Option<GoDuration>,
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_bookmarks: bool,
    /// HTTP/2 (h2c) to an http:// apiserver that answers it (rkube's does); HTTP/1.1 otherwise
    /// and over https. The nodes' watches and requests then share a connection pair per 500
    /// nodes, where HTTP/1.1 takes one per watch and per request in flight.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    http2: bool,
    /// The shortest timeout a pod watch asks for (each picks one in [t, 2t]); client-go uses 5m.
    #[arg(long, default_value = "5m")]
    watch_timeout: GoDuration,
    /// The address the node(s) advertise as InternalIP (where this server is reachable).
    #[arg(long, default_value = "127.0.0.1")]
    node_ip: String,
    /// Address to listen on for logs, /healthz and /metrics.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: String,
    #[arg(long, default_value_t = 10250)]
    port: u16,
    #[arg(long, default_value_t = 50.0)]
    event_qps: f32,
    #[arg(long, default_value_t = 100)]
    event_burst: u32,
    /// Each node speaks as itself with DIR/node-<name>.kubeconfig (as rkube-pki writes
    /// them: `system:node:<name>` in `system:nodes`), not with --kubeconfig. Each node then
    /// has its own --kube-api-qps budget and connections, as separate kubelets would.
    #[arg(long)]
    node_kubeconfig_dir: Option<std::path::PathBuf>,
    /// HTTPS; with --client-ca-file, logs only for a client certificate from that CA naming
    /// the apiserver.
    #[command(flatten)]
    tls: rkube_daemon::TlsFlags,
}

/// `--node-ip` as an address: a host name (a compose service) is resolved once, since a Node's
/// `InternalIP` must be an IP address.
async fn resolve_node_ip(given: &str) -> anyhow::Result<String> {
    if given.parse::<std::net::IpAddr>().is_ok() {
        return Ok(given.to_string());
    }
    let addr = tokio::net::lookup_host((given, 0))
        .await
        .with_context(|| format!("--node-ip {given}: not an IP address, and it does not resolve"))?
        .next()
        .with_context(|| format!("--node-ip {given}: resolves to no address"))?;
    Ok(addr.ip().to_string())
}

/// Runs the component as its binary does with these flags, until `shutdown`.
pub async fn run(f: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "node".into());
    let name = f.node_name.unwrap_or(host);
    let mut config = crate::Config::new(f.client.config("rkube-kubelet-agent")?, &name);
    config.nodes = f.nodes.max(1);
    config.node_index = f.node_index;
    config.cpu = f.cpu;
    config.memory = f.memory;
    config.max_pods = f.max_pods;
    config.node_labels = crate::parse_labels(&f.node_labels).map_err(anyhow::Error::msg)?;
    config.taints = crate::parse_taints(&f.register_with_taints).map_err(anyhow::Error::msg)?;
    config.status_update_frequency = f.node_status_update_frequency.into();
    config.lease_duration = f.node_lease_duration.into();
    config.stages = crate::stages::Stages::load(&f.stages).map_err(anyhow::Error::msg)?;
    if let Some(d) = f.default_run_duration {
        config.stages.run = d.into();
    }
    config.watch_bookmarks = f.watch_bookmarks;
    config.http2 = f.http2;
    config.watch_timeout = f.watch_timeout.into();
    config.node_ip = resolve_node_ip(&f.node_ip).await?;
    config.port = f.port;
    config.event_qps = f.event_qps;
    config.event_burst = f.event_burst;
    config.node_kubeconfig_dir = f.node_kubeconfig_dir;
    config.tls = f.tls.files();
    let addr = format!("{}:{}", f.bind_address, f.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    crate::run(config, listener, shutdown).await
}
