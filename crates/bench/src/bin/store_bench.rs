//! store-bench: drives an etcd v3 endpoint with one client implementation (`rkube-etcd-api`,
//! over gRPC or the JSON gateway: `--transport`) and runs rkube-store and etcd 3.4 side by
//! side in one run: unique-key
//! puts, create-if-absent txns (the apiserver's create), CAS-update txns, a prefix range over
//! 10k keys, watch delivery latency with 100 watchers, RSS with 100k keys of 1 KiB, and the
//! machine's fsync latency. Prints the table and writes it to `docs/benchmarks.md`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rkube_bench::*;
use rkube_etcd_api::*;

#[derive(Parser, Debug)]
struct Flags {
    /// The rkube-store binary to run.
    #[arg(long, default_value = "target/release/rkube-store")]
    store_bin: PathBuf,
    /// The etcd binary to compare with; empty to skip etcd.
    #[arg(long, default_value = "etcd")]
    etcd_bin: String,
    /// Duration of each timed load.
    #[arg(long, default_value = "4s")]
    duration: humanish::Dur,
    /// Keys for the RSS measurement (1 KiB each).
    #[arg(long, default_value_t = 100_000)]
    rss_keys: usize,
    /// Run only the watch-delivery measurement against rkube-store, print it, write nothing.
    #[arg(long)]
    watch_only: bool,
    /// Watchers for the watch-delivery measurement.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// The client's transport: `grpc` (HTTP/2, protobuf) or `json` (the gateway).
    #[arg(long, default_value = "grpc", value_parser = ["grpc", "json"])]
    transport: String,
    /// Where to write the results section.
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

mod humanish {
    /// A duration flag like `4s` or `500ms`.
    #[derive(Clone, Copy, Debug)]
    pub struct Dur(pub std::time::Duration);
    impl std::str::FromStr for Dur {
        type Err = String;
        fn from_str(s: &str) -> Result<Self, String> {
            let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
            let n: u64 = n.parse().map_err(|_| format!("bad duration {s}"))?;
            Ok(Dur(match unit {
                "ms" => std::time::Duration::from_millis(n),
                "s" | "" => std::time::Duration::from_secs(n),
                _ => return Err(format!("bad duration {s}")),
            }))
        }
    }
}

const VALUE_256: [u8; 256] = [b'v'; 256];
const WATCHERS: usize = 100;

#[derive(Default, Clone)]
struct Results {
    loads: Vec<(String, usize, Stats)>,
    watch: Option<WatchStats>,
    rss_10k_bytes: u64,
    rss_bytes: u64,
    db_bytes: u64,
    load_rate: f64,
}

#[derive(Default, Clone, Debug)]
struct WatchStats {
    rate: f64,
    watchers: usize,
    writes: usize,
    delivered: usize,
    expected: usize,
    commit_p50_us: u64,
    commit_p99_us: u64,
    write_p50_us: u64,
    write_p99_us: u64,
}

/// Whether clients speak gRPC (set once from `--transport`).
static GRPC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn client(url: &str) -> EtcdClient {
    if *GRPC.get().unwrap_or(&true) {
        EtcdClient::grpc(&[url.to_string()], None).expect("client")
    } else {
        EtcdClient::new(&[url.to_string()]).expect("client")
    }
}

async fn bench_server(server: &Server, dur: Duration) -> anyhow::Result<Results> {
    let mut res = Results::default();
    let url = server.url.clone();
    for clients in [1usize, 64] {
        let c = client(&url);
        let st = run_load(clients, dur, move |cl, i| {
            let c = c.clone();
            async move {
                let key = format!("bench/put/{clients}/{cl}/{i}").into_bytes();
                c.put(&PutRequest {
                    key,
                    value: VALUE_256.to_vec(),
                    ..Default::default()
                })
                .await?;
                Ok(())
            }
        })
        .await;
        println!(
            "  [{}] put, {clients} clients: {:.0}/s p50 {}us p99 {}us",
            server.name,
            st.rate(),
            st.p50_us,
            st.p99_us
        );
        res.loads.push(("unique-key put".into(), clients, st));

        let c = client(&url);
        let st = run_load(clients, dur, move |cl, i| {
            let c = c.clone();
            async move {
                let key = format!("bench/create/{clients}/{cl}/{i}").into_bytes();
                let txn = TxnRequest {
                    compare: vec![Compare::mod_revision(key.clone(), CompareResult::Equal, 0)],
                    success: vec![RequestOp::put(PutRequest {
                        key: key.clone(),
                        value: VALUE_256.to_vec(),
                        ..Default::default()
                    })],
                    failure: vec![RequestOp::range(RangeRequest {
                        key,
                        ..Default::default()
                    })],
                };
                let r = c.txn(&txn).await?;
                anyhow::ensure!(r.succeeded, "create failed");
                Ok(())
            }
        })
        .await;
        println!(
            "  [{}] create txn, {clients} clients: {:.0}/s p50 {}us p99 {}us",
            server.name,
            st.rate(),
            st.p50_us,
            st.p99_us
        );
        res.loads
            .push(("create txn (If mod==0 Then Put)".into(), clients, st));

        // CAS updates: every client owns one key and keeps its last mod_revision.
        let c = client(&url);
        let revs: Arc<Vec<Mutex<i64>>> = Arc::new((0..clients).map(|_| Mutex::new(0)).collect());
        for cl in 0..clients {
            let key = format!("bench/cas/{clients}/{cl}").into_bytes();
            let r = c
                .put(&PutRequest {
                    key,
                    value: VALUE_256.to_vec(),
                    ..Default::default()
                })
                .await?;
            *revs[cl].lock().unwrap() = r.header.map(|h| h.revision).unwrap_or(0);
        }
        let st = run_load(clients, dur, move |cl, _| {
            let c = c.clone();
            let revs = revs.clone();
            async move {
                let key = format!("bench/cas/{clients}/{cl}").into_bytes();
                let last = *revs[cl].lock().unwrap();
                let txn = TxnRequest {
                    compare: vec![Compare::mod_revision(
                        key.clone(),
                        CompareResult::Equal,
                        last,
                    )],
                    success: vec![RequestOp::put(PutRequest {
                        key: key.clone(),
                        value: VALUE_256.to_vec(),
                        ..Default::default()
                    })],
                    failure: vec![RequestOp::range(RangeRequest {
                        key,
                        ..Default::default()
                    })],
                };
                let r = c.txn(&txn).await?;
                let new = if r.succeeded {
                    r.header.map(|h| h.revision).unwrap_or(0)
                } else {
                    r.responses
                        .first()
                        .and_then(|o| o.response_range.as_ref())
                        .and_then(|rr| rr.kvs.first())
                        .map(|kv| kv.mod_revision)
                        .unwrap_or(0)
                };
                *revs[cl].lock().unwrap() = new;
                anyhow::ensure!(r.succeeded, "CAS conflict");
                Ok(())
            }
        })
        .await;
        println!(
            "  [{}] CAS txn, {clients} clients: {:.0}/s p50 {}us p99 {}us",
            server.name,
            st.rate(),
            st.p50_us,
            st.p99_us
        );
        res.loads.push((
            "CAS update txn (If mod==X Then Put Else Range)".into(),
            clients,
            st,
        ));
    }

    // Prefix range over 10k keys.
    load_keys(&url, "bench/range/", 10_000, 256).await?;
    res.rss_10k_bytes = server.rss_bytes();
    for clients in [1usize, 64] {
        let c = client(&url);
        let st = run_load(clients, dur, move |_, _| {
            let c = c.clone();
            async move {
                let r = c
                    .range(&RangeRequest {
                        key: b"bench/range/".to_vec(),
                        range_end: prefix_range_end(b"bench/range/"),
                        ..Default::default()
                    })
                    .await?;
                anyhow::ensure!(r.kvs.len() == 10_000, "range returned {} keys", r.kvs.len());
                Ok(())
            }
        })
        .await;
        println!(
            "  [{}] range 10k keys, {clients} clients: {:.1}/s p50 {}us p99 {}us",
            server.name,
            st.rate(),
            st.p50_us,
            st.p99_us
        );
        res.loads
            .push(("prefix range, 10k keys x 256 B".into(), clients, st));
    }

    res.watch = Some(bench_watch(&url, WATCHERS, 1000, dur.max(Duration::from_secs(3))).await?);

    Ok(res)
}

/// RSS of a fresh server holding exactly `keys` keys of 1 KiB.
async fn bench_rss(server: &Server, keys: usize, res: &mut Results) -> anyhow::Result<()> {
    let url = server.url.clone();
    let t = Instant::now();
    load_keys(&url, "bench/rss/", keys, 1024).await?;
    res.load_rate = keys as f64 / t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await; // let the process settle before reading RSS
    res.rss_bytes = server.rss_bytes();
    res.db_bytes = client(&url).status().await?.db_size as u64;
    println!(
        "  [{}] RSS with {keys} x 1 KiB: {} MiB (db {} MiB)",
        server.name,
        res.rss_bytes >> 20,
        res.db_bytes >> 20
    );
    Ok(())
}

async fn load_keys(url: &str, prefix: &str, n: usize, size: usize) -> anyhow::Result<()> {
    let c = client(url);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let value = vec![b'x'; size];
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (c, next, value, prefix) = (c.clone(), next.clone(), value.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), anyhow::Error>(());
                }
                let key = format!("{prefix}{i:08}").into_bytes();
                c.put(&PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                })
                .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// `watchers` streams on one prefix; one writer paces `rate` puts/s for `dur`.
