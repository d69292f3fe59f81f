//! `docker compose`: the image builds without pulling, the stack comes up with its health
//! checks and start ordering, the scripted nginx end-to-end passes against it, in the
//! `monitoring` profile Prometheus scrapes every component (every target up, upstream's metric
//! names there), and with `docker-compose.etcd.yml` in place of the default storage file the
//! apiserver reaches three etcd members over gRPC with TLS (no rkube-store started beside them)
//! and the cluster keeps serving after one of them is killed. Reports itself skipped (with the reason) where no Docker engine or
//! compose tool is present, and the monitoring part where Prometheus is not installed.

use std::process::{Command, Output};
use std::time::Duration;

use rkube_e2e::{free_port, wait_for, workspace_root};

/// `docker compose` (v2) or `docker-compose` (v1), if an engine answers.
fn compose() -> Result<Vec<String>, String> {
    let engine = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output();
    match engine {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "no Docker engine: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => return Err(format!("no docker command: {e}")),
    }
    if Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(vec!["docker".into(), "compose".into()]);
    }
    if Command::new("docker-compose")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(vec!["docker-compose".into()]);
    }
    Err("neither `docker compose` nor `docker-compose` is installed".into())
}

struct Stack {
    cmd: Vec<String>,
    project: String,
    env: Vec<(String, String)>,
    profile: Option<&'static str>,
    /// Compose files named with `-f` (none: docker-compose.yml and its override).
    files: &'static [&'static str],
    /// The published apiserver port.
    port: u16,
    /// The published Prometheus port (the `monitoring` profile).
    prometheus: u16,
    /// Where the stack's `pki` step writes (a bind mount).
    pki: tempfile::TempDir,
    /// The admin kubeconfig it wrote there.
    kubeconfig: String,
}

