//! rkube-apiserver: the Kubernetes API over etcd-style storage, reached only over HTTP through
//! `rkube-etcd-api` (rkube-store or a real etcd). `registry` is the generic store and the
//! per-resource strategies, `storage` the etcd3 layer, `cache` the watch cache with bookmarks,
//! `http` the wire front.

pub mod admission;
pub mod audit;
pub mod auth;
pub mod cache;
pub mod callout;
pub mod cel;
pub mod chain;
pub mod cli;
pub mod compactor;
pub mod crd;
pub mod encryption;
pub mod flowcontrol;
pub mod http;
pub mod inflight;
pub mod kinds;
pub mod metrics;
pub mod overrides;
pub mod pki;
pub mod reconcile;
pub mod registry;
pub mod request;
pub mod services;
pub mod storage;
pub mod tls;
pub mod ui;
pub mod watches;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use rkube_api::RESOURCES;
use rkube_daemon::health::Ready;
use rkube_daemon::ShutdownToken;
use rkube_etcd_api::{EtcdClient, WatchCreateRequest, WatchRequest};
use tokio::net::TcpListener;

use crate::cache::{CacheConfig, Cacher};
use crate::http::ApiState;
use crate::registry::Registry;
use crate::storage::Storage;

/// The Kubernetes version this server reports.
pub const KUBE_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.0");

#[derive(Clone, Debug)]
pub struct Config {
    pub etcd_servers: Vec<String>,
    /// TLS to https:// storage endpoints (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`).
    pub etcd_tls: Option<rkube_etcd_api::ClientTls>,
    /// How the apiserver talks to storage (`--etcd-transport`).
    pub etcd_transport: Transport,
    /// Resources kept on other servers (`--etcd-servers-overrides`).
    pub etcd_servers_overrides: Vec<overrides::Override>,
    pub etcd_prefix: String,
    /// How long to wait for storage at startup before giving up.
    pub storage_timeout: Duration,
    pub event_ttl: Duration,
    /// Zero disables the compactor.
    pub compaction_interval: Duration,
    pub cache: CacheConfig,
    /// Whether storage answers watch progress requests; `None` detects it.
    pub progress_requests: Option<bool>,
    /// Authentication and authorization (default: anonymous, AlwaysAllow).
    pub auth: auth::AuthConfig,
    pub audit: audit::AuditConfig,
    /// `--enable-admission-plugins` (on top of the defaults).
    pub enable_admission_plugins: Vec<String>,
    /// `--disable-admission-plugins`.
    pub disable_admission_plugins: Vec<String>,
    /// DefaultTolerationSeconds' (not-ready, unreachable) tolerations.
    pub default_toleration_seconds: (i64, i64),
    /// HTTPS (and client certificates) instead of plain HTTP.
    pub tls: Option<tls::TlsFiles>,
    /// `--encryption-provider-config`: an EncryptionConfiguration file.
    pub encryption_config: Option<std::path::PathBuf>,
    /// `--enable-priority-and-fairness`: APF over the in-flight totals instead of the legacy
    /// limits.
    pub priority_and_fairness: bool,
    /// `--max-requests-inflight` (0 = no limit).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight` (0 = no limit).
    pub max_mutating_requests_inflight: usize,
    /// Open watches one user may hold (0 = no limit).
    pub max_watches_per_user: usize,
    /// How kubelets are reached (`--kubelet-client-certificate`, …).
    pub kubelet: http::logs::KubeletConfig,
    /// What clients may hold: connections, and how long heads, idle connections and blocked
    /// writes may take.
    pub limits: rkube_daemon::serve::Limits,
    /// `--service-cluster-ip-range` and `--service-node-port-range`.
    pub services: services::ServiceConfig,
    /// What the `kubernetes` Service's endpoints list for this apiserver.
    pub advertise_address: Option<std::net::IpAddr>,
    /// How often cluster IP and node port allocations are repaired.
    pub allocation_repair_interval: Duration,
    /// ServiceAccount tokens: issuer, audiences, signing key.
    pub tokens: auth::serviceaccount::TokenConfig,
}

