//! Where the CLI's clusters live and what it knows of each: `$RKUBE_HOME/clusters/<name>/`
//! (default `$XDG_DATA_HOME/rkube`, else `~/.local/share/rkube`) holding `cluster.json` (the
//! [`Spec`]: what was asked for and the ports chosen), the admin `kubeconfig`, `pki/`, the
//! store's data, `logs/<process>.log` and `run/<process>.pid`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// The directory holding every cluster.
pub fn root() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("RKUBE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("clusters"));
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("rkube/clusters"));
    }
    let home = std::env::var_os("HOME").context("set RKUBE_HOME or HOME: where clusters live")?;
    Ok(PathBuf::from(home).join(".local/share/rkube/clusters"))
}

/// A cluster name is a DNS label (it names files and appears in kubeconfig contexts).
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        bail!("invalid cluster name {name:?}: use lower-case letters, digits and '-' (at most 63, starting and ending alphanumeric)");
    }
    Ok(())
}

/// The ports a cluster's processes listen on, chosen at create and kept across restarts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Ports {
    pub apiserver: u16,
    pub store: u16,
    /// etcd's peer port (only with `--etcd`).
    pub store_peer: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
    /// Node i's kubelet port is `nodes[i]`; the list grows as nodes are added.
    pub nodes: Vec<u16>,
}

/// What a cluster is: written at create, updated when nodes are scaled.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Spec {
    pub name: String,
    pub nodes: usize,
    /// A real etcd (Debian's `etcd`) as storage instead of rkube-store.
    pub etcd: bool,
    /// HTTPS with client certificates, Node+RBAC and priority and fairness.
    pub secure: bool,
    pub ports: Ports,
    /// Seconds since the epoch.
    pub created: u64,
}

impl Spec {
    pub fn scheme(&self) -> &'static str {
        if self.secure {
            "https"
        } else {
            "http"
        }
    }

    pub fn server(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme(), self.ports.apiserver)
    }

    pub fn store_url(&self) -> String {
        // rkube-store serves HTTPS when secure; etcd stays plain on loopback, as up.sh ran it.
        let scheme = if self.secure && !self.etcd {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.ports.store)
    }

    /// Node i's name (1-based, as `scripts/up.sh` has always named them).
    pub fn node_name(i: usize) -> String {
        format!("rkube-node-{}", i + 1)
    }

    pub fn node_names(&self) -> Vec<String> {
        (0..self.nodes).map(Spec::node_name).collect()
    }
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One cluster's directory and the paths inside it.
#[derive(Clone, Debug)]
pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    pub fn of(name: &str) -> anyhow::Result<Home> {
        check_name(name)?;
        Ok(Home {
            dir: root()?.join(name),
        })
    }

    pub fn exists(&self) -> bool {
        self.spec_file().exists()
    }

    fn spec_file(&self) -> PathBuf {
        self.dir.join("cluster.json")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    pub fn log(&self, process: &str) -> PathBuf {
        self.logs().join(format!("{process}.log"))
    }

    pub fn pid_file(&self, process: &str) -> PathBuf {
        self.dir.join("run").join(format!("{process}.pid"))
    }

    /// Where the store keeps its data (rkube-store's or etcd's).
    pub fn data(&self, etcd: bool) -> PathBuf {
        self.dir.join(if etcd { "etcd" } else { "store" })
    }

    /// The cluster's spec, or an error naming the cluster and how to see which exist.
    pub fn load(&self) -> anyhow::Result<Spec> {
        let name = self.name();
        let text = match std::fs::read(self.spec_file()) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("no cluster named {name:?} (`rkube cluster list` shows them; `rkube cluster create {name}` makes it)")
            }
            Err(e) => {
                return Err(e).with_context(|| format!("read {}", self.spec_file().display()))
            }
        };
        serde_json::from_slice(&text).with_context(|| {
            format!(
                "{} is damaged: `rkube cluster delete {name}` removes it",
                self.spec_file().display()
            )
        })
    }

    /// Writes the spec atomically (a temporary file renamed over it).
    pub fn save(&self, spec: &Spec) -> anyhow::Result<()> {
        let tmp = self.dir.join("cluster.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(spec)?)
            .with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, self.spec_file())?;
        Ok(())
    }

    pub fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Makes the directory owner-only (it holds the CA key and the store).
    pub fn create_dirs(&self) -> anyhow::Result<()> {
        for d in [self.dir.clone(), self.logs(), self.dir.join("run")] {
            std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
        }
        private_dir(&self.dir)
    }
}

#[cfg(unix)]
fn private_dir(d: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 700 {}", d.display()))
}

#[cfg(not(unix))]
fn private_dir(_: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// The stems of `dir`'s files named `<stem><suffix>` (none if `dir` is missing).
pub fn stems(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(suffix))
                .map(str::to_string)
        })
        .collect()
}

/// Every cluster's name, sorted (directories holding a `cluster.json`).
pub fn names() -> anyhow::Result<Vec<String>> {
    let root = root()?;
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("read {}", root.display())),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join("cluster.json").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for ok in ["a", "dev", "test-1", "x9"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "Dev", "a/b", "..", "a_b", &"a".repeat(64)] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("invalid cluster name"), "{bad}: {e}");
        }
    }

    #[test]
    fn urls_follow_the_configuration() {
        let mut s = Spec {
            name: "a".into(),
            nodes: 2,
            etcd: false,
            secure: true,
            ports: Ports {
                apiserver: 6443,
                store: 2379,
                store_peer: 2380,
                controller_manager: 1,
                scheduler: 2,
                nodes: vec![3, 4],
            },
            created: 0,
        };
        assert_eq!(s.server(), "https://127.0.0.1:6443");
        assert_eq!(s.store_url(), "https://127.0.0.1:2379");
        s.etcd = true;
        assert_eq!(s.store_url(), "http://127.0.0.1:2379");
        s.secure = false;
        assert_eq!(s.server(), "http://127.0.0.1:6443");
        assert_eq!(s.node_names(), ["rkube-node-1", "rkube-node-2"]);
    }
}
