//! rkube-kubelet-agent: simulates one or many nodes in one process. Each node registers
//! itself, heartbeats through its Lease, watches only its own pods (`spec.nodeName=<node>`,
//! through the client's Reflector, with bookmarks unless turned off) and runs them through the
//! simulated runtime (`sim`, driven by `stages`), reporting status as a kubelet does. One HTTP
//! server serves `/healthz`, `/metrics`, the simulated container logs, each node's resource
//! usage (`/stats/summary`) and the streaming sessions of exec, attach and port-forward
//! (`exec`) for every node.

pub mod cli;
pub mod exec;
pub mod logs;
pub mod node;
pub mod overrides;
pub mod server;
pub mod sim;
pub mod stages;
pub mod stats;
pub mod stream;
pub mod usage;
pub mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Taint;
use rkube_client::events::Recorder;
use rkube_client::informer::Change;
use rkube_client::pod::Pod;
use rkube_client::reflector::Options;
use rkube_client::{Api, Client, Informer, ListParams, Stats};
use rkube_daemon::metrics::Registry;
use rkube_daemon::ShutdownToken;
use tokio::net::TcpListener;

use node::NodeSpec;
use stages::Stages;
use worker::NodeRuntime;

#[derive(Clone, Debug)]
pub struct Config {
    pub client: rkube_client::Config,
    /// The node's name; with `nodes > 1`, nodes are `<name>-0` … `<name>-<N-1>`.
    pub node_name: String,
    pub nodes: usize,
    /// The first node's index in the cluster (its podCIDR is 10.244.<index>.0/24).
    pub node_index: usize,
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    pub node_labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub status_update_frequency: Duration,
    pub lease_duration: Duration,
    pub stages: Stages,
    pub watch_bookmarks: bool,
    /// Each pod watch asks for a timeout in [this, 2×this] (client-go: 5 min).
    pub watch_timeout: Duration,
    /// The address other components reach this agent's HTTP server on (`InternalIP`).
    pub node_ip: String,
    /// The port advertised as `daemonEndpoints.kubeletEndpoint.Port`; 0 = the listener's.
    pub port: u16,
    /// Events per second across the process; 0 = unlimited.
    pub event_qps: f32,
    pub event_burst: u32,
    /// Each node speaks as itself (`system:node:<name>`) with `<dir>/node-<name>.kubeconfig`
    /// (rkube-pki's layout) instead of the process's kubeconfig.
    pub node_kubeconfig_dir: Option<std::path::PathBuf>,
    /// HTTPS for the agent's port, and who may read logs (`server`).
    pub tls: Option<server::Tls>,
    /// HTTP/2 to the apiserver where it speaks it (`connect`).
    pub http2: bool,
}

impl Config {
    pub fn new(client: rkube_client::Config, node_name: &str) -> Self {
        Config {
            // Not the components' cap of 64: the client the simulated nodes share speaks for
            // many kubelets (`run` caps it at `AGENT_MAX_IN_FLIGHT`); pod status writes have
            // their own limit (`writes`).
            client,
            node_name: node_name.into(),
            nodes: 1,
            node_index: 0,
            cpu: "4".into(),
            memory: "8Gi".into(),
            max_pods: 110,
            node_labels: BTreeMap::new(),
            taints: Vec::new(),
            status_update_frequency: Duration::from_secs(10),
            lease_duration: Duration::from_secs(40),
            stages: Stages::fast(),
            watch_bookmarks: true,
            watch_timeout: Duration::from_secs(300),
            node_ip: "127.0.0.1".into(),
            port: 0,
            event_qps: 50.0,
            event_burst: 100,
            node_kubeconfig_dir: None,
            tls: None,
            http2: true,
        }
    }

    pub fn node_names(&self) -> Vec<String> {
        if self.nodes <= 1 {
            vec![self.node_name.clone()]
        } else {
            (0..self.nodes)
                .map(|i| format!("{}-{i}", self.node_name))
                .collect()
        }
    }
}

