//! A whole rkube cluster as processes, for end-to-end tests: rkube-store, rkube-apiserver,
//! rkube-controller-manager, rkube-scheduler and kubelet-agents, on free loopback ports, from
//! the workspace's built binaries (`cargo build --workspace --bins`; `scripts/test.sh` does it).
//! Components can be stopped, frozen (SIGSTOP), killed and restarted; kubectl runs against it
//! with a written kubeconfig.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tokio::process::Child;

/// Where the binaries are: `$RKUBE_BIN_DIR`, else the workspace's `target/debug`.
pub fn bin_dir() -> PathBuf {
    if let Ok(d) = std::env::var("RKUBE_BIN_DIR") {
        return PathBuf::from(d);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug")
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} not built: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        p.display()
    );
    p
}

pub use rkube_daemon::port::free_port;

pub use rkube_client::wait::wait_for;

/// `GET url` with `http`, its body as JSON (panics naming the URL if either fails).
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    let resp = http.get(url).send().await.expect(url);
    resp.json().await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// An HTTP client trusting `pki`'s CA with the admin's client certificate.
/// An HTTPS client trusting `pki`'s CA; with `admin`, presenting the admin's certificate.
pub fn https_client(pki: &Path, admin: bool) -> reqwest::Client {
    https_client_as(pki, admin.then_some("admin"))
}

/// An HTTPS client trusting the cluster's CA, presenting `<identity>.crt` (if any).
pub fn https_client_as(pki: &Path, identity: Option<&str>) -> reqwest::Client {
    let read = |f: &str| std::fs::read(pki.join(f)).unwrap();
    let mut b = reqwest::Client::builder()
        .http1_only()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&read("ca.crt")).unwrap());
    if let Some(who) = identity {
        let mut id = read(&format!("{who}.crt"));
        id.extend(read(&format!("{who}.key")));
        b = b.identity(reqwest::Identity::from_pem(&id).unwrap());
    }
    b.build().unwrap()
}

