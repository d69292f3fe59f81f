//! The `rkube` binary as a test dependency: `rkube server --ephemeral --print-kubeconfig`
//! (read by a process, by kubectl and by the documented pytest fixture) and `rkube
//! envtest-assets`, driven exactly as controller-runtime's envtest drives its binaries.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rkube_e2e::{bin, free_port, kubectl_with, wait_for, workspace_root};
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

/// Starts `rkube server ARGS --print-kubeconfig` and reads the kubeconfig it prints (up to
/// the `...` line).
async fn server(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(bin("rkube"))
        .arg("server")
        .args(args)
        .arg("--print-kubeconfig")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut kubeconfig = String::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line == "..." {
                return;
            }
            kubeconfig.push_str(&line);
            kubeconfig.push('\n');
        }
        panic!("rkube server exited before printing a kubeconfig");
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("a kubeconfig within 60 s");
    (child, kubeconfig)
}

/// SIGTERM, then the exit status within 20 s (envtest's stop timeout).
async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits within 20 s of SIGTERM")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rkube_server_prints_a_kubeconfig_serves_kubectl_and_stops_on_sigterm() {
    let (mut child, kubeconfig) = server(&["--ephemeral", "--port", "0", "--nodes", "3"]).await;
    assert!(
        kubeconfig.contains("server: https://127.0.0.1:"),
        "{kubeconfig}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, &kubeconfig).unwrap();
    let out = kubectl_with(&path, &["get", "nodes", "--no-headers"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains(" Ready ")).count(),
        3,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl_with(&path, &["create", "deployment", "web", "--image=nginx"]);
    assert!(out.status.success(), "{out:?}");
    let out = kubectl_with(
        &path,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(terminate(&mut child).await.success());
}

/// The CAs and certificates envtest makes (`pkg/internal/testing/certs/tinyca.go`): ECDSA
/// P-256 keys in PKCS#8, a serving CA kept in memory, a client-auth CA, and the service
/// account signer.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(cn: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec![cn.to_string()]).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "envtest");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
        ];
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// A leaf: serving (with SANs) or client (CN = user, O = groups).
    fn issue(&self, cn: &str, groups: &[&str], sans: &[&str], server: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for g in groups {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *g);
        }
        p.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// `--k=v` flags sorted by name, as envtest's `process.Arguments.AsStrings` renders them.
fn render(mut flags: Vec<(&str, String)>) -> Vec<String> {
    flags.sort();
    flags
        .into_iter()
        .map(|(k, v)| format!("--{k}={v}"))
        .collect()
}

/// envtest's `CheckFlag`: `<bin> --help`, and whether a line starts with `--flag`.
fn check_flag(bin: &Path, flag: &str) -> Option<bool> {
    let out = std::process::Command::new(bin)
        .arg("--help")
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.success().then(|| {
        text.lines()
            .any(|l| l.trim_start().starts_with(&format!("--{flag}")))
    })
}

/// envtest's poller: every 100 ms, 200 or keep waiting, within its 20 s start timeout.
async fn poll_ready(http: &reqwest::Client, url: &str, child: &mut Child) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if http.get(url).send().await.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the process exited before {url} was ready"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "timeout waiting for {url}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn spawn(bin: &Path, args: &[String]) -> Child {
    Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envtest_starts_the_assets_as_it_starts_etcd_and_kube_apiserver() {
    let work = tempfile::tempdir().unwrap();
    let assets = work.path().join("assets");
    let out = std::process::Command::new(bin("rkube"))
        .arg("envtest-assets")
        .arg(&assets)
        .arg("--with-controllers")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // envtest finds the binaries by these names in KUBEBUILDER_ASSETS.
    let etcd_bin: PathBuf = assets.join("etcd");
    let apiserver_bin: PathBuf = assets.join("kube-apiserver");
    assert!(etcd_bin.is_file() && apiserver_bin.is_file());

    // etcd: `etcd --help` decides --unsafe-no-fsync; two ports; a fresh data directory.
    let no_fsync = check_flag(&etcd_bin, "unsafe-no-fsync") == Some(true);
    assert!(no_fsync, "the stand-in etcd lists --unsafe-no-fsync");
    let (client_port, peer_port) = (free_port(), free_port());
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let mut etcd_flags = vec![
        ("advertise-client-urls", etcd_url.clone()),
        ("listen-client-urls", etcd_url.clone()),
        ("listen-peer-urls", format!("http://127.0.0.1:{peer_port}")),
        (
            "data-dir",
            work.path().join("etcd").to_string_lossy().into_owned(),
        ),
    ];
    if no_fsync {
        etcd_flags.push(("unsafe-no-fsync", "true".into()));
    }
    let mut etcd = spawn(&etcd_bin, &render(etcd_flags));
    let plain = reqwest::Client::new();
    poll_ready(&plain, &format!("{etcd_url}/health"), &mut etcd).await;

    // The certificate directory envtest writes before starting the apiserver.
    let certs = work.path().join("k8s_test_framework_certs");
    std::fs::create_dir_all(&certs).unwrap();
    let serving_ca = Ca::new("envtest-environment");
    let (crt, key) = serving_ca.issue("localhost", &["envtest"], &["localhost", "127.0.0.1"], true);
    std::fs::write(certs.join("apiserver.crt"), crt).unwrap();
    std::fs::write(certs.join("apiserver.key"), key).unwrap();
    let sa = Ca::new("envtest-environment");
    std::fs::write(certs.join("sa-signer.crt"), sa.cert.pem()).unwrap();
    std::fs::write(certs.join("sa-signer.key"), sa.key.serialize_pem()).unwrap();
    let client_ca = Ca::new("envtest-environment");
    std::fs::write(certs.join("client-cert-auth-ca.crt"), client_ca.cert.pem()).unwrap();

    // kube-apiserver: `--help` must succeed; `--insecure-port` is passed only if listed.
    let insecure_port = check_flag(&apiserver_bin, "insecure-port");
    assert_eq!(
        insecure_port,
        Some(false),
        "--help exits 0 without --insecure-port"
    );
    let port = free_port();
    let dir = |f: &str| certs.join(f).to_string_lossy().into_owned();
    let mut api = spawn(
        &apiserver_bin,
        &render(vec![
            ("allow-privileged", "true".into()),
            ("authorization-mode", "RBAC".into()),
            ("bind-address", "127.0.0.1".into()),
            ("cert-dir", certs.to_string_lossy().into_owned()),
            ("client-ca-file", dir("client-cert-auth-ca.crt")),
            ("disable-admission-plugins", "ServiceAccount".into()),
            ("etcd-servers", etcd_url.clone()),
            ("secure-port", port.to_string()),
            (
                "service-account-issuer",
                format!("https://127.0.0.1:{port}/"),
            ),
            ("service-account-key-file", dir("sa-signer.crt")),
            ("service-account-signing-key-file", dir("sa-signer.key")),
            ("service-cluster-ip-range", "10.0.0.0/24".into()),
        ]),
    );
    // The health check: anonymous, TLS not verified, HTTP/1.1.
    let insecure = reqwest::Client::builder()
        .use_rustls_tls()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let server = format!("https://127.0.0.1:{port}");
    poll_ready(&insecure, &format!("{server}/healthz"), &mut api).await;

    // AddUser("admin", system:masters): a client certificate from the client CA; the
    // serving CA verifies the server.
    let (crt, key) = client_ca.issue("admin", &["system:masters"], &[], false);
    let admin = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(
            reqwest::Certificate::from_pem(serving_ca.cert.pem().as_bytes()).unwrap(),
        )
        .identity(reqwest::Identity::from_pem(format!("{crt}{key}").as_bytes()).unwrap())
        .build()
        .unwrap();
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut rb = admin.request(method, format!("{server}{path}"));
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        async move {
            let r = rb.send().await.unwrap();
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };

    // InstallCRDs: the RESTMapper reads the group's discovery, then GET → 404 → POST.
    let (code, _) = call(reqwest::Method::GET, "/apis/apiextensions.k8s.io/v1", None).await;
    assert_eq!(code, 200);
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (code, _) = call(
        reqwest::Method::GET,
        &format!("{crd_path}/widgets.envtest.example.com"),
        None,
    )
    .await;
    assert_eq!(code, 404);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.envtest.example.com"},
        "spec": {"group": "envtest.example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let (code, body) = call(reqwest::Method::POST, crd_path, Some(crd)).await;
    assert_eq!(code, 201, "{body}");
    // WaitForCRDs: the group-version's discovery lists the plural.
    wait_for("the CRD served", Duration::from_secs(10), || async {
        let (code, body) = call(reqwest::Method::GET, "/apis/envtest.example.com/v1", None).await;
        (code == 200
            && body["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["name"] == "widgets")))
        .then_some(())
    })
    .await;

    // A test's objects: a namespace, a widget, an owner and its dependent.
    let (code, _) = call(
        reqwest::Method::POST,
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "t1"}})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _) = call(
        reqwest::Method::POST,
        "/apis/envtest.example.com/v1/namespaces/t1/widgets",
        Some(
            json!({"apiVersion": "envtest.example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"size": 3}}),
        ),
    )
    .await;
    assert_eq!(code, 201);
    let (code, owner) = call(
        reqwest::Method::POST,
        "/api/v1/namespaces/t1/configmaps",
        Some(json!({"metadata": {"name": "owner"}})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _) = call(
        reqwest::Method::POST,
        "/api/v1/namespaces/t1/configmaps",
        Some(
            json!({"metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner["metadata"]["uid"]}]}}),
        ),
    )
    .await;
    assert_eq!(code, 201);

    // Unlike envtest's, this control plane collects garbage and finishes namespace deletion.
    let (code, _) = call(
        reqwest::Method::DELETE,
        "/api/v1/namespaces/t1/configmaps/owner",
        None,
    )
    .await;
    assert_eq!(code, 200);
    wait_for(
        "the dependent collected",
        Duration::from_secs(30),
        || async {
            let (code, _) = call(
                reqwest::Method::GET,
                "/api/v1/namespaces/t1/configmaps/dependent",
                None,
            )
            .await;
            (code == 404).then_some(())
        },
    )
    .await;
    let (code, _) = call(reqwest::Method::DELETE, "/api/v1/namespaces/t1", None).await;
    assert_eq!(code, 200);
    wait_for("the namespace deleted", Duration::from_secs(30), || async {
        let (code, _) = call(reqwest::Method::GET, "/api/v1/namespaces/t1", None).await;
        (code == 404).then_some(())
    })
    .await;

    // Stop: the apiserver, then etcd, each with SIGTERM.
    assert!(terminate(&mut api).await.success());
    assert!(terminate(&mut etcd).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_pytest_fixture_runs_a_test() {
    let Some(python) = crate::streaming::python_client() else {
        return;
    };
    let out = tokio::process::Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(workspace_root().join("examples/pytest"))
        .env("RKUBE", bin("rkube"))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("2 passed"), "{text}");
}
