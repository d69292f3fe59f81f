//! chain-bench: what the request chain costs. Two rkube-apiservers on one rkube-store, side by
//! side: the open configuration (anonymous, AlwaysAllow, no audit), token authentication with
//! Node + RBAC authorization, and that plus a Metadata-level audit log and API Priority and
//! Fairness. Cached GETs (`resourceVersion=0`) of a pod and of a secret are timed in
//! alternating rounds; the difference of the medians is the chain's cost (target ≤ 50 µs). Prints the figures and writes them to `docs/benchmarks.md`.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use rkube_bench::*;
use serde_json::json;

#[derive(Parser, Debug)]
struct Flags {
    #[arg(long, default_value = "target/release/rkube-store")]
    store_bin: PathBuf,
    #[arg(long, default_value = "target/release/rkube-apiserver")]
    apiserver_bin: PathBuf,
    /// GETs per configuration and round.
    #[arg(long, default_value_t = 2_000)]
    gets: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
}

const TOKEN: &str = "bench-admin-token";

/// One apiserver: its base URL and the bearer token to use ("" = none).
struct Api {
    _child: tokio::process::Child,
    base: String,
    token: &'static str,
}

/// Starts an apiserver with `extra` flags; ready once `/readyz` answers (with `token`'s bearer
/// when given: a server without anonymous access answers only with credentials).
async fn start(
    bin: &PathBuf,
    storage: &str,
    extra: &[String],
    token: &'static str,
    http: &reqwest::Client,
) -> anyhow::Result<Api> {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut args: Vec<String> = [
        "--etcd-servers",
        storage,
        "--secure-port",
        &port.to_string(),
        // No controller-manager makes the `default` ServiceAccount for the bench's pods.
        "--disable-admission-plugins=ServiceAccount",
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(extra);
    let child = tokio::process::Command::new(bin)
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let mut probe = http.get(format!("{base}/readyz"));
        if !token.is_empty() {
            probe = probe.bearer_auth(token);
        }
        if probe.send().await.is_ok_and(|r| r.status() == 200) {
            return Ok(Api {
                _child: child,
                base,
                token,
            });
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "an apiserver did not become ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn timed(http: &reqwest::Client, api: &Api, path: &str, n: usize, lat: &mut Vec<u64>) {
    let url = format!("{}{path}", api.base);
    for _ in 0..n {
        let mut req = http.get(&url);
        if !api.token.is_empty() {
            req = req.bearer_auth(api.token);
        }
        let t = Instant::now();
        let r = req.send().await.expect("GET");
        assert!(r.status().is_success(), "{url}: {}", r.status());
        let _ = r.bytes().await.expect("body");
        lat.push(t.elapsed().as_micros() as u64);
    }
}

fn median_p99(mut v: Vec<u64>) -> (u64, u64) {
    v.sort_unstable();
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

/// `n` sequential GETs as the victim: latencies of those served, and how many were refused.
async fn victim_gets(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    n: usize,
) -> (Vec<u64>, usize) {
    let (mut lat, mut refused) = (Vec::new(), 0);
    for _ in 0..n {
        let t = Instant::now();
        match http.get(url).bearer_auth(token).send().await {
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                lat.push(t.elapsed().as_micros() as u64);
            }
            _ => refused += 1,
        }
    }
    (lat, refused)
}

/// Runs `f` on its own thread and runtime: the victim and the node are other clients than the
/// flooder, so their latencies must not include waiting behind the flood's tasks in the
/// flooder's runtime.
fn on_own_thread<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    f: impl FnOnce() -> F + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _ = tx.send(rt.block_on(f()));
    });
    tokio::spawn(async move { rx.await.expect("the thread finished") })
}