impl Config {
    pub fn new(etcd_servers: Vec<String>) -> Self {
        Config {
            etcd_servers,
            etcd_tls: None,
            etcd_transport: Transport::Auto,
            etcd_servers_overrides: Vec::new(),
            etcd_prefix: "/registry".into(),
            storage_timeout: Duration::from_secs(30),
            event_ttl: Duration::from_secs(3600),
            compaction_interval: Duration::from_secs(300),
            cache: CacheConfig::default(),
            progress_requests: None,
            auth: auth::AuthConfig::default(),
            audit: audit::AuditConfig::default(),
            encryption_config: None,
            tls: None,
            enable_admission_plugins: Vec::new(),
            disable_admission_plugins: Vec::new(),
            default_toleration_seconds: (300, 300),
            services: services::ServiceConfig::default(),
            advertise_address: None,
            allocation_repair_interval: Duration::from_secs(30),
            tokens: Default::default(),
            priority_and_fairness: false,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            max_watches_per_user: 10_000,
            kubelet: Default::default(),
            limits: serving_limits(Default::default()),
        }
    }
}

/// What the apiserver's front allows: `limits`, with HTTP/2 beside HTTP/1.1 on plain TCP
/// (h2c, for clients that know it: the kubelet-agent's thousand node watches share a few
/// connections instead of one each). Over TLS, ALPN still offers HTTP/1.1 only. A stream
/// buffers at most 64 KiB for a client that stopped granting window: with 1,000 streams a
/// connection, hyper's 400 KiB would let one connection of unread watches hold 400 MiB.
pub fn serving_limits(limits: rkube_daemon::serve::Limits) -> rkube_daemon::serve::Limits {
    rkube_daemon::serve::Limits {
        http2: true,
        max_send_buf: 64 * 1024,
        ..limits
    }
}

/// Whether the cache may rely on progress requests: the storage answers them mid-stream and
/// in order with its events. Over gRPC every server answers, but etcd before 3.4.31 and
/// 3.5.13 could report a revision before delivering the events up to it (etcd#15220;
/// upstream's storage feature checker trusts those versions on, on every endpoint);
/// rkube-store (known by its `x-rkube-store` header) queues the answer behind its events.
/// Every endpoint must qualify (one that does not answer disqualifies: reads then go to
/// storage, which is always correct).
fn progress_trusted(
    statuses: &[Result<rkube_etcd_api::EndpointStatus, rkube_etcd_api::EtcdError>],
) -> bool {
    statuses.iter().all(|s| {
        s.as_ref()
            .is_ok_and(|s| s.rkube_store || progress_fixed(&s.version))
    })
}

/// Whether a JSON-gateway endpoint answers a full-duplex watch stream: rkube-store's does;
/// etcd's answers nothing until the request body ends.
async fn gateway_answers_mid_stream(client: &EtcdClient) -> bool {
    let create = WatchCreateRequest {
        key: b"/rkube-probe".to_vec(),
        ..Default::default()
    };
    let Ok(Ok((_tx, mut rx))) = tokio::time::timeout(
        Duration::from_secs(2),
        client.watch_duplex(vec![WatchRequest::create(create)]),
    )
    .await
    else {
        return false;
    };
    matches!(tokio::time::timeout(Duration::from_secs(1), rx.next()).await, Ok(Some(Ok(r))) if r.created)
}

/// etcd versions whose progress notifications follow the events they cover.
fn progress_fixed(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, m) => m > 5,
        (m, _) => m > 3,
    }
}

/// A client of one storage cluster (`servers`), with the call metrics, once it answers; and
/// whether progress requests can be relied on there.
async fn connect_storage(
    config: &Config,
    servers: &[String],
    registry: &Arc<rkube_daemon::metrics::Registry>,
) -> anyhow::Result<(EtcdClient, bool)> {
    let tls = config.etcd_tls.as_ref();
    let client = match config.etcd_transport {
        Transport::Json => EtcdClient::with_tls(servers, tls),
        Transport::Grpc | Transport::Auto => EtcdClient::grpc(servers, tls),
    }
    .context("etcd client")?;
    wait_for_storage(&client, config.storage_timeout).await?;
    // Asked once: which endpoints are rkube-store, and which etcd versions.
    let statuses = if client.is_grpc() {
        client.endpoint_statuses().await
    } else {
        Vec::new()
    };
    let all_rkube = statuses
        .iter()
        .all(|s| s.as_ref().is_ok_and(|s| s.rkube_store));
    let client = if config.etcd_transport == Transport::Auto && all_rkube {
        EtcdClient::with_tls(servers, tls).context("etcd client")?
    } else {
        client
    };
    let duplex = match config.progress_requests {
        Some(v) => v,
        None if client.is_grpc() => progress_trusted(&statuses),
        None => gateway_answers_mid_stream(&client).await,
    };
    tracing::info!(
        ?servers,
        grpc = client.is_grpc(),
        progress_requests = duplex,
        "connected to storage"
    );
    let reg = registry.clone();
    let client = client.with_observer(Arc::new(move |path: &str, took: Duration, ok: bool| {
        let op = path.rsplit('/').next().unwrap_or(path);
        reg.histogram(
            "etcd_request_duration_seconds",
            "Storage call latency by operation.",
            &[("operation", op)],
            rkube_daemon::metrics::LATENCY_BUCKETS,
        )
        .observe_duration(took);
        if !ok {
            reg.counter(
                "etcd_request_errors_total",
                "Failed storage calls by operation.",
                &[("operation", op)],
            )
            .inc();
        }
    }));
    Ok((client, duplex))
}

