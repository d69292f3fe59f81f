//! `--hops`: where a 1-replica Deployment's time to Running goes. One watch on ReplicaSets and
//! one on pods mark, for each run, when the ReplicaSet, the pod, its binding and its Running
//! status were first seen; the medians of the steps between them name the slow hop.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use rkube_bench::list_rv;

use super::{
    deployment, each_event, is_running, metric_total, metrics_page, post, samples, Cluster,
};

/// A first sighting: the object's `app` label, the step it shows, when.
type Seen = (String, Step, Instant);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Step {
    ReplicaSet,
    Pod,
    Bound,
    Running,
}

/// Follows one resource's watch from now on and sends every step its events show.
async fn follow(base: &str, path: &str, tx: mpsc::UnboundedSender<Seen>) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let rv = list_rv(&http, &format!("{base}{path}")).await?;
    let resp = http
        .get(format!(
            "{base}{path}?watch=true&resourceVersion={rv}&timeoutSeconds=3600"
        ))
        .send()
        .await?;
    let is_rs = path.ends_with("replicasets");
    tokio::spawn(each_event(resp, move |ev, at| {
        let o = &ev["object"];
        let app = o["metadata"]["labels"]["app"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let steps = if is_rs {
            vec![Step::ReplicaSet]
        } else {
            let mut v = vec![Step::Pod];
            if o["spec"]["nodeName"].is_string() {
                v.push(Step::Bound);
            }
            if is_running(o) {
                v.push(Step::Running);
            }
            v
        };
        steps
            .into_iter()
            .all(|step| tx.send((app.clone(), step, at)).is_ok())
    }));
    Ok(())
}

/// Runs `runs` 1-replica Deployments one after another and prints the median and p99 of each
/// step: POST answered, ReplicaSet seen, pod seen, pod bound, pod Running.
pub async fn hops(c: &Cluster, runs: usize) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    follow(&c.base, "/apis/apps/v1/replicasets", tx.clone()).await?;
    follow(&c.base, "/api/v1/pods", tx).await?;
    let store_url = c
        .storage
        .as_ref()
        .map(|s| s.url.clone())
        .unwrap_or_default();
    let store_before = metrics_page(&store_url).await;
    let before = metrics_page(&c.base).await;
    let http = reqwest::Client::new();
    let names = [
        "POST answered",
        "ReplicaSet seen",
        "pod seen",
        "pod bound",
        "pod Running",
    ];
    let mut steps: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut totals = Vec::new();
    for i in 0..runs {
        let name = format!("hop-{i}");
        let t0 = Instant::now();
        post(&http, &c.base, &deployment(&name, 1)).await?;
        let posted = Instant::now();
        let mut first: HashMap<Step, Instant> = HashMap::new();
        while !first.contains_key(&Step::Running) {
            let (app, step, at) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("watch ended"))?;
            if app == name {
                first.entry(step).or_insert(at);
            }
        }
        let marks = [
            Some(posted),
            first.get(&Step::ReplicaSet).copied(),
            first.get(&Step::Pod).copied(),
            first.get(&Step::Bound).copied(),
            first.get(&Step::Running).copied(),
        ];
        let mut prev = t0;
        for (k, m) in marks.iter().enumerate() {
            let m = m.ok_or_else(|| anyhow::anyhow!("{name}: {} never seen", names[k]))?;
            steps[k].push(m.saturating_duration_since(prev).as_secs_f64() * 1000.0);
            prev = m;
        }
        totals.push(prev.saturating_duration_since(t0).as_secs_f64() * 1000.0);
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
    let mut total = 0.0;
    println!("step (from the previous one)        p50 ms   p99 ms");
    for (k, v) in steps.iter_mut().enumerate() {
        let p50 = pct(v, 0.5);
        total += p50;
        println!("  {:<32} {p50:7.2}  {:7.2}", names[k], pct(v, 0.99));
    }
    println!("  {:<32} {total:7.2}", "sum of the medians");
    println!(
        "  {:<32} {:7.2}  {:7.2}",
        "POST to Running",
        pct(&mut totals, 0.5),
        pct(&mut totals, 0.99)
    );
    let after = metrics_page(&c.base).await;
    let store_after = metrics_page(&store_url).await;
    println!("mean time in the apiserver, by request and by storage call, during the runs:");
    for (metric, keys) in [
        (
            "apiserver_request_duration_seconds",
            &["verb", "resource"][..],
        ),
        ("etcd_request_duration_seconds", &["operation"][..]),
    ] {
        for (what, n, ms) in means(&before, &after, metric, keys) {
            println!("  {what:<40} {n:6.0} × {ms:6.2} ms");
        }
    }
    println!("mean time in the store, by call (from its request to its answer):");
    for (what, n, ms) in means(
        &store_before,
        &store_after,
        "grpc_server_handling_seconds",
        &["grpc_method"],
    ) {
        println!("  {what:<40} {n:6.0} × {ms:6.2} ms");
    }
    let delta = |name: &str| metric_total(&store_after, name) - metric_total(&store_before, name);
    let commits = delta("etcd_disk_backend_commit_duration_seconds_count");
    if commits > 0.0 {
        println!(
            "store: {commits:.0} group commits, {:.2} ms each, {:.2} writes each",
            delta("etcd_disk_backend_commit_duration_seconds_sum") / commits * 1000.0,
            delta("rkube_store_backend_commit_batch_size_sum") / commits
        );
    }
    Ok(())
}

/// A histogram's mean by label set between two `/metrics` pages: (labels, count, mean ms).
fn means(before: &str, after: &str, metric: &str, keys: &[&str]) -> Vec<(String, f64, f64)> {
    let by = |text: &str, part: &str| -> HashMap<String, f64> {
        let mut m = HashMap::new();
        for (labels, v) in samples(text, &format!("{metric}_{part}")) {
            let key: Vec<&str> = keys
                .iter()
                .map(|k| labels.get(k).copied().unwrap_or(""))
                .collect();
            *m.entry(key.join(" ")).or_default() += v;
        }
        m
    };
    let (s0, c0, s1, c1) = (
        by(before, "sum"),
        by(before, "count"),
        by(after, "sum"),
        by(after, "count"),
    );
    let mut out: Vec<(String, f64, f64)> = c1
        .iter()
        .filter_map(|(k, c)| {
            let n = c - c0.get(k).copied().unwrap_or(0.0);
            let sum = s1.get(k).copied().unwrap_or(0.0) - s0.get(k).copied().unwrap_or(0.0);
            (n >= 1.0).then(|| (k.clone(), n, sum / n * 1000.0))
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}
