//! controller-bench: rkube-store + rkube-apiserver + rkube-controller-manager as processes,
//! client limits off. Measures what issue 5 targets: a 1,000-replica Deployment's Pod objects
//! all created (observed through a watch) after the Deployment's creation, and the
//! controller-manager's RSS with 10k pods and 1k nodes cached. Writes `docs/benchmarks.md`.

use std::path::PathBuf;
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
    #[arg(long, default_value_t = 1_000)]
    replicas: usize,
    #[arg(long, default_value_t = 10_000)]
    big_replicas: usize,
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

fn deployment(name: &str, replicas: usize) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}]}}}})
}

/// Counts ADDED pods with label `app=<app>` from `rv` until `n`, returning when the n-th came.
async fn count_added(base: String, app: String, rv: String, n: usize) -> anyhow::Result<Instant> {
    let url = format!("{base}/api/v1/pods?watch=true&resourceVersion={rv}&labelSelector=app%3D{app}&timeoutSeconds=600");
    let resp = reqwest::get(url).await?;
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut seen = 0;
    while let Some(chunk) = stream.next().await {
        buf.extend_from_slice(&chunk?);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            if line.starts_with(br#"{"type":"ADDED""#) {
                seen += 1;
                if seen == n {
                    return Ok(Instant::now());
                }
            }
        }
    }
    anyhow::bail!("watch ended after {seen} of {n} pods")
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
    let cm_pid = cm.id().unwrap_or(0);

    // 1. A Deployment of `replicas`: time from POST to the last Pod object created.
    let rv = pods_rv(&http, &base).await?;
    let watcher = tokio::spawn(count_added(base.clone(), "web".into(), rv, f.replicas));
    let t0 = Instant::now();
    let r = http
        .post(format!(
            "{base}/apis/apps/v1/namespaces/default/deployments"
        ))
        .json(&deployment("web", f.replicas))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "create deployment: {}", r.status());
    let done = watcher.await??;
    let create_1k = done - t0;
    println!(
        "{} pods created {:.2} s after the Deployment ({:.0} pods/s)",
        f.replicas,
        create_1k.as_secs_f64(),
        f.replicas as f64 / create_1k.as_secs_f64()
    );

    // 2. Memory with `big_replicas` pods and `nodes` nodes cached.
    let nodes_start = Instant::now();
    let mut posts = futures_util::stream::iter(0..f.nodes)
        .map(|i| {
            let http = http.clone();
            let base = base.clone();
            async move {
                http.post(format!("{base}/api/v1/nodes"))
                    .json(&json!({"metadata": {"name": format!("node-{i}"), "labels": {"kubernetes.io/hostname": format!("node-{i}")}}}))
                    .send()
                    .await
            }
        })
        .buffer_unordered(64);
    while let Some(r) = posts.next().await {
        anyhow::ensure!(r?.status().is_success(), "create node");
    }
    println!(
        "{} nodes created in {:.2} s",
        f.nodes,
        nodes_start.elapsed().as_secs_f64()
    );
    let rv = pods_rv(&http, &base).await?;
    let more = f.big_replicas.saturating_sub(f.replicas);
    let watcher = tokio::spawn(count_added(base.clone(), "web".into(), rv, more));
    let t1 = Instant::now();
    let r = http
        .patch(format!(
            "{base}/apis/apps/v1/namespaces/default/deployments/web"
        ))
        .header("Content-Type", "application/merge-patch+json")
        .body(json!({"spec": {"replicas": f.big_replicas}}).to_string())
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "scale: {}", r.status());
    watcher.await??;
    let create_10k = t1.elapsed();
    println!(
        "scaled to {} pods in {:.2} s ({:.0} pods/s)",
        f.big_replicas,
        create_10k.as_secs_f64(),
        more as f64 / create_10k.as_secs_f64()
    );
    // Wait until the ReplicaSet's status counts them all: the controller-manager has them cached.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v: Value = http
            .get(format!(
                "{base}/apis/apps/v1/namespaces/default/replicasets"
            ))
            .send()
            .await?
            .json()
            .await?;
        if v["items"][0]["status"]["replicas"].as_u64() == Some(f.big_replicas as u64) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "replicaset status did not reach {}",
            f.big_replicas
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rss = rss_of(cm_pid);
    println!(
        "controller-manager RSS with {} pods and {} nodes cached: {:.1} MiB",
        f.big_replicas,
        f.nodes,
        rss as f64 / 1048576.0
    );
    let _ = cm.kill().await;

    let body = format!(
        "## Controller-manager\n\nMachine: {}  \nCommit: {}, {}  \nrkube-store + rkube-apiserver + rkube-controller-manager as processes on loopback, client limits off (`scripts/bench-controllers.sh`).\n\n\
         | Measure | Target | rkube |\n|---|---|---|\n\
         | {} -replica Deployment: all Pod objects created after the Deployment's POST (seen through a watch) | ≤ 3 s | {:.2} s ({:.0} pods/s) |\n\
         | scale to {} replicas: the further pods created | — | {:.2} s ({:.0} pods/s) |\n\
         | controller-manager RSS with {} pods and {} nodes cached | ≤ 100 MiB | {:.1} MiB |\n",
        machine(),
        git_commit(),
        utc_now(),
        f.replicas,
        create_1k.as_secs_f64(),
        f.replicas as f64 / create_1k.as_secs_f64(),
        f.big_replicas,
        create_10k.as_secs_f64(),
        more as f64 / create_10k.as_secs_f64(),
        f.big_replicas,
        f.nodes,
        rss as f64 / 1048576.0,
    );
    write_section(&f.out, "controller-manager", &body)?;
    println!("wrote {}", f.out.display());
    Ok(())
}