/// The most requests (watches aside) the nodes' shared client has at the apiserver at once.
/// Every simulated kubelet speaks from this process's one address, where real kubelets each
/// have their own: with a watch per node this stays under the apiserver's 8,192 connections
/// per client at 5,000 nodes (past it, connections are reset). Far above the 64 the other
/// components take: 5,000 nodes renew 500 leases a second beside their pods' status writes.
pub const AGENT_MAX_IN_FLIGHT: usize = 1024;

/// Node watches per HTTP/2 connection pair (requests on one, watches on the other): half the
/// apiserver's stream limit (1,000), so watch restarts and lists fit beside them.
const NODES_PER_CONNECTION: usize = 500;

/// Whether the nodes speak HTTP/2 (h2c) to `cfg`'s apiserver. Only over plain HTTP, where
/// rkube's apiserver serves it beside HTTP/1.1 with 1,000 streams a connection; an https
/// apiserver gets HTTP/1.1 (its stream limit is unknown: past it, watches would wait for a
/// stream for ever). h2c takes prior knowledge, so the apiserver is asked (`GET /version`
/// over h2c, then over HTTP/1.1, then over h2c once more) until it answers, for at most
/// `CONNECT_TRIES` rounds: one that answers only HTTP/1.1, or not at all, gets HTTP/1.1.
/// `None`: shut down first.
async fn connect(cfg: &rkube_client::Config, shutdown: &ShutdownToken) -> Option<bool> {
    const CONNECT_TRIES: usize = 20;
    if !cfg.http2 || !cfg.server.starts_with("http://") {
        return Some(false);
    }
    let answers = |http2: bool| {
        let mut c = cfg.clone();
        c.http2 = http2;
        c.observer = None;
        c.timeout = Duration::from_secs(5);
        async move {
            let client = Client::new(c).ok()?;
            match client
                .send(rkube_client::Method::GET, "/version", None)
                .await
            {
                Ok(_) | Err(rkube_client::Error::Api(_)) => Some(()),
                Err(_) => None,
            }
        }
    };
    for attempt in 1..=CONNECT_TRIES {
        let answered = tokio::select! {
            _ = shutdown.cancelled() => return None,
            a = async {
                if answers(true).await.is_some() {
                    return Some(true);
                }
                answers(false).await?;
                // HTTP/1.1 answered: h2c once more, so one failed attempt does not decide.
                Some(answers(true).await.is_some())
            } => a,
        };
        match answered {
            Some(true) => return Some(true),
            Some(false) => {
                tracing::info!(server = %cfg.server, "the apiserver does not answer h2c; HTTP/1.1");
                return Some(false);
            }
            None if attempt % 5 == 0 => {
                tracing::warn!(server = %cfg.server, attempt, "the apiserver does not answer yet")
            }
            None => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    tracing::warn!(server = %cfg.server, "no answer from the apiserver; HTTP/1.1");
    Some(false)
}

/// Runs every simulated node until `shutdown`; `listener` serves logs, health and metrics.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    let port = if config.port == 0 {
        listener.local_addr()?.port()
    } else {
        config.port
    };
    let metrics = Registry::new();
    metrics.gauge_fn(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        &[],
        || rkube_daemon::metrics::process_rss_bytes() as f64,
    );
    let ready = rkube_daemon::health::Ready::default();
    let sims: logs::Sims = Arc::default();
    let node_pods: stats::NodePods = Arc::default();
    let observer =
        rkube_daemon::metrics::rest_client_observer(metrics.clone(), &config.client.server);
    let mut base = config.client.clone().capped(AGENT_MAX_IN_FLIGHT);
    base.observer = Some(observer.clone());
    base.http2 = config.http2;
    let Some(http2) = connect(&base, &shutdown).await else {
        return Ok(());
    };
    base.http2 = http2;
    let client = Client::new(base)?;
    let recorder = Recorder::new(&client, "kubelet", None, shutdown.clone())
        .with_rate(config.event_qps, config.event_burst);
    // Each node's client: its own identity when given one, else the process's.
    let mut clients: BTreeMap<String, Client> = BTreeMap::new();
    let mut shared = client.clone();
    for (i, name) in config.node_names().into_iter().enumerate() {
        let c = match &config.node_kubeconfig_dir {
            None => {
                if http2 && i > 0 && i % NODES_PER_CONNECTION == 0 {
                    shared = client.with_own_connections()?;
                }
                shared.clone()
            }
            Some(dir) => {
                let path = dir.join(format!("node-{name}.kubeconfig"));
                let mut cfg = rkube_client::Config::from_kubeconfig(&path)
                    .map_err(|e| anyhow::anyhow!("node {name}: {e}"))?;
                cfg.qps = config.client.qps;
                cfg.burst = config.client.burst;
                cfg.max_in_flight = config.client.max_in_flight;
                cfg.user_agent = config.client.user_agent.clone();
                cfg.timeout = config.client.timeout;
                cfg.observer = Some(observer.clone());
                // h2c only where it was found (the same apiserver).
                cfg.http2 = http2 && cfg.server == config.client.server;
                Client::new(cfg)?
            }
        };
        clients.insert(name, c);
    }
    let streaming = exec::Streaming::new(sims.clone(), node_pods.clone(), clients.clone());
    let app = rkube_daemon::health::router(metrics.clone(), ready.clone())
        .merge(logs::router(sims.clone()))
        .merge(stats::router(node_pods.clone()))
        .merge(exec::router(streaming))
        .layer(axum::middleware::from_fn(server::guard_logs));
    let tls = config.tls.as_ref().map(server::server_config).transpose()?;
    let identify = server::identify(config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()));
    let s = shutdown.clone();
    let server = tokio::spawn(async move {
        rkube_daemon::serve::serve(listener, tls, app, identify, Default::default(), s).await
    });
    let stages = Arc::new(config.stages.clone());
    let status_writes = metrics.counter(
        "kubelet_pod_status_writes_total",
        "Pod status updates written.",
        &[],
    );
    {
        let sims = sims.clone();
        metrics.gauge_fn(
            "kubelet_running_pods",
            "Pods with a simulated runtime on this process's nodes.",
            &[],
            move || sims.lock().unwrap().len() as f64,
        );
    }

    let specs: Vec<NodeSpec> = config
        .node_names()
        .into_iter()
        .enumerate()
        .map(|(i, name)| NodeSpec {
            name,
            index: config.node_index + i,
            cpu: config.cpu.clone(),
            memory: config.memory.clone(),
            max_pods: config.max_pods,
            labels: config.node_labels.clone(),
            taints: config.taints.clone(),
            ip: config.node_ip.clone(),
            port,
            lease_duration: config.lease_duration,
            status_update_frequency: config.status_update_frequency,
        })
        .collect();
    // Nodes register concurrently; each retries until the apiserver answers.
    let registrations = futures_util::stream::iter(specs)
        .map(|spec| {
            let client = clients[&spec.name].clone();
            let shutdown = shutdown.clone();
            async move {
                loop {
                    match node::register(&client, &spec).await {
                        Ok(n) => return Some((spec, n)),
                        Err(e) => {
                            tracing::warn!(node = %spec.name, error = %e, "node registration failed; retrying");
                            tokio::select! {
                                _ = shutdown.cancelled() => return None,
                                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                            }
                        }
                    }
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    if shutdown.is_cancelled() {
        return Ok(());
    }
    let writes = Arc::new(tokio::sync::Semaphore::new(64));
    let mut registered = 0usize;
    let mut informers = Vec::new();
    for (spec, node) in registrations.into_iter().flatten() {
        let name = spec.name.clone();
        registered += 1;
        let client = clients[&name].clone();
        let recorder = match config.node_kubeconfig_dir {
            Some(_) => recorder.for_client(&client, &name, shutdown.clone()),
            None => recorder.for_host(&name),
        };
        let uid = node.metadata.uid.clone().unwrap_or_default();
        tokio::spawn(node::lease_loop(
            client.clone(),
            spec.clone(),
            uid,
            shutdown.clone(),
        ));
        tokio::spawn(node::status_loop(
            client.clone(),
            spec.clone(),
            shutdown.clone(),
        ));
        let rt = NodeRuntime::new(
            client.clone(),
            recorder,
            spec,
            stages.clone(),
            sims.clone(),
            status_writes.clone(),
            writes.clone(),
        );
        let opts = Options {
            bookmarks: config.watch_bookmarks,
            min_watch_timeout: config.watch_timeout,
            ..Default::default()
        };
        let inf = Informer::with_options(
            Api::<Pod>::all(&client),
            ListParams::default().fields(&format!("spec.nodeName={name}")),
            opts,
        );
        export(&metrics, &name, inf.stats());
        node_pods.write().unwrap().insert(name.clone(), inf.store());
        inf.store().set_transform(worker::cached_pod);
        let s = shutdown.clone();
        inf.store().on_change(move |ch| match ch {
            Change::Added(p) | Change::Updated { new: p, .. } => rt.pod_changed(p.clone(), &s),
            Change::Deleted(p) => rt.pod_deleted(p),
        });
        informers.push(inf.spawn(shutdown.clone()));
    }
    tracing::info!(nodes = registered, port, "simulated nodes registered");
    // Ready once every node watches its pods: a harness that starts its work on readiness
    // then measures the work, not a thousand first lists beside it.
    let synced = futures_util::future::join_all(informers.iter().map(|s| s.wait_synced()));
    tokio::pin!(synced);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = &mut synced => break,
            _ = tokio::time::sleep(Duration::from_secs(10)) => {
                let waiting = informers.iter().filter(|s| !s.has_synced()).count();
                tracing::warn!(nodes = waiting, "nodes still waiting for their first pod list");
            }
        }
    }
    tracing::info!(nodes = registered, "every node's pods listed");
    ready.set(true);
    shutdown.cancelled().await;
    ready.set(false);
    let _ = server.await;
    Ok(())
}

/// Exports a node's reflector counters, labelled by node.
fn export(metrics: &Registry, node: &str, stats: Arc<Stats>) {
    for (name, help, get) in Stats::SERIES {
        let st = stats.clone();
        metrics.gauge_fn(name, help, &[("node", node)], move || get(&st) as f64);
    }
}

/// Parses `--node-labels k=v,k2=v2`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("invalid label {p:?}: want key=value"))
        })
        .collect()
}

/// Parses `--register-with-taints key=value:Effect,key2:Effect`.
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (kv, effect) = p
                .rsplit_once(':')
                .ok_or_else(|| format!("invalid taint {p:?}: want key[=value]:Effect"))?;
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
                return Err(format!("invalid taint effect {effect:?}"));
            }
            let (key, value) = match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (kv.to_string(), None),
            };
            Ok(Taint {
                key,
                value,
                effect: effect.into(),
                time_added: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        assert_eq!(parse_labels("a=b,c=d").unwrap().len(), 2);
        assert!(parse_labels("nope").is_err());
        let t = parse_taints("dedicated=gpu:NoSchedule,spot:PreferNoSchedule").unwrap();
        assert_eq!(
            (
                t[0].key.as_str(),
                t[0].value.as_deref(),
                t[0].effect.as_str()
            ),
            ("dedicated", Some("gpu"), "NoSchedule")
        );
        assert_eq!(t[1].value, None);
        assert!(parse_taints("x:Sometimes").is_err());
        let mut c = Config::new(rkube_client::Config::new("http://x:1"), "n");
        assert_eq!(c.node_names(), ["n"]);
        c.nodes = 3;
        assert_eq!(c.node_names(), ["n-0", "n-1", "n-2"]);
    }
}
