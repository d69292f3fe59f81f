//! services-bench: rkube-store + rkube-apiserver + rkube-controller-manager as processes.
//! Measures what the built-in API issue targets for Services: create latency with cluster IP
//! (and node port) allocation beside a ConfigMap create as the baseline, and how long after a
//! pod turns Ready its Service's Endpoints and EndpointSlice list it (target ≤ 50 ms).
//! Writes `docs/benchmarks.md`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use rkube_bench::*;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release/rkube-store")]
    store_bin: PathBuf,
    #[arg(long, default_value = "target/release/rkube-apiserver")]
    apiserver_bin: PathBuf,
    #[arg(long, default_value = "target/release/rkube-controller-manager")]
    cm_bin: PathBuf,
    /// Services (and ConfigMaps) created, one at a time.
    #[arg(long, default_value_t = 1_000)]
    creates: usize,
    /// Pods turned Ready one at a time behind one Service.
    #[arg(long, default_value_t = 200)]
    pods: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

/// p50 / p99 of microsecond samples.
fn p50_p99(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (percentile(&v, 0.50), percentile(&v, 0.99))
}

/// POSTs `n` objects from `make` one at a time; their latencies in microseconds.
async fn sequential(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    make: impl Fn(usize) -> Value,
) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let r = http.post(url).json(&make(i)).send().await?;
        let code = r.status();
        let _ = r.bytes().await?;
        anyhow::ensure!(code.is_success(), "POST {url}: {code}");
        out.push(t.elapsed().as_micros() as u64);
    }
    Ok(out)
}

/// Watches `path` (one object by name) and records when each IP first shows as ready.
fn watch_ready_ips(
    base: String,
    path: String,
    name: &'static str,
    ips_of: fn(&Value) -> Vec<String>,
) -> Arc<Mutex<HashMap<String, Instant>>> {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        let url = format!(
            "{base}{path}?watch=true&fieldSelector=metadata.name%3D{name}&timeoutSeconds=600"
        );
        let Ok(resp) = reqwest::get(url).await else {
            return;
        };
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let now = Instant::now();
                if let Ok(ev) = serde_json::from_slice::<Value>(&line) {
                    let mut seen = s.lock().unwrap();
                    for ip in ips_of(&ev["object"]) {
                        seen.entry(ip).or_insert(now);
                    }
                }
            }
        }
    });
    seen
}

