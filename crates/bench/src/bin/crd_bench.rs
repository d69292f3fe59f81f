//! crd-bench: what the CRD issue targets, on rkube-apiserver over rkube-store: CRD create →
//! its custom resources creatable (what envtest's `WaitForCRDs` polls discovery for); custom
//! resource create, GET and LIST of 1,000 beside the same for ConfigMaps; an admission
//! webhook's round trip over loopback TLS (ConfigMap create with and without it); a CEL rule
//! over a 1,000-item list (create with and without the rule). Writes `docs/benchmarks.md`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use base64::Engine;
use clap::Parser;
use rkube_bench::*;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release/rkube-store")]
    store_bin: PathBuf,
    #[arg(long, default_value = "target/release/rkube-apiserver")]
    apiserver_bin: PathBuf,
    /// CRDs created for the CRD → creatable figure.
    #[arg(long, default_value_t = 30)]
    crds: usize,
    #[arg(long, default_value_t = 1_000)]
    objects: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

fn pct(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

fn crd(plural: &str, kind: &str, rule: Option<&str>) -> Value {
    let mut items = json!({"type": "array", "items": {"type": "string"}});
    if let Some(r) = rule {
        items["x-kubernetes-validations"] = json!([{"rule": r, "message": "items must be short"}]);
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.bench.example.com")},
        "spec": {"group": "bench.example.com", "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer"}, "color": {"type": "string"}, "items": items}}}}}}]}})
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<(u16, u64)> {
    let t = Instant::now();
    let r = http.post(url).json(body).send().await?;
    let code = r.status().as_u16();
    let _ = r.bytes().await?;
    Ok((code, t.elapsed().as_micros() as u64))
}

/// Creates `n` objects from `make`; their create latencies.
async fn creates(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    make: impl Fn(usize) -> Value,
) -> anyhow::Result<Vec<u64>> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let (code, us) = post(http, url, &make(i)).await?;
        anyhow::ensure!(code == 201, "create {url}: {code}");
        lat.push(us);
    }
    Ok(lat)
}

async fn gets(
    http: &reqwest::Client,
    url: impl Fn(usize) -> String,
    n: usize,
) -> anyhow::Result<Vec<u64>> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let r = http.get(url(i)).send().await?;
        anyhow::ensure!(r.status().is_success(), "GET: {}", r.status());
        let _ = r.bytes().await?;
        lat.push(t.elapsed().as_micros() as u64);
    }
    Ok(lat)
}

