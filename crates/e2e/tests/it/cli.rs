//! The cluster CLI as a user drives it: `rkube cluster create|list|kubeconfig|logs|stop|
//! start|delete`, `rkube nodes scale`, `rkube snapshot save|restore`, each a real process
//! with its own `RKUBE_HOME`, checked with kubectl; bad input exits non-zero naming the fix;
//! `scripts/up.sh` stops the cluster and exits 0 on Ctrl-C; `rkube dashboard` serves a secure
//! cluster's web view and API with the admin's credentials to loopback pages only.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rkube_e2e::{bin, kubectl_with, wait_for, workspace_root};
use tokio::io::AsyncBufReadExt;

/// Deletes every cluster under its directory when dropped, so a failed assertion leaves no
/// detached processes behind.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let names = std::fs::read_dir(self.0.join("clusters"))
            .into_iter()
            .flatten();
        for e in names.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let _ = rkube(&self.0, &["cluster", "delete", &name, "-q"]);
        }
    }
}

/// A temporary `RKUBE_HOME` whose clusters are deleted with it.
fn scratch_home() -> (tempfile::TempDir, Cleanup) {
    let t = tempfile::tempdir().unwrap();
    let c = Cleanup(t.path().to_path_buf());
    (t, c)
}

/// `rkube ARGS` with clusters under `home`.
fn rkube(home: &Path, args: &[&str]) -> Output {
    Command::new(bin("rkube"))
        .args(args)
        .env("RKUBE_HOME", home)
        .output()
        .expect("rkube runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `rkube ARGS`, which must succeed; its stdout.
fn ok(home: &Path, args: &[&str]) -> String {
    let out = rkube(home, args);
    assert!(
        out.status.success(),
        "rkube {args:?} failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `rkube ARGS`, which must fail; its stderr.
fn fails(home: &Path, args: &[&str]) -> String {
    let out = rkube(home, args);
    assert!(
        !out.status.success(),
        "rkube {args:?} succeeded: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

fn kubectl_ok(kc: &Path, args: &[&str]) -> String {
    let out = kubectl_with(kc, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The `list` row of `name`, split into columns.
fn row(home: &Path, name: &str) -> Vec<String> {
    ok(home, &["cluster", "list"])
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cols| cols.first().is_some_and(|c| c == name))
        .unwrap_or_else(|| panic!("{name} not listed"))
}

fn pids(home: &Path, name: &str) -> Vec<u32> {
    std::fs::read_dir(home.join("clusters").join(name).join("run"))
        .unwrap()
        .map(|e| {
            let t = std::fs::read_to_string(e.unwrap().path()).unwrap();
            t.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !matches!(
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next()),
            Some("Z")
        )
    })
}

async fn ready_nodes(kc: &Path, want: usize) {
    wait_for(
        &format!("{want} Ready node(s)"),
        Duration::from_secs(60),
        || async {
            let out = kubectl_with(kc, &["get", "nodes", "--no-headers"]);
            let t = text(&out.stdout);
            let ready = t
                .lines()
                .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
                .count();
            (out.status.success() && ready == want && t.lines().count() == want).then_some(())
        },
    )
    .await;
}

/// `rkube cluster create NAME --insecure --nodes 1 --port 0 EXTRA`; its kubeconfig's path.
fn create_open(home: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        "cluster",
        "create",
        name,
        "--insecure",
        "--nodes",
        "1",
        "--port",
        "0",
        "-q",
    ];
    args.extend(extra);
    ok(home, &args);
    PathBuf::from(ok(home, &["cluster", "kubeconfig", name, "--path"]).trim())
}

/// `{.items[*].FIELD}` of the `app=web` objects of `resource`.
fn web_field(kc: &Path, resource: &str, field: &str) -> String {
    let jsonpath = format!("jsonpath={{.items[*].{field}}}");
    kubectl_ok(kc, &["get", resource, "-l", "app=web", "-o", &jsonpath])
}

/// `kubectl create deployment web` with 2 replicas, waited for until available.
async fn web_with_2_replicas(kc: &Path) {
    kubectl_ok(
        kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    available(kc, "web", 2).await;
}

async fn available(kc: &Path, deploy: &str, replicas: u32) {
    wait_for(
        &format!("{deploy} available"),
        Duration::from_secs(60),
        || async {
            let out = kubectl_with(
                kc,
                &[
                    "get",
                    "deploy",
                    deploy,
                    "-o",
                    "jsonpath={.status.availableReplicas}",
                ],
            );
            (text(&out.stdout) == replicas.to_string()).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_cli_creates_scales_snapshots_stops_and_deletes_a_cluster() {
    let (t, _cleanup) = scratch_home();
    let home = t.path();
    let created = rkube(
        home,
        &["cluster", "create", "c1", "--nodes", "2", "--port", "0"],
    );
    let progress = text(&created.stderr);
    assert!(created.status.success(), "{progress}");
    for step in [
        "✓ certificates and kubeconfigs written",
        "✓ rkube-store ready at https://",
        "✓ apiserver ready at https://127.0.0.1:",
        "✓ controller-manager and scheduler ready",
        "✓ 2 node(s) Ready",
    ] {
        assert!(progress.contains(step), "{step:?} in\n{progress}");
    }
    // Bad input names the fix.
    assert!(fails(home, &["cluster", "create", "c1"]).contains("already exists"));
    assert!(fails(home, &["cluster", "start", "nope"]).contains("no cluster named \"nope\""));
    assert!(fails(home, &["cluster", "create", "Bad_Name"]).contains("invalid cluster name"));
    let api_port: u16 = row(home, "c1")[2]
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let busy = fails(
        home,
        &["cluster", "create", "c2", "--port", &api_port.to_string()],
    );
    assert!(
        busy.contains(&format!("port {api_port} is in use")),
        "{busy}"
    );
    assert!(
        !home.join("clusters/c2").exists(),
        "a refused create leaves nothing"
    );

    let r = row(home, "c1");
    assert_eq!(r[1], "Running");
    assert!(r[2].starts_with("https://127.0.0.1:"));
    assert_eq!(r[3], "2");
    assert_eq!(r[4], "rkube-store");
    let kc = PathBuf::from(ok(home, &["cluster", "kubeconfig", "c1", "--path"]).trim());
    assert!(ok(home, &["cluster", "kubeconfig", "c1"]).contains("client-certificate-data"));
    ready_nodes(&kc, 2).await;
    web_with_2_replicas(&kc).await;

    // Logs: one component's as written, all with prefixes, an unknown one refused.
    assert!(ok(home, &["cluster", "logs", "c1", "apiserver"]).contains("rkube-apiserver"));
    let all = ok(home, &["cluster", "logs", "c1"]);
    assert!(
        all.lines().any(|l| l.starts_with("scheduler ")),
        "{}",
        &all[..all.len().min(2000)]
    );
    let unknown = fails(home, &["cluster", "logs", "c1", "kube-proxy"]);
    assert!(
        unknown.contains("no component \"kube-proxy\"") && unknown.contains("node-2"),
        "{unknown}"
    );

    // Nodes come and go live.
    ok(home, &["nodes", "scale", "c1", "--replicas", "3"]);
    ready_nodes(&kc, 3).await;
    assert_eq!(row(home, "c1")[3], "3");
    ok(home, &["nodes", "scale", "c1", "--replicas", "1"]);
    ready_nodes(&kc, 1).await;
    assert!(kubectl_ok(&kc, &["get", "nodes", "-o", "name"]).trim() == "node/rkube-node-1");

    // A snapshot brings deleted objects back.
    let snap = home.join("c1.snapshot");
    let saved = rkube(home, &["snapshot", "save", "c1", snap.to_str().unwrap()]);
    assert!(saved.status.success(), "{}", text(&saved.stderr));
    kubectl_ok(&kc, &["delete", "deployment", "web", "--wait=true"]);
    kubectl_ok(&kc, &["create", "configmap", "after-snapshot"]);
    let restored = rkube(home, &["snapshot", "restore", "c1", snap.to_str().unwrap()]);
    assert!(restored.status.success(), "{}", text(&restored.stderr));
    assert!(text(&restored.stderr).contains("keys restored"));
    assert_eq!(row(home, "c1")[1], "Running");
    kubectl_ok(&kc, &["get", "deployment", "web"]);
    assert!(!kubectl_with(&kc, &["get", "configmap", "after-snapshot"])
        .status
        .success());
    available(&kc, "web", 2).await;
    assert!(
        fails(home, &["snapshot", "restore", "c1", "/nonexistent/file"])
            .contains("/nonexistent/file")
    );
    assert_eq!(
        row(home, "c1")[1],
        "Running",
        "a refused restore leaves the cluster as it was"
    );

    // Stop and start keep the data; delete leaves no process and no state.
    let before = pids(home, "c1");
    ok(home, &["cluster", "stop", "c1"]);
    assert_eq!(row(home, "c1")[1], "Stopped");
    assert!(before.iter().all(|p| !alive(*p)), "every process stopped");
    ok(home, &["cluster", "start", "c1"]);
    assert_eq!(row(home, "c1")[1], "Running");
    kubectl_ok(&kc, &["get", "deployment", "web"]);
    let running = pids(home, "c1");
    ok(home, &["cluster", "delete", "c1"]);
    assert!(running.iter().all(|p| !alive(*p)), "every process stopped");
    assert!(!home.join("clusters/c1").exists());
    assert!(!ok(home, &["cluster", "list"]).contains("c1"));
    assert!(fails(home, &["cluster", "delete", "c1"]).contains("no cluster named"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_cli_runs_an_open_cluster_on_etcd() {
    if std::env::var("RKUBE_SKIP_ETCD").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: RKUBE_SKIP_ETCD=1");
        return;
    }
    let (t, _cleanup) = scratch_home();
    let home = t.path();
    let kc = create_open(home, "e", &["--etcd"]);
    let r = row(home, "e");
    assert_eq!((r[1].as_str(), r[4].as_str()), ("Running", "etcd"));
    assert!(r[2].starts_with("http://127.0.0.1:"));
    ready_nodes(&kc, 1).await;
    kubectl_ok(&kc, &["create", "configmap", "kept", "--from-literal=a=b"]);
    let snap = home.join("e.snapshot");
    ok(home, &["snapshot", "save", "e", snap.to_str().unwrap()]);
    kubectl_ok(&kc, &["delete", "configmap", "kept"]);
    ok(home, &["snapshot", "restore", "e", snap.to_str().unwrap()]);
    assert_eq!(
        kubectl_ok(
            &kc,
            &["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]
        ),
        "b"
    );
    ok(home, &["cluster", "delete", "e"]);
    assert!(!home.join("clusters/e").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_sh_stops_the_cluster_and_exits_0_on_ctrl_c() {
    let (t, _cleanup) = scratch_home();
    let home = t.path();
    let mut script = tokio::process::Command::new(workspace_root().join("scripts/up.sh"));
    script
        .args([
            "--nodes",
            "1",
            "--no-example",
            "--port",
            "0",
            "--name",
            "upt",
        ])
        .env("RKUBE_HOME", home)
        .env("RKUBE_BIN", bin("rkube"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, as a terminal's foreground job: Ctrl-C goes to the group.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = script.spawn().unwrap();
    let pgid = child.id().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("Ctrl-C stops it") {
                return;
            }
        }
        panic!("up.sh ended before it was up:\n{seen}");
    })
    .await
    .unwrap_or_else(|_| panic!("up.sh not up in 90 s:\n{seen}"));
    assert_eq!(row(home, "upt")[1], "Running");
    let cluster = pids(home, "upt");
    // What the terminal does on Ctrl-C: SIGINT to the foreground process group.
    let sent = Command::new("kill")
        .args(["-s", "INT", "--", &format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(sent.success());
    let rest = tokio::time::timeout(Duration::from_secs(60), async {
        let mut rest = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    })
    .await
    .expect("up.sh ends within 60 s of Ctrl-C");
    let status = child.wait().await.unwrap();
    assert!(status.success(), "exit {status:?}; printed:\n{rest}");
    assert!(rest.contains("rkube stopped"), "{rest}");
    assert!(
        cluster.iter().all(|p| !alive(*p)),
        "the cluster's processes stopped"
    );
    assert_eq!(row(home, "upt")[1], "Stopped");
    ok(home, &["cluster", "delete", "upt", "-q"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_replays_into_another_cluster_with_owners_relinked() {
    let (t, _cleanup) = scratch_home();
    let home = t.path();
    let kc = create_open(home, "src", &[]);
    ready_nodes(&kc, 1).await;
    kubectl_ok(
        &kc,
        &["create", "configmap", "before", "--from-literal=a=1"],
    );

    let file = home.join("recording.yaml");
    let mut rec = tokio::process::Command::new(bin("rkube"))
        .args(["record", "src", file.to_str().unwrap()])
        .env("RKUBE_HOME", home)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut err = tokio::io::BufReader::new(rec.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), err.next_line())
        .await
        .expect("record starts")
        .unwrap()
        .unwrap_or_default();
    assert!(first.contains("Recording cluster \"src\""), "{first}");
    web_with_2_replicas(&kc).await;
    kubectl_ok(&kc, &["scale", "deployment", "web", "--replicas=3"]);
    available(&kc, "web", 3).await;
    kubectl_ok(&kc, &["delete", "configmap", "before"]);
    kubectl_ok(&kc, &["create", "configmap", "temp"]);
    kubectl_ok(&kc, &["delete", "configmap", "temp"]);
    wait_for(
        "both deletions recorded",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            (text.matches("type: DELETED").count() >= 2).then_some(())
        },
    )
    .await;
    let pid = rec.id().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-s", "INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(10), rec.wait())
        .await
        .expect("record stops on Ctrl-C")
        .unwrap();
    assert!(status.success());
    let last = err.next_line().await.unwrap().unwrap_or_default();
    assert!(last.starts_with("Recorded "), "{last}");
    let recorded = std::fs::read_to_string(&file).unwrap();
    for want in [
        "type: ADDED",
        "type: MODIFIED",
        "type: DELETED",
        "kind: Namespace",
        "kind: Deployment",
        "kind: ReplicaSet",
        "kind: Pod",
        "name: before",
    ] {
        assert!(recorded.contains(want), "{want} in the recording");
    }
    assert!(!recorded.contains("managedFields"));

    // Into a fresh cluster, as fast as it goes.
    let kc2 = create_open(home, "dst", &[]);
    // Without its controller-manager, nothing in `dst` adopts or replaces what the replay
    // writes: the owner references checked below are the replay's own.
    let cm = std::fs::read_to_string(home.join("clusters/dst/run/controller-manager.pid")).unwrap();
    let cm = cm.split_whitespace().next().unwrap().to_string();
    assert!(Command::new("kill").arg(&cm).status().unwrap().success());
    wait_for(
        "dst's controller-manager gone",
        Duration::from_secs(20),
        || async { (!alive(cm.parse().unwrap())).then_some(()) },
    )
    .await;
    let replayed = rkube(
        home,
        &["replay", "dst", file.to_str().unwrap(), "--speed", "0"],
    );
    let out = text(&replayed.stderr);
    assert!(
        replayed.status.success() && out.contains("applied"),
        "{out}"
    );
    assert_eq!(
        kubectl_ok(
            &kc2,
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]
        ),
        "3"
    );
    available(&kc2, "web", 3).await;
    for gone in ["before", "temp"] {
        assert!(
            !kubectl_with(&kc2, &["get", "configmap", gone])
                .status
                .success(),
            "{gone} deleted"
        );
    }
    // Owner references point at this cluster's objects.
    let deploy_uid = kubectl_ok(
        &kc2,
        &["get", "deploy", "web", "-o", "jsonpath={.metadata.uid}"],
    );
    let rs_owners = web_field(&kc2, "rs", "metadata.ownerReferences[0].uid");
    assert!(
        !rs_owners.is_empty() && rs_owners.split(' ').all(|u| u == deploy_uid),
        "{rs_owners} vs {deploy_uid}"
    );
    let rs_uids = web_field(&kc2, "rs", "metadata.uid");
    wait_for(
        "3 pods owned by the replayed ReplicaSet",
        Duration::from_secs(60),
        || async {
            let owners = web_field(&kc2, "pods", "metadata.ownerReferences[0].uid");
            let owners: Vec<&str> = owners.split_whitespace().collect();
            (owners.len() == 3 && owners.iter().all(|u| rs_uids.contains(u))).then_some(())
        },
    )
    .await;
    ok(home, &["cluster", "delete", "src", "dst", "-q"]);
}

/// `rkube dashboard` in front of a secure cluster: the web view's files, the API with the
/// admin's credentials (a browser has no client certificate), watches over WebSocket; another
/// site's requests and host names refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_a_secure_cluster_to_loopback_pages_only() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let (t, _cleanup) = scratch_home();
    let home = t.path();
    ok(
        home,
        &[
            "cluster", "create", "d1", "--nodes", "1", "--port", "0", "-q",
        ],
    );
    assert!(fails(home, &["dashboard", "nope"]).contains("no cluster named \"nope\""));
    let port = rkube_e2e::free_port();
    let mut dash = tokio::process::Command::new(bin("rkube"))
        .args(["dashboard", "d1", "--port", &port.to_string()])
        .env("RKUBE_HOME", home)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(dash.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .expect("the dashboard says where it is")
        .unwrap()
        .unwrap_or_default();
    let base = format!("http://127.0.0.1:{port}");
    assert!(first.contains(&format!("{base}/ui/")), "{first}");

    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = http.get(format!("{base}/ui/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains("<script src=\"app.js\""));
    let root = http.get(&base).send().await.unwrap();
    assert_eq!(root.headers()["location"], "/ui/");
    // The API, as the admin.
    let nodes = rkube_e2e::get_json(&http, &format!("{base}/api/v1/nodes")).await;
    assert_eq!(nodes["items"].as_array().map(Vec::len), Some(1), "{nodes}");
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "via-dashboard"}});
    let post = |origin: String, host: Option<&'static str>| {
        let mut rb = http
            .post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .header("origin", origin)
            .json(&cm);
        if let Some(h) = host {
            rb = rb.header("host", h);
        }
        rb.send()
    };
    let own = format!("http://127.0.0.1:{port}");
    let created = post(own.clone(), None).await.unwrap();
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().await.unwrap();
    let evil = post("http://evil.example".into(), None).await.unwrap();
    assert_eq!(evil.status(), 403, "another site's page is refused");
    let rebound = post(own, Some("evil.example")).await.unwrap();
    assert_eq!(rebound.status(), 403, "a rebound host name is refused");

    // A watch over WebSocket from the created object's resourceVersion.
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    let url = format!(
        "ws://127.0.0.1:{port}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
    );
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
        .await
        .unwrap();
    let kc = PathBuf::from(ok(home, &["cluster", "kubeconfig", "d1", "--path"]).trim());
    kubectl_ok(&kc, &["create", "configmap", "after-watch"]);
    let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("the event in time")
        .unwrap()
        .unwrap();
    let Message::Text(text) = msg else {
        panic!("{msg:?}")
    };
    let ev: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "after-watch");
    // An upstream refusal arrives as one ERROR event holding its Status.
    let bad = format!("ws://127.0.0.1:{port}/api/v1/configmaps?watch=1&labelSelector=a%20in");
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(bad.as_str(), tcp)
        .await
        .unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("the refusal in time")
        .unwrap()
        .unwrap();
    let ev: serde_json::Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_u64()),
        (Some("ERROR"), Some(400)),
        "{ev}"
    );
    // A cross-site WebSocket is refused at the handshake.
    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        other => panic!(
            "a cross-site upgrade is refused: {:?}",
            other.map(|(_, r)| r)
        ),
    }
    dash.kill().await.unwrap();
}