/// One user flooding LISTs at ten times the server's capacity while another user reads and a
/// node renews its lease, with the legacy in-flight limits and with APF.
async fn fairness(
    flags: &Flags,
    storage: &str,
    dir: &tempfile::TempDir,
    enc_args: &[String],
) -> anyhow::Result<String> {
    const READS: usize = 20;
    const WRITES: usize = 10;
    const FLOODERS: usize = 10 * (READS + WRITES);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(FLOODERS + 8)
        .build()?;
    let mut out = format!(
        "\n### Fairness under a flood\n\n`--max-requests-inflight={READS} --max-mutating-requests-inflight={WRITES}`; user `flood` keeps {FLOODERS} LISTs of 300 pods in flight \
         (10× the server's capacity) for 10 s while user `victim` GETs one pod in a loop and node `n1` renews its Lease every 500 ms (the victim and the node are separate clients, each on its own thread). APF weighs a LIST of 300 pods as 3 seats and holds seats until the response is written. The third row is a control: the victim as a service account, in another priority level than the flood, sharing no seats or queues with it — what is left there is the two cores' contention between the flood's traffic (both ends on this machine) and the victim. \
         Targets: the victim's p99 within 3× its unloaded p99, no lease renewal failing or late past its 40 s duration.\n\n\
         | limits | victim unloaded p50 / p99 | victim under flood p50 / p99 | flooded / unloaded p99 | victim 429s | flood served / 429s | lease renewals ok / failed, slowest |\n|---|---|---|---|---|---|---|\n"
    );
    // The third run is a control: the victim is a service account, in another priority level
    // (workload-low) than the flood, so it shares no seats or queues with it; what remains is
    // the machine's own contention.
    for (run, apf, victim) in [
        (0, false, "victim-token"),
        (1, true, "victim-token"),
        (2, true, "sa-victim-token"),
    ] {
        let mut args: Vec<String> = [
            "--token-auth-file",
            dir.path().join("tokens.csv").to_str().unwrap(),
            "--authorization-mode=Node,RBAC",
            &format!("--max-requests-inflight={READS}"),
            &format!("--max-mutating-requests-inflight={WRITES}"),
            &format!("--enable-priority-and-fairness={apf}"),
        ]
        .map(String::from)
        .to_vec();
        args.extend_from_slice(enc_args);
        let api = start(&flags.apiserver_bin, storage, &args, TOKEN, &http).await?;
        let base = api.base.clone();
        // Everyone may read pods; the node needs its lease.
        let bind = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("bench-view-{run}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]});
        http.post(format!(
            "{base}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
        ))
        .bearer_auth(TOKEN)
        .json(&bind)
        .send()
        .await?;
        for i in 0..300 {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("f{run}-{i}")},
                "spec": {"containers": [{"name": "c", "image": "nginx:1.14.2"}]}});
            http.post(format!("{base}/api/v1/namespaces/default/pods"))
                .bearer_auth(TOKEN)
                .json(&pod)
                .send()
                .await?;
        }
        let lease_url =
            format!("{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1");
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}});
        http.put(&lease_url)
            .bearer_auth("node-token")
            .json(&lease)
            .send()
            .await?;
        let victim_url = format!("{base}/api/v1/namespaces/default/pods/f{run}-0");
        let vurl = victim_url.clone();
        let (unloaded, _) = on_own_thread(move || async move {
            victim_gets(&reqwest::Client::new(), &vurl, victim, 500).await
        })
        .await?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let rejected = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut flood = Vec::new();
        for _ in 0..FLOODERS {
            let (http, url, stop, served, rejected) = (
                http.clone(),
                format!("{base}/api/v1/namespaces/default/pods?resourceVersion=0"),
                stop.clone(),
                served.clone(),
                rejected.clone(),
            );
            flood.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match http.get(&url).bearer_auth("flood-token").send().await {
                        Ok(r) if r.status() == 200 => {
                            let _ = r.bytes().await;
                            served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        _ => {
                            rejected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await; // let the flood build up
        let renewals = {
            let (url, stop) = (lease_url.clone(), stop.clone());
            on_own_thread(move || async move {
                let http = reqwest::Client::new();
                let (mut ok, mut failed, mut slowest) = (0u32, 0u32, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    let patch = json!({"spec": {"leaseDurationSeconds": 40}});
                    match http
                        .patch(&url)
                        .bearer_auth("node-token")
                        .header("content-type", "application/merge-patch+json")
                        .body(patch.to_string())
                        .send()
                        .await
                    {
                        Ok(r) if r.status().is_success() => ok += 1,
                        _ => failed += 1,
                    }
                    slowest = slowest.max(t.elapsed().as_millis() as u64);
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                (ok, failed, slowest)
            })
        };
        let vurl = victim_url.clone();
        let victim_run = on_own_thread(move || async move {
            let vhttp = reqwest::Client::new();
            let deadline = Instant::now() + std::time::Duration::from_secs(9);
            let (mut lat, mut refused) = (Vec::new(), 0);
            while Instant::now() < deadline {
                let (l, r) = victim_gets(&vhttp, &vurl, victim, 20).await;
                lat.extend(l);
                refused += r;
            }
            (lat, refused)
        });
        let (loaded, victim_refused) = victim_run.await?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (ok, failed, slowest) = renewals.await?;
        for f in flood {
            let _ = f.await;
        }
        let (u50, u99) = median_p99(unloaded);
        let (l50, l99) = if loaded.is_empty() {
            (0, 0)
        } else {
            median_p99(loaded)
        };
        let name = match run {
            0 => "legacy max-in-flight",
            1 => "APF",
            _ => "APF, control: victim in another level",
        };
        println!("fairness {name}: victim unloaded {u50}/{u99} µs, flooded {l50}/{l99} µs, {victim_refused} refused; lease ok {ok} failed {failed} slowest {slowest} ms");
        out += &format!(
            "| {name} | {u50} / {u99} µs | {l50} / {l99} µs | {:.1}× | {victim_refused} | {} / {} | {ok} / {failed}, {slowest} ms |\n",
            l99 as f64 / u99.max(1) as f64,
            served.load(std::sync::atomic::Ordering::Relaxed),
            rejected.load(std::sync::atomic::Ordering::Relaxed)
        );
        drop(api);
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        format!(
            "{TOKEN},bench-admin,1,\"system:masters\"\nflood-token,flood,2\nvictim-token,victim,3\nsa-victim-token,system:serviceaccount:default:victim,5,system:serviceaccounts\nnode-token,system:node:n1,4,system:nodes\n"
        ),
    )?;
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )?;
    let enc = dir.path().join("encryption.yaml");
    std::fs::write(
        &enc,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: k1, secret: MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=}]}\n",
    )?;
    let store = start_rkube_store(&flags.store_bin).await?;
    // Every apiserver reads the encrypted secret; encryption costs nothing on cached GETs.
    let enc_args: Vec<String> = ["--encryption-provider-config", enc.to_str().unwrap()]
        .map(String::from)
        .to_vec();
    let http = reqwest::Client::new();
    let open_args = [
        &enc_args[..],
        &["--enable-priority-and-fairness=false".to_string()],
    ]
    .concat();
    let open = start(&flags.apiserver_bin, &store.url, &open_args, "", &http).await?;
    let authz_args: Vec<String> = [
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--anonymous-auth=false",
        "--authorization-mode=Node,RBAC",
    ]
    .map(String::from)
    .to_vec();
    let mut full_args = authz_args.clone();
    full_args.extend(
        [
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-log-path",
            dir.path().join("audit.log").to_str().unwrap(),
            "--enable-priority-and-fairness=true",
        ]
        .map(String::from),
    );
    let authz = start(
        &flags.apiserver_bin,
        &store.url,
        &[
            &authz_args[..],
            &enc_args[..],
            &["--enable-priority-and-fairness=false".to_string()],
        ]
        .concat(),
        TOKEN,
        &http,
    )
    .await?;
    let secure = start(
        &flags.apiserver_bin,
        &store.url,
        &[&full_args[..], &enc_args[..]].concat(),
        TOKEN,
        &http,
    )
    .await?;

    // One pod and one secret (written through the full chain, so the secret is encrypted).
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bench"},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.14.2"}]}});
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bench"}, "data": {"k": "dmFsdWU="}});
    for (path, body) in [("pods", &pod), ("secrets", &secret)] {
        let r = http
            .post(format!("{}/api/v1/namespaces/default/{path}", secure.base))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 201, "create {path}: {}", r.status());
    }
    let paths = [
        (
            "pod",
            "/api/v1/namespaces/default/pods/bench?resourceVersion=0",
        ),
        (
            "secret",
            "/api/v1/namespaces/default/secrets/bench?resourceVersion=0",
        ),
    ];
    let mut rows = Vec::new();
    for (what, path) in paths {
        // Warm both, then alternate rounds so drift on a shared machine hits both alike.
        let apis = [
            ("open", &open),
            ("tokens + Node,RBAC", &authz),
            ("+ audit + APF", &secure),
        ];
        let mut scratch = Vec::new();
        for (_, api) in apis {
            timed(&http, api, path, 200, &mut scratch).await;
        }
        let mut lat: Vec<Vec<u64>> = vec![Vec::new(); apis.len()];
        for _ in 0..flags.rounds {
            for (i, (_, api)) in apis.iter().enumerate() {
                timed(&http, api, path, flags.gets, &mut lat[i]).await;
            }
        }
        let figures: Vec<(u64, u64)> = lat.into_iter().map(median_p99).collect();
        for ((name, _), (p50, p99)) in apis.iter().zip(&figures) {
            println!("{what}: {name}: p50 {p50} µs p99 {p99} µs");
        }
        rows.push((what, figures));
    }
    let mut table = format!(
        "## The request chain's cost (chain-bench)\n\n{} — commit {}, {}\n\nCached GET (`resourceVersion=0`), {} × {} sequential requests per configuration, in alternating rounds, three apiservers on one rkube-store. \
         *Open*: anonymous, AlwaysAllow, no audit. *Tokens + Node,RBAC*: bearer-token authentication (anonymous off) and the Node and RBAC authorizers with the bootstrap policy. \
         *+ audit + APF*: also a Metadata-level audit log and API Priority and Fairness. All three encrypt Secrets with aesgcm (invisible to cached reads). \
         Target: the full chain adds ≤ 50 µs to the median.\n\n\
         | object | open p50 / p99 | tokens + Node,RBAC p50 / p99 | + audit + APF p50 / p99 | full chain adds to the median |\n|---|---|---|---|---|\n",
        machine(),
        git_commit(),
        utc_now(),
        flags.rounds,
        flags.gets
    );
    for (what, f) in rows {
        table += &format!(
            "| {what} | {} / {} µs | {} / {} µs | {} / {} µs | {} µs |\n",
            f[0].0,
            f[0].1,
            f[1].0,
            f[1].1,
            f[2].0,
            f[2].1,
            f[2].0 as i64 - f[0].0 as i64
        );
    }
    println!("\n{table}");
    drop((open, authz, secure));
    table += &fairness(&flags, &store.url, &dir, &enc_args).await?;
    write_section(&flags.out, "chain-bench", &table)?;
    println!("written to {}", flags.out.display());
    Ok(())
}
