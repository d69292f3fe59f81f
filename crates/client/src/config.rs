//! Where the apiserver is and how to talk to it: kubeconfig loading (the file kubectl uses),
//! the `--server` override, and the client flags every component shares.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Error;

/// Told of every finished request: its verb (`GET`, …), its HTTP code as text (`"<error>"`
/// when none came back) and how long it took — what a component turns into upstream's
/// `rest_client_*` metrics.
pub type RequestObserver = std::sync::Arc<dyn Fn(&str, &str, std::time::Duration) + Send + Sync>;

/// Connection settings for one apiserver.
#[derive(Clone)]
pub struct Config {
    /// `http://host:port` (no trailing slash).
    pub server: String,
    pub token: Option<String>,
    /// Skip server certificate verification (kubeconfig `insecure-skip-tls-verify`).
    pub insecure: bool,
    /// PEM CA bundle to verify an https server with (`certificate-authority[-data]`).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate and key (`client-certificate[-data]`, `client-key[-data]`).
    pub client_identity_pem: Option<Vec<u8>>,
    /// Client-side rate limit in requests per second; 0 turns it off.
    pub qps: f32,
    pub burst: u32,
    /// The most requests (watches aside) one client — its clones and `with_own_rate_limit`
    /// copies together — has at the server at once; more wait their turn. 0: no cap.
    pub max_in_flight: usize,
    pub user_agent: String,
    pub timeout: std::time::Duration,
    pub observer: Option<RequestObserver>,
    /// HTTP/2: with prior knowledge (h2c) to an `http://` server, offered by ALPN to an
    /// `https://` one. The client's requests then share one connection and its watches
    /// another (with its clones and copies, but for `with_own_connections`); past the
    /// server's stream limit, requests wait for a stream. Off: HTTP/1.1 only, a connection
    /// per request in flight and per watch.
    pub http2: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credentials in logs.
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .field("max_in_flight", &self.max_in_flight)
            .field("user_agent", &self.user_agent)
            .field("timeout", &self.timeout)
            .field("http2", &self.http2)
            .finish_non_exhaustive()
    }
}

/// The most requests the controller-manager or the scheduler has at the apiserver at once,
/// unless its config sets its own cap. Together they stay well under the apiserver's 200
/// mutating seats: a ReplicaSet's slow-start batch of 256 creates would otherwise overrun
/// them beside the kubelets' writes, and each refused request waits out a `Retry-After`
/// second.
pub const COMPONENT_MAX_IN_FLIGHT: usize = 64;

impl Config {
    /// This config with `max_in_flight` set to `n` unless it has a cap already.
    pub fn capped(mut self, n: usize) -> Self {
        if self.max_in_flight == 0 {
            self.max_in_flight = n;
        }
        self
    }

    pub fn new(server: impl Into<String>) -> Self {
        Config {
            server: server.into().trim_end_matches('/').to_string(),
            token: None,
            insecure: false,
            ca_pem: None,
            client_identity_pem: None,
            qps: 0.0,
            burst: 0,
            max_in_flight: 0,
            user_agent: format!("rkube/{}", env!("CARGO_PKG_VERSION")),
            timeout: std::time::Duration::from_secs(30),
            observer: None,
            http2: false,
        }
    }

