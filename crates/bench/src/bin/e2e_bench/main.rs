//! e2e-bench: the whole control plane as processes (store or etcd 3.4, apiserver,
//! controller-manager, scheduler, kubelet-agents) measured end to end, as issue 7 asks:
//! 1-replica Deployment create → pod Running seen through a watch (p50/p99 over N runs), a
//! 100-replica Deployment, and 10,000 replicas on 1,000 simulated nodes (time to all Running,
//! pods/s over time, peak RSS and CPU per component); with client limits off and upstream-like
//! (controller-manager 20 qps/30 burst, scheduler 50/100); on rkube-store and on etcd 3.4;
//! and a Job of 1,000 completions, 100 at a time, to its Complete condition. `--one-binary`:
//! the 10,000-replica run on `rkube server` (every component in one process) beside the
//! separate processes, in one run. `--scale`: 100,000 pods on 5,000 nodes (`scale.rs`).
//! `--hops`: the 1-replica latency split by step, with the writes it took (`hops.rs`).
//! Writes `docs/benchmarks.md`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use rkube_bench::*;
use serde_json::{json, Value};
use tokio::process::Child;
use tokio::sync::mpsc;

mod hops;
mod scale;

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    #[arg(long, default_value = "etcd")]
    etcd_bin: String,
    #[arg(long, default_value_t = 100)]
    runs: usize,
    #[arg(long, default_value_t = 10_000)]
    big_replicas: usize,
    #[arg(long, default_value_t = 1_000)]
    big_nodes: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// Run only the bookmark scenario.
    #[arg(long)]
    bookmarks_only: bool,
    /// Run only the workloads scenarios (a Job of many completions, an ordered StatefulSet,
    /// a DaemonSet over many nodes).
    #[arg(long)]
    workloads_only: bool,
    #[arg(long, default_value_t = 1_000)]
    job_completions: usize,
    #[arg(long, default_value_t = 100)]
    job_parallelism: usize,
    #[arg(long, default_value_t = 100)]
    sts_replicas: usize,
    /// How long the bookmark scenario churns.
    #[arg(long, default_value_t = 60)]
    churn_secs: u64,
    /// Run only the 10,000-replica run on `rkube server` (one process) beside the separate
    /// processes.
    #[arg(long)]
    one_binary: bool,
    /// Run only the scale run: `--scale-pods` pods on `--scale-nodes` nodes.
    #[arg(long)]
    scale: bool,
    #[arg(long, default_value_t = 100_000)]
    scale_pods: usize,
    #[arg(long, default_value_t = 5_000)]
    scale_nodes: usize,
    /// Run only the 10,000-replica run on the separate processes and print each component's
    /// CPU-seconds and peak RSS and the apiserver's requests by verb and resource; writes
    /// nothing (what to profile next).
    #[arg(long)]
    probe: bool,
    /// Run only `--runs` 1-replica Deployments on rkube-store and print the median and p99 of
    /// each step to Running (ReplicaSet, pod, binding, status); writes nothing.
    #[arg(long)]
    hops: bool,
}

struct Proc {
    name: &'static str,
    child: Child,
}

struct Cluster {
    procs: Vec<Proc>,
    base: String,
    /// The storage process (none when `rkube server` holds it).
    storage: Option<Server>,
}

async fn spawn(
    name: &'static str,
    bin: PathBuf,
    args: Vec<String>,
    health: String,
) -> anyhow::Result<Proc> {
    let child = spawn_ready(&bin, &args, &health).await?;
    Ok(Proc { name, child })
}

impl Cluster {
    /// `limits`: upstream-like client limits for the controller-manager and scheduler.
    async fn start(f: &Flags, etcd: bool, limits: bool, nodes: usize) -> anyhow::Result<Cluster> {
        Self::start_over(f, etcd, "grpc", limits, nodes).await
    }