impl Stack {
    /// Brings a stack up on a free port with its own certificate directory and waits for its
    /// three nodes.
    async fn up(
        cmd: Vec<String>,
        project: String,
        profile: Option<&'static str>,
        files: &'static [&'static str],
        extra_env: &[(&str, &str)],
    ) -> Stack {
        let port = free_port();
        let prometheus = free_port();
        let pki = tempfile::tempdir().unwrap();
        let kubeconfig = pki.path().join("admin.kubeconfig");
        let mut env = vec![
            ("RKUBE_API_PORT".to_string(), port.to_string()),
            ("RKUBE_PROMETHEUS_PORT".to_string(), prometheus.to_string()),
            (
                "RKUBE_PKI_DIR".to_string(),
                pki.path().to_str().unwrap().to_string(),
            ),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let stack = Stack {
            cmd,
            project,
            env,
            profile,
            files,
            port,
            prometheus,
            kubeconfig: kubeconfig.to_str().unwrap().to_string(),
            pki,
        };
        stack.ok(&["up", "-d"]);
        wait_cluster(&stack.kubeconfig).await;
        stack
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = Command::new(&self.cmd[0]);
        c.args(&self.cmd[1..]).args(["-p", &self.project]);
        for f in self.files {
            c.args(["-f", f]);
        }
        if let Some(p) = self.profile {
            c.args(["--profile", p]);
        }
        c.args(args)
            .current_dir(workspace_root())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        c.output().expect("compose runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "compose {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.run(&["down", "-v", "--remove-orphans"]);
    }
}

/// kubectl with the admin kubeconfig the stack's `pki` step wrote.
fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    rkube_e2e::kubectl_with(std::path::Path::new(kubeconfig), args)
}

async fn wait_cluster(kubeconfig: &str) {
    wait_for(
        "3 nodes Ready in the compose stack",
        Duration::from_secs(180),
        || async {
            let o = kubectl(kubeconfig, &["get", "nodes", "--no-headers"]);
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            (text
                .lines()
                .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
                .count()
                == 3)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_stack_runs_the_nginx_flow_and_survives_an_etcd_member_loss() {
    let cmd = match compose() {
        Ok(c) => c,
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
    let image = Command::new("bash")
        .arg(workspace_root().join("scripts/image.sh"))
        .arg("--debug")
        .output()
        .unwrap();
    assert!(
        image.status.success(),
        "image.sh: {}",
        String::from_utf8_lossy(&image.stderr)
    );

    // rkube-store: the scripted nginx end-to-end, over HTTPS as the admin; with Prometheus
    // when image.sh could pack it.
    let monitoring = workspace_root()
        .join("target/image-root/usr/local/bin/prometheus")
        .exists();
    if !monitoring {
        eprintln!("SKIPPED (monitoring profile): prometheus is not installed (Debian's `prometheus` package)");
    }
    let stack = Stack::up(
        cmd.clone(),
        format!("rkube-e2e-{}", std::process::id()),
        monitoring.then_some("monitoring"),
        &[],
        &[],
    )
    .await;
    let (port, kc) = (stack.port, stack.kubeconfig.clone());
    let admin = std::fs::read_to_string(&kc).unwrap();
    assert!(
        admin.contains(&format!("server: https://127.0.0.1:{port}")),
        "{admin}"
    );
    // Without credentials the apiserver answers only the public health paths.
    rkube_e2e::assert_anonymous_sees_only_health(
        &format!("https://127.0.0.1:{port}"),
        stack.pki.path(),
    )
    .await;
    let e2e = Command::new("bash")
        .arg(workspace_root().join("scripts/e2e-nginx.sh"))
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    assert!(
        e2e.status.success(),
        "e2e-nginx.sh against compose:\n{}\n{}",
        String::from_utf8_lossy(&e2e.stdout),
        String::from_utf8_lossy(&e2e.stderr)
    );
    if monitoring {
        prometheus_scrapes_every_component(stack.prometheus).await;
    }
    drop(stack);

    // The etcd storage file: three members serving their clients over TLS with client
    // certificates; no rkube-store beside them; one member killed, the cluster still serves
    // reads and writes.
    let project = format!("rkube-e2e-etcd-{}", std::process::id());
    let stack = Stack::up(
        cmd,
        project.clone(),
        None,
        &["docker-compose.yml", "docker-compose.etcd.yml"],
        &[],
    )
    .await;
    let kc = stack.kubeconfig.clone();
    let services = Command::new("docker")
        .args(["ps", "--filter"])
        .arg(format!("label=com.docker.compose.project={project}"))
        .args(["--format", "{{.Label \"com.docker.compose.service\"}}"])
        .output()
        .unwrap();
    let services = String::from_utf8_lossy(&services.stdout).to_string();
    let mut running: Vec<&str> = services.lines().collect();
    running.sort_unstable();
    assert_eq!(
        running,
        [
            "apiserver",
            "controller-manager",
            "etcd-1",
            "etcd-2",
            "etcd-3",
            "node-1",
            "node-2",
            "node-3",
            "scheduler"
        ],
        "the etcd stack's containers"
    );
    // A member answers only clients with a certificate from the cluster CA.
    let probe = |cert: &[&str]| {
        let mut args = vec![
            "exec",
            "-T",
            "etcd-1",
            "rkube-probe",
            "https://127.0.0.1:2379/health",
            "/pki/ca.crt",
        ];
        args.extend_from_slice(cert);
        stack.run(&args).status.success()
    };
    assert!(probe(&[
        "/pki/apiserver-etcd-client.crt",
        "/pki/apiserver-etcd-client.key"
    ]));
    assert!(
        !probe(&[]),
        "etcd-1 answered a client without a certificate"
    );
    let o = kubectl(&kc, &["apply", "-f", "e2e/nginx.yml"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    stack.ok(&["kill", "etcd-2"]);
    let cm = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        cm.path(),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: after-loss}\ndata: {k: v}\n",
    )
    .unwrap();
    let cm_path = cm.path().to_str().unwrap().to_string();
    wait_for(
        "writes and the nginx pod with one etcd member down",
        Duration::from_secs(120),
        || async {
            let wrote = kubectl(&kc, &["apply", "-f", &cm_path]).status.success();
            let pods = String::from_utf8_lossy(
                &kubectl(&kc, &["get", "po", "-l", "app=nginx", "--no-headers"]).stdout,
            )
            .to_string();
            (wrote && pods.contains("1/1") && pods.contains("Running")).then_some(())
        },
    )
    .await;
}

/// Every scrape target up (apiserver, store, controller-manager, scheduler, three kubelets),
/// and upstream's metric names in what was scraped.
async fn prometheus_scrapes_every_component(port: u16) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/api/v1");
    wait_for(
        "7 Prometheus targets up",
        Duration::from_secs(120),
        || async {
            let v: serde_json::Value = http
                .get(format!("{base}/targets"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            let targets = v["data"]["activeTargets"].as_array()?;
            let up: Vec<&str> = targets
                .iter()
                .filter(|t| t["health"] == "up")
                .filter_map(|t| t["labels"]["job"].as_str())
                .collect();
            (targets.len() == 7 && up.len() == 7).then_some(())
        },
    )
    .await;
    for (query, want) in [
        ("etcd_server_has_leader", "1"),
        ("count(apiserver_flowcontrol_nominal_limit_seats) > 0", ""),
        ("count(apiserver_watch_events_total) > 0", ""),
        ("count(apiserver_request_duration_seconds_bucket) > 0", ""),
        ("count(scheduler_schedule_attempts_total) > 0", ""),
        ("count(workqueue_depth) > 0", ""),
        (
            "count(rest_client_requests_total{job=\"scheduler\"}) > 0",
            "",
        ),
        (
            "count(etcd_disk_backend_commit_duration_seconds_bucket) > 0",
            "",
        ),
    ] {
        wait_for(
            &format!("Prometheus answers {query}"),
            Duration::from_secs(60),
            || async {
                let v: serde_json::Value = http
                    .get(format!("{base}/query"))
                    .query(&[("query", query)])
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                let first = v["data"]["result"].as_array()?.first()?.clone();
                let value = first["value"][1].as_str()?.to_string();
                (want.is_empty() || value == want).then_some(())
            },
        )
        .await;
    }
}
