//! start-bench: how fast rkube is ready as a test dependency. `rkube server` spawned and read
//! until it prints its kubeconfig (every component ready, nodes Ready), secure and open;
//! in-process clusters (`rkube::Cluster`, what `rkube-testcluster` wraps) started one after
//! another and 20 at once; the resident memory of an idle `rkube server` and of a process
//! holding one in-process cluster. Writes `docs/benchmarks.md`. With `--cli`, the cluster
//! CLI instead: `rkube cluster create|stop|start|delete` times, and a snapshot of a cluster
//! holding 10,000 pods saved and restored.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use rkube_bench::*;
use tokio::io::AsyncBufReadExt;

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release/rkube")]
    rkube_bin: PathBuf,
    /// Starts measured per configuration.
    #[arg(long, default_value_t = 50)]
    starts: usize,
    /// In-process clusters started at once.
    #[arg(long, default_value_t = 20)]
    parallel: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// Internal: hold one in-process cluster with these nodes and print this process's RSS.
    #[arg(long, hide = true)]
    idle_rss: Option<usize>,
    /// Measure the cluster CLI (and its snapshots) instead.
    #[arg(long)]
    cli: bool,
    /// With --cli: pods in the snapshotted cluster.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// With --cli: create/stop/start/delete rounds.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