fn endpoint_ips(ep: &Value) -> Vec<String> {
    ep["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["addresses"].as_array().into_iter().flatten())
        .filter_map(|a| a["ip"].as_str().map(String::from))
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let f = Flags::parse();
    let store = start_rkube_store(&f.store_bin).await?;
    let (_api, base) = start_apiserver(&f.apiserver_bin, &store.url).await?;
    let cm_port = free_port();
    let cm_args = ["--server", &base, "--secure-port", &cm_port.to_string()].map(String::from);
    let mut cm = spawn_ready(
        &f.cm_bin,
        &cm_args,
        &format!("http://127.0.0.1:{cm_port}/readyz"),
    )
    .await?;
    let http = reqwest::Client::new();

    // 1. Creates: ConfigMaps (baseline), ClusterIP Services, NodePort Services.
    let cms = sequential(&http, &format!("{base}/api/v1/namespaces/default/configmaps"), f.creates, |i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}, "data": {"k": "v"}})
    })
    .await?;
    let svcs = sequential(
        &http,
        &format!("{base}/api/v1/namespaces/default/services"),
        f.creates,
        |i| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i}")},
            "spec": {"selector": {"app": format!("s{i}")}, "ports": [{"port": 80}]}})
        },
    )
    .await?;
    let nodeports = f.creates.min(2000);
    let nps = sequential(
        &http,
        &format!("{base}/api/v1/namespaces/default/services"),
        nodeports,
        |i| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("n{i}")},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
        },
    )
    .await?;
    let (c50, c99) = p50_p99(cms);
    let (s50, s99) = p50_p99(svcs);
    let (n50, n99) = p50_p99(nps);
    println!("ConfigMap create p50 {} p99 {}", ms(c50), ms(c99));
    println!("Service (ClusterIP) create p50 {} p99 {}", ms(s50), ms(s99));
    println!("Service (NodePort) create p50 {} p99 {}", ms(n50), ms(n99));

    // 2. Pods turning Ready one at a time behind one Service.
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ep"},
        "spec": {"selector": {"app": "ep"}, "ports": [{"port": 80}]}});
    let r = http
        .post(format!("{base}/api/v1/namespaces/default/services"))
        .json(&svc)
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "create service: {}", r.status());
    let endpoints = watch_ready_ips(
        base.clone(),
        "/api/v1/namespaces/default/endpoints".into(),
        "ep",
        endpoint_ips,
    );
    let slices_seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    {
        let s = slices_seen.clone();
        let base = base.clone();
        tokio::spawn(async move {
            let url = format!("{base}/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?watch=true&labelSelector=kubernetes.io%2Fservice-name%3Dep&timeoutSeconds=600");
            let Ok(resp) = reqwest::get(url).await else {
                return;
            };
            let mut stream = resp.bytes_stream();
            let mut buf = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let now = Instant::now();
                    if let Ok(ev) = serde_json::from_slice::<Value>(&line) {
                        let mut seen = s.lock().unwrap();
                        for e in ev["object"]["endpoints"].as_array().into_iter().flatten() {
                            if e["conditions"]["ready"] == json!(true) {
                                if let Some(ip) = e["addresses"][0].as_str() {
                                    seen.entry(ip.to_string()).or_insert(now);
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ready_at: Vec<(String, Instant)> = Vec::new();
    for i in 0..f.pods {
        let name = format!("ep{i}");
        let ip = format!("10.77.{}.{}", i / 250, i % 250 + 1);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "ep"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "nginx"}]}});
        let r = http
            .post(format!("{base}/api/v1/namespaces/default/pods"))
            .json(&pod)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "create pod: {}", r.status());
        let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}});
        let r = http
            .patch(format!(
                "{base}/api/v1/namespaces/default/pods/{name}/status"
            ))
            .header("content-type", "application/merge-patch+json")
            .body(status.to_string())
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "pod status: {}", r.status());
        ready_at.push((ip, Instant::now()));
        // One at a time: the next pod turns Ready once this one is listed (or 1 s passed).
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let done = {
                let ip = &ready_at.last().unwrap().0;
                endpoints.lock().unwrap().contains_key(ip)
                    && slices_seen.lock().unwrap().contains_key(ip)
            };
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lag = |seen: &Arc<Mutex<HashMap<String, Instant>>>| -> (Vec<u64>, usize) {
        let seen = seen.lock().unwrap();
        let mut v = Vec::new();
        for (ip, at) in &ready_at {
            if let Some(t) = seen.get(ip) {
                v.push(t.saturating_duration_since(*at).as_micros() as u64);
            }
        }
        let n = v.len();
        (v, n)
    };
    let (ep_lag, ep_n) = lag(&endpoints);
    let (sl_lag, sl_n) = lag(&slices_seen);
    anyhow::ensure!(ep_n > 0 && sl_n > 0, "no endpoints observed");
    let (e50, e99) = p50_p99(ep_lag);
    let (l50, l99) = p50_p99(sl_lag);
    println!(
        "Endpoints list a Ready pod after: p50 {} p99 {} ({ep_n}/{})",
        ms(e50),
        ms(e99),
        f.pods
    );
    println!(
        "EndpointSlice lists a Ready pod after: p50 {} p99 {} ({sl_n}/{})",
        ms(l50),
        ms(l99),
        f.pods
    );
    let _ = cm.kill().await;

    let body = format!(
        "## Services (services-bench)\n\nRun {} on {} at commit `{}`: rkube-store + rkube-apiserver + rkube-controller-manager as release-build processes on loopback (`scripts/bench-services.sh`); creates one at a time.\n\n\
         | measurement (p50 / p99) | target | rkube |\n|---|---|---|\n\
         | ConfigMap create (baseline, {n}) | - | {} / {} |\n\
         | Service create, ClusterIP allocated ({n}) | - | {} / {} ({:.2}× the ConfigMap p99) |\n\
         | Service create, ClusterIP and NodePort allocated ({np}) | - | {} / {} |\n\
         | pod turns Ready → listed in its Service's Endpoints ({ep_n}/{pods}) | ≤ 50 ms | {} / {} |\n\
         | pod turns Ready → ready in its Service's EndpointSlice ({sl_n}/{pods}) | ≤ 50 ms | {} / {} |\n",
        utc_now(),
        machine(),
        git_commit(),
        ms(c50),
        ms(c99),
        ms(s50),
        ms(s99),
        s99 as f64 / c99.max(1) as f64,
        ms(n50),
        ms(n99),
        ms(e50),
        ms(e99),
        ms(l50),
        ms(l99),
        n = f.creates,
        np = nodeports,
        pods = f.pods,
    );
    write_section(&f.out, "services-bench", &body)?;
    println!("wrote {}", f.out.display());
    Ok(())
}
