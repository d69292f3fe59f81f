//! HTTPS and x509 client certificates against a real apiserver: a certificate's CN and O are
//! the user and its groups, requests without one fall back to tokens, a certificate from
//! another CA fails the handshake, and stock kubectl works over HTTPS with the CA.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rkube_apiserver::auth::Mode;

use crate::harness::{Backend, Cluster};

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// (certificate PEM, key PEM) for `cn` in `org`, valid for `names`.
    fn issue(&self, names: &[&str], cn: &str, org: Option<&str>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn client(ca: &Ca, identity: Option<&(String, String)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert.pem().as_bytes()).unwrap());
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_the_user_over_https() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("rkube-ca");
    let (server_cert, server_key) = ca.issue(&["localhost", "127.0.0.1"], "rkube-apiserver", None);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut cfg = rkube_apiserver::Config::new(vec![c.storage_url.clone()]);
    cfg.tls = Some(rkube_apiserver::tls::TlsFiles {
        require_client_cert: false,
        cert: write("server.crt", &server_cert),
        key: write("server.key", &server_key),
        client_ca: Some(write("ca.crt", &ca.cert.pem())),
    });
    cfg.auth.token_file = Some(write("tokens.csv", "alice-token,alice,1\n"));
    cfg.auth.anonymous = false;
    cfg.auth.modes = vec![Mode::Node, Mode::Rbac];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let stop = rkube_daemon::ShutdownToken::new();
    let running = tokio::spawn(rkube_apiserver::run(cfg, listener, stop.clone()));
    let admin_id = ca.issue(&[], "admin", Some("system:masters"));
    let admin = client(&ca, Some(&admin_id));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !admin
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(
            !running.is_finished(),
            "apiserver stopped: {:?}",
            running.await
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "HTTPS apiserver not ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
    // CN=admin, O=system:masters: cluster-admin.
    assert_eq!(
        admin
            .get(format!("{base}/api/v1/namespaces"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // CN=bob, no groups: authenticated, not authorized; the 403 names him.
    let bob = client(&ca, Some(&ca.issue(&[], "bob", None)));
    let r = bob
        .get(format!("{base}/api/v1/namespaces/default/pods"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("User \"bob\" cannot list"),
        "{v}"
    );
    // No certificate: a bearer token still works; nothing at all is 401.
    let plain = client(&ca, None);
    let r = plain
        .get(format!("{base}/api/v1/pods"))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "alice is known but not authorized");
    assert_eq!(
        plain
            .get(format!("{base}/version"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    // A certificate from another CA: the handshake fails.
    let other = Ca::new("other-ca");
    let stranger = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.cert.pem().as_bytes()).unwrap())
        .identity(
            reqwest::Identity::from_pem(
                {
                    let (c, k) = other.issue(&[], "admin", Some("system:masters"));
                    format!("{c}{k}")
                }
                .as_bytes(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    let r = stranger
        .get(format!("{base}/api/v1/namespaces"))
        .send()
        .await;
    assert!(
        r.is_err() || r.unwrap().status() != 200,
        "a foreign CA's certificate is refused"
    );
    // Plain HTTP to the HTTPS port gets nothing useful.
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/version", base.replace("https", "http")))
        .send()
        .await;
    assert!(r.is_err() || !r.unwrap().status().is_success());

    // Stock kubectl over HTTPS with the CA and the admin certificate.
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: {base}\n    certificate-authority: {}\nusers:\n- name: t\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t}}\ncurrent-context: t\n",
        dir.path().join("ca.crt").display(),
        write("admin.crt", &admin_id.0).display(),
        write("admin.key", &admin_id.1).display(),
    );
    let kubeconfig = write("kubeconfig", &kc);
    // The components' client over HTTPS from the same kubeconfig.
    let cfg = rkube_client::config::Config::from_kubeconfig(&kubeconfig).unwrap();
    let components = rkube_client::Client::new(cfg).unwrap();
    let namespaces: rkube_client::Api<rkube_api::k8s::api::core::v1::Namespace> =
        rkube_client::Api::all(&components);
    let list = namespaces.list(&Default::default()).await.unwrap();
    assert!(list
        .items
        .iter()
        .any(|n| n.metadata.name.as_deref() == Some("default")));
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "ns", "-o", "name"])
        .output();
    if let Ok(out) = out {
        assert!(
            out.status.success(),
            "kubectl over HTTPS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("namespace/default"));
    }
    stop.cancel();
}
