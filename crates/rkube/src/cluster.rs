//! A whole cluster in this process: rkube-store, rkube-apiserver, rkube-controller-manager,
//! rkube-scheduler and a kubelet-agent simulating N nodes, each on its own loopback listener
//! and talking to the others over HTTP(S) exactly as the separate binaries do. `rkube server`
//! and the test-cluster library both start clusters through [`Cluster::start`].
//!
//! Listeners are bound (port 0 unless asked otherwise) before anything starts, so ports are
//! never guessed and many clusters can start side by side. Secure clusters get a fresh PKI
//! (`rkube_apiserver::pki`, as `rkube-pki` writes it) and run as `scripts/up.sh` does: HTTPS
//! everywhere, a client certificate per component and node, Node+RBAC, priority and fairness.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use rkube_daemon::ShutdownToken;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use rkube_apiserver::Config as ApiserverConfig;

/// A change to the apiserver's configuration before it starts.
pub type ApiserverTweak = Arc<dyn Fn(&mut rkube_apiserver::Config) + Send + Sync>;

/// What to run.
#[derive(Clone)]
pub struct Options {
    /// Simulated nodes (0: none, and no kubelet-agent).
    pub nodes: usize,
    /// The nodes' name: `<prefix>` for one node, `<prefix>-0` … `<prefix>-<N-1>` for more.
    pub node_prefix: String,
    /// The controller-manager's `--controllers` (`*` for all); `None` runs no
    /// controller-manager (as envtest: then the ServiceAccount admission plugin is off too,
    /// since no controller creates `default` accounts).
    pub controllers: Option<Vec<String>>,
    pub scheduler: bool,
    /// HTTPS, client certificates and Node+RBAC; else plain HTTP and AlwaysAllow.
    pub secure: bool,
    /// Where the store and the PKI live; `None`: the store in memory and the PKI in a
    /// temporary directory, both gone with the cluster.
    pub data_dir: Option<PathBuf>,
    /// The apiserver's address (port 0: any free port).
    pub api_addr: SocketAddr,
    /// More addresses or names for the secure apiserver's certificate (beside the one the
    /// kubeconfig uses).
    pub tls_sans: Vec<String>,
    /// The simulated containers' stages (`fast`, `realistic`, or a file).
    pub stages: rkube_kubelet_agent::stages::Stages,
    /// How long `start` waits for everything to be ready.
    pub ready_timeout: Duration,
    pub apiserver_tweaks: Vec<ApiserverTweak>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 1,
            node_prefix: "rkube-node".into(),
            controllers: Some(vec!["*".into()]),
            scheduler: true,
            secure: false,
            data_dir: None,
            api_addr: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0),
            tls_sans: Vec::new(),
            stages: rkube_kubelet_agent::stages::Stages::fast(),
            ready_timeout: Duration::from_secs(30),
            apiserver_tweaks: Vec::new(),
        }
    }
}

impl Options {
    /// The nodes' names, as the kubelet-agent names them.
    pub fn node_names(&self) -> Vec<String> {
        match self.nodes {
            0 => Vec::new(),
            1 => vec![self.node_prefix.clone()],
            n => (0..n)
                .map(|i| format!("{}-{i}", self.node_prefix))
                .collect(),
        }
    }
}

/// A running component: its shutdown token and task.
struct Component {
    name: &'static str,
    stop: ShutdownToken,
    task: JoinHandle<()>,
}

/// A running cluster. Dropping it stops every component (their tasks end on the runtime);
/// [`Cluster::shutdown`] stops them in order and waits.
pub struct Cluster {
    /// The apiserver's URL (`https://127.0.0.1:PORT` or `http://…`).
    pub server: String,
    /// The admin's kubeconfig (`system:masters` when secure), certificates inline.
    pub kubeconfig: String,
    /// The admin's client settings.
    pub admin: rkube_client::Config,
    /// The storage URL.
    pub store_url: String,
    /// The PKI's directory when secure (the CA, every identity's certificate and kubeconfig).
    pub pki: Option<PathBuf>,
    /// The nodes' names.
    pub nodes: Vec<String>,
    /// How long `start` took until everything was ready.
    pub startup: Duration,
    components: Vec<Component>,
    exits: mpsc::UnboundedReceiver<(&'static str, anyhow::Result<()>)>,
    _temp: Option<tempfile::TempDir>,
}

/// Components started by a `Cluster::start` that has not returned yet.
struct Started(Vec<Component>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &self.0 {
            c.stop.cancel();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &self.components {
            c.stop.cancel();
        }
    }
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("{what}: listen on {addr}"))?;
    let mut local = listener.local_addr()?;
    if local.ip().is_unspecified() {
        local.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    Ok((listener, local))
}

fn loopback() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0)
}