async fn wait_for_storage(client: &EtcdClient, timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last_err = match client.status().await {
            Ok(_) => return Ok(()),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "storage at {} unreachable for {:?}: {last_err}",
                client.endpoints().join(","),
                timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Storage's wire (`--etcd-transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// etcd's gRPC API (HTTP/2, protobuf), as Kubernetes speaks to etcd.
    Grpc,
    /// etcd's JSON gateway (HTTP/1.1).
    Json,
    /// gRPC, except to rkube-store (every endpoint answering with `x-rkube-store`), whose
    /// JSON gateway answers sooner today: measured side by side in docs/benchmarks.md.
    Auto,
}

/// Serves the API on `listener` until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    let registry = rkube_daemon::metrics::Registry::new();
    let (client, duplex) = connect_storage(&config, &config.etcd_servers, &registry).await?;
    let transformer = match &config.encryption_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--encryption-provider-config {}", path.display()))?;
            encryption::Transformer::from_config(&text, &config.etcd_prefix, RESOURCES).map_err(
                |e| anyhow::anyhow!("--encryption-provider-config {}: {e}", path.display()),
            )?
        }
        None => encryption::Transformer::default(),
    };
    let transformer = Arc::new(transformer);
    let storage = Arc::new(Storage::with_transformer(
        client.clone(),
        transformer.clone(),
    ));
    // `--etcd-servers-overrides`: a client and storage per distinct server list.
    let mut backends: Vec<(Vec<String>, Arc<Storage>, bool)> = Vec::new();
    for o in &config.etcd_servers_overrides {
        if backends.iter().any(|(servers, ..)| *servers == o.servers) {
            continue;
        }
        let (c, d) = connect_storage(&config, &o.servers, &registry).await?;
        let s = Arc::new(Storage::with_transformer(c, transformer.clone()));
        backends.push((o.servers.clone(), s, d));
    }
    let storage_for = |def: &rkube_api::resources::ResourceDef| {
        overrides::for_def(&config.etcd_servers_overrides, def, RESOURCES)
            .and_then(|o| backends.iter().find(|(servers, ..)| *servers == o.servers))
            .map(|(_, s, d)| (s.clone(), *d))
            .unwrap_or_else(|| (storage.clone(), duplex))
    };
    let metrics = Arc::new(metrics::ApiMetrics::new(registry.clone()));

    let plugins = admission::plugins(
        &config.enable_admission_plugins,
        &config.disable_admission_plugins,
    )
    .map_err(|e| anyhow::anyhow!("admission plugins: {e}"))?;
    let mut registries = registry::Registries::default();
    let mut caches: Vec<Arc<Cacher>> = Vec::new();
    for def in RESOURCES {
        let (def_storage, def_duplex) = storage_for(def);
        let cache = def.watch_cached.then(|| {
            let c = Cacher::new(
                def,
                kinds::StrategyRef::Builtin(kinds::of(def)),
                &config.etcd_prefix,
                def_storage.clone(),
                config.cache.clone(),
                def_duplex,
            );
            tokio::spawn(cache::feed::run(c.clone(), shutdown.clone()));
            caches.push(c.clone());
            c
        });
        let reg = Registry::new(
            def,
            kinds::StrategyRef::Builtin(kinds::of(def)),
            def_storage,
            cache,
            &config.etcd_prefix,
            config.event_ttl,
        );
        registries.insert(reg);
    }
    register_gauges(&registry, &caches);
    let registries = Arc::new(registries);
    bootstrap_namespaces(&registries).await?;
    start_services(&config, &registries, &storage, &listener, &shutdown).await?;
    let issuer = auth::serviceaccount::Issuer::load(&config.tokens, &storage, &config.etcd_prefix)
        .await
        .map(Arc::new)?;
    let authn = Arc::new(auth::Auth::new(&config.auth, &registries, Some(issuer))?);
    let admission = Arc::new(admission::Admission::new(
        plugins,
        registries.clone(),
        authn.clone(),
        config.default_toleration_seconds,
    ));
    tokio::spawn(admission.clone().run_policy_status(shutdown.clone()));
    if admission.has(admission::Plugin::ResourceQuota) {
        tokio::spawn(
            admission
                .clone()
                .run_quota_loop(Duration::from_secs(2), shutdown.clone()),
        );
    }
    let chain = Arc::new(chain::Chain {
        auth: authn.clone(),
        limits: inflight::Limits::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        ),
        apf: match config.priority_and_fairness {
            true => Some(Arc::new(
                flowcontrol::Apf::from_caches(
                    (config.max_requests_inflight + config.max_mutating_requests_inflight).max(1),
                    [
                        registry::cache_of(&registries, FLOWCONTROL, "flowschemas")?,
                        registry::cache_of(
                            &registries,
                            FLOWCONTROL,
                            "prioritylevelconfigurations",
                        )?,
                    ],
                )
                .with_width(list_width(&registries)),
            )),
            false => None,
        },
        audit: audit::Auditor::new(&config.audit)?,
        watches: inflight::Watches::new(config.max_watches_per_user),
        registries: registries.clone(),
    });
    if let Some(apf) = &chain.apf {
        metrics.flowcontrol(apf);
    }
    // Upstream's bootstrap objects, the groups side by side (each is independent).
    let rbac = async {
        if config.auth.modes.contains(&auth::Mode::Rbac) {
            bootstrap(
                &registries,
                "rbac.authorization.k8s.io",
                [
                    ("clusterroles", auth::bootstrap::cluster_roles()),
                    (
                        "clusterrolebindings",
                        auth::bootstrap::cluster_role_bindings(),
                    ),
                ],
            )
            .await?;
        }
        anyhow::Ok(())
    };
    let classes = bootstrap(
        &registries,
        "scheduling.k8s.io",
        [("priorityclasses", kinds::scheduling::system_classes())],
    );
    let apiservices = bootstrap(
        &registries,
        "apiregistration.k8s.io",
        [("apiservices", kinds::apiregistration::local_services())],
    );
    let apf = async {
        if config.priority_and_fairness {
            bootstrap(
                &registries,
                FLOWCONTROL,
                [
                    (
                        "prioritylevelconfigurations",
                        flowcontrol::defaults::level_objects(),
                    ),
                    ("flowschemas", flowcontrol::defaults::schema_objects()),
                ],
            )
            .await?;
        }
        anyhow::Ok(())
    };
    tokio::try_join!(rbac, classes, apiservices, apf)?;

    tokio::spawn(bookmarks(registries.clone(), shutdown.clone()));
    tokio::spawn(
        Arc::new(crd::Controller {
            registries: registries.clone(),
            storage: storage.clone(),
            etcd_prefix: config.etcd_prefix.clone(),
            cache: config.cache.clone(),
            duplex,
            event_ttl: config.event_ttl,
            caller: Some(admission.webhooks.caller()),
        })
        .run(shutdown.clone()),
    );
    if !config.compaction_interval.is_zero() {
        // Each storage cluster keeps its own compaction (upstream runs one per etcd).
        let clients = std::iter::once(client.clone())
            .chain(backends.iter().map(|(_, s, _)| s.client.clone()));
        for c in clients {
            tokio::spawn(compactor::run(
                c,
                config.compaction_interval,
                shutdown.clone(),
            ));
        }
    }
    let ready = Ready::default();
    {
        let (ready, caches, shutdown) = (ready.clone(), caches.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut was_ready = false;
            loop {
                let now = caches.iter().all(|c| c.is_ready());
                ready.set(now);
                was_ready |= now;
                // Until first ready, often: a start waits on this flag.
                let every = if was_ready { 100 } else { 2 };
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(every)) => {}
                }
            }
        });
    }
    let state = ApiState {
        auth: authn.clone(),
        admission: admission.clone(),
        registries,
        metrics,
        shutdown: shutdown.clone(),
        ready: ready.clone(),
        kubelet: Arc::new(http::logs::KubeletClient::new(&config.kubelet)?),
        watches: Arc::new(watches::WatchTable::default()),
    };
    let app = Router::new()
        .route("/version", get(version))
        .merge(rkube_daemon::health::router(registry, ready).with_state(()))
        .fallback(http::fallback)
        .layer(axum::middleware::from_fn_with_state(
            chain.clone(),
            chain::handle,
        ))
        .with_state(state);
    tracing::info!(addr = %listener.local_addr()?, "rkube-apiserver serving");
    let tls_config = config.tls.as_ref().map(tls::server_config).transpose()?;
    let served = rkube_daemon::serve::serve(
        listener,
        tls_config,
        app,
        tls::identify(),
        config.limits.clone(),
        shutdown,
    )
    .await;
    if let Some(a) = &chain.audit {
        a.close();
    }
    served?;
    Ok(())
}

