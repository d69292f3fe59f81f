//! `rkube-apiserver`'s command line (upstream-style flags) and how it becomes a `Config`; the `rkube-apiserver` binary and `rkube apiserver` share it.

use anyhow::Context;
use clap::Parser;
use rkube_daemon::GoDuration;

#[derive(Parser, Debug)]
#[command(
    name = "rkube-apiserver",
    version,
    about = "The Kubernetes API server of rkube"
)]
pub struct Flags {
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: String,
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Storage endpoints (rkube-store or etcd), comma-separated.
    #[arg(
        long,
        env = "RKUBE_ETCD_SERVERS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    etcd_servers: Vec<String>,
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// Verify https:// storage endpoints with this CA.
    #[arg(long)]
    etcd_cafile: Option<std::path::PathBuf>,
    /// Present this client certificate to storage ...
    #[arg(long, requires = "etcd_keyfile")]
    etcd_certfile: Option<std::path::PathBuf>,
    /// ... with this key.
    #[arg(long, requires = "etcd_certfile")]
    etcd_keyfile: Option<std::path::PathBuf>,
    /// Resources on storage of their own: comma-separated `group/resource#servers`, servers
    /// separated by semicolons; the core group is empty (`/events#https://etcd-events:2379`).
    #[arg(long, default_value = "")]
    etcd_servers_overrides: String,
    /// How to talk to storage: `grpc` (etcd's gRPC API over HTTP/2, as Kubernetes does),
    /// `json` (etcd's JSON gateway over HTTP/1.1), or `auto`: gRPC, except to rkube-store,
    /// whose gateway answers sooner today (docs/benchmarks.md, e2e-bench).
    #[arg(long, env = "RKUBE_ETCD_TRANSPORT", default_value = "auto", value_parser = ["auto", "grpc", "json"])]
    etcd_transport: String,
    /// Give up if storage is unreachable this long at startup.
    #[arg(long, default_value = "30s")]
    storage_startup_timeout: GoDuration,
    #[arg(long, default_value = "1h")]
    event_ttl: GoDuration,
    #[arg(long, default_value = "5m")]
    etcd_compaction_interval: GoDuration,
    #[arg(long, default_value = "75s")]
    watch_cache_history_window: GoDuration,
    #[arg(long, default_value = "60s")]
    watch_bookmark_interval: GoDuration,
    /// HTTPS; client certificates signed by --client-ca-file authenticate (CN = user,
    /// O = groups).
    #[command(flatten)]
    tls: rkube_daemon::TlsFlags,
    /// Static bearer tokens: `token,user,uid,"group1,group2"` per line.
    #[arg(long)]
    token_auth_file: Option<std::path::PathBuf>,
    /// Requests without credentials run as system:anonymous (else 401).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Authorizers in order, comma-separated: Node, RBAC, AlwaysAllow, AlwaysDeny.
    #[arg(long, default_value = "AlwaysAllow")]
    authorization_mode: String,
    /// Read-only requests served at once; more get 429 (0 = no limit).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Mutating requests served at once; more get 429 (0 = no limit).
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// The client certificate the apiserver presents to kubelets (then reached over HTTPS).
    #[arg(long)]
    kubelet_client_certificate: Option<std::path::PathBuf>,
    /// Its private key.
    #[arg(long)]
    kubelet_client_key: Option<std::path::PathBuf>,
    /// The CA that signed kubelets' serving certificates.
    #[arg(long)]
    kubelet_certificate_authority: Option<std::path::PathBuf>,
    #[command(flatten)]
    serve: rkube_daemon::ServeFlags,
    /// Open watches one user may hold; beyond it a new watch gets 429 (0 = no limit).
    #[arg(long, default_value_t = 10_000)]
    max_watches_per_user: usize,
    /// An audit.k8s.io/v1 Policy; with --audit-log-path, turns auditing on.
    #[arg(long)]
    audit_policy_file: Option<std::path::PathBuf>,
    /// Where audit events go, as JSON lines.
    #[arg(long)]
    audit_log_path: Option<std::path::PathBuf>,
    /// Rotate the audit log past this many megabytes (0 = never).
    #[arg(long, default_value_t = 100)]
    audit_log_maxsize: u64,
    /// Rotated audit logs kept (0 = all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Admission plugins to turn on besides the defaults (NamespaceLifecycle, LimitRanger,
    /// DefaultTolerationSeconds, ResourceQuota), comma-separated; AlwaysPullImages is opt-in.
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// Admission plugins to turn off, comma-separated.
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// DefaultTolerationSeconds: how long pods tolerate a not-ready node.
    #[arg(long, default_value_t = 300)]
    default_not_ready_toleration_seconds: i64,
    /// DefaultTolerationSeconds: how long pods tolerate an unreachable node.
    #[arg(long, default_value_t = 300)]
    default_unreachable_toleration_seconds: i64,
    /// API Priority and Fairness (upstream's default FlowSchemas and priority levels) over the
    /// in-flight totals, in place of the plain limits (on by default, as upstream).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_priority_and_fairness: bool,
    /// An apiserver.config.k8s.io/v1 EncryptionConfiguration: which resources are encrypted
    /// at rest, and how.
    #[arg(long)]
    encryption_provider_config: Option<std::path::PathBuf>,
    /// The `iss` of ServiceAccount tokens (and the OpenID issuer URL).
    #[arg(long)]
    service_account_issuer: Option<String>,
    /// Audiences tokens are accepted for (default: the issuer).
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// A PKCS#8 PEM P-256 private key ServiceAccount tokens are signed with (default: a key
    /// kept in storage, shared by every apiserver on it).
    #[arg(long)]
    service_account_signing_key_file: Option<std::path::PathBuf>,
    /// Accepted for compatibility: tokens are verified with the signing key's public half.
    #[arg(long)]
    service_account_key_file: Option<std::path::PathBuf>,
    /// The ranges cluster IPs are allocated from: one CIDR, or two (one per IP family) for
    /// dual-stack.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// The ports NodePort Services get.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// The address the `kubernetes` Service's endpoints list for this apiserver (default: the
    /// bind address, or 127.0.0.1 when that is unspecified).
    #[arg(long)]
    advertise_address: Option<std::net::IpAddr>,
    /// Write an admin kubeconfig for this server here once listening (for kubectl and the
    /// other components).
    #[arg(long)]
    write_kubeconfig: Option<std::path::PathBuf>,
}