    /// `transport`: the apiserver's `--etcd-transport` (grpc or json).
    async fn start_over(
        f: &Flags,
        etcd: bool,
        transport: &str,
        limits: bool,
        nodes: usize,
    ) -> anyhow::Result<Cluster> {
        let b = |n: &str| f.bin_dir.join(n);
        let storage = if etcd {
            start_etcd(&f.etcd_bin).await?
        } else {
            start_rkube_store(&b("rkube-store")).await?
        };
        // The whole control plane runs: admission as upstream's defaults, ServiceAccount on.
        let transport = format!("--etcd-transport={transport}");
        let (api, base) =
            start_apiserver_with(&b("rkube-apiserver"), &storage.url, &[transport.as_str()])
                .await?;
        let mut procs = vec![Proc {
            name: "apiserver",
            child: api,
        }];
        let (cm_lim, sch_lim) = if limits {
            (("20", "30"), ("50", "100"))
        } else {
            (("0", "0"), ("0", "0"))
        };
        let p = free_port();
        procs.push(
            spawn(
                "controller-manager",
                b("rkube-controller-manager"),
                vec![
                    "--server".into(),
                    base.clone(),
                    "--secure-port".into(),
                    p.to_string(),
                    "--kube-api-qps".into(),
                    cm_lim.0.into(),
                    "--kube-api-burst".into(),
                    cm_lim.1.into(),
                ],
                format!("http://127.0.0.1:{p}/readyz"),
            )
            .await?,
        );
        let p = free_port();
        procs.push(
            spawn(
                "scheduler",
                b("rkube-scheduler"),
                vec![
                    "--server".into(),
                    base.clone(),
                    "--secure-port".into(),
                    p.to_string(),
                    "--kube-api-qps".into(),
                    sch_lim.0.into(),
                    "--kube-api-burst".into(),
                    sch_lim.1.into(),
                ],
                format!("http://127.0.0.1:{p}/readyz"),
            )
            .await?,
        );
        let p = free_port();
        procs.push(
            spawn(
                "kubelet-agent",
                b("rkube-kubelet-agent"),
                vec![
                    "--server".into(),
                    base.clone(),
                    "--nodes".into(),
                    nodes.to_string(),
                    "--node-name".into(),
                    "n".into(),
                    "--port".into(),
                    p.to_string(),
                    "--max-pods".into(),
                    "110".into(),
                ],
                format!("http://127.0.0.1:{p}/readyz"),
            )
            .await?,
        );
        // As on any cluster a user is handed: the namespace's `default` ServiceAccount exists
        // (the ServiceAccount admission plugin refuses pods until the controller made it).
        wait_ready(&format!(
            "{base}/api/v1/namespaces/default/serviceaccounts/default"
        ))
        .await?;
        Ok(Cluster {
            procs,
            base,
            storage: Some(storage),
        })
    }

    /// `rkube server --insecure` with `nodes` nodes, its store on disk in a temporary
    /// directory (as the separate store's), client limits off (its defaults).
    async fn one_binary(f: &Flags, nodes: usize) -> anyhow::Result<(Cluster, tempfile::TempDir)> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let args: Vec<String> = [
            "server",
            "--insecure",
            "--port",
            &port.to_string(),
            "--nodes",
            &nodes.to_string(),
            "--node-name",
            "n",
            "--ready-timeout",
            "300s",
            "--data-dir",
            &dir.path().to_string_lossy(),
            "--print-kubeconfig",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Ready (every node Ready too) when it has printed the kubeconfig and its `...` line.
        let mut child = tokio::process::Command::new(f.bin_dir.join("rkube"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let out = child.stdout.take().expect("piped");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(out));
        while lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow::anyhow!("rkube server exited"))?
            != "..."
        {}
        wait_ready(&format!(
            "{base}/api/v1/namespaces/default/serviceaccounts/default"
        ))
        .await?;
        let procs = vec![Proc {
            name: "rkube server",
            child,
        }];
        Ok((
            Cluster {
                procs,
                base,
                storage: None,
            },
            dir,
        ))
    }

    fn pids(&self) -> Vec<(&'static str, u32)> {
        let mut v: Vec<(&'static str, u32)> = self
            .procs
            .iter()
            .map(|p| (p.name, p.child.id().unwrap_or(0)))
            .collect();
        if let Some(s) = &self.storage {
            v.push(("storage", s.pid()));
        }
        v
    }
}

fn deployment(name: &str, replicas: usize) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}})
}

fn is_running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A pod seen Running and Ready for the first time.
struct Ran {
    /// Its `app` label.
    app: String,
    name: String,
    /// From its first event (ADDED) to this one, both on the same watch.
    startup: Duration,
    /// From its first event to the first showing it bound to a node (`spec.nodeName`).
    bound: Duration,
}