async fn version(State(_): State<ApiState>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "major": KUBE_VERSION.0,
        "minor": KUBE_VERSION.1,
        "gitVersion": KUBE_VERSION.2,
        "gitCommit": "rkube",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": "linux/amd64",
    }))
}

fn register_gauges(registry: &rkube_daemon::metrics::Registry, caches: &[Arc<Cacher>]) {
    for c in caches {
        let c2 = c.clone();
        registry.gauge_fn(
            "apiserver_watch_cache_objects",
            "Objects in the watch cache.",
            &[("resource", c.def.plural)],
            move || c2.len() as f64,
        );
        let c2 = c.clone();
        registry.gauge_fn(
            "apiserver_watch_cache_resource_version",
            "The watch cache's resourceVersion.",
            &[("resource", c.def.plural)],
            move || c2.resource_version() as f64,
        );
        let c2 = c.clone();
        registry.gauge_fn(
            "apiserver_watch_cache_watchers",
            "Watchers served from the cache.",
            &[("resource", c.def.plural)],
            move || c2.watcher_count() as f64,
        );
    }
    registry.gauge_fn(
        "process_resident_memory_bytes",
        "Resident set size.",
        &[],
        || rkube_daemon::metrics::process_rss_bytes() as f64,
    );
}

/// The apiserver's own writes: no admission, recorded under its name.
const OWN_WRITE: registry::Write<'static> = registry::Write {
    admit: &registry::Unadmitted,
    dry_run: false,
    manager: Some("rkube-apiserver"),
    verb: "create",
};

