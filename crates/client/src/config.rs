//! Where the apiserver is and how to talk to it: kubeconfig loading (the file kubectl uses),
//! the `--server` override, and the client flags every component shares.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Error;

/// Connection settings for one apiserver.
#[derive(Clone, Debug)]
pub struct Config {
    /// `http://host:port` (no trailing slash).
    pub server: String,
    pub token: Option<String>,
    /// Skip server certificate verification (kubeconfig `insecure-skip-tls-verify`).
    pub insecure: bool,
    /// Client-side rate limit in requests per second; 0 turns it off.
    pub qps: f32,
    pub burst: u32,
    pub user_agent: String,
    pub timeout: std::time::Duration,
}

impl Config {
    pub fn new(server: impl Into<String>) -> Self {
        Config {
            server: server.into().trim_end_matches('/').to_string(),
            token: None,
            insecure: false,
            qps: 0.0,
            burst: 0,
            user_agent: format!("rkube/{}", env!("CARGO_PKG_VERSION")),
            timeout: std::time::Duration::from_secs(30),
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
        if self.server.starts_with("http://") {
            Ok(())
        } else if self.server.starts_with("https://") {
            Err(Error::Config(format!(
                "server {}: this build of rkube-client speaks plain HTTP only (rkube's apiserver serves HTTP on loopback)",
                self.server
            )))
        } else {
            Err(Error::Config(format!(
                "server {:?} is not an http:// URL",
                self.server
            )))
        }
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

pub use rkube_api::kubeconfig::kubeconfig_yaml;

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
    fn errors_are_clear() {
        let e =
            Config::from_kubeconfig_str("current-context: x\ncontexts: []\n", None).unwrap_err();
        assert!(e.to_string().contains("context \"x\" not found"), "{e}");
        let e = Config::infer(None, Some("https://h:1")).unwrap_err();
        assert!(e.to_string().contains("plain HTTP"), "{e}");
        let e = Config::from_kubeconfig_str(": : :", None).unwrap_err();
        assert!(e.to_string().contains("parsing kubeconfig"), "{e}");
    }
}
