//! apiserver-bench: runs rkube-apiserver (on rkube-store, and on etcd 3.4 for comparison)
//! and measures what issue 3 targets: LIST of 10k ~3 KB pods from the watch cache (all, by
//! label, by `spec.nodeName`), 1,000 node-filtered watchers under 500 writes/s, paced
//! single-object create/update at 100/s, GET, and memory per cached pod and per idle watch.
//! Prints the figures and writes them to `docs/benchmarks.md`.

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
    /// etcd to run the same measurements on; empty to skip.
    #[arg(long, default_value = "etcd")]
    etcd_bin: String,
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

#[derive(Default, Clone, Debug)]
struct Figures {
    pod_json_bytes: usize,
    rss_per_pod: f64,
    list_all_rv0: (u64, u64),
    list_all_consistent: (u64, u64),
    list_label: (u64, u64),
    list_node: (u64, u64),
    watch_latency: (u64, u64),
    watch_delivered: (usize, usize),
    rss_per_watch: f64,
    create: (u64, u64),
    update: (u64, u64),
    get: (u64, u64),
}

fn pod(i: usize, nodes: usize) -> Value {
    // ~3 KB per pod, like a small real pod with managed annotations.
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i:05}"), "namespace": "default",
            "labels": {"app": "bench", "group": format!("g{}", i % 100)},
            "annotations": {"bench/padding": "x".repeat(2000)}},
        "spec": {"nodeName": format!("node-{}", i % nodes), "containers": [{"name": "c", "image": "nginx:1.14.2",
            "ports": [{"containerPort": 80}], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}
    })
}

fn pct(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

async fn timed_gets(http: &reqwest::Client, url: &str, n: usize) -> (u64, u64) {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = http.get(url).send().await.expect("GET");
        assert!(r.status().is_success(), "{url}: {}", r.status());
        let _ = r.bytes().await.expect("body");
        lat.push(t.elapsed().as_micros() as u64);
    }
    pct(lat)
}

/// The apiserver's RSS once the memory freed by what came before is returned: mimalloc hands
/// freed pages back only after a delay (rkube-alloc's purge thread within seconds), so this
/// keeps a trickle of GETs going for 15 s before reading.
async fn settled_rss(http: &reqwest::Client, base: &str, pid: u32) -> u64 {
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        let _ = http.get(format!("{base}/readyz")).send().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rss_of(pid)
}