impl Cluster {
    /// Starts every component and returns once the apiserver, the controller-manager and the
    /// scheduler answer `/readyz` and every node is Ready.
    pub async fn start(opts: Options) -> anyhow::Result<Cluster> {
        let began = Instant::now();
        let (temp, base) = match &opts.data_dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
                // The store (Secrets, the token signing key) and the CA key live here.
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                        .with_context(|| format!("chmod 700 {}", d.display()))?;
                }
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new().prefix("rkube-").tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let (api_listener, api_addr) = bind(opts.api_addr, "apiserver").await?;
        let (store_listener, store_addr) = bind(loopback(), "store").await?;
        let scheme = if opts.secure { "https" } else { "http" };
        let server = format!("{scheme}://{api_addr}");
        let store_url = format!("{scheme}://{store_addr}");
        let nodes = opts.node_names();

        let pki = if opts.secure {
            let plan = rkube_apiserver::pki::Plan {
                dir: base.join("pki"),
                server: server.clone(),
                admin_server: None,
                hosts: std::iter::once(api_addr.ip().to_string())
                    .chain(opts.tls_sans.iter().cloned())
                    .collect(),
                nodes: nodes.clone(),
                admin_owner: None,
            };
            let p = plan.clone();
            tokio::task::spawn_blocking(move || rkube_apiserver::pki::generate(&p))
                .await?
                .context("writing the cluster's certificates")?;
            Some(plan.dir)
        } else {
            None
        };
        let kubeconfig = match &pki {
            Some(dir) => std::fs::read_to_string(dir.join("admin.kubeconfig"))?,
            None => rkube_api::kubeconfig::kubeconfig_yaml("rkube", &server, None),
        };
        let client_config = |who: &str| -> anyhow::Result<rkube_client::Config> {
            let mut c = match &pki {
                Some(dir) => {
                    rkube_client::Config::from_kubeconfig(&dir.join(format!("{who}.kubeconfig")))?
                }
                None => rkube_client::Config::new(server.clone()),
            };
            c.user_agent = format!("rkube-{who}");
            Ok(c)
        };
        let admin = client_config("admin")?;

        let (exit_tx, exits) = mpsc::unbounded_channel();
        // Until the cluster is returned, an error (or the caller dropping this future) stops
        // whatever already started.
        let mut components = Started(Vec::new());
        let mut spawn = |name: &'static str,
                         fut: std::pin::Pin<
            Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>,
        >,
                         stop: ShutdownToken| {
            let tx = exit_tx.clone();
            let task = tokio::spawn(async move {
                let result = fut.await;
                if let Err(e) = &result {
                    tracing::error!(component = name, error = %format!("{e:#}"), "component failed");
                }
                let _ = tx.send((name, result));
            });
            components.0.push(Component { name, stop, task });
        };

        // Storage.
        let mut store = rkube_store::Config::new(base.join("store"));
        store.ephemeral = opts.data_dir.is_none();
        // Progress notifications every 5 s keep the watch caches' bookmarks moving.
        store.watch_progress_notify_interval = Duration::from_secs(5);
        if let Some(dir) = &pki {
            store.tls = Some(rkube_daemon::tls::TlsFiles {
                cert: dir.join("store.crt"),
                key: dir.join("store.key"),
                client_ca: Some(dir.join("ca.crt")),
                require_client_cert: true,
            });
            store.client_cert_allowed_cn = Some("kube-apiserver-etcd-client".into());
        }
        let stop = ShutdownToken::new();
        spawn(
            "store",
            Box::pin(rkube_store::run(store, store_listener, stop.clone())),
            stop,
        );