/// Without credentials a secure apiserver answers its health and nothing else: `/readyz`
/// is 200, listing pods upstream's 403 for `system:anonymous`.
pub async fn assert_anonymous_sees_only_health(server: &str, pki: &Path) {
    let anon = https_client(pki, false);
    let ready = anon.get(format!("{server}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let pods = anon
        .get(format!("{server}/api/v1/pods"))
        .send()
        .await
        .unwrap();
    assert_eq!(pods.status(), 403);
    let status: serde_json::Value = pods.json().await.unwrap();
    assert_eq!(
        status["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
    );
}

/// kubectl with `kubeconfig`, from the workspace root.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("kubectl on PATH")
}

/// Extra flags per component.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub nodes: usize,
    /// A real etcd 3.4 (Debian's `etcd`, or `$RKUBE_ETCD_BIN`) in place of rkube-store.
    pub etcd: bool,
    pub apiserver: Vec<String>,
    pub controller_manager: Vec<String>,
    pub scheduler: Vec<String>,
    pub kubelet: Vec<String>,
    /// Further kubelet-agent processes: (node name, extra flags).
    pub extra_nodes: Vec<(String, Vec<String>)>,
    /// Plain HTTP, anonymous and AlwaysAllow instead of the secure default (HTTPS, client
    /// certificates per component from `rkube-pki`, Node+RBAC authorization, priority and
    /// fairness).
    pub insecure: bool,
}

struct Proc {
    args: Vec<String>,
    bin: PathBuf,
    child: Option<Child>,
    /// Where /readyz (or the store's status) answers.
    health: String,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub server: String,
    pub store_url: String,
    /// The admin's kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// `rkube-pki`'s directory, when secure.
    pub pki: Option<PathBuf>,
    procs: BTreeMap<String, Proc>,
    http: reqwest::Client,
    /// What the store lets in: the apiserver's etcd client certificate when secure.
    store_http: reqwest::Client,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.procs.values_mut() {
            if let Some(c) = p.child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }
}

impl Cluster {
    pub async fn start(opts: Opts) -> Cluster {
        let store_port = free_port();
        let api_port = free_port();
        // The secure cluster's rkube-store serves HTTPS and requires client certificates, as
        // a kubeadm etcd does; a real etcd stays plain.
        let store_scheme = if opts.insecure || opts.etcd {
            "http"
        } else {
            "https"
        };
        let store_url = format!("{store_scheme}://127.0.0.1:{store_port}");
        let scheme = if opts.insecure { "http" } else { "https" };
        let server = format!("{scheme}://127.0.0.1:{api_port}");
        let dir = tempfile::tempdir().unwrap();
        // Written by the apiserver itself (`--write-kubeconfig`) once it listens; when secure
        // it names only the server, and every identity's kubeconfig comes from rkube-pki.
        let written_kc = dir.path().join("kubeconfig");
        let mut nodes: Vec<(String, Vec<String>)> = (1..=opts.nodes.max(1))
            .map(|i| (format!("node-{i}"), opts.kubelet.clone()))
            .collect();
        nodes.extend(opts.extra_nodes.iter().cloned());
        let pki = (!opts.insecure).then(|| {
            let pki = dir.path().join("pki");
            // Every node gets its identity, also each of an agent's `--nodes N`.
            let mut names: Vec<String> = Vec::new();
            for (n, extra) in &nodes {
                names.push(n.clone());
                if let Some(i) = extra.iter().position(|f| f == "--nodes") {
                    let count: usize = extra[i + 1].parse().expect("--nodes N");
                    names.extend((0..count).map(|k| format!("{n}-{k}")));
                }
            }
            let out = Command::new(bin("rkube-pki"))
                .arg("--dir")
                .arg(&pki)
                .args(["--server", &server, "--node", &names.join(",")])
                .output()
                .expect("run rkube-pki");
            assert!(
                out.status.success(),
                "rkube-pki: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            pki
        });
        let kubeconfig_for = |who: &str| -> String {
            match &pki {
                Some(p) => p.join(format!("{who}.kubeconfig")).to_str().unwrap().into(),
                None => written_kc.to_str().unwrap().into(),
            }
        };
        let kubeconfig = PathBuf::from(kubeconfig_for("admin"));
        let http = match &pki {
            Some(p) => https_client(p, true),
            None => reqwest::Client::new(),
        };
        let store_http = match &pki {
            Some(p) => https_client_as(p, Some("apiserver-etcd-client")),
            None => reqwest::Client::new(),
        };
        let mut c = Cluster {
            server: server.clone(),
            store_url: store_url.clone(),
            kubeconfig,
            pki: pki.clone(),
            procs: BTreeMap::new(),
            http,
            store_http,
            dir,
        };
        let data = c.dir.path().join("store");
        if opts.etcd {
            let peer = format!("http://127.0.0.1:{}", free_port());
            let args = [
                "--data-dir",
                data.to_str().unwrap(),
                "--listen-client-urls",
                &store_url,
                "--advertise-client-urls",
                &store_url,
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &format!("default={peer}"),
                "--name",
                "default",
                "--experimental-watch-progress-notify-interval",
                "1s",
            ];
            let etcd = std::env::var("RKUBE_ETCD_BIN").unwrap_or_else(|_| "etcd".into());
            c.procs.insert(
                "store".into(),
                Proc {
                    args: args.iter().map(|s| s.to_string()).collect(),
                    bin: PathBuf::from(etcd),
                    child: None,
                    health: format!("{store_url}/health"),
                },
            );
        } else {
            let mut args = vec![
                "--data-dir".into(),
                data.to_str().unwrap().into(),
                "--listen-client-urls".into(),
                store_url.clone(),
            ];
            if let Some(p) = &pki {
                let f = |name: &str| p.join(name).to_str().unwrap().to_string();
                args.extend([
                    "--cert-file".into(),
                    f("store.crt"),
                    "--key-file".into(),
                    f("store.key"),
                    "--trusted-ca-file".into(),
                    f("ca.crt"),
                    "--client-cert-auth".into(),
                    "--client-cert-allowed-cn".into(),
                    "kube-apiserver-etcd-client".into(),
                ]);
            }
            c.add("store", "rkube-store", args, format!("{store_url}/health"));
        }
        c.start_proc("store").await;
        let mut args = vec![
            "--etcd-servers".into(),
            store_url.clone(),
            "--secure-port".into(),
            api_port.to_string(),
            "--write-kubeconfig".into(),
            written_kc.to_str().unwrap().into(),
        ];
        if let Some(p) = &pki {
            let f = |name: &str| p.join(name).to_str().unwrap().to_string();
            args.extend([
                "--tls-cert-file".into(),
                f("apiserver.crt"),
                "--tls-private-key-file".into(),
                f("apiserver.key"),
                "--client-ca-file".into(),
                f("ca.crt"),
                "--authorization-mode".into(),
                "Node,RBAC".into(),
                "--enable-admission-plugins".into(),
                "NodeRestriction".into(),
                "--enable-priority-and-fairness".into(),
                "true".into(),
                "--kubelet-client-certificate".into(),
                f("apiserver-kubelet-client.crt"),
                "--kubelet-client-key".into(),
                f("apiserver-kubelet-client.key"),
                "--kubelet-certificate-authority".into(),
                f("ca.crt"),
            ]);
            if !opts.etcd {
                args.extend([
                    "--etcd-cafile".into(),
                    f("ca.crt"),
                    "--etcd-certfile".into(),
                    f("apiserver-etcd-client.crt"),
                    "--etcd-keyfile".into(),
                    f("apiserver-etcd-client.key"),
                ]);
            }
        }
        args.extend(opts.apiserver.clone());
        c.add(
            "apiserver",
            "rkube-apiserver",
            args,
            format!("{server}/readyz"),
        );
        c.start_proc("apiserver").await;
        let written = std::fs::read_to_string(&written_kc).unwrap_or_default();
        assert!(
            written.contains(&format!("server: {server}")),
            "the apiserver's --write-kubeconfig wrote {written:?}"
        );
        for (name, bin, extra) in [
            (
                "controller-manager",
                "rkube-controller-manager",
                &opts.controller_manager,
            ),
            ("scheduler", "rkube-scheduler", &opts.scheduler),
        ] {
            let port = free_port();
            let mut args = vec![
                "--kubeconfig".into(),
                kubeconfig_for(name),
                "--secure-port".into(),
                port.to_string(),
            ];
            if let (Some(p), "controller-manager") = (&pki, name) {
                let f = |n: &str| p.join(n).to_str().unwrap().to_string();
                args.extend([
                    "--cluster-signing-cert-file".into(),
                    f("ca.crt"),
                    "--cluster-signing-key-file".into(),
                    f("ca.key"),
                ]);
            }
            args.extend(extra.clone());
            c.add(name, bin, args, format!("http://127.0.0.1:{port}/readyz"));
            c.start_proc(name).await;
        }
        for (index, (name, extra)) in nodes.into_iter().enumerate() {
            let port = free_port();
            let mut args: Vec<String> = vec![
                "--kubeconfig".into(),
                kubeconfig_for(&format!("node-{name}")),
                "--node-name".into(),
                name.clone(),
                "--node-index".into(),
                index.to_string(),
                "--port".into(),
                port.to_string(),
            ];
            let mut health_scheme = "http";
            if let Some(p) = &pki {
                let f = |name: &str| p.join(name).to_str().unwrap().to_string();
                args.extend([
                    "--node-kubeconfig-dir".into(),
                    p.to_str().unwrap().into(),
                    "--tls-cert-file".into(),
                    f("kubelet.crt"),
                    "--tls-private-key-file".into(),
                    f("kubelet.key"),
                    "--client-ca-file".into(),
                    f("ca.crt"),
                ]);
                health_scheme = "https";
            }
            args.extend(extra);
            c.add(
                &name,
                "rkube-kubelet-agent",
                args,
                format!("{health_scheme}://127.0.0.1:{port}/readyz"),
            );
            c.start_proc(&name).await;
        }
        c
    }

    fn add(&mut self, name: &str, binary: &str, args: Vec<String>, health: String) {
        self.procs.insert(
            name.into(),
            Proc {
                args,
                bin: bin(binary),
                child: None,
                health,
            },
        );
    }

    /// Starts (or restarts) a component and waits until it is ready.
    pub async fn start_proc(&mut self, name: &str) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let p = self.procs.get_mut(name).expect("known component");
        let child = tokio::process::Command::new(&p.bin)
            .args(&p.args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", p.bin.display()));
        p.child = Some(child);
        let health = p.health.clone();
        let http = if name == "store" {
            self.store_http.clone()
        } else {
            self.http.clone()
        };
        let logs = self.dir.path().join(format!("{name}.log"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if http
                .get(&health)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            let exited = self
                .procs
                .get_mut(name)
                .and_then(|p| p.child.as_mut())
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || tokio::time::Instant::now() > deadline {
                panic!(
                    "{name} not ready ({}): {}",
                    exited.map_or("timed out".to_string(), |s| format!("exited: {s}")),
                    std::fs::read_to_string(&logs).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
        }
    }

    pub fn pid(&self, name: &str) -> u32 {
        self.procs[name]
            .child
            .as_ref()
            .and_then(|c| c.id())
            .expect("running")
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`, `TERM`).
    pub fn signal(&self, name: &str, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.pid(name).to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {name}");
    }

    /// Kills a component (SIGKILL) and waits for it to be gone.
    pub async fn kill(&mut self, name: &str) {
        if let Some(mut c) = self.procs.get_mut(name).and_then(|p| p.child.take()) {
            let _ = c.kill().await;
        }
    }

    /// Stops a component with SIGTERM (a clean shutdown) and waits for it.
    pub async fn stop(&mut self, name: &str) {
        self.signal(name, "TERM");
        if let Some(mut c) = self.procs.get_mut(name).and_then(|p| p.child.take()) {
            let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
            let _ = c.kill().await;
        }
    }

    /// The `/metrics` URL of a component.
    pub fn metrics_url(&self, name: &str) -> String {
        self.procs[name]
            .health
            .replace("/readyz", "/metrics")
            .replace("/health", "/metrics")
    }

    /// Sum of a metric's series (optionally those whose labels contain `filter`).
    pub async fn metric(&self, name: &str, metric: &str, filter: &str) -> f64 {
        let http = if name == "store" {
            &self.store_http
        } else {
            &self.http
        };
        let text = http
            .get(self.metrics_url(name))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with(metric)
                    && (l[metric.len()..].starts_with('{') || l[metric.len()..].starts_with(' '))
            })
            .filter(|l| l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// rkube-client as the admin.
    pub fn client(&self) -> rkube_client::Client {
        let cfg =
            rkube_client::Config::from_kubeconfig(&self.kubeconfig).expect("admin kubeconfig");
        rkube_client::Client::new(cfg).expect("admin client")
    }

    /// A plain HTTP client that trusts the cluster's CA and presents the admin's certificate.
    pub fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// A client the store lets in (the apiserver's etcd client certificate when secure).
    pub fn store_http(&self) -> reqwest::Client {
        self.store_http.clone()
    }

    /// Runs kubectl against the cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl_with(&self.kubeconfig, args)
    }

    /// Runs kubectl as one of rkube-pki's identities (`controller-manager`, `scheduler`,
    /// `node-<name>`, `admin`); secure clusters only.
    pub fn kubectl_as(&self, who: &str, args: &[&str]) -> Output {
        let pki = self.pki.as_ref().expect("a secure cluster");
        kubectl_with(&pki.join(format!("{who}.kubeconfig")), args)
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `scripts/e2e-nginx.sh` against the cluster (with another kubectl if given) and
    /// panics with its output unless every step passed; returns its stdout.
    pub fn run_nginx_script(&self, kubectl: Option<&str>) -> String {
        let mut cmd = Command::new("bash");
        cmd.arg(workspace_root().join("scripts/e2e-nginx.sh"))
            .env("KUBECONFIG", &self.kubeconfig);
        if let Some(k) = kubectl {
            cmd.args(["--kubectl", k]);
        }
        let out = cmd.output().expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && stdout.contains("all steps passed"),
            "e2e-nginx.sh ({}) failed:\n{stdout}\n{}",
            kubectl.unwrap_or("kubectl"),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Lines of `kubectl get po -l <selector> --no-headers` showing `1/1 Running`.
    pub fn running_pods(&self, selector: &str) -> Vec<String> {
        let out = self.kubectl(&["get", "po", "-l", selector, "--no-headers"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                l.split_whitespace().nth(1) == Some("1/1")
                    && l.split_whitespace().nth(2) == Some("Running")
            })
            .map(str::to_string)
            .collect()
    }
}