async fn bench_watch(
    url: &str,
    watchers: usize,
    rate: usize,
    dur: Duration,
) -> anyhow::Result<WatchStats> {
    let c = client(url);
    let prefix = b"bench/watch/".to_vec();
    let recv: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let create = WatchCreateRequest {
            key: prefix.clone(),
            range_end: prefix_range_end(&prefix),
            ..Default::default()
        };
        let mut rx = c.watch(vec![WatchRequest::create(create)]).await?;
        // The created response confirms the watch is registered before writes start.
        let first = rx
            .next()
            .await
            .ok_or_else(|| anyhow::anyhow!("watch closed"))??;
        anyhow::ensure!(first.created, "expected created response");
        let recv = recv.clone();
        tasks.push(tokio::spawn(async move {
            let mut local = Vec::new();
            while let Some(Ok(resp)) = rx.next().await {
                let now = Instant::now();
                for ev in resp.events {
                    if let Some(kv) = ev.kv {
                        if kv.value == b"stop" {
                            recv.lock().unwrap().extend(local);
                            return;
                        }
                        local.push((kv.mod_revision, now));
                    }
                }
            }
            recv.lock().unwrap().extend(local);
        }));
    }
    // Writes are issued at a fixed rate, each on its own task, so a slow reply does not lower
    // the offered load.
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    let sent: Arc<Mutex<HashMap<i64, (Instant, Instant)>>> = Arc::default();
    let mut writes = Vec::new();
    let mut i = 0u64;
    let mut next = start;
    while start.elapsed() < dur {
        next += interval;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep(next - now).await;
        }
        let (c, sent) = (c.clone(), sent.clone());
        let key = [prefix.as_slice(), format!("{i}").as_bytes()].concat();
        writes.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let r = c
                .put(&PutRequest {
                    key,
                    value: VALUE_256.to_vec(),
                    ..Default::default()
                })
                .await?;
            let acked = Instant::now();
            sent.lock()
                .unwrap()
                .insert(r.header.map(|h| h.revision).unwrap_or(0), (t0, acked));
            Ok::<(), anyhow::Error>(())
        }));
        i += 1;
    }
    for w in writes {
        w.await??;
    }
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let offered_rate = sent.len() as f64 / start.elapsed().as_secs_f64();
    c.put(&PutRequest {
        key: [prefix.as_slice(), b"stop"].concat(),
        value: b"stop".to_vec(),
        ..Default::default()
    })
    .await?;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    let recv = recv.lock().unwrap();
    let mut commit = Vec::new();
    let mut write = Vec::new();
    for (rev, at) in recv.iter() {
        if let Some((t0, acked)) = sent.get(rev) {
            write.push(at.duration_since(*t0).as_micros() as u64);
            commit.push(at.saturating_duration_since(*acked).as_micros() as u64);
        }
    }
    commit.sort_unstable();
    write.sort_unstable();
    let ws = WatchStats {
        rate: offered_rate,
        watchers,
        writes: sent.len(),
        delivered: commit.len(),
        expected: sent.len() * watchers,
        commit_p50_us: percentile(&commit, 0.5),
        commit_p99_us: percentile(&commit, 0.99),
        write_p50_us: percentile(&write, 0.5),
        write_p99_us: percentile(&write, 0.99),
    };
    println!("  watch: {ws:?}");
    Ok(ws)
}