/// Watches every pod from now on and reports each one once, when it first runs.
async fn running_feed(base: &str) -> anyhow::Result<mpsc::UnboundedReceiver<Ran>> {
    let mut rv = pods_rv(&reqwest::Client::new(), base).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let base = base.to_string();
    tokio::spawn(async move {
        // First event of each pod, and how long it waited for a node; `None` once reported.
        let mut first: HashMap<String, Option<(Instant, Option<Duration>)>> = HashMap::new();
        // Bounded: a watch that ends is resumed from its last resourceVersion, a few times.
        for _ in 0..100 {
            let url = format!("{base}/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600");
            let Ok(resp) = reqwest::get(url).await else {
                return;
            };
            let mut stop = false;
            each_event(resp, |ev, _| {
                if ev["type"] == "ERROR" {
                    stop = true;
                    return false;
                }
                let o = &ev["object"];
                if let Some(r) = o["metadata"]["resourceVersion"].as_str() {
                    rv = r.to_string();
                }
                let (Some("ADDED" | "MODIFIED"), Some(name)) =
                    (ev["type"].as_str(), o["metadata"]["name"].as_str())
                else {
                    return true;
                };
                let at = first
                    .entry(name.to_string())
                    .or_insert_with(|| Some((Instant::now(), None)));
                if let Some((t, bound @ None)) = at {
                    if o["spec"]["nodeName"].is_string() {
                        *bound = Some(t.elapsed());
                    }
                }
                if let Some((t, bound)) = at.filter(|_| is_running(o)) {
                    *at = None;
                    let ran = Ran {
                        app: o["metadata"]["labels"]["app"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        name: name.to_string(),
                        startup: t.elapsed(),
                        bound: bound.unwrap_or_default(),
                    };
                    if tx.send(ran).is_err() {
                        stop = true;
                        return false;
                    }
                }
                true
            })
            .await;
            if stop {
                return;
            }
        }
    });
    Ok(rx)
}

/// Reads a watch response's JSON lines and calls `f` with each event and the moment its chunk
/// arrived, until the stream ends or `f` returns false.
async fn each_event(resp: reqwest::Response, mut f: impl FnMut(Value, Instant) -> bool) {
    let mut s = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(Ok(chunk)) = s.next().await {
        let at = Instant::now();
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(pos) = buf[start..].iter().position(|b| *b == b'\n') {
            let line = &buf[start..start + pos];
            start += pos + 1;
            if let Ok(ev) = serde_json::from_slice::<Value>(line) {
                if !f(ev, at) {
                    return;
                }
            }
        }
        buf.drain(..start);
    }
}

async fn post(http: &reqwest::Client, base: &str, d: &Value) -> anyhow::Result<()> {
    // As client-go: a 429 (the apiserver's in-flight limit, e.g. while 1,000 nodes register)
    // is retried after its Retry-After.
    for _ in 0..10 {
        let r = http
            .post(format!(
                "{base}/apis/apps/v1/namespaces/default/deployments"
            ))
            .json(d)
            .send()
            .await?;
        let code = r.status();
        if code.as_u16() == 429 {
            let wait = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1);
            tokio::time::sleep(Duration::from_secs(wait.clamp(1, 5))).await;
            continue;
        }
        anyhow::ensure!(
            code.is_success(),
            "create deployment: {code}: {}",
            r.text().await.unwrap_or_default()
        );
        return Ok(());
    }
    anyhow::bail!("create deployment: still 429 after 10 tries")
}

/// (p50, p99) in ms of `runs` 1-replica Deployments, one after another.
async fn latency(c: &Cluster, runs: usize) -> anyhow::Result<(f64, f64)> {
    let http = reqwest::Client::new();
    let mut feed = running_feed(&c.base).await?;
    let mut lat = Vec::new();
    for i in 0..runs {
        let name = format!("lat-{i}");
        let t0 = Instant::now();
        post(&http, &c.base, &deployment(&name, 1)).await?;
        loop {
            let Ran { app, .. } = tokio::time::timeout(Duration::from_secs(60), feed.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("feed ended"))?;
            if app == name {
                break;
            }
        }
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    Ok((pct(0.5), pct(0.99)))
}

struct Big {
    secs: f64,
    curve: Vec<(f64, usize)>,
    peak_rss: HashMap<&'static str, u64>,
    cpu: HashMap<&'static str, f64>,
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    (f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0))
        / 100.0
}