impl Flags {
    /// The URL the server answers on once listening (loopback when bound to every address;
    /// with `--secure-port=0` the port is only known after binding).
    pub fn url(&self) -> String {
        let ip: std::net::IpAddr = match self.bind_address.parse() {
            Ok(ip) if !std::net::IpAddr::is_unspecified(&ip) => ip,
            _ => std::net::Ipv4Addr::LOCALHOST.into(),
        };
        let scheme = if self.tls.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        format!(
            "{scheme}://{}",
            std::net::SocketAddr::new(ip, self.secure_port)
        )
    }
}

/// Runs the component as its binary does with these flags, until `shutdown`.
pub async fn run(f: Flags, shutdown: rkube_daemon::ShutdownToken) -> anyhow::Result<()> {
    let mut config = crate::Config::new(f.etcd_servers);
    config.etcd_prefix = f.etcd_prefix;
    if f.etcd_cafile.is_some() || f.etcd_certfile.is_some() {
        let read = |p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        };
        let identity_pem = match (&f.etcd_certfile, &f.etcd_keyfile) {
            (Some(c), Some(k)) => {
                let mut pem = read(c)?;
                pem.push(b'\n');
                pem.extend(read(k)?);
                Some(pem)
            }
            _ => None,
        };
        config.etcd_tls = Some(rkube_etcd_api::ClientTls {
            ca_pem: f.etcd_cafile.as_deref().map(read).transpose()?,
            identity_pem,
        });
    }
    config.etcd_transport = match f.etcd_transport.as_str() {
        "grpc" => crate::Transport::Grpc,
        "json" => crate::Transport::Json,
        _ => crate::Transport::Auto,
    };
    config.etcd_servers_overrides =
        crate::overrides::parse(&f.etcd_servers_overrides, rkube_api::RESOURCES)
            .map_err(|e| anyhow::anyhow!("--etcd-servers-overrides: {e}"))?;
    config.storage_timeout = f.storage_startup_timeout.into();
    config.event_ttl = f.event_ttl.into();
    config.compaction_interval = f.etcd_compaction_interval.into();
    config.cache.history_window = f.watch_cache_history_window.into();
    config.cache.bookmark_interval = f.watch_bookmark_interval.into();
    config.max_requests_inflight = f.max_requests_inflight;
    config.max_mutating_requests_inflight = f.max_mutating_requests_inflight;
    config.max_watches_per_user = f.max_watches_per_user;
    config.limits = crate::serving_limits(f.serve.limits());
    config.kubelet = crate::http::logs::KubeletConfig {
        client_cert: f.kubelet_client_certificate.clone(),
        client_key: f.kubelet_client_key.clone(),
        ca: f.kubelet_certificate_authority.clone(),
    };
    config.audit = crate::audit::AuditConfig {
        policy_file: f.audit_policy_file.clone(),
        log_path: f.audit_log_path.clone(),
        max_size_mb: f.audit_log_maxsize,
        max_backup: f.audit_log_maxbackup,
    };
    config.encryption_config = f.encryption_provider_config.clone();
    config.tls = f.tls.files();
    config.priority_and_fairness = f.enable_priority_and_fairness;
    config.services = crate::services::ServiceConfig {
        cluster_ip_ranges: crate::services::ServiceConfig::parse_ranges(
            &f.service_cluster_ip_range,
        )
        .map_err(|e| anyhow::anyhow!("--service-cluster-ip-range: {e}"))?,
        node_ports: crate::services::ServiceConfig::parse_ports(&f.service_node_port_range)
            .map_err(|e| anyhow::anyhow!("--service-node-port-range: {e}"))?,
    };
    config.advertise_address = f.advertise_address;
    config.tokens = crate::auth::serviceaccount::TokenConfig {
        issuer: f.service_account_issuer.clone(),
        audiences: f.api_audiences.clone(),
        signing_key_file: f.service_account_signing_key_file.clone(),
    };
    let _ = &f.service_account_key_file;
    config.enable_admission_plugins = f.enable_admission_plugins.clone();
    config.disable_admission_plugins = f.disable_admission_plugins.clone();
    config.default_toleration_seconds = (
        f.default_not_ready_toleration_seconds,
        f.default_unreachable_toleration_seconds,
    );
    config.auth.token_file = f.token_auth_file.clone();
    config.auth.anonymous = f.anonymous_auth;
    config.auth.modes = crate::auth::Mode::parse_list(&f.authorization_mode)
        .map_err(|e| anyhow::anyhow!("--authorization-mode: {e}"))?;
    let addr = format!("{}:{}", f.bind_address, f.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listen on {addr}"))?;
    if let Some(path) = &f.write_kubeconfig {
        let local = listener.local_addr()?;
        let ip = if local.ip().is_unspecified() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            local.ip()
        };
        let scheme = if f.tls.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        let server = format!("{scheme}://{}", std::net::SocketAddr::new(ip, local.port()));
        let yaml = rkube_api::kubeconfig::kubeconfig_yaml("rkube", &server, None);
        std::fs::write(path, yaml).with_context(|| format!("write {}", path.display()))?;
        tracing::info!(path = %path.display(), %server, "wrote kubeconfig");
    }
    crate::run(config, listener, shutdown).await
}

