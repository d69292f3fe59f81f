//! nodes-bench: rkube-scheduler and rkube-kubelet-agent at scale, as processes on rkube-store +
//! rkube-apiserver, client limits off. Measures issue 6's targets: pods bound per second by the
//! scheduler alone with 5,000 nodes; one kubelet-agent process simulating 1,000 nodes (all Ready,
//! leases on time, idle CPU); 10,000 pre-bound pods reported Running per second. Writes
//! `docs/benchmarks.md`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use rkube_bench::*;
use serde_json::{json, Value};

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    #[arg(long, default_value_t = 5_000)]
    sched_nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    sched_pods: usize,
    #[arg(long, default_value_t = 1_000)]
    kubelet_nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    kubelet_pods: usize,
    /// How long to sample the idle kubelet-agent's CPU.
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

/// POSTs (and optionally status-PATCHes) many objects with 64 in flight.
async fn create_many(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    bodies: Vec<Value>,
    status: Option<Value>,
) -> anyhow::Result<()> {
    let mut s = futures_util::stream::iter(bodies)
        .map(|b| {
            let http = http.clone();
            let url = format!("{base}{path}");
            let status = status.clone();
            async move {
                let name = b["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let r = http.post(&url).json(&b).send().await?;
                anyhow::ensure!(r.status().is_success(), "create {name}: {}", r.status());
                if let Some(st) = status {
                    let r = http
                        .patch(format!("{url}/{name}/status"))
                        .header("Content-Type", "application/merge-patch+json")
                        .body(st.to_string())
                        .send()
                        .await?;
                    let code = r.status();
                    anyhow::ensure!(
                        code.is_success(),
                        "status {name}: {code} {}",
                        r.text().await.unwrap_or_default()
                    );
                }
                Ok(())
            }
        })
        .buffer_unordered(64);
    while let Some(r) = s.next().await {
        r?;
    }
    Ok(())
}

fn ready_status() -> Value {
    json!({"status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
}

fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.14.2", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

/// Counts pods (label app=bench) matching `done` in a watch from `rv`, until `n`; returns
/// (seconds to the last, samples of (seconds, count)). A watch the server ends (a slow reader
/// on a busy machine) is resumed from the last resourceVersion seen.
async fn watch_count(
    base: String,
    mut rv: String,
    n: usize,
    done: fn(&str) -> bool,
) -> anyhow::Result<(f64, Vec<(f64, usize)>)> {
    let start = Instant::now();
    let mut seen = std::collections::HashSet::new();
    let mut samples = Vec::new();
    let mut last_sample = 0.0;
    for _attempt in 0..50 {
        let url = format!("{base}/api/v1/pods?watch=true&resourceVersion={rv}&labelSelector=app%3Dbench&timeoutSeconds=600&allowWatchBookmarks=true");
        let resp = reqwest::get(url).await?;
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                // String scanning, not a JSON parse: the bench must not be the bottleneck.
                let text = std::str::from_utf8(&line).unwrap_or("");
                anyhow::ensure!(
                    !text.starts_with("{\"type\":\"ERROR\""),
                    "watch error: {text}"
                );
                if let Some(r) = field(text, "\"resourceVersion\":\"") {
                    rv = r.to_string();
                }
                if !text.starts_with("{\"type\":\"BOOKMARK\"") && done(text) {
                    seen.insert(field(text, "\"name\":\"").unwrap_or_default().to_string());
                    let t = start.elapsed().as_secs_f64();
                    if t - last_sample >= 0.5 {
                        samples.push((t, seen.len()));
                        last_sample = t;
                    }
                    if seen.len() >= n {
                        return Ok((t, samples));
                    }
                }
            }
        }
    }
    anyhow::bail!("watch kept ending; saw {} of {n}", seen.len())
}

/// The string value after the first `key` (which ends with the opening quote).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let start = text.find(key)? + key.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let f = Flags::parse();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()?;
    let b = |n: &str| f.bin_dir.join(n);

    // --- Scheduler alone.
    let store = start_rkube_store(&b("rkube-store")).await?;
    let (_api, base) = start_apiserver(&b("rkube-apiserver"), &store.url).await?;
    println!("creating {} nodes…", f.sched_nodes);
    let nodes: Vec<Value> = (0..f.sched_nodes)
        .map(|i| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("n{i}")}}))
        .collect();
    create_many(&http, &base, "/api/v1/nodes", nodes, Some(ready_status())).await?;
    println!("creating {} pending pods…", f.sched_pods);
    let pods: Vec<Value> = (0..f.sched_pods)
        .map(|i| pod(&format!("p{i}"), None))
        .collect();
    create_many(&http, &base, "/api/v1/namespaces/default/pods", pods, None).await?;
    let rv = pods_rv(&http, &base).await?;
    let counter = tokio::spawn(watch_count(base.clone(), rv, f.sched_pods, |t| {
        t.contains("\"nodeName\":\"")
    }));
    let port = free_port();
    let t0 = Instant::now();
    let sched = spawn_ready(
        &b("rkube-scheduler"),
        &[
            "--server".into(),
            base.clone(),
            "--secure-port".into(),
            port.to_string(),
        ],
        &format!("http://127.0.0.1:{port}/readyz"),
    )
    .await?;
    let (_, _) = counter.await??;
    let sched_secs = t0.elapsed().as_secs_f64();
    let sched_rate = f.sched_pods as f64 / sched_secs;
    println!("scheduler: {} pods bound on {} nodes in {sched_secs:.2} s ({sched_rate:.0} pods/s, including its start and initial list)", f.sched_pods, f.sched_nodes);
    let sched_rss = rss_of(sched.id().unwrap_or(0));
    drop(sched);
    drop(_api);
    drop(store);

    // --- One kubelet-agent process with many nodes.
    let store = start_rkube_store(&b("rkube-store")).await?;
    let (_api, base) = start_apiserver(&b("rkube-apiserver"), &store.url).await?;
    let port = free_port();
    let t0 = Instant::now();
    let agent_args: Vec<String> = [
        "--server",
        &base,
        "--nodes",
        &f.kubelet_nodes.to_string(),
        "--node-name",
        "sim",
        "--port",
        &port.to_string(),
        "--max-pods",
        "200",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let agent = spawn_ready(
        &b("rkube-kubelet-agent"),
        &agent_args,
        &format!("http://127.0.0.1:{port}/readyz"),
    )
    .await?;
    let reg_secs = t0.elapsed().as_secs_f64();
    println!(
        "kubelet-agent: {} nodes registered in {reg_secs:.2} s",
        f.kubelet_nodes
    );
    let pid = agent.id().unwrap_or(0);
    let c0 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(f.idle_secs)).await; // the measurement window
    let idle_cpu = (cpu_seconds(pid) - c0) / f.idle_secs as f64 * 100.0;
    let nodes: Value = http
        .get(format!("{base}/api/v1/nodes"))
        .send()
        .await?
        .json()
        .await?;
    let ready = nodes["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count()
        })
        .unwrap_or(0);
    let leases: Value = http
        .get(format!(
            "{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        ))
        .send()
        .await?
        .json()
        .await?;
    let now = k8s_now();
    let fresh = leases["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|l| {
                    l["spec"]["renewTime"]
                        .as_str()
                        .and_then(parse_ts)
                        .is_some_and(|t| now - t <= 40.0)
                })
                .count()
        })
        .unwrap_or(0);
    println!("kubelet-agent idle: {ready}/{} nodes Ready, {fresh} leases renewed within 40 s, CPU {idle_cpu:.1}% of one core", f.kubelet_nodes);
    let idle_rss = rss_of(pid);

    // Pre-bound pods: created while the agent is down, then the agent starts and runs them.
    drop(agent);
    println!(
        "creating {} pods bound to the simulated nodes (agent stopped)…",
        f.kubelet_pods
    );
    let pods: Vec<Value> = (0..f.kubelet_pods)
        .map(|i| {
            pod(
                &format!("k{i}"),
                Some(&format!("sim-{}", i % f.kubelet_nodes)),
            )
        })
        .collect();
    create_many(&http, &base, "/api/v1/namespaces/default/pods", pods, None).await?;
    let rv = pods_rv(&http, &base).await?;
    let counter = tokio::spawn(watch_count(base.clone(), rv, f.kubelet_pods, |t| {
        t.contains("\"phase\":\"Running\"")
    }));
    let t1 = Instant::now();
    let agent = spawn_ready(
        &b("rkube-kubelet-agent"),
        &agent_args,
        &format!("http://127.0.0.1:{port}/readyz"),
    )
    .await?;
    let pid = agent.id().unwrap_or(0);
    let (_, samples) = counter.await??;
    let run_secs = t1.elapsed().as_secs_f64();
    let run_rate = f.kubelet_pods as f64 / run_secs;
    println!("{} pre-bound pods Running {run_secs:.2} s after the agent started ({run_rate:.0} pods/s, its start and node registration included)", f.kubelet_pods);
    let busy_rss = rss_of(pid);
    let curve: String = samples
        .iter()
        .map(|(t, n)| format!("{t:.1}s:{n}"))
        .collect::<Vec<_>>()
        .join(" ");

    let body = format!(
        "## Scheduler and kubelet-agent (nodes-bench)\n\nMachine: {}  \nCommit: {}, {}  \nrkube-store + rkube-apiserver + the component as processes on loopback, client limits off (`scripts/bench-nodes.sh`).\n\n\
         | Measure | Target | rkube |\n|---|---|---|\n\
         | scheduler alone, {} nodes: {} pending pods bound (from its start, initial list included) | ≥ 2,000 pods/s | {sched_rate:.0} pods/s ({sched_secs:.2} s); scheduler RSS {:.0} MiB |\n\
         | one kubelet-agent simulating {} nodes: Ready / leases renewed within 40 s | all | {ready} / {fresh} |\n\
         | same, idle CPU over {} s | ≤ 10% of one core | {idle_cpu:.1}% (RSS {:.0} MiB) |\n\
         | {} pre-bound pods on those nodes reported Running (from the agent's start) | ≥ 1,000 pods/s | {run_rate:.0} pods/s ({run_secs:.2} s); agent RSS {:.0} MiB |\n\n\
         Pods Running over time: {curve}\n",
        machine(), git_commit(), utc_now(),
        f.sched_nodes, f.sched_pods, sched_rss as f64 / 1048576.0,
        f.kubelet_nodes, f.idle_secs, idle_rss as f64 / 1048576.0,
        f.kubelet_pods, busy_rss as f64 / 1048576.0,
    );
    write_section(&f.out, "nodes-bench", &body)?;
    println!("wrote {}", f.out.display());
    drop(agent);
    Ok(())
}

fn k8s_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-11-22T04:00:00.123456Z`).
fn parse_ts(s: &str) -> Option<f64> {
    let (date, time) = s.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, mi, sec) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days as f64 * 86400.0 + h * 3600.0 + mi * 60.0 + sec)
}