/// A Deployment of `n` replicas: seconds until all Running, the curve, per-component peak RSS
/// and CPU seconds used meanwhile.
async fn scale_run(c: &Cluster, name: &str, n: usize, progress: bool) -> anyhow::Result<Big> {
    let http = reqwest::Client::new();
    let mut feed = running_feed(&c.base).await?;
    let pids = c.pids();
    let cpu0: HashMap<&str, f64> = pids.iter().map(|(n, p)| (*n, cpu_seconds(*p))).collect();
    let mut peak: HashMap<&'static str, u64> = HashMap::new();
    let t0 = Instant::now();
    post(&http, &c.base, &deployment(name, n)).await?;
    let mut count = 0;
    let mut curve = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while count < n {
        tokio::select! {
            got = feed.recv() => {
                let ran = got.ok_or_else(|| anyhow::anyhow!("feed ended"))?;
                if ran.app == name { count += 1; }
            }
            _ = tick.tick() => {
                let t = t0.elapsed().as_secs_f64();
                curve.push((t, count));
                for (n, p) in &pids {
                    let e = peak.entry(n).or_default();
                    *e = (*e).max(rss_of(*p));
                }
                if progress && curve.len() % 4 == 0 {
                    println!("    {t:5.1}s  {count}/{n} Running");
                }
                anyhow::ensure!(t < 600.0, "{name}: only {count}/{n} Running after 10 min");
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    curve.push((secs, count));
    let cpu = pids
        .iter()
        .map(|(n, p)| (*n, cpu_seconds(*p) - cpu0[n]))
        .collect();
    Ok(Big {
        secs,
        curve,
        peak_rss: peak,
        cpu,
    })
}

fn svg(curve: &[(f64, usize)], total: usize, title: &str) -> String {
    let (w, h) = (640.0, 300.0);
    let tmax = curve.last().map(|c| c.0).unwrap_or(1.0).max(0.1);
    let pts: Vec<String> = curve
        .iter()
        .map(|(t, n)| {
            format!(
                "{:.1},{:.1}",
                50.0 + t / tmax * (w - 70.0),
                h - 30.0 - *n as f64 / total as f64 * (h - 60.0)
            )
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"50\" y=\"18\">{title}</text>\
         <line x1=\"50\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/><line x1=\"50\" y1=\"30\" x2=\"50\" y2=\"{y0}\" stroke=\"black\"/>\
         <text x=\"{x1}\" y=\"{yl}\" text-anchor=\"end\">{tmax:.1} s</text><text x=\"45\" y=\"34\" text-anchor=\"end\">{total}</text><text x=\"45\" y=\"{y0}\" text-anchor=\"end\">0</text>\
         <polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/></svg>\n",
        pts.join(" "),
        y0 = h - 30.0,
        x1 = w - 20.0,
        yl = h - 12.0,
    )
}

async fn metric_sum(url: &str, name: &str) -> f64 {
    let Ok(r) = reqwest::get(url).await else {
        return 0.0;
    };
    metric_total(&r.text().await.unwrap_or_default(), name)
}

/// The sum of a metric's samples, over every label set, in a Prometheus text page.
fn metric_total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The seed's bookmark scenario: quiet nodes (10 stable pods each) whose watches see nothing
/// while another node churns pods; the apiserver keeps 10 s of history, each watch lasts
/// 15–30 s. One agent process's nodes ask for bookmarks, another's do not. Returns
/// (relists with, relists without, bytes of one quiet node's list, watches with, watches without).
async fn bookmark_scenario(f: &Flags) -> anyhow::Result<(f64, f64, usize, f64, f64)> {
    let b = |n: &str| f.bin_dir.join(n);
    let storage = start_rkube_store(&b("rkube-store")).await?;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _api = spawn(
        "apiserver",
        b("rkube-apiserver"),
        [
            "--etcd-servers",
            &storage.url,
            "--secure-port",
            &port.to_string(),
            "--watch-cache-history-window",
            "10s",
            "--watch-bookmark-interval",
            "5s",
            "--enable-priority-and-fairness=false",
            // No controller-manager here to make the `default` ServiceAccount.
            "--disable-admission-plugins=ServiceAccount",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        format!("{base}/readyz"),
    )
    .await?;
    let agent = |name: &'static str, nodes: usize, index: usize, bookmarks: bool| {
        let p = free_port();
        let args: Vec<String> = [
            "--server",
            &base,
            "--nodes",
            &nodes.to_string(),
            "--node-name",
            name,
            "--node-index",
            &index.to_string(),
            "--port",
            &p.to_string(),
            "--watch-timeout",
            "15s",
            "--watch-bookmarks",
            if bookmarks { "true" } else { "false" },
            "--event-qps",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        (
            spawn(
                name,
                b("rkube-kubelet-agent"),
                args,
                format!("http://127.0.0.1:{p}/readyz"),
            ),
            format!("http://127.0.0.1:{p}/metrics"),
        )
    };
    let (busy, _) = agent("busy", 1, 0, true);
    let _busy = busy.await?;
    let (on, on_metrics) = agent("quiet-on", 20, 10, true);
    let _on = on.await?;
    let (off, off_metrics) = agent("quiet-off", 20, 40, false);
    let _off = off.await?;
    let http = reqwest::Client::new();
    let url = format!("{base}/api/v1/namespaces/default/pods");
    for (prefix, nodes) in [("quiet-on", 20), ("quiet-off", 20)] {
        for n in 0..nodes {
            for i in 0..10 {
                let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("{prefix}-{n}-{i}"), "labels": {"app": "quiet"}},
                    "spec": {"nodeName": format!("{prefix}-{n}"), "containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}});
                http.post(&url).json(&p).send().await?;
            }
        }
    }
    let list_bytes = http
        .get(format!(
            "{base}/api/v1/pods?fieldSelector=spec.nodeName%3Dquiet-off-0"
        ))
        .send()
        .await?
        .bytes()
        .await?
        .len();
    let (r_on0, r_off0) = (
        metric_sum(&on_metrics, "reflector_relists_total").await,
        metric_sum(&off_metrics, "reflector_relists_total").await,
    );
    println!("  churning pods on another node for {} s…", f.churn_secs);
    let t0 = Instant::now();
    let mut i = 0u64;
    while t0.elapsed() < Duration::from_secs(f.churn_secs) {
        let p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("churn-{i}")},
            "spec": {"nodeName": "busy", "containers": [{"name": "c", "image": "nginx:1.14.2"}]}});
        http.post(&url).json(&p).send().await?;
        if i >= 20 {
            http.delete(format!("{url}/churn-{}", i - 20))
                .send()
                .await?;
        }
        i += 1;
        if i.is_multiple_of(500) {
            println!("    {:.0}s  {i} pods churned", t0.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(10)).await; // pacing: ~100 pods/s
    }
    let on = metric_sum(&on_metrics, "reflector_relists_total").await - r_on0;
    let off = metric_sum(&off_metrics, "reflector_relists_total").await - r_off0;
    let w_on = metric_sum(&on_metrics, "reflector_watches_total").await;
    let w_off = metric_sum(&off_metrics, "reflector_watches_total").await;
    Ok((on, off, list_bytes, w_on, w_off))
}

async fn bookmark_section(f: &Flags) -> anyhow::Result<()> {
    println!("== bookmark scenario");
    let (on, off, bytes, w_on, w_off) = bookmark_scenario(f).await?;
    println!("  relists: {on} with bookmarks, {off} without ({bytes} bytes per quiet node's list)");
    let body = format!(
        "## Bookmarks on a quiet node (e2e-bench)\n\nMachine: {}  \nCommit: {}, {}  \n20 quiet nodes with bookmarks and 20 without (two kubelet-agent processes; 10 stable pods per node) while another node churns ~100 pods/s for {} s;          the apiserver keeps 10 s of watch history and sends bookmarks every 5 s; each kubelet watch lasts 15–30 s.\n\n         | | watches opened | re-lists | bytes re-transferred by lists |\n|---|---|---|---|\n         | with bookmarks | {w_on} | {on} | {} |\n| without bookmarks | {w_off} | {off} | {} ({bytes} bytes per list) |\n\nTarget: 0 re-lists with bookmarks, ≥ 1 without.\n",
        machine(), git_commit(), utc_now(), f.churn_secs, on as usize * bytes, off as usize * bytes
    );
    write_section(&f.out, "e2e-bookmarks", &body)?;
    Ok(())
}

/// Seconds from POSTing `obj` to `url` until `done` holds for it (polled every 20 ms; an
/// `Err` from `done` stops the run), within `limit`.
async fn time_until(
    url: &str,
    obj: &Value,
    limit: Duration,
    done: impl Fn(&Value) -> anyhow::Result<bool>,
) -> anyhow::Result<f64> {
    let http = reqwest::Client::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let t0 = Instant::now();
    // A 429 (the in-flight limits while a thousand nodes register) is retried, as clients do.
    loop {
        let r = http.post(url).json(obj).send().await?;
        let status = r.status();
        if status.is_success() {
            break;
        }
        let body = r.text().await.unwrap_or_default();
        anyhow::ensure!(
            status.as_u16() == 429 && t0.elapsed() < Duration::from_secs(30),
            "create {name}: {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        let o: Value = http
            .get(format!("{url}/{name}"))
            .send()
            .await?
            .json()
            .await?;
        if done(&o)? {
            return Ok(t0.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            t0.elapsed() < limit,
            "{name} not done after {limit:?}: {}",
            o["status"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Seconds from POSTing a Job of `completions` (at most `parallelism` at once, each pod
/// running the agent's default 100 ms) to its Complete condition.
async fn job_run(c: &Cluster, completions: usize, parallelism: usize) -> anyhow::Result<f64> {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "many"},
        "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "work", "image": "busybox"}]}}}});
    let url = format!("{}/apis/batch/v1/namespaces/default/jobs", c.base);
    time_until(&url, &job, Duration::from_secs(300), |j| {
        let conds = j.pointer("/status/conditions").and_then(Value::as_array);
        let has = |t: &str| {
            conds.is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
        };
        anyhow::ensure!(!has("Failed"), "the job failed: {}", j["status"]);
        Ok(has("Complete"))
    })
    .await
}

/// Seconds from POSTing an OrderedReady StatefulSet of `replicas` (no probes, no claims) until
/// every pod is Ready: each pod is created only once the one before it is.
async fn statefulset_run(c: &Cluster, replicas: usize) -> anyhow::Result<f64> {
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ordered"},
        "spec": {"replicas": replicas, "serviceName": "ordered",
            "selector": {"matchLabels": {"app": "ordered"}},
            "template": {"metadata": {"labels": {"app": "ordered"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    let url = format!("{}/apis/apps/v1/namespaces/default/statefulsets", c.base);
    time_until(&url, &sts, Duration::from_secs(300), |s| {
        Ok(s.pointer("/status/readyReplicas").and_then(Value::as_u64) == Some(replicas as u64))
    })
    .await
}

/// Seconds from POSTing a DaemonSet until its pod is Ready on each of `nodes` nodes.
async fn daemonset_run(c: &Cluster, nodes: usize) -> anyhow::Result<f64> {
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "fluent-bit"}]}}}});
    let url = format!("{}/apis/apps/v1/namespaces/default/daemonsets", c.base);
    time_until(&url, &ds, Duration::from_secs(300), |d| {
        Ok(d.pointer("/status/numberReady").and_then(Value::as_u64) == Some(nodes as u64))
    })
    .await
}

async fn workloads_section(f: &Flags) -> anyhow::Result<()> {
    println!(
        "== workloads: a Job of {} completions, parallelism {}; a StatefulSet of {}",
        f.job_completions, f.job_parallelism, f.sts_replicas
    );
    let c = Cluster::start(f, false, false, 10).await?;
    let secs = job_run(&c, f.job_completions, f.job_parallelism).await?;
    let rate = f.job_completions as f64 / secs;
    println!("  Job Complete in {secs:.2} s ({rate:.0} pods/s)");
    let sts = statefulset_run(&c, f.sts_replicas).await?;
    println!("  StatefulSet all Ready in {sts:.2} s");
    drop(c);
    println!("== workloads: a DaemonSet over {} nodes", f.big_nodes);
    let c = Cluster::start(f, false, false, f.big_nodes).await?;
    let ds = daemonset_run(&c, f.big_nodes).await?;
    println!("  DaemonSet Ready on every node in {ds:.2} s");
    drop(c);
    let body = format!(
        "## Workloads (e2e-bench)\n\nMachine: {}  \nCommit: {}, {}  \nThe five components as processes on rkube-store (limits off, `fast` stages: each Job pod runs the default 100 ms and exits 0; no probe delays). \
         Each object is POSTed and the time runs until its status says done: the Job's `Complete` condition (every pod counted through the tracking finalizer), the StatefulSet's `readyReplicas` (OrderedReady: each pod is created only once the one before it is Ready), the DaemonSet's `numberReady`.\n\n\
         | workload | nodes | time | pods/s | target |\n|---|---|---|---|---|\n\
         | Job: {} completions, parallelism {} | 10 | {secs:.2} s | {rate:.0} | ≤ 5 s |\n\
         | StatefulSet: {} replicas, OrderedReady | 10 | {sts:.2} s | {:.0} | ≤ 5 s |\n\
         | DaemonSet: one pod per node | {} | {ds:.2} s | {:.0} | ≤ 5 s |\n\n\
         KWOK's documented pace is about 20 pods/s (50 s for the same Job).\n",
        machine(), git_commit(), utc_now(), f.job_completions, f.job_parallelism,
        f.sts_replicas, f.sts_replicas as f64 / sts, f.big_nodes, f.big_nodes as f64 / ds
    );
    write_section(&f.out, "e2e-workloads", &body)?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let f = Flags::parse();
    if f.bookmarks_only {
        bookmark_section(&f).await?;
        println!("wrote {}", f.out.display());
        return Ok(());
    }
    if f.workloads_only {
        workloads_section(&f).await?;
        println!("wrote {}", f.out.display());
        return Ok(());
    }
    if f.scale {
        scale::scale_section(&f).await?;
        println!("wrote {}", f.out.display());
        return Ok(());
    }
    if f.probe {
        return probe(&f).await;
    }
    if f.hops {
        // 110 pods fit a node: every run's pod keeps its place.
        let c = Cluster::start(&f, false, false, f.runs.div_ceil(100).max(3)).await?;
        return hops::hops(&c, f.runs).await;
    }
    if f.one_binary {
        one_binary_section(&f).await?;
        println!("wrote {}", f.out.display());
        return Ok(());
    }
    let mut rows = String::new();
    let mut big_rows = String::new();
    // gRPC is the apiserver's default; the JSON gateway rows measure it side by side.
    for (backend, etcd, transport) in [
        ("rkube-store", false, "grpc"),
        ("etcd 3.4", true, "grpc"),
        ("rkube-store, JSON gateway", false, "json"),
        ("etcd 3.4, JSON gateway", true, "json"),
    ] {
        for (mode, limits) in [("limits off", false), ("upstream-like limits", true)] {
            if transport == "json" && limits {
                continue;
            }
            println!("== {backend}, {mode}");
            let c = Cluster::start_over(&f, etcd, transport, limits, 3).await?;
            let (p50, p99) = latency(&c, f.runs).await?;
            println!(
                "  1-replica Deployment → Running: p50 {p50:.1} ms, p99 {p99:.1} ms ({} runs)",
                f.runs
            );
            let hundred = scale_run(&c, "hundred", 100, false).await?;
            println!("  100 replicas all Running in {:.2} s", hundred.secs);
            rows.push_str(&format!(
                "| {backend} | {mode} | {p50:.1} ms | {p99:.1} ms | {:.2} s |\n",
                hundred.secs
            ));
        }
        println!(
            "== {backend}: {} replicas on {} nodes, limits off",
            f.big_replicas, f.big_nodes
        );
        let c = Cluster::start_over(&f, etcd, transport, false, f.big_nodes).await?;
        let big = scale_run(&c, "big", f.big_replicas, true).await?;
        let total_rss: u64 = big.peak_rss.values().sum();
        let per: Vec<String> = [
            "storage",
            "apiserver",
            "controller-manager",
            "scheduler",
            "kubelet-agent",
        ]
        .iter()
        .map(|n| {
            format!(
                "{n} {:.0} MiB / {:.1} CPU-s",
                big.peak_rss.get(n).copied().unwrap_or(0) as f64 / 1048576.0,
                big.cpu.get(n).copied().unwrap_or(0.0)
            )
        })
        .collect();
        println!(
            "  all Running in {:.2} s ({:.0} pods/s); peak RSS total {:.0} MiB",
            big.secs,
            f.big_replicas as f64 / big.secs,
            total_rss as f64 / 1048576.0
        );
        let file = format!(
            "docs/e2e-{}{}.svg",
            if etcd { "etcd" } else { "rkube-store" },
            if transport == "json" { "-json" } else { "" }
        );
        std::fs::write(
            &file,
            svg(
                &big.curve,
                f.big_replicas,
                &format!(
                    "{} pods Running over time, {} nodes, {backend}",
                    f.big_replicas, f.big_nodes
                ),
            ),
        )?;
        big_rows.push_str(&format!(
            "| {backend} | {:.2} s | {:.0} pods/s | {:.0} MiB | {} | [curve]({}) |\n",
            big.secs,
            f.big_replicas as f64 / big.secs,
            total_rss as f64 / 1048576.0,
            per.join("; "),
            file.trim_start_matches("docs/")
        ));
    }
    let body = format!(
        "## End to end (e2e-bench)\n\nMachine: {}  \nCommit: {}, {}  \nThe five components as processes on loopback (`scripts/bench-e2e.sh`); the apiserver talks to storage over etcd's gRPC API unless a row says JSON gateway (`--etcd-transport json`); in the open configuration (anonymous, AlwaysAllow, APF off: chain-bench measures the request chain); one kubelet-agent process simulates the nodes (`fast` stages: no simulated pull delay). \
         Latency: a Deployment of 1 replica is POSTed and the time runs until its pod is seen Running and Ready through a pods watch; runs are sequential. \
         Upstream-like limits: controller-manager 20 qps / 30 burst, scheduler 50 / 100.\n\n\
         | storage | client limits | 1-replica → Running p50 | p99 | 100 replicas all Running |\n|---|---|---|---|---|\n{rows}\n\
         Targets: p50 ≤ 20 ms, p99 ≤ 100 ms.\n\n\
         | storage | {} replicas on {} nodes: all Running | rate | peak RSS, whole control plane | per component (peak RSS / CPU used) | |\n|---|---|---|---|---|---|\n{big_rows}\n\
         Targets: ≤ 20 s (≥ 500 pods/s), whole control plane ≤ 1 GiB.\n",
        machine(), git_commit(), utc_now(), f.big_replicas, f.big_nodes
    );
    write_section(&f.out, "e2e-bench", &body)?;
    workloads_section(&f).await?;
    bookmark_section(&f).await?;
    println!("wrote {}", f.out.display());
    Ok(())
}

/// The 10,000-replica run on the separate processes, with what each component spent and
/// which requests the apiserver served.
async fn probe(f: &Flags) -> anyhow::Result<()> {
    let c = Cluster::start(f, false, false, f.big_nodes).await?;
    let before = request_counts(&c.base).await;
    let big = scale_run(&c, "big", f.big_replicas, true).await?;
    let after = request_counts(&c.base).await;
    println!(
        "all Running in {:.2} s ({:.0} pods/s)",
        big.secs,
        f.big_replicas as f64 / big.secs
    );
    for (name, cpu) in &big.cpu {
        let rss = big.peak_rss.get(name).copied().unwrap_or(0);
        println!(
            "  {name:<20} {cpu:6.1} CPU-s  {:5.0} MiB",
            rss as f64 / 1048576.0
        );
    }
    let mut served: Vec<(f64, &String)> = after
        .iter()
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0.0), k))
        .filter(|(d, _)| *d > 0.0)
        .collect();
    served.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("apiserver requests during the run (verb resource code):");
    for (d, k) in served.iter().take(25) {
        println!("  {d:8.0}  {k}");
    }
    Ok(())
}

/// `apiserver_request_total` by "verb resource code".
async fn request_counts(base: &str) -> HashMap<String, f64> {
    let text = metrics_page(base).await;
    let mut by = HashMap::new();
    for (labels, value) in samples(&text, "apiserver_request_total") {
        let label = |k: &str| labels.get(k).copied().unwrap_or("");
        let key = format!("{} {} {}", label("verb"), label("resource"), label("code"));
        *by.entry(key).or_default() += value;
    }
    by
}

/// The apiserver's `/metrics` page (empty when it cannot be read).
async fn metrics_page(base: &str) -> String {
    match reqwest::get(format!("{base}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The samples of the metric `name` (with its labels) in a Prometheus text page: each one's
/// labels and value.
fn samples<'a>(text: &'a str, name: &str) -> Vec<(HashMap<&'a str, &'a str>, f64)> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|line| {
            let (labels, value) = line.strip_prefix(&prefix)?.rsplit_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k, v.trim_end_matches('"')))
                })
                .collect();
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// The 10,000-replica run on the separate processes and on `rkube server`, one after the
/// other in one run.
async fn one_binary_section(f: &Flags) -> anyhow::Result<()> {
    let mut rows = String::new();
    for one in [false, true] {
        let label = if one {
            "`rkube server` (one process)"
        } else {
            "separate processes"
        };
        println!(
            "== {label}: {} replicas on {} nodes",
            f.big_replicas, f.big_nodes
        );
        let (c, dir) = if one {
            let (c, d) = Cluster::one_binary(f, f.big_nodes).await?;
            (c, Some(d))
        } else {
            (Cluster::start(f, false, false, f.big_nodes).await?, None)
        };
        let big = scale_run(&c, "big", f.big_replicas, true).await?;
        let rss: u64 = big.peak_rss.values().sum();
        let cpu: f64 = big.cpu.values().sum();
        println!(
            "  all Running in {:.2} s ({:.0} pods/s); peak RSS {:.0} MiB; {cpu:.1} CPU-s",
            big.secs,
            f.big_replicas as f64 / big.secs,
            rss as f64 / 1048576.0
        );
        rows.push_str(&format!(
            "| {label} | {:.2} s | {:.0} pods/s | {:.0} MiB | {cpu:.1} |\n",
            big.secs,
            f.big_replicas as f64 / big.secs,
            rss as f64 / 1048576.0
        ));
        drop(c);
        drop(dir);
    }
    let body = format!(
        "## One binary (e2e-bench --one-binary)\n\nMachine: {}  \nCommit: {}, {}  \n\
         {} replicas on {} simulated nodes, open configuration, client limits off, store on disk: the five components as \
         separate processes, then `rkube server --insecure` running them in one process (one runtime, one allocator; \
         the components still talk HTTP on loopback). Peak RSS sums the processes' peaks; CPU-s is user+system time \
         during the run.\n\n\
         | control plane | all Running | rate | peak RSS | CPU-s |\n|---|---|---|---|---|\n{rows}",
        machine(),
        git_commit(),
        utc_now(),
        f.big_replicas,
        f.big_nodes
    );
    write_section(&f.out, "e2e-one-binary", &body)
}