/// `rkube-pki`'s command line (`rkube pki`).
#[derive(Parser, Debug)]
#[command(
    name = "rkube-pki",
    version,
    about = "Generates rkube's certificates and kubeconfigs"
)]
pub struct PkiFlags {
    /// Where to write (an existing CA there is kept).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// The apiserver URL the components' kubeconfigs use.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
    /// The admin kubeconfig's server, if users reach the apiserver by another address.
    #[arg(long)]
    admin_server: Option<String>,
    /// Further names or IP addresses for the serving certificate (repeatable or comma-separated).
    #[arg(long = "host", value_delimiter = ',')]
    hosts: Vec<String>,
    /// Node names that get a system:node:<name> identity (repeatable or comma-separated).
    #[arg(long = "node", value_delimiter = ',')]
    nodes: Vec<String>,
    /// UID:GID to own the admin's files (a root container writing them for a user).
    #[arg(long, value_parser = owner)]
    admin_owner: Option<(u32, u32)>,
}

fn owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("want UID:GID")?;
    Ok((
        u.parse().map_err(|_| format!("bad uid {u:?}"))?,
        g.parse().map_err(|_| format!("bad gid {g:?}"))?,
    ))
}

/// Writes the PKI `f` asks for and says how many files.
pub fn pki(f: PkiFlags) -> anyhow::Result<()> {
    let plan = crate::pki::Plan {
        dir: f.dir,
        server: f.server,
        admin_server: f.admin_server,
        hosts: f.hosts,
        nodes: f.nodes,
        admin_owner: f.admin_owner,
    };
    let files = crate::pki::generate(&plan)?;
    println!(
        "rkube-pki: wrote {} files in {}",
        files.len(),
        plan.dir.display()
    );
    Ok(())
}