fn us(v: u64) -> String {
    if v >= 10_000 {
        format!("{:.0} ms", v as f64 / 1000.0)
    } else {
        format!("{:.2} ms", v as f64 / 1000.0)
    }
}

fn render(
    ours: &Results,
    etcd: Option<&Results>,
    fsync: (u64, u64),
    dur: Duration,
    rss_keys: usize,
) -> String {
    let mut s = String::new();
    let grpc = *GRPC.get().unwrap_or(&true);
    s.push_str(if grpc {
        "## rkube-store vs etcd 3.4 over gRPC (store-bench)\n\n"
    } else {
        "## rkube-store vs etcd 3.4 over the JSON gateway (store-bench --transport json)\n\n"
    });
    s.push_str(&format!(
        "Run {} on {} at commit `{}`; {}s per load; same client (`rkube-etcd-api` over {}), \
         durable writes on both (rkube: one fsync per group commit; etcd: its WAL fsync). \
         Machine fsync (4 KiB write + fdatasync): p50 {}, p99 {}.\n\n",
        utc_now(),
        machine(),
        git_commit(),
        dur.as_secs(),
        if grpc {
            "gRPC: one HTTP/2 connection, calls multiplexed"
        } else {
            "HTTP/1.1 JSON, pooled connections"
        },
        us(fsync.0),
        us(fsync.1)
    ));
    s.push_str("| workload | clients | rkube ops/s | etcd ops/s | rkube / etcd | rkube p50 / p99 | etcd p50 / p99 |\n");
    s.push_str("|---|---:|---:|---:|---:|---|---|\n");
    for (i, (name, clients, st)) in ours.loads.iter().enumerate() {
        let e = etcd
            .and_then(|e| e.loads.get(i))
            .map(|(_, _, st)| st.clone());
        let (erate, ratio, elat) = match &e {
            Some(e) => (
                format!("{:.0}", e.rate()),
                format!("{:.2}x", st.rate() / e.rate().max(1e-9)),
                format!("{} / {}", us(e.p50_us), us(e.p99_us)),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        s.push_str(&format!(
            "| {name} | {clients} | {:.0} | {erate} | {ratio} | {} / {} | {elat} |\n",
            st.rate(),
            us(st.p50_us),
            us(st.p99_us)
        ));
    }
    s.push('\n');
    if let Some(w) = &ours.watch {
        s.push_str(&format!(
            "Watch delivery, {} watchers on one prefix, puts issued at a fixed rate (achieved {:.0}/s, {} writes):\n\n",
            w.watchers, w.rate, w.writes
        ));
        s.push_str("| server | events delivered / expected | commit→delivery p50 / p99 | put sent→delivery p50 / p99 |\n|---|---|---|---|\n");
        let row = |name: &str, w: &WatchStats| {
            format!(
                "| {name} | {} / {} | {} / {} | {} / {} |\n",
                w.delivered,
                w.expected,
                us(w.commit_p50_us),
                us(w.commit_p99_us),
                us(w.write_p50_us),
                us(w.write_p99_us)
            )
        };
        s.push_str(&row("rkube-store", w));
        if let Some(ew) = etcd.and_then(|e| e.watch.as_ref()) {
            s.push_str(&row("etcd 3.4", ew));
        }
        s.push_str("\n(commit→delivery counts from the moment the writer received its put acknowledgement.)\n\n");
    }
    s.push_str(&format!(
        "Memory: a fresh server after loading exactly {rss_keys} keys of 1 KiB with 64 clients; \
         the third column is the load server after its 10k-key range setup:\n\n"
    ));
    s.push_str(&format!(
        "| server | RSS with {rss_keys} keys | RSS (load server) | db file | load rate (64 clients, 1 KiB puts) |\n|---|---:|---:|---:|---:|\n"
    ));
    s.push_str(&format!(
        "| rkube-store | {} MiB | {} MiB | {} MiB | {:.0}/s |\n",
        ours.rss_bytes >> 20,
        ours.rss_10k_bytes >> 20,
        ours.db_bytes >> 20,
        ours.load_rate
    ));
    if let Some(e) = etcd {
        s.push_str(&format!(
            "| etcd 3.4 | {} MiB | {} MiB | {} MiB | {:.0}/s |\n",
            e.rss_bytes >> 20,
            e.rss_10k_bytes >> 20,
            e.db_bytes >> 20,
            e.load_rate
        ));
    }
    s
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let _ = GRPC.set(flags.transport == "grpc");
    let dur = flags.duration.0;
    if flags.watch_only {
        let server = start_rkube_store(&flags.store_bin).await?;
        bench_watch(&server.url, flags.watchers, 1000, dur).await?;
        return Ok(());
    }
    let ours = {
        println!("== rkube-store ({})", flags.store_bin.display());
        let server = start_rkube_store(&flags.store_bin).await?;
        let mut res = bench_server(&server, dur).await?;
        drop(server);
        let fresh = start_rkube_store(&flags.store_bin).await?;
        bench_rss(&fresh, flags.rss_keys, &mut res).await?;
        res
    };
    let fsync = fsync_latency(std::env::temp_dir().as_path(), 500);
    let etcd = if flags.etcd_bin.is_empty() {
        None
    } else {
        println!("== etcd ({})", flags.etcd_bin);
        let server = start_etcd(&flags.etcd_bin).await?;
        let mut res = bench_server(&server, dur).await?;
        drop(server);
        let fresh = start_etcd(&flags.etcd_bin).await?;
        bench_rss(&fresh, flags.rss_keys, &mut res).await?;
        Some(res)
    };
    let table = render(&ours, etcd.as_ref(), fsync, dur, flags.rss_keys);
    println!("\n{table}");
    let section = if flags.transport == "grpc" {
        "store-bench-grpc"
    } else {
        "store-bench"
    };
    write_section(&flags.out, section, &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}