/// Services' allocation (hooks on the Services registry, the default ServiceCIDR, the repair
/// loop), the `kubernetes` Service and this apiserver's place in its endpoints.
async fn start_services(
    config: &Config,
    registries: &registry::Registries,
    storage: &Arc<Storage>,
    listener: &TcpListener,
    shutdown: &ShutdownToken,
) -> anyhow::Result<()> {
    let alloc = services::Allocator::new(
        config.services.clone(),
        registries,
        storage.clone(),
        &config.etcd_prefix,
    )?;
    let svc = registries
        .get(&("", "services"))
        .context("services registry")?;
    let hooks: Arc<dyn registry::Hooks> = alloc.clone();
    let _ = svc.hooks.set(hooks);
    alloc.ips.ensure_default_cidr().await?;
    let local = listener.local_addr()?;
    let ip = match config.advertise_address {
        Some(ip) => ip,
        None if local.ip().is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        None => local.ip(),
    };
    let first = config.services.cluster_ip_ranges[0]
        .nth(1)
        .context("the service cluster IP range has no first address")?;
    services::kubernetes::ensure_service(&svc, &first.to_string(), local.port()).await?;
    let reconciler = services::kubernetes::Reconciler::new(
        registries,
        storage.clone(),
        &config.etcd_prefix,
        std::net::SocketAddr::new(ip, local.port()),
    )?;
    tokio::spawn(reconciler.run(shutdown.clone()));
    if !config.allocation_repair_interval.is_zero() {
        let repair = services::repair::Repair::new(alloc, registries)?;
        tokio::spawn(repair.run(config.allocation_repair_interval, shutdown.clone()));
    }
    Ok(())
}