async fn bench(name: &str, storage_url: &str, flags: &Flags) -> anyhow::Result<Figures> {
    println!("== rkube-apiserver on {name}");
    let (api, base) = start_apiserver(&flags.apiserver_bin, storage_url).await?;
    let pid = api.id().unwrap_or(0);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(2000)
        .build()?;
    let mut f = Figures {
        pod_json_bytes: serde_json::to_vec(&pod(0, flags.nodes))?.len(),
        ..Default::default()
    };

    let rss_before = rss_of(pid);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (http, base, next, nodes, total) = (
            http.clone(),
            base.clone(),
            next.clone(),
            flags.nodes,
            flags.pods,
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let r = http
                    .post(format!("{base}/api/v1/namespaces/default/pods"))
                    .json(&pod(i, nodes))
                    .send()
                    .await
                    .expect("create");
                assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
            }
        }));
    }
    let t = Instant::now();
    for t in tasks {
        t.await?;
    }
    println!(
        "  created {} pods in {:.1}s",
        flags.pods,
        t.elapsed().as_secs_f64()
    );
    // Wait until the cache holds them all.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = http
            .get(format!(
                "{base}/api/v1/pods?resourceVersion=0&labelSelector=app%3Dbench"
            ))
            .send()
            .await?
            .json()
            .await?;
        if v["items"].as_array().map(|a| a.len()).unwrap_or(0) >= flags.pods {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "cache did not fill");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // "Its JSON size": the pod as the API serves it (with defaults and metadata filled in).
    f.pod_json_bytes = http
        .get(format!("{base}/api/v1/namespaces/default/pods/bench-00007"))
        .send()
        .await?
        .bytes()
        .await?
        .len();
    let rss_loaded = settled_rss(&http, &base, pid).await;
    f.rss_per_pod = rss_loaded.saturating_sub(rss_before) as f64 / flags.pods as f64;

    f.list_all_rv0 = timed_gets(&http, &format!("{base}/api/v1/pods?resourceVersion=0"), 30).await;
    f.list_all_consistent = timed_gets(&http, &format!("{base}/api/v1/pods"), 30).await;
    f.list_label = timed_gets(
        &http,
        &format!("{base}/api/v1/pods?labelSelector=group%3Dg7"),
        200,
    )
    .await;
    f.list_node = timed_gets(
        &http,
        &format!("{base}/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-7"),
        200,
    )
    .await;
    f.get = timed_gets(
        &http,
        &format!("{base}/api/v1/namespaces/default/pods/bench-00007"),
        500,
    )
    .await;
    println!(
        "  LIST all (RV=0) p50/p99 {:?} us; consistent {:?}; label {:?}; node {:?}; GET {:?}",
        f.list_all_rv0, f.list_all_consistent, f.list_label, f.list_node, f.get
    );

    // 1,000 watchers, one per node.
    let rss_before_watch = settled_rss(&http, &base, pid).await;
    let received: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let mut watchers = Vec::new();
    for n in 0..flags.nodes {
        let url = format!("{base}/api/v1/pods?watch=1&resourceVersion=0&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-{n}");
        let resp = http.get(url).send().await?;
        let received = received.clone();
        watchers.push(tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut buf = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                let now = Instant::now();
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    if let Ok(ev) = serde_json::from_slice::<Value>(&line) {
                        if ev["type"] == "MODIFIED" {
                            if let Some(mark) = ev["object"]["metadata"]["labels"]["mark"].as_str()
                            {
                                received.lock().unwrap().push((mark.to_string(), now));
                            }
                        }
                    }
                }
            }
        }));
    }
    // The initial events drain, and their buffers are returned, before memory is read.
    let rss_watching = settled_rss(&http, &base, pid).await;
    f.rss_per_watch = rss_watching.saturating_sub(rss_before_watch) as f64 / flags.nodes as f64;
    let sent: Arc<Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    let mut writes = Vec::new();
    let total_writes = 2500usize; // 5 s at 500/s
    for k in 0..total_writes {
        let at = start + Duration::from_micros(2000 * k as u64);
        let now = Instant::now();
        if at > now {
            tokio::time::sleep(at - now).await;
        }
        let (http, base, sent) = (http.clone(), base.clone(), sent.clone());
        let i = (k * 7919) % flags.pods;
        writes.push(tokio::spawn(async move {
            let mark = format!("m{k}");
            sent.lock().unwrap().insert(mark.clone(), Instant::now());
            let r = http
                .patch(format!(
                    "{base}/api/v1/namespaces/default/pods/bench-{i:05}"
                ))
                .header("content-type", "application/merge-patch+json")
                .body(json!({"metadata": {"labels": {"mark": mark}}}).to_string())
                .send()
                .await
                .expect("patch");
            assert!(r.status().is_success());
        }));
    }
    for w in writes {
        w.await?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while received.lock().unwrap().len() < total_writes && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        let rec = received.lock().unwrap();
        let sent = sent.lock().unwrap();
        let lat: Vec<u64> = rec
            .iter()
            .filter_map(|(m, at)| {
                sent.get(m)
                    .map(|t| at.saturating_duration_since(*t).as_micros() as u64)
            })
            .collect();
        f.watch_delivered = (rec.len(), total_writes);
        f.watch_latency = pct(lat);
    }
    println!(
        "  watch: delivered {:?}, p50/p99 {:?} us, {:.0} B per watch",
        f.watch_delivered, f.watch_latency, f.rss_per_watch
    );
    for w in watchers {
        w.abort();
    }

    // Paced single-object writes at 100/s.
    let mut create = Vec::new();
    let mut update = Vec::new();
    for k in 0..300 {
        let t0 = Instant::now();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{k}")}, "data": {"k": "v"}});
        let r = http
            .post(format!("{base}/api/v1/namespaces/default/configmaps"))
            .json(&cm)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 201);
        let created: Value = r.json().await?;
        create.push(t0.elapsed().as_micros() as u64);
        let mut upd = created.clone();
        upd["data"]["k"] = json!("w");
        let t1 = Instant::now();
        let r = http
            .put(format!(
                "{base}/api/v1/namespaces/default/configmaps/cm-{k}"
            ))
            .json(&upd)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200);
        let _ = r.bytes().await?;
        update.push(t1.elapsed().as_micros() as u64);
        let spent = t0.elapsed();
        if spent < Duration::from_millis(20) {
            tokio::time::sleep(Duration::from_millis(20) - spent).await; // 2 writes per 20 ms = 100/s
        }
    }
    f.create = pct(create);
    f.update = pct(update);
    println!("  create {:?} update {:?} us", f.create, f.update);
    drop(api);
    Ok(f)
}