        // The apiserver.
        let mut api = rkube_apiserver::Config::new(vec![store_url.clone()]);
        if let Some(dir) = &pki {
            let read = |f: &str| std::fs::read(dir.join(f)).with_context(|| f.to_string());
            let mut identity = read("apiserver-etcd-client.crt")?;
            identity.push(b'\n');
            identity.extend(read("apiserver-etcd-client.key")?);
            api.etcd_tls = Some(rkube_etcd_api::ClientTls {
                ca_pem: Some(read("ca.crt")?),
                identity_pem: Some(identity),
            });
            api.tls = Some(rkube_daemon::tls::TlsFiles {
                cert: dir.join("apiserver.crt"),
                key: dir.join("apiserver.key"),
                client_ca: Some(dir.join("ca.crt")),
                require_client_cert: false,
            });
            api.auth.modes = rkube_apiserver::auth::Mode::parse_list("Node,RBAC")
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            api.enable_admission_plugins = vec!["NodeRestriction".into()];
            api.priority_and_fairness = true;
            api.kubelet = rkube_apiserver::http::logs::KubeletConfig {
                client_cert: Some(dir.join("apiserver-kubelet-client.crt")),
                client_key: Some(dir.join("apiserver-kubelet-client.key")),
                ca: Some(dir.join("ca.crt")),
            };
        }
        api.advertise_address = Some(api_addr.ip());
        if opts.controllers.is_none() {
            api.disable_admission_plugins = vec!["ServiceAccount".into()];
        }
        for tweak in &opts.apiserver_tweaks {
            tweak(&mut api);
        }
        let stop = ShutdownToken::new();
        spawn(
            "apiserver",
            Box::pin(rkube_apiserver::run(api, api_listener, stop.clone())),
            stop,
        );

        // Controllers, scheduler and nodes start at once: each waits for the apiserver.
        let mut probes = vec![("apiserver", server.clone())];
        if let Some(controllers) = &opts.controllers {
            let (listener, addr) = bind(loopback(), "controller-manager").await?;
            let mut cm =
                rkube_controller_manager::Config::new(client_config("controller-manager")?);
            cm.controllers = controllers.clone();
            if let Some(dir) = &pki {
                let read = |f: &str| std::fs::read_to_string(dir.join(f));
                cm.signing = Some(rkube_controller_manager::csrsigning::SigningCa {
                    cert_pem: read("ca.crt")?,
                    key_pem: read("ca.key")?,
                });
                cm.root_ca = Some(read("ca.crt")?);
            }
            let stop = ShutdownToken::new();
            spawn(
                "controller-manager",
                Box::pin(rkube_controller_manager::run(cm, listener, stop.clone())),
                stop,
            );
            probes.push(("controller-manager", format!("http://{addr}")));
        }
        if opts.scheduler {
            let (listener, addr) = bind(loopback(), "scheduler").await?;
            let sched = rkube_scheduler::Config::new(client_config("scheduler")?);
            let stop = ShutdownToken::new();
            spawn(
                "scheduler",
                Box::pin(rkube_scheduler::run(sched, listener, stop.clone())),
                stop,
            );
            probes.push(("scheduler", format!("http://{addr}")));
        }
        if !nodes.is_empty() {
            let (listener, addr) = bind(loopback(), "kubelet-agent").await?;
            // Secure: each node speaks as itself (`node_kubeconfig_dir`); the first node's
            // identity is the agent's own.
            let who = match &pki {
                Some(_) => format!("node-{}", nodes[0]),
                None => "kubelet-agent".into(),
            };
            let mut agent =
                rkube_kubelet_agent::Config::new(client_config(&who)?, &opts.node_prefix);
            agent.nodes = opts.nodes;
            agent.port = addr.port();
            agent.node_ip = addr.ip().to_string();
            agent.stages = opts.stages.clone();
            if let Some(dir) = &pki {
                agent.node_kubeconfig_dir = Some(dir.clone());
                agent.tls = Some(rkube_daemon::tls::TlsFiles {
                    cert: dir.join("kubelet.crt"),
                    key: dir.join("kubelet.key"),
                    client_ca: Some(dir.join("ca.crt")),
                    require_client_cert: false,
                });
            }
            let stop = ShutdownToken::new();
            spawn(
                "kubelet-agent",
                Box::pin(rkube_kubelet_agent::run(agent, listener, stop.clone())),
                stop,
            );
        }
        drop(exit_tx);