/// Namespaces every cluster starts with.
async fn bootstrap_namespaces(registries: &registry::Registries) -> anyhow::Result<()> {
    let ns = registries
        .get(&("", "namespaces"))
        .context("namespaces registry")?;
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match ns.create("", obj, OWN_WRITE).await {
            Ok(_) => tracing::info!(namespace = name, "created namespace"),
            Err(e) if e.code() == 409 => {}
            Err(e) => anyhow::bail!("creating namespace {name}: {}", e.status().message),
        }
    }
    Ok(())
}

const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";

/// APF's width of a request: LISTs by the number of objects their watch cache holds.
fn list_width(registries: &registry::Registries) -> flowcontrol::Width {
    let caches: Vec<(&'static str, &'static str, Arc<Cacher>)> = registries
        .values()
        .into_iter()
        .filter_map(|r| r.cache.clone().map(|c| (r.def.group, r.def.plural, c)))
        .collect();
    Box::new(move |a| {
        if a.verb != "list" {
            return 1;
        }
        let objects = caches
            .iter()
            .find(|(g, p, _)| *g == a.api_group && *p == a.resource)
            .map_or(0, |(_, _, c)| c.len());
        flowcontrol::list_width(&a.verb, objects)
    })
}

/// How many bootstrap objects are written at once: RBAC's ~120 written one by one took most
/// of a secure start.
const BOOTSTRAP_CONCURRENCY: usize = 16;

/// Creates upstream's bootstrap objects of a group (RBAC's roles and bindings, flow control's
/// schemas and levels), several at once; existing ones are reconciled (`reconcile`).
async fn bootstrap<const N: usize>(
    registries: &registry::Registries,
    group: &'static str,
    sets: [(&'static str, Vec<serde_json::Value>); N],
) -> anyhow::Result<()> {
    use futures_util::TryStreamExt;
    for (plural, objects) in sets {
        let reg = registries
            .get(&(group, plural))
            .with_context(|| format!("{plural} registry"))?;
        let reg = &reg;
        futures_util::stream::iter(objects.into_iter().map(Ok))
            .try_for_each_concurrent(BOOTSTRAP_CONCURRENCY, |obj| async move {
                bootstrap_one(reg, plural, obj).await
            })
            .await?;
    }
    Ok(())
}

/// Creates one bootstrap object, or reconciles the stored one.
async fn bootstrap_one(reg: &Registry, plural: &str, obj: serde_json::Value) -> anyhow::Result<()> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    match reg.create("", obj.clone(), OWN_WRITE).await {
        Ok(_) => tracing::debug!(%plural, %name, "created bootstrap object"),
        Err(e) if e.code() == 409 => {
            // Present: bring it up to this version's (a racing writer wins; next start tries
            // again).
            let current: serde_json::Value =
                serde_json::from_slice(&reg.get("", &name, None).await.map_err(|e| {
                    anyhow::anyhow!("reading {plural} {name}: {}", e.status().message)
                })?)?;
            if let Some(updated) = reg.strategy.reconcile_bootstrap(&current, &obj) {
                match reg.update("", &name, updated, None, OWN_WRITE).await {
                    Ok(_) => tracing::info!(%plural, %name, "reconciled bootstrap object"),
                    Err(e) => {
                        tracing::warn!(%plural, %name, error = %e.status().message, "could not reconcile bootstrap object")
                    }
                }
            }
        }
        Err(e) => anyhow::bail!("creating {plural} {name}: {}", e.status().message),
    }
    Ok(())
}

/// Sends due bookmarks about every second; with storage that answers progress requests, asks
/// for progress first so idle resources' versions keep up with the cluster.
async fn bookmarks(registries: Arc<registry::Registries>, shutdown: ShutdownToken) {
    loop {
        let jitter = Duration::from_millis(1000 + rand::random::<u64>() % 250);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(jitter) => {}
        }
        for c in &registries.caches() {
            if c.bookmark_tick() && c.duplex {
                c.request_progress().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn progress_requests_are_trusted_from_the_etcd_versions_upstream_trusts() {
        for (v, ok) in [
            ("3.4.23", false),
            ("3.4.31", true),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.6.0", true),
            ("4.0.0", true),
            ("garbage", false),
        ] {
            assert_eq!(super::progress_fixed(v), ok, "{v}");
        }
    }
}