fn ms(v: u64) -> String {
    format!("{:.2} ms", v as f64 / 1000.0)
}

fn render(rows: &[(&str, Figures)], flags: &Flags) -> String {
    let mut s = String::from("## rkube-apiserver (apiserver-bench)\n\n");
    s.push_str(&format!(
        "Run {} on {} at commit `{}`: {} pods of ~{} B JSON as served on {} nodes, release builds, client on the same machine. Memory figures are RSS deltas of the apiserver process, each read after 15 s of light traffic (the allocator returns freed memory after a delay).\n\n",
        utc_now(),
        machine(),
        git_commit(),
        flags.pods,
        rows.first().map(|r| r.1.pod_json_bytes).unwrap_or(0),
        flags.nodes
    ));
    s.push_str("| measurement (p50 / p99) | target |");
    for (n, _) in rows {
        s.push_str(&format!(" on {n} |"));
    }
    s.push_str("\n|---|---|");
    for _ in rows {
        s.push_str("---|");
    }
    s.push('\n');
    let line = |label: &str, target: &str, get: &dyn Fn(&Figures) -> String| {
        let mut l = format!("| {label} | {target} |");
        for (_, f) in rows {
            l.push_str(&format!(" {} |", get(f)));
        }
        l.push('\n');
        l
    };
    s.push_str(&line(
        "LIST all pods, RV=0 (cache)",
        "p99 ≤ 100 ms",
        &|f| format!("{} / {}", ms(f.list_all_rv0.0), ms(f.list_all_rv0.1)),
    ));
    s.push_str(&line("LIST all pods, consistent (RV unset)", "-", &|f| {
        format!(
            "{} / {}",
            ms(f.list_all_consistent.0),
            ms(f.list_all_consistent.1)
        )
    }));
    s.push_str(&line("LIST by label (100 match)", "p99 ≤ 5 ms", &|f| {
        format!("{} / {}", ms(f.list_label.0), ms(f.list_label.1))
    }));
    s.push_str(&line(
        "LIST by spec.nodeName (10 match)",
        "p99 ≤ 5 ms",
        &|f| format!("{} / {}", ms(f.list_node.0), ms(f.list_node.1)),
    ));
    s.push_str(&line(
        "1,000 node watchers, write → its watcher at 500 writes/s",
        "p99 ≤ 50 ms",
        &|f| {
            format!(
                "{} / {} ({}/{} delivered)",
                ms(f.watch_latency.0),
                ms(f.watch_latency.1),
                f.watch_delivered.0,
                f.watch_delivered.1
            )
        },
    ));
    s.push_str(&line("memory per idle watch", "≤ 64 KiB", &|f| {
        format!("{:.1} KiB", f.rss_per_watch / 1024.0)
    }));
    s.push_str(&line("create at 100 writes/s", "p99 ≤ 10 ms", &|f| {
        format!("{} / {}", ms(f.create.0), ms(f.create.1))
    }));
    s.push_str(&line("update at 100 writes/s", "p99 ≤ 10 ms", &|f| {
        format!("{} / {}", ms(f.update.0), ms(f.update.1))
    }));
    s.push_str(&line(
        "GET one pod (RV unset: from storage)",
        "p99 ≤ 1 ms",
        &|f| format!("{} / {}", ms(f.get.0), ms(f.get.1)),
    ));
    s.push_str(&line(
        "memory per cached pod / pod JSON size",
        "≤ 2×",
        &|f| {
            format!(
                "{:.0} B / {} B = {:.2}×",
                f.rss_per_pod,
                f.pod_json_bytes,
                f.rss_per_pod / f.pod_json_bytes as f64
            )
        },
    ));
    s
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let mut rows = Vec::new();
    {
        let store = start_rkube_store(&flags.store_bin).await?;
        rows.push((
            "rkube-store",
            bench("rkube-store", &store.url, &flags).await?,
        ));
    }
    if !flags.etcd_bin.is_empty() {
        let etcd = start_etcd(&flags.etcd_bin).await?;
        rows.push(("etcd 3.4", bench("etcd 3.4", &etcd.url, &flags).await?));
    }
    let table = render(&rows, &flags);
    println!("\n{table}");
    write_section(&flags.out, "apiserver-bench", &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}