    /// Loads the current context of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading kubeconfig {}: {e}", path.display())))?;
        Self::from_kubeconfig_str(&text, path.parent())
    }

    /// Parses kubeconfig YAML (JSON is YAML too); relative file paths resolve against `dir`.
    pub fn from_kubeconfig_str(text: &str, dir: Option<&Path>) -> Result<Self, Error> {
        let kc: Kubeconfig = serde_yaml::from_str(text)
            .map_err(|e| Error::Config(format!("parsing kubeconfig: {e}")))?;
        let ctx_name = kc
            .current_context
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| kc.contexts.first().map(|c| c.name.clone()))
            .ok_or_else(|| Error::Config("kubeconfig has no contexts".into()))?;
        let ctx = kc
            .contexts
            .iter()
            .find(|c| c.name == ctx_name)
            .ok_or_else(|| {
                Error::Config(format!("context {ctx_name:?} not found in kubeconfig"))
            })?;
        let cluster = kc
            .clusters
            .iter()
            .find(|c| c.name == ctx.context.cluster)
            .ok_or_else(|| {
                Error::Config(format!(
                    "cluster {:?} not found in kubeconfig",
                    ctx.context.cluster
                ))
            })?;
        let mut cfg = Config::new(&cluster.cluster.server);
        cfg.insecure = cluster.cluster.insecure_skip_tls_verify;
        cfg.ca_pem = pem_of(
            dir,
            cluster.cluster.certificate_authority_data.as_deref(),
            cluster.cluster.certificate_authority.as_deref(),
            "certificate-authority",
        )?;
        if let Some(user) = ctx
            .context
            .user
            .as_deref()
            .and_then(|u| kc.users.iter().find(|x| x.name == u))
        {
            cfg.token = match (&user.user.token, &user.user.token_file) {
                (Some(t), _) => Some(t.clone()),
                (None, Some(f)) => {
                    let p = resolve(dir, f);
                    let t = std::fs::read_to_string(&p).map_err(|e| {
                        Error::Config(format!("reading token file {}: {e}", p.display()))
                    })?;
                    Some(t.trim().to_string())
                }
                _ => None,
            };
            let cert = pem_of(
                dir,
                user.user.client_certificate_data.as_deref(),
                user.user.client_certificate.as_deref(),
                "client-certificate",
            )?;
            let key = pem_of(
                dir,
                user.user.client_key_data.as_deref(),
                user.user.client_key.as_deref(),
                "client-key",
            )?;
            cfg.client_identity_pem = match (cert, key) {
                (Some(mut c), Some(k)) => {
                    c.push(b'\n');
                    c.extend_from_slice(&k);
                    Some(c)
                }
                (None, None) => None,
                _ => {
                    return Err(Error::Config(
                        "kubeconfig user has a client certificate or key without the other".into(),
                    ))
                }
            };
        }
        cfg.check_scheme()?;
        Ok(cfg)
    }

    /// `--server` wins over the kubeconfig; without either, `$KUBECONFIG` then `~/.kube/config`.
    pub fn infer(kubeconfig: Option<&Path>, server: Option<&str>) -> Result<Self, Error> {
        let mut cfg = match kubeconfig {
            Some(p) => Some(Self::from_kubeconfig(p)?),
            None => match default_kubeconfig_path() {
                Some(p) if p.exists() && server.is_none() => Some(Self::from_kubeconfig(&p)?),
                _ => None,
            },
        };
        if let Some(s) = server {
            match &mut cfg {
                Some(c) => c.server = s.trim_end_matches('/').to_string(),
                None => cfg = Some(Config::new(s)),
            }
        }
        let cfg = cfg.ok_or_else(|| {
            Error::Config("no apiserver: pass --kubeconfig or --server (or set KUBECONFIG)".into())
        })?;
        cfg.check_scheme()?;
        Ok(cfg)
    }

    fn check_scheme(&self) -> Result<(), Error> {
        if self.server.starts_with("http://") || self.server.starts_with("https://") {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "server {:?} is not an http:// or https:// URL",
                self.server
            )))
        }
    }
}

/// PEM bytes from a kubeconfig `*-data` field (base64) or file path (relative to `dir`).
fn pem_of(
    dir: Option<&Path>,
    data: Option<&str>,
    file: Option<&str>,
    field: &str,
) -> Result<Option<Vec<u8>>, Error> {
    use base64::Engine as _;
    if let Some(d) = data.filter(|d| !d.is_empty()) {
        return base64::engine::general_purpose::STANDARD
            .decode(d.trim())
            .map(Some)
            .map_err(|e| Error::Config(format!("kubeconfig {field}-data is not base64: {e}")));
    }
    match file.filter(|f| !f.is_empty()) {
        Some(f) => {
            let p = resolve(dir, f);
            std::fs::read(&p)
                .map(Some)
                .map_err(|e| Error::Config(format!("reading {field} {}: {e}", p.display())))
        }
        None => Ok(None),
    }
}

fn resolve(dir: Option<&Path>, f: &str) -> PathBuf {
    let p = PathBuf::from(f);
    match dir {
        Some(d) if p.is_relative() => d.join(p),
        _ => p,
    }
}

fn default_kubeconfig_path() -> Option<PathBuf> {
    if let Ok(k) = std::env::var("KUBECONFIG") {
        if let Some(first) = k.split(':').find(|s| !s.is_empty()) {
            return Some(PathBuf::from(first));
        }
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube").join("config"))
}

pub use rkube_api::kubeconfig::{kubeconfig_yaml, kubeconfig_yaml_x509};

/// The flags every component shares to reach the apiserver.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientFlags {
    /// Path to a kubeconfig file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The apiserver's address; overrides the kubeconfig's.
    #[arg(long, alias = "master")]
    pub server: Option<String>,
    /// Client-side request rate limit; 0 turns it off.
    #[arg(long, default_value_t = 0.0)]
    pub kube_api_qps: f32,
    /// Burst allowed over `--kube-api-qps`.
    #[arg(long, default_value_t = 0)]
    pub kube_api_burst: u32,
}

