//! The scale run (`e2e-bench --scale`): 100,000 pods on 5,000 simulated nodes by default,
//! as Deployments of mixed sizes, through the whole control plane on rkube-store. Records
//! pods Running over time, each component's RSS over time, peak RSS and CPU-seconds, pod
//! startup latency (first seen → Running, both through one pods watch), the apiserver's request
//! latency by verb from its own histogram, and a LIST of every pod; checks them against
//! upstream's SLOs and writes the `e2e-scale` section and `docs/e2e-scale-*.svg`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rkube_bench::*;
use serde_json::Value;

use super::{cpu_seconds, deployment, post, running_feed, svg, Cluster, Flags, Ran};

/// Deployment sizes and the share of the pods each size holds: a few big, many small, as
/// upstream's load test mixes them.
const MIX: [(usize, f64); 4] = [(1000, 0.4), (500, 0.4), (100, 0.1), (20, 0.1)];

/// The Deployments for `total` pods: sizes from `MIX`, interleaved (big and small ones are
/// created side by side), the remainder as one more.
fn plan(total: usize) -> Vec<usize> {
    let mut groups: Vec<Vec<usize>> = MIX
        .iter()
        .map(|(size, share)| vec![*size; (total as f64 * share) as usize / size])
        .collect();
    let placed: usize = groups.iter().flatten().sum();
    if total > placed {
        groups.push(vec![total - placed]);
    }
    let mut out = Vec::new();
    while groups.iter().any(|g| !g.is_empty()) {
        for g in &mut groups {
            if let Some(s) = g.pop() {
                out.push(s);
            }
        }
    }
    out
}