        let mut cluster = Cluster {
            server,
            kubeconfig,
            admin,
            store_url,
            pki,
            nodes,
            startup: Duration::ZERO,
            components: std::mem::take(&mut components.0),
            exits,
            _temp: temp,
        };
        let deadline = began + opts.ready_timeout;
        let admin = cluster.admin.clone();
        let want = cluster.nodes.len();
        tokio::select! {
            ready = wait_ready(admin, want, &probes, deadline) => ready?,
            (name, result) = cluster.next_exit() => {
                anyhow::bail!("{name} exited while starting: {}", match result {
                    Ok(()) => "no error".to_string(),
                    Err(e) => format!("{e:#}"),
                });
            }
        }
        cluster.startup = began.elapsed();
        tracing::info!(
            server = %cluster.server,
            nodes = cluster.nodes.len(),
            startup_ms = cluster.startup.as_millis() as u64,
            "cluster ready"
        );
        Ok(cluster)
    }
}

/// Polls every component's `/readyz`, then for `want` Ready nodes, until all are ready or
/// `deadline`.
async fn wait_ready(
    admin: rkube_client::Config,
    want: usize,
    probes: &[(&str, String)],
    deadline: Instant,
) -> anyhow::Result<()> {
    let client = rkube_client::Client::new(admin)?;
    // Plain HTTP for the controllers' and scheduler's health ports.
    let http = reqwest::Client::builder()
        .http1_only()
        .timeout(Duration::from_secs(2))
        .build()?;
    for (name, base) in probes {
        let ok = if *name == "apiserver" {
            poll(deadline, || async {
                client
                    .send(reqwest::Method::GET, "/readyz", None)
                    .await
                    .is_ok()
            })
            .await
        } else {
            let url = format!("{base}/readyz");
            poll(deadline, || async {
                http.get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await
        };
        anyhow::ensure!(ok, "{name} not ready at {base} in time");
    }
    if want == 0 {
        return Ok(());
    }
    let nodes: rkube_client::Api<Node> = rkube_client::Api::all(&client);
    let ok = poll(deadline, || async {
        nodes
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.iter().filter(|n| node_ready(n)).count() >= want)
    })
    .await;
    anyhow::ensure!(ok, "{want} node(s) not Ready in time");
    Ok(())
}

impl Cluster {
    /// Waits until a component exits (it should not before shutdown), with its result.
    pub async fn next_exit(&mut self) -> (&'static str, anyhow::Result<()>) {
        match self.exits.recv().await {
            Some(exit) => exit,
            None => std::future::pending().await,
        }
    }

    /// Stops the components in reverse start order (nodes and controllers first, storage
    /// last), each given `grace` to drain.
    pub async fn shutdown(mut self, grace: Duration) {
        let components = std::mem::take(&mut self.components);
        for c in components.into_iter().rev() {
            c.stop.cancel();
            let abort = c.task.abort_handle();
            if tokio::time::timeout(grace, c.task).await.is_err() {
                tracing::warn!(component = c.name, "did not stop in time; aborted");
                abort.abort();
            }
        }
    }

    /// Writes the admin kubeconfig to `path` (owner-only: it holds the admin's key).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        write_private(path, &self.kubeconfig)
    }
}

/// Writes `text` readable by its owner only.
pub fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    create_private(path)?.write_all(text.as_bytes())?;
    Ok(())
}

/// Creates (or truncates) `path` readable by its owner only (kubeconfigs with keys,
/// snapshots and recordings holding Secrets).
pub fn create_private(path: &Path) -> anyhow::Result<std::fs::File> {
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let f = opts
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    // An existing file keeps its mode on open: make it private before anything goes in.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Calls `check` until it is true or `deadline` passes; true if it became true.
async fn poll<F, Fut>(deadline: Instant, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // Startup takes tens of milliseconds: a short interval keeps the wait close to it.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