impl ClientFlags {
    pub fn config(&self, agent: &str) -> Result<Config, Error> {
        let mut cfg = Config::infer(self.kubeconfig.as_deref(), self.server.as_deref())?;
        cfg.qps = self.kube_api_qps;
        cfg.burst = self.kube_api_burst;
        cfg.user_agent = format!("{agent}/{}", env!("CARGO_PKG_VERSION"));
        Ok(cfg)
    }
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default)]
    users: Vec<NamedUser>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    cluster: T,
}

#[derive(Deserialize)]
struct ClusterEntry {
    server: String,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
    #[serde(rename = "certificate-authority", default)]
    certificate_authority: Option<String>,
    #[serde(rename = "certificate-authority-data", default)]
    certificate_authority_data: Option<String>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: ContextEntry,
}

#[derive(Deserialize)]
struct ContextEntry {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: UserEntry,
}

#[derive(Deserialize, Default)]
struct UserEntry {
    #[serde(default)]
    token: Option<String>,
    #[serde(rename = "tokenFile", default)]
    token_file: Option<String>,
    #[serde(rename = "client-certificate", default)]
    client_certificate: Option<String>,
    #[serde(rename = "client-certificate-data", default)]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key", default)]
    client_key: Option<String>,
    #[serde(rename = "client-key-data", default)]
    client_key_data: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_current_context_with_token() {
        let text = "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: a\n  cluster:\n    server: http://a:1\n- name: cb\n  cluster:\n    server: http://127.0.0.1:6443/\ncontexts:\n- name: a\n  context: {cluster: a, user: ua}\n- name: b\n  context: {cluster: cb, user: ub}\nusers:\n- name: ua\n  user: {token: x}\n- name: ub\n  user: {token: secret}\n";
        let c = Config::from_kubeconfig_str(text, None).unwrap();
        assert_eq!(c.server, "http://127.0.0.1:6443");
        assert_eq!(c.token.as_deref(), Some("secret"));
    }

    #[test]
    fn written_kubeconfig_round_trips() {
        let y = kubeconfig_yaml("rkube", "http://127.0.0.1:6443", Some("t0k"));
        let c = Config::from_kubeconfig_str(&y, None).unwrap();
        assert_eq!(c.server, "http://127.0.0.1:6443");
        assert_eq!(c.token.as_deref(), Some("t0k"));
        let y = kubeconfig_yaml("rkube", "http://127.0.0.1:6443", None);
        assert_eq!(Config::from_kubeconfig_str(&y, None).unwrap().token, None);
    }

    #[test]
    fn https_clusters_bring_their_ca_and_client_certificate() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "CA PEM").unwrap();
        let text = "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: \"https://127.0.0.1:6443\", certificate-authority: ca.crt}\nusers:\n- name: u\n  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}\n";
        let c = Config::from_kubeconfig_str(text, Some(dir.path())).unwrap();
        assert_eq!(c.server, "https://127.0.0.1:6443");
        assert_eq!(c.ca_pem.as_deref(), Some(&b"CA PEM"[..]));
        assert_eq!(c.client_identity_pem.as_deref(), Some(&b"CERT\nKEY"[..]));
    }

    #[test]
    fn errors_are_clear() {
        let e =
            Config::from_kubeconfig_str("current-context: x\ncontexts: []\n", None).unwrap_err();
        assert!(e.to_string().contains("context \"x\" not found"), "{e}");
        let e = Config::infer(None, Some("ftp://h:1")).unwrap_err();
        assert!(
            e.to_string().contains("not an http:// or https:// URL"),
            "{e}"
        );
        let half = "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: \"https://h:1\"}\nusers:\n- name: u\n  user: {client-certificate-data: Zm9v}\n";
        let e = Config::from_kubeconfig_str(half, None).unwrap_err();
        assert!(e.to_string().contains("without the other"), "{e}");
        let e = Config::from_kubeconfig_str(": : :", None).unwrap_err();
        assert!(e.to_string().contains("parsing kubeconfig"), "{e}");
    }
}