/// Waits until `n` nodes report Ready.
async fn nodes_ready(base: &str, n: usize) -> anyhow::Result<f64> {
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    loop {
        let v: Value = http
            .get(format!("{base}/api/v1/nodes"))
            .send()
            .await?
            .json()
            .await?;
        let ready = v["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|node| {
                        node["status"]["conditions"].as_array().is_some_and(|c| {
                            c.iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready >= n {
            return Ok(t0.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(600),
            "only {ready}/{n} nodes Ready after 10 min"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `apiserver_request_duration_seconds` bucket counts by verb: `le` → cumulative count.
type Histograms = HashMap<String, Vec<(f64, f64)>>;

async fn request_histograms(base: &str) -> Histograms {
    let text = super::metrics_page(base).await;
    let mut by: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for (labels, v) in super::samples(&text, "apiserver_request_duration_seconds_bucket") {
        let (Some(verb), Some(le)) = (labels.get("verb"), labels.get("le")) else {
            continue;
        };
        *by.entry(verb.to_string())
            .or_default()
            .entry(le.to_string())
            .or_default() += v;
    }
    by.into_iter()
        .map(|(verb, les)| {
            let mut b: Vec<(f64, f64)> = les
                .into_iter()
                .map(|(le, c)| (le.parse().unwrap_or(f64::INFINITY), c))
                .collect();
            b.sort_by(|a, b| a.0.total_cmp(&b.0));
            (verb, b)
        })
        .collect()
}

/// The `q` quantile of a cumulative histogram, interpolated inside its bucket as
/// Prometheus's `histogram_quantile` does; the last finite bound when it falls in `+Inf`.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map(|b| b.1).unwrap_or(0.0);
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in buckets {
        if c >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let span = c - prev.1;
            return if span > 0.0 {
                prev.0 + (le - prev.0) * (rank - prev.1) / span
            } else {
                le
            };
        }
        prev = (le, c);
    }
    prev.0
}

/// Lines over time on one chart: `series` of (name, [(seconds, value)]).
fn svg_lines(series: &[(&str, Vec<(f64, f64)>)], unit: &str, title: &str) -> String {
    let (w, h) = (640.0, 320.0);
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    let pts = series.iter().flat_map(|s| s.1.iter());
    let tmax = pts.clone().map(|p| p.0).fold(0.1, f64::max);
    let ymax = pts.map(|p| p.1).fold(1.0, f64::max);
    let mut body = String::new();
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colours[i % colours.len()];
        let line: Vec<String> = pts
            .iter()
            .map(|(t, v)| {
                format!(
                    "{:.1},{:.1}",
                    60.0 + t / tmax * (w - 80.0),
                    h - 30.0 - v / ymax * (h - 70.0)
                )
            })
            .collect();
        body.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" fill=\"{c}\">{name}</text>",
            line.join(" "),
            70 + (i % 3) * 190,
            36 + (i / 3) * 14
        ));
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"60\" y=\"18\">{title}</text>\
         <line x1=\"60\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/><line x1=\"60\" y1=\"40\" x2=\"60\" y2=\"{y0}\" stroke=\"black\"/>\
         <text x=\"{x1}\" y=\"{yl}\" text-anchor=\"end\">{tmax:.0} s</text><text x=\"55\" y=\"44\" text-anchor=\"end\">{ymax:.0} {unit}</text>\
         <text x=\"55\" y=\"{y0}\" text-anchor=\"end\">0</text>{body}</svg>\n",
        y0 = h - 30.0,
        x1 = w - 20.0,
        yl = h - 12.0,
    )
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

const COMPONENTS: [&str; 5] = [
    "storage",
    "apiserver",
    "controller-manager",
    "scheduler",
    "kubelet-agent",
];

pub(crate) async fn scale_section(f: &Flags) -> anyhow::Result<()> {
    let (pods, nodes) = (f.scale_pods, f.scale_nodes);
    let sizes = plan(pods);
    println!(
        "== scale: {pods} pods in {} Deployments on {nodes} nodes, rkube-store",
        sizes.len()
    );
    let c = Cluster::start(f, false, false, nodes).await?;
    let ready_secs = nodes_ready(&c.base, nodes).await?;
    println!("  {nodes} nodes Ready ({ready_secs:.1} s after the agent registered them)");
    let pids = c.pids();
    let rss_before: HashMap<&str, u64> = pids.iter().map(|(n, p)| (*n, rss_of(*p))).collect();
    let mut feed = running_feed(&c.base).await?;
    let hist0 = request_histograms(&c.base).await;
    let cpu0: HashMap<&str, f64> = pids.iter().map(|(n, p)| (*n, cpu_seconds(*p))).collect();
    let t0 = Instant::now();

    // Every Deployment is created at once by 8 concurrent clients, as a chart install would.
    let creator = {
        let base = c.base.clone();
        let sizes = sizes.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let work: Vec<(usize, usize)> = sizes.into_iter().enumerate().collect();
            futures_util::stream::iter(work)
                .map(|(i, n)| {
                    let (http, base) = (http.clone(), base.clone());
                    async move { post(&http, &base, &deployment(&format!("scale-{i}"), n)).await }
                })
                .buffer_unordered(8)
                .collect::<Vec<anyhow::Result<()>>>()
                .await
                .into_iter()
                .collect::<anyhow::Result<Vec<()>>>()
                .map(|_| Instant::now())
        })
    };

    let mut startup: Vec<f64> = Vec::with_capacity(pods);
    let mut bound: Vec<f64> = Vec::with_capacity(pods);
    let mut curve: Vec<(f64, usize)> = Vec::new();
    let mut rss: HashMap<&str, Vec<(f64, f64)>> = HashMap::new();
    let mut peak: HashMap<&str, u64> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while startup.len() < pods {
        tokio::select! {
            got = feed.recv() => {
                let ran = got.ok_or_else(|| anyhow::anyhow!("the pods watch ended"))?;
                startup.push(ran.startup.as_secs_f64() * 1000.0);
                bound.push(ran.bound.as_secs_f64() * 1000.0);
            }
            _ = tick.tick() => {
                let t = t0.elapsed().as_secs_f64();
                curve.push((t, startup.len()));
                for &(n, p) in &pids {
                    let r = rss_of(p);
                    let e = peak.entry(n).or_default();
                    *e = (*e).max(r);
                    rss.entry(n).or_default().push((t, r as f64 / 1048576.0));
                }
                if curve.len().is_multiple_of(10) {
                    let total: u64 = pids.iter().map(|(_, p)| rss_of(*p)).sum();
                    println!("    {t:6.1}s  {}/{pods} Running, RSS {:.0} MiB", startup.len(), total as f64 / 1048576.0);
                }
                anyhow::ensure!(t < 3600.0, "only {}/{pods} Running after an hour", startup.len());
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    curve.push((secs, startup.len()));
    let created = creator.await??.duration_since(t0).as_secs_f64();
    let cpu: HashMap<&str, f64> = pids
        .iter()
        .map(|(n, p)| (*n, cpu_seconds(*p) - cpu0[n]))
        .collect();
    let hist1 = request_histograms(&c.base).await;

    // Upstream's density method: with the cluster full, latency pods created at a steady
    // 5 per second (1-replica Deployments here), each timed from its first event to Running.
    let latency_pods = 100;
    let creator = {
        let base = c.base.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            for i in 0..latency_pods {
                tick.tick().await;
                post(&http, &base, &deployment(&format!("latency-{i}"), 1)).await?;
            }
            anyhow::Ok(())
        })
    };
    let mut latency: Vec<f64> = Vec::with_capacity(latency_pods);
    let lat_deadline = Instant::now() + Duration::from_secs(300);
    while latency.len() < latency_pods {
        let got =
            tokio::time::timeout_at(tokio::time::Instant::from_std(lat_deadline), feed.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "only {} of {latency_pods} latency pods Running after 5 min",
                        latency.len()
                    )
                })?;
        let ran: Ran = got.ok_or_else(|| anyhow::anyhow!("the pods watch ended"))?;
        if ran.name.starts_with("latency-") {
            latency.push(ran.startup.as_secs_f64() * 1000.0);
        }
    }
    creator.await??;
    latency.sort_by(f64::total_cmp);
    let (l50, l99) = (pct(&latency, 0.5), pct(&latency, 0.99));
    println!("  latency pods in the full cluster: startup p50 {l50:.0} ms, p99 {l99:.0} ms");

    // The best 10 s of the run.
    let best10 = curve
        .iter()
        .filter_map(|(t, n)| {
            let later = curve.iter().find(|(u, _)| *u >= t + 10.0)?;
            Some((later.1 - n) as f64 / (later.0 - t))
        })
        .fold(0.0, f64::max);

    // A LIST of every pod, from the watch cache (resourceVersion=0) and consistent, 3 each.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let mut lists = Vec::new();
    for (label, query) in [
        ("from the cache (resourceVersion=0)", "?resourceVersion=0"),
        ("consistent (no resourceVersion)", ""),
    ] {
        let mut took = Vec::new();
        let mut bytes = 0;
        let mut refused = 0;
        while took.len() < 3 {
            let t = Instant::now();
            let resp = http
                .get(format!("{}/api/v1/pods{query}", c.base))
                .send()
                .await?;
            // Told to come back (the in-flight limit, a cache re-listing): as a client would,
            // after Retry-After, a bounded number of times; the waits are not timed.
            if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS && refused < 30 {
                refused += 1;
                let wait = rkube_client::client::retry_after(429, true, resp.headers())
                    .unwrap_or(Duration::from_secs(1));
                println!("  LIST {label}: 429, retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                continue;
            }
            let body = resp.error_for_status()?.bytes().await?;
            took.push(t.elapsed().as_secs_f64());
            bytes = body.len();
        }
        took.sort_by(f64::total_cmp);
        lists.push((label, took[1], took[2], bytes));
    }

    startup.sort_by(f64::total_cmp);
    let (s50, s99) = (pct(&startup, 0.5), pct(&startup, 0.99));
    // Where the flood's pods waited: for a node (the scheduler), then on it (the agent).
    bound.sort_by(f64::total_cmp);
    let (b50, b99) = (pct(&bound, 0.5), pct(&bound, 0.99));
    let total_peak: u64 = peak.values().sum();
    let total_cpu: f64 = cpu.values().sum();
    println!(
        "  all {pods} Running in {secs:.1} s ({:.0} pods/s, best 10 s {best10:.0} pods/s); Deployments created in {created:.1} s",
        pods as f64 / secs
    );
    println!(
        "  peak RSS {:.0} MiB; {total_cpu:.0} CPU-s ({:.2} ms per pod); pod startup p50 {s50:.0} ms p99 {s99:.0} ms (bound to a node after p50 {b50:.0} ms, p99 {b99:.0} ms)",
        total_peak as f64 / 1048576.0,
        total_cpu / pods as f64 * 1000.0
    );

    // API latency by verb over the run (the histogram's increase), against upstream's SLOs:
    // single-object calls p99 ≤ 1 s, LISTs ≤ 30 s.
    let mut verbs: Vec<&String> = hist1
        .keys()
        .filter(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "watch" | "watchlist" | "connect"
            )
        })
        .collect();
    verbs.sort();
    let mut api_rows = String::new();
    let mut slo_met = true;
    for verb in verbs {
        let before = hist0.get(verb);
        let delta: Vec<(f64, f64)> = hist1[verb]
            .iter()
            .map(|(le, c)| {
                let was = before
                    .and_then(|b| b.iter().find(|(l, _)| l == le))
                    .map(|b| b.1)
                    .unwrap_or(0.0);
                (*le, c - was)
            })
            .collect();
        let n = delta.last().map(|b| b.1).unwrap_or(0.0);
        if n < 1.0 {
            continue;
        }
        let (p50, p99) = (quantile(&delta, 0.5), quantile(&delta, 0.99));
        let slo = if verb.eq_ignore_ascii_case("list") {
            30.0
        } else {
            1.0
        };
        let met = p99 <= slo;
        slo_met &= met;
        println!(
            "  {verb:7} {n:>9.0} requests  p50 {:.1} ms  p99 {:.1} ms",
            p50 * 1000.0,
            p99 * 1000.0
        );
        api_rows.push_str(&format!(
            "| {verb} | {n:.0} | {:.1} ms | {:.1} ms | ≤ {slo:.0} s | {} |\n",
            p50 * 1000.0,
            p99 * 1000.0,
            if met { "met" } else { "**missed**" }
        ));
    }
    let startup_met = l99 <= 5000.0;

    std::fs::write(
        "docs/e2e-scale-pods.svg",
        svg(
            &curve,
            pods,
            &format!("{pods} pods Running over time, {nodes} nodes, rkube-store"),
        ),
    )?;
    let series: Vec<(&str, Vec<(f64, f64)>)> = COMPONENTS
        .iter()
        .map(|n| (*n, rss.remove(n).unwrap_or_default()))
        .collect();
    std::fs::write(
        "docs/e2e-scale-rss.svg",
        svg_lines(
            &series,
            "MiB",
            &format!("RSS per component over the {pods}-pod run"),
        ),
    )?;

    let per: String = COMPONENTS
        .iter()
        .map(|n| {
            let p = *n;
            let before = rss_before.get(p).copied().unwrap_or(0) as f64 / 1048576.0;
            let top = peak.get(p).copied().unwrap_or(0) as f64 / 1048576.0;
            format!(
                "| {n} | {before:.0} MiB | {top:.0} MiB | {:.1} KiB | {:.1} | {:.2} ms |\n",
                (top - before).max(0.0) * 1024.0 / pods as f64,
                cpu.get(p).copied().unwrap_or(0.0),
                cpu.get(p).copied().unwrap_or(0.0) / pods as f64 * 1000.0
            )
        })
        .collect();
    let list_rows: String = lists
        .iter()
        .map(|(label, med, max, bytes)| {
            format!(
                "| {label} | {:.0} ms | {:.0} ms | {:.0} MiB | ≤ 30 s |\n",
                med * 1000.0,
                max * 1000.0,
                *bytes as f64 / 1048576.0
            )
        })
        .collect();
    let body = format!(
        "## Scale: {pods} pods on {nodes} nodes (e2e-bench --scale)\n\nMachine: {}  \nCommit: {}, {}  \n\
         `scripts/bench-scale.sh`: the five components as processes on loopback, rkube-store, the open configuration, client limits off; \
         one kubelet-agent process simulates {nodes} nodes (each with its own lease, status updates and pods watch; `fast` stages). \
         {} Deployments of mixed sizes (40 % of the pods in Deployments of 1,000, 40 % of 500, 10 % of 100, 10 % of 20) are POSTed by 8 concurrent clients at once; \
         the run lasts until every pod is seen Running and Ready through a pods watch. Pod startup: first event of a pod → first event showing it Running and Ready, on that watch; the SLO is checked as upstream's density test checks it, on latency pods created at a steady rate once the cluster is full (during the flood every pod waits behind tens of thousands of others). \
         API latency: the increase of the apiserver's `apiserver_request_duration_seconds` over the run, by verb, quantiles interpolated inside buckets as Prometheus's `histogram_quantile`.\n\n\
         | | |\n|---|---|\n\
         | all Running | {secs:.1} s |\n| rate | {:.0} pods/s (best 10 s: {best10:.0} pods/s) |\n| Deployments created | in {created:.1} s |\n\
         | peak RSS, whole control plane | {:.0} MiB (sum of the processes' peaks) |\n| CPU, whole control plane | {total_cpu:.0} CPU-s, {:.2} ms per pod |\n\
         | pod startup, {latency_pods} latency pods at 5/s in the full cluster (upstream's density method) | p50 {l50:.0} ms, p99 {l99:.0} ms (SLO p99 ≤ 5 s: {}) |\n\
         | pod startup during the flood (every pod, queued behind the others) | p50 {s50:.0} ms, p99 {s99:.0} ms |\n| of which waiting for a node (first event → first event bound) | p50 {b50:.0} ms, p99 {b99:.0} ms |\n| API calls | {} |\n\n\
         | component | RSS with {nodes} idle nodes | peak RSS | per pod | CPU-s | CPU per pod |\n|---|---|---|---|---|---|\n{per}\n\
         | verb | requests | p50 | p99 | SLO (p99) | |\n|---|---|---|---|---|---|\n{api_rows}\n\
         | LIST of every pod | median of 3 | slowest | size | SLO |\n|---|---|---|---|---|\n{list_rows}\n\
         ![pods Running over time](e2e-scale-pods.svg)\n![RSS per component](e2e-scale-rss.svg)\n\n\
         Targets (issue 20): completes, ≥ 1,000 pods/s, whole control plane ≤ 4 GiB, upstream's SLOs met.\n",
        machine(),
        git_commit(),
        utc_now(),
        sizes.len(),
        pods as f64 / secs,
        total_peak as f64 / 1048576.0,
        total_cpu / pods as f64 * 1000.0,
        if startup_met { "met" } else { "**missed**" },
        if slo_met { "every verb within its SLO" } else { "**an SLO missed** (below)" },
    );
    write_section(&f.out, "e2e-scale", &body)?;
    drop(c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_places_every_pod_in_mixed_sizes() {
        let p = plan(100_000);
        assert_eq!(p.iter().sum::<usize>(), 100_000);
        assert_eq!(p.len(), 40 + 80 + 100 + 500);
        assert_eq!(&p[..4], &[1000, 500, 100, 20]);
        let small = plan(1_234);
        assert_eq!(small.iter().sum::<usize>(), 1_234);
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let b = [(0.1, 50.0), (1.0, 100.0), (f64::INFINITY, 100.0)];
        assert!((quantile(&b, 0.5) - 0.1).abs() < 1e-9);
        assert!((quantile(&b, 0.75) - 0.55).abs() < 1e-9);
        let tail = [(0.1, 10.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(&tail, 0.99), 0.1);
    }
}