/// Runs `rkube ARGS` with clusters under `home`; its stdout and how long it took (µs).
fn rkube_cli(
    bin: &PathBuf,
    home: &std::path::Path,
    args: &[&str],
) -> anyhow::Result<(String, u64)> {
    let t = Instant::now();
    let out = std::process::Command::new(bin)
        .args(args)
        .env("RKUBE_HOME", home)
        .output()?;
    let us = t.elapsed().as_micros() as u64;
    anyhow::ensure!(
        out.status.success(),
        "rkube {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), us))
}

fn kubectl(kubeconfig: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `--cli`: the cluster CLI's lifecycle times, and a snapshot of `pods` pods.
async fn cli_bench(flags: &Flags) -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let home = home.path();
    let bin = &flags.rkube_bin;
    let (mut create, mut stop, mut start, mut delete) = (vec![], vec![], vec![], vec![]);
    for _ in 0..flags.rounds {
        create.push(
            rkube_cli(
                bin,
                home,
                &[
                    "cluster", "create", "b", "--nodes", "3", "--port", "0", "-q",
                ],
            )?
            .1,
        );
        stop.push(rkube_cli(bin, home, &["cluster", "stop", "b", "-q"])?.1);
        start.push(rkube_cli(bin, home, &["cluster", "start", "b", "-q"])?.1);
        delete.push(rkube_cli(bin, home, &["cluster", "delete", "b", "-q"])?.1);
    }
    println!(
        "create {:?} stop {:?} start {:?} delete {:?}",
        pct(create.clone()),
        pct(stop.clone()),
        pct(start.clone()),
        pct(delete.clone())
    );

    // A cluster holding `pods` pods: no nodes, so they stay Pending (what the store holds is
    // the point; the scheduler's FailedScheduling Events are in it too).
    rkube_cli(
        bin,
        home,
        &[
            "cluster", "create", "big", "--nodes", "0", "--port", "0", "-q",
        ],
    )?;
    let kc = rkube_cli(bin, home, &["cluster", "kubeconfig", "big", "--path"])?.0;
    let kc = kc.trim();
    kubectl(
        kc,
        &[
            "create",
            "deployment",
            "big",
            "--image=nginx",
            &format!("--replicas={}", flags.pods),
        ],
    )?;
    let want = flags.pods.to_string();
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let have = kubectl(
            kc,
            &[
                "get",
                "rs",
                "-l",
                "app=big",
                "-o",
                "jsonpath={.items[0].status.replicas}",
            ],
        )?;
        if have == want {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{have} of {want} pods after 900 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let snap = home.join("big.snapshot");
    let snap_s = snap.to_str().unwrap_or_default();
    let (_, save) = rkube_cli(bin, home, &["snapshot", "save", "big", snap_s])?;
    let size = std::fs::metadata(&snap)?.len();
    let keys = std::fs::read_to_string(&snap)?.lines().count() - 1;
    let mut restores = Vec::new();
    for _ in 0..3 {
        restores.push(rkube_cli(bin, home, &["snapshot", "restore", "big", snap_s])?.1);
    }
    let pods_back = kubectl(kc, &["get", "pods", "--no-headers"])?
        .lines()
        .count();
    anyhow::ensure!(
        pods_back == flags.pods,
        "{pods_back} pods after restore, want {}",
        flags.pods
    );
    rkube_cli(bin, home, &["cluster", "delete", "big", "-q"])?;

    let ms = |us: u64| format!("{:.0} ms", us as f64 / 1000.0);
    let row = |label: &str, v: Vec<u64>| {
        let (p50, p99) = pct(v);
        format!("| {label} | {} | {} |\n", ms(p50), ms(p99))
    };
    let mut table = format!(
        "## Cluster CLI (start-bench --cli)\n\n{} — commit {} — {}\n\n\
         Each figure is the command's wall time, from spawning `rkube` until it exits. A cluster is secure (HTTPS, client \
         certificates, Node+RBAC, priority and fairness) with rkube-store on disk, every component a background process; \
         `create` and `start` return once every component is ready and every node Ready. {} rounds.\n\n\
         | command (3 nodes) | p50 | p99 |\n|---|---|---|\n",
        machine(),
        git_commit(),
        utc_now(),
        flags.rounds
    );
    for (label, v) in [
        ("`rkube cluster create`", create),
        ("`rkube cluster stop`", stop),
        ("`rkube cluster start`", start),
        ("`rkube cluster delete`", delete),
    ] {
        table += &row(label, v);
    }
    restores.sort_unstable();
    table += &format!(
        "\nA cluster holding {} pods (Pending: no nodes) — {keys} keys, a {:.1} MiB snapshot file. Target: restoring a 10k-pod \
         cluster ≤ 5 s.\n\n| figure | value |\n|---|---|\n\
         | `rkube snapshot save` | {} |\n\
         | `rkube snapshot restore` (stop, fresh store, every key written, every component started and ready), 3 runs | {} / {} / {} |\n",
        flags.pods,
        size as f64 / 1048576.0,
        ms(save),
        ms(restores[0]),
        ms(restores[1]),
        ms(restores[2]),
    );
    println!("\n{table}");
    write_section(&flags.out, "cluster-cli-bench", &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}

fn pct(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// Spawns `rkube server ARGS --print-kubeconfig`; microseconds until the `...` line, and the
/// child (still running).
async fn server_start(
    bin: &PathBuf,
    args: &[&str],
) -> anyhow::Result<(u64, tokio::process::Child)> {
    let t = Instant::now();
    let mut child = tokio::process::Command::new(bin)
        .arg("server")
        .args(args)
        .args(["--ephemeral", "--port", "0", "--print-kubeconfig"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await? {
        if line == "..." {
            return Ok((t.elapsed().as_micros() as u64, child));
        }
    }
    anyhow::bail!("rkube server exited before it was ready")
}

async fn stop(mut child: tokio::process::Child) -> anyhow::Result<()> {
    let pid = child.id().unwrap_or_default().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    tokio::time::timeout(Duration::from_secs(20), child.wait()).await??;
    Ok(())
}

fn options(nodes: usize, secure: bool) -> rkube::Options {
    rkube::Options {
        nodes,
        secure,
        ..Default::default()
    }
}

/// One in-process cluster held idle; prints this process's RSS and its anonymous part, in
/// bytes.
async fn idle_rss(nodes: usize) -> anyhow::Result<()> {
    let opts = if nodes == 0 {
        rkube::Options {
            nodes: 0,
            controllers: None,
            scheduler: false,
            ..Default::default()
        }
    } else {
        options(nodes, false)
    };
    let cluster = rkube::Cluster::start(opts).await?;
    // Settled: informers synced, first status reports and leases written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let me = std::process::id();
    println!("{} {}", rss_of(me), rss_anon_of(me));
    cluster.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

/// (RSS, anonymous RSS) of a child process holding one idle cluster with `nodes` nodes.
fn rss_child(self_bin: &PathBuf, nodes: usize) -> anyhow::Result<(u64, u64)> {
    let out = std::process::Command::new(self_bin)
        .args(["--idle-rss", &nodes.to_string()])
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    match (it.next(), it.next()) {
        (Some(Ok(rss)), Some(Ok(anon))) => Ok((rss, anon)),
        _ => anyhow::bail!("idle-rss printed {text:?}"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    if let Some(nodes) = flags.idle_rss {
        return idle_rss(nodes).await;
    }
    if flags.cli {
        return cli_bench(&flags).await;
    }
    let n = flags.starts;
    let mut server = Vec::new();
    let mut server_rss = (0, 0);
    for (label, args) in [
        (
            "secure (HTTPS, client certificates, Node+RBAC, priority and fairness), 3 nodes",
            vec!["--nodes", "3"],
        ),
        (
            "open (`--insecure`), 3 nodes",
            vec!["--nodes", "3", "--insecure"],
        ),
        (
            "API only (`--insecure --nodes 0 --no-controller-manager --no-scheduler`)",
            vec![
                "--nodes",
                "0",
                "--insecure",
                "--no-controller-manager",
                "--no-scheduler",
            ],
        ),
    ] {
        let mut times = Vec::new();
        for i in 0..n {
            let (us, child) = server_start(&flags.rkube_bin, &args).await?;
            times.push(us);
            if i == 0 && server_rss.0 == 0 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let pid = child.id().unwrap_or_default();
                server_rss = (rss_of(pid), rss_anon_of(pid));
            }
            stop(child).await?;
        }
        println!("rkube server {label}: {:?}", pct(times.clone()));
        server.push((label, pct(times)));
    }

    let mut inproc = Vec::new();
    for (label, opts) in [
        (
            "1 node, all controllers, scheduler, open",
            options(1, false),
        ),
        ("1 node, secure", options(1, true)),
        (
            "API only (no controllers, scheduler or nodes)",
            rkube::Options {
                nodes: 0,
                controllers: None,
                scheduler: false,
                ..Default::default()
            },
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let c = rkube::Cluster::start(opts.clone()).await?;
            times.push(t.elapsed().as_micros() as u64);
            c.shutdown(Duration::from_secs(5)).await;
        }
        println!("in-process {label}: {:?}", pct(times.clone()));
        inproc.push((label, pct(times)));
    }

    let t = Instant::now();
    let starts = (0..flags.parallel).map(|_| rkube::Cluster::start(options(1, false)));
    let clusters = futures_util::future::join_all(starts).await;
    let parallel = t.elapsed();
    let mut started = Vec::new();
    for c in clusters {
        started.push(c?);
    }
    let slowest = started.iter().map(|c| c.startup).max().unwrap_or_default();
    for c in started {
        c.shutdown(Duration::from_secs(5)).await;
    }

    let me = std::env::current_exe()?;
    let rss_api = rss_child(&me, 0)?;
    let rss_one = rss_child(&me, 1)?;

    let ms = |us: u64| format!("{:.0}", us as f64 / 1000.0);
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
    let split = |(rss, anon): (u64, u64)| {
        format!(
            "{} ({} anonymous; the rest is the binary's code pages, file-backed and shared)",
            mib(rss),
            mib(anon)
        )
    };
    let mut table = format!(
        "## Start-up as a test dependency (start-bench)\n\n{} — commit {} — {}\n\n\
         Ready means every component answers `/readyz` and every node is Ready (for `rkube server`, from spawning the process \
         until it prints the kubeconfig). {n} starts each, one after another, store in memory. Targets: `rkube server` ≤ 200 ms, \
         an in-process cluster ≤ 100 ms, an idle in-process cluster ≤ 40 MiB. For comparison, published figures: \
         controller-runtime's envtest (etcd + kube-apiserver, no controllers) 7–15 s; KWOK ~5 s; k3d/kind tens of seconds.\n\n\
         | start | p50 | p99 |\n|---|---|---|\n",
        machine(),
        git_commit(),
        utc_now()
    );
    for (label, (p50, p99)) in &server {
        table += &format!(
            "| `rkube server`, {label} | {} ms | {} ms |\n",
            ms(*p50),
            ms(*p99)
        );
    }
    for (label, (p50, p99)) in &inproc {
        table += &format!(
            "| in-process cluster, {label} | {} ms | {} ms |\n",
            ms(*p50),
            ms(*p99)
        );
    }
    table += &format!(
        "\n| figure | value |\n|---|---|\n\
         | {} in-process clusters (1 node each) started at once in one process: all ready | {} ms (slowest {} ms) |\n\
         | RSS of a process holding one idle in-process cluster, API only | {} |\n\
         | RSS of a process holding one idle in-process cluster, 1 node and every controller | {} |\n\
         | RSS of an idle `rkube server` (secure, 3 nodes) | {} |\n",
        flags.parallel,
        parallel.as_millis(),
        slowest.as_millis(),
        split(rss_api),
        split(rss_one),
        split(server_rss),
    );
    println!("\n{table}");
    write_section(&flags.out, "start-bench", &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}
