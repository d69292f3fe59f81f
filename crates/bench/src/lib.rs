//! Shared pieces of rkube's benchmark programs: starting servers as processes, timed load
//! loops with latency percentiles, process RSS, machine facts, and writing result sections
//! into `docs/benchmarks.md`.

use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Throughput and latency of one timed load.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub ops: u64,
    pub errors: u64,
    pub secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
}

impl Stats {
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
}

pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Runs `op(client_index, iteration)` from `clients` concurrent tasks for `dur`.
pub async fn run_load<F, Fut>(clients: usize, dur: Duration, op: F) -> Stats
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                match op(c, i).await {
                    Ok(()) => lat.push(t.elapsed().as_micros() as u64),
                    Err(_) => errors += 1,
                }
                i += 1;
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.unwrap_or_default();
        all.extend(lat);
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort_unstable();
    Stats {
        ops: all.len() as u64,
        errors,
        secs,
        p50_us: percentile(&all, 0.5),
        p99_us: percentile(&all, 0.99),
    }
}

/// A server started for a benchmark; killed when dropped.
pub struct Server {
    pub name: &'static str,
    pub url: String,
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
    pub fn rss_bytes(&self) -> u64 {
        rss_of(self.pid())
    }
}

pub use rkube_daemon::port::free_port;

pub async fn wait_healthy(url: &str, dur: Duration) -> anyhow::Result<()> {
    let client = rkube_etcd_api::EtcdClient::new(&[url.to_string()])?;
    let deadline = Instant::now() + dur;
    loop {
        if client.status().await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{url} did not become healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn start_rkube_store(bin: &Path) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let child = Command::new(bin)
        .args([
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--listen-client-urls",
            &url,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    wait_healthy(&url, Duration::from_secs(30)).await?;
    Ok(Server {
        name: "rkube-store",
        url,
        child,
        dir,
    })
}

pub async fn start_etcd(bin: &str) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let peer = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(bin)
        .args(["--data-dir", dir.path().to_str().unwrap()])
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
        ])
        .args([
            "--initial-cluster",
            &format!("default={peer_url}"),
            "--name",
            "default",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    wait_healthy(&url, Duration::from_secs(30)).await?;
    Ok(Server {
        name: "etcd 3.4",
        url,
        child,
        dir,
    })
}

pub fn rss_of(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// The anonymous part of a process's resident memory (heap, stacks; not its code pages,
/// which are file-backed and shared by every process running the same binary).
pub fn rss_anon_of(pid: u32) -> u64 {
    status_bytes(pid, "RssAnon:")
}

/// A `… kB` line of `/proc/PID/status`, in bytes (0 when unreadable).
fn status_bytes(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// fdatasync latency of 4 KiB writes in `dir`: (p50, p99) in microseconds.
pub fn fsync_latency(dir: &Path, samples: usize) -> (u64, u64) {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).expect("create fsync probe");
    let buf = vec![7u8; 4096];
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        f.write_all(&buf).unwrap();
        f.sync_data().unwrap();
        lat.push(t.elapsed().as_micros() as u64);
    }
    let _ = std::fs::remove_file(&path);
    lat.sort_unstable();
    (percentile(&lat, 0.5), percentile(&lat, 0.99))
}

/// One line describing the machine: CPU model, cores, memory, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().next().and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<u64>().ok())
            })
        })
        .map(|kb| format!("{:.0} GiB", kb as f64 / 1048576.0))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem} RAM, Linux {}", kernel.trim())
}

pub fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Replaces (or appends) the section between `<!-- {tag}:start -->` and `<!-- {tag}:end -->`.
pub fn write_section(path: &Path, tag: &str, body: &str) -> anyhow::Result<()> {
    let start = format!("<!-- {tag}:start -->");
    let end = format!("<!-- {tag}:end -->");
    let existing = std::fs::read_to_string(path).unwrap_or_else(|_| {
        "# rkube benchmarks\n\nFigures written by the benchmark programs (`scripts/bench-*.sh`), with the machine they ran on. \
         Machines are shared and noisy: compare the ratios measured side by side in one run.\n"
            .to_string()
    });
    let section = format!("{start}\n{body}\n{end}");
    let out = match (existing.find(&start), existing.find(&end)) {
        (Some(a), Some(b)) if b > a => format!(
            "{}{}{}",
            &existing[..a],
            section,
            &existing[b + end.len()..]
        ),
        _ => format!("{}\n{}\n", existing.trim_end(), section),
    };
    std::fs::write(path, out)?;
    Ok(())
}

/// Waits until `url` answers 200 (at most two minutes).
pub async fn wait_ready(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while http
        .get(url)
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        anyhow::ensure!(Instant::now() < deadline, "{url} did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Starts `bin` with `args` (logs at warn, output discarded, killed when dropped) and waits
/// until `ready_url` answers 200.
pub async fn spawn_ready(bin: &Path, args: &[String], ready_url: &str) -> anyhow::Result<Child> {
    let child = Command::new(bin)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log_sink(bin)?)
        .kill_on_drop(true)
        .spawn()?;
    wait_ready(ready_url).await?;
    Ok(child)
}

/// Where a component's warnings go: nowhere, or with `RKUBE_BENCH_LOG_DIR` set, appended to
/// `<dir>/<binary>.log` (what a run that misbehaved is explained from).
fn log_sink(bin: &Path) -> anyhow::Result<Stdio> {
    let Some(dir) = std::env::var_os("RKUBE_BENCH_LOG_DIR") else {
        return Ok(Stdio::null());
    };
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&dir).join(format!("{name}.log")))?;
    Ok(Stdio::from(file))
}

/// The current resourceVersion of the pods collection (to watch from "now").
pub async fn pods_rv(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    list_rv(http, &format!("{base}/api/v1/pods")).await
}

/// The current resourceVersion of the collection at `url` (one item listed).
pub async fn list_rv(http: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let v: serde_json::Value = http
        .get(format!("{url}?limit=1"))
        .send()
        .await?
        .json()
        .await?;
    Ok(v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string())
}

/// Starts rkube-apiserver on `storage_url` and waits for `/readyz`, with the ServiceAccount
/// admission plugin off: the benches that post pods themselves run no controller-manager to
/// make the namespace's `default` account.
pub async fn start_apiserver(bin: &Path, storage_url: &str) -> anyhow::Result<(Child, String)> {
    start_apiserver_with(
        bin,
        storage_url,
        &["--disable-admission-plugins=ServiceAccount"],
    )
    .await
}

/// Starts rkube-apiserver on `storage_url` with `extra` flags and waits for `/readyz`.
pub async fn start_apiserver_with(
    bin: &Path,
    storage_url: &str,
    extra: &[&str],
) -> anyhow::Result<(Child, String)> {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    // The open configuration: every component is anonymous, so APF would hold them all in one
    // flow of global-default (about 49 of 600 seats) and answer 429 to the bench's own
    // requests under a large load; the benches measure the control plane, chain-bench the
    // request chain and APF.
    let mut args: Vec<String> = [
        "--etcd-servers",
        storage_url,
        "--secure-port",
        &port.to_string(),
        "--enable-priority-and-fairness=false",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let child = spawn_ready(bin, &args, &format!("{base}/readyz")).await?;
    Ok((child, base))
}