/// A validating webhook server over TLS that allows everything; (port, CA bundle base64).
async fn webhook() -> anyhow::Result<(u16, String, tempfile::TempDir)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(vec!["localhost".to_string()])?;
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse()?));
    let cert = p.signed_by(&key, &ca, &ca_key)?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("tls.crt"), cert.pem())?;
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem())?;
    let tls = rkube_daemon::tls::server_config(&rkube_daemon::tls::TlsFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        client_ca: None,
        require_client_cert: false,
    })?;
    let app = axum::Router::new().route(
        "/validate",
        axum::routing::post(|Json(r): Json<Value>| async move {
            Json(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": r["request"]["uid"], "allowed": true}}),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let identify: rkube_daemon::serve::Identify<()> = Arc::new(|_, _| ());
    tokio::spawn(rkube_daemon::serve::serve(
        listener,
        Some(tls),
        app,
        identify,
        Default::default(),
        rkube_daemon::ShutdownToken::new(),
    ));
    Ok((
        port,
        base64::engine::general_purpose::STANDARD.encode(ca.pem()),
        dir,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let store = start_rkube_store(&flags.store_bin).await?;
    let (_api, base) = start_apiserver(&flags.apiserver_bin, &store.url).await?;
    let http = reqwest::Client::new();
    let crds_url = format!("{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions");

    // CRD create → the first custom resource created.
    let mut ready = Vec::new();
    for i in 0..flags.crds {
        let plural = format!("things{i}");
        let t = Instant::now();
        let (code, _) = post(&http, &crds_url, &crd(&plural, &format!("Thing{i}"), None)).await?;
        anyhow::ensure!(code == 201, "CRD create: {code}");
        let url = format!("{base}/apis/bench.example.com/v1/namespaces/default/{plural}");
        let obj = json!({"apiVersion": "bench.example.com/v1", "kind": format!("Thing{i}"), "metadata": {"name": "first"}, "spec": {"size": 1}});
        loop {
            let (code, _) = post(&http, &url, &obj).await?;
            if code == 201 {
                break;
            }
            anyhow::ensure!(
                t.elapsed() < Duration::from_secs(30),
                "CR never creatable: {code}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ready.push(t.elapsed().as_micros() as u64);
    }
    let ready = pct(ready);
    println!(
        "CRD create → creatable: p50 {} ms, p99 {} ms",
        ready.0 / 1000,
        ready.1 / 1000
    );

    // Custom resources beside ConfigMaps.
    let n = flags.objects;
    let padding = "x".repeat(512);
    let cr_url = format!("{base}/apis/bench.example.com/v1/namespaces/default/things0");
    let cm_url = format!("{base}/api/v1/namespaces/default/configmaps");
    let cr_create = pct(creates(&http, &cr_url, n, |i| json!({"apiVersion": "bench.example.com/v1", "kind": "Thing0",
        "metadata": {"name": format!("t{i:05}"), "labels": {"app": "bench"}}, "spec": {"size": i, "color": padding}})).await?);
    let cm_create = pct(creates(&http, &cm_url, n, |i| json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("c{i:05}"), "labels": {"app": "bench"}}, "data": {"size": i.to_string(), "color": padding}})).await?);
    let cr_get = pct(gets(&http, |i| format!("{cr_url}/t{:05}", i % n), 2 * n).await?);
    let cm_get = pct(gets(&http, |i| format!("{cm_url}/c{:05}", i % n), 2 * n).await?);
    let cr_list = pct(gets(
        &http,
        |_| format!("{cr_url}?labelSelector=app%3Dbench"),
        100,
    )
    .await?);
    let cm_list = pct(gets(
        &http,
        |_| format!("{cm_url}?labelSelector=app%3Dbench"),
        100,
    )
    .await?);

    // A CEL rule over a 1,000-item list.
    let (code, _) = post(
        &http,
        &crds_url,
        &crd("ruled", "Ruled", Some("self.all(i, i.size() < 64)")),
    )
    .await?;
    anyhow::ensure!(code == 201);
    let (code, _) = post(&http, &crds_url, &crd("plain", "Plain", None)).await?;
    anyhow::ensure!(code == 201);
    let items: Vec<String> = (0..1000).map(|i| format!("item-{i}")).collect();
    let mut cel = Vec::new();
    for (plural, kind) in [("ruled", "Ruled"), ("plain", "Plain")] {
        let url = format!("{base}/apis/bench.example.com/v1/namespaces/default/{plural}");
        let probe = json!({"apiVersion": "bench.example.com/v1", "kind": kind, "metadata": {"name": "probe"}, "spec": {}});
        let t = Instant::now();
        while post(&http, &url, &probe).await?.0 != 201 {
            anyhow::ensure!(t.elapsed() < Duration::from_secs(30));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cel.push(pct(creates(&http, &url, 200, |i| {
            json!({"apiVersion": "bench.example.com/v1", "kind": kind,
            "metadata": {"name": format!("x{i}")}, "spec": {"items": items}})
        })
        .await?));
    }

    // An admission webhook's round trip: ConfigMap creates in a namespace it selects.
    let (port, ca, _dir) = webhook().await?;
    for ns in ["plain", "hooked"] {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"bench": ns}}});
        post(&http, &format!("{base}/api/v1/namespaces"), &body).await?;
    }
    let hook = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench"}, "webhooks": [{"name": "bench.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca},
            "namespaceSelector": {"matchLabels": {"bench": "hooked"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]});
    let (code, _) = post(
        &http,
        &format!("{base}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"),
        &hook,
    )
    .await?;
    anyhow::ensure!(code == 201);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut hooked = Vec::new();
    for ns in ["plain", "hooked"] {
        let url = format!("{base}/api/v1/namespaces/{ns}/configmaps");
        hooked.push(pct(creates(&http, &url, 500, |i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{i}")}})).await?));
    }

    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    let mut table = format!(
        "## CRDs, admission webhooks and CEL (crd-bench)\n\n{} — commit {} — {}\n\nOne rkube-apiserver on rkube-store, plain HTTP on loopback, requests one at a time. \
         Targets: CRD create → custom resources creatable p50 ≤ 200 ms; a webhook adds ≤ 1 ms.\n\n\
         | figure | custom resources | ConfigMaps |\n|---|---|---|\n",
        machine(),
        git_commit(),
        utc_now()
    );
    table += &format!(
        "| CRD create → its first custom resource created ({} CRDs) | p50 {} ms, p99 {} ms | |\n",
        flags.crds,
        ms(ready.0),
        ms(ready.1)
    );
    table += &format!(
        "| create ({n} objects, ~600 B) p50 / p99 | {} / {} ms | {} / {} ms |\n",
        ms(cr_create.0),
        ms(cr_create.1),
        ms(cm_create.0),
        ms(cm_create.1)
    );
    table += &format!(
        "| GET p50 / p99 | {} / {} ms | {} / {} ms |\n",
        ms(cr_get.0),
        ms(cr_get.1),
        ms(cm_get.0),
        ms(cm_get.1)
    );
    table += &format!(
        "| LIST of {n} by label p50 / p99 | {} / {} ms | {} / {} ms |\n",
        ms(cr_list.0),
        ms(cr_list.1),
        ms(cm_list.0),
        ms(cm_list.1)
    );
    table += &format!(
        "\n| figure | with | without | added to the median |\n|---|---|---|---|\n\
         | custom resource create with a CEL rule over a 1,000-item list, p50 / p99 | {} / {} ms | {} / {} ms | {} ms |\n\
         | ConfigMap create through a validating webhook over loopback TLS, p50 / p99 | {} / {} ms | {} / {} ms | {} ms |\n",
        ms(cel[0].0), ms(cel[0].1), ms(cel[1].0), ms(cel[1].1), ms(cel[0].0.saturating_sub(cel[1].0)),
        ms(hooked[1].0), ms(hooked[1].1), ms(hooked[0].0), ms(hooked[0].1), ms(hooked[1].0.saturating_sub(hooked[0].0)),
    );
    println!("\n{table}");
    write_section(&flags.out, "crd-bench", &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}
