//! Creating, starting, stopping, deleting and scaling a cluster of detached processes: the
//! plan's processes started stage by stage (storage, apiserver, controllers, nodes), each
//! stage waited for until ready with progress shown; on a failure the log's last lines and
//! the likely fix are in the error, and nothing is left running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::Node;

use super::home::{self, Home, Ports, Spec};
use super::plan::{self, Proc, Ready, Stage};
use super::procs;
use super::steps::Steps;

/// How long each stage may take to become ready.
const STAGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process has to stop on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Nodes a cluster may have (each is a process).
pub const MAX_NODES: usize = 100;

/// `rkube cluster create`'s choices.
pub struct Create {
    pub name: String,
    pub nodes: usize,
    pub etcd: bool,
    pub insecure: bool,
    /// The apiserver's port: `None` for 6443 if free, else any; `Some(0)` for any free port.
    pub port: Option<u16>,
}

/// This binary (its components run as `rkube <component>`).
fn rkube_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("find the rkube binary")
}

/// `program` on `PATH`.
fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    })
}

fn etcd_exe(spec: &Spec) -> anyhow::Result<PathBuf> {
    if !spec.etcd {
        return Ok(PathBuf::from("etcd"));
    }
    which("etcd").context(
        "--etcd needs the `etcd` program on PATH: install Debian's etcd-server (apt-get install etcd-server), or leave out --etcd for rkube-store",
    )
}

pub(crate) fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// `n` distinct free loopback ports.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    rkube_daemon::port::free_ports(n).context("find free ports")
}

fn busy_port_error(port: u16) -> anyhow::Error {
    anyhow::anyhow!(
        "port {port} is in use (by another cluster? `rkube cluster list` shows them): pass --port with a free port, or --port 0 for any"
    )
}

/// The processes of `spec`.
fn processes(spec: &Spec, home: &Home) -> anyhow::Result<Vec<Proc>> {
    Ok(plan::processes(spec, home, &rkube_exe()?, &etcd_exe(spec)?))
}

pub async fn create(c: Create, steps: &Steps) -> anyhow::Result<()> {
    anyhow::ensure!(
        c.nodes <= MAX_NODES,
        "--nodes {}: at most {MAX_NODES} (each node is a process)",
        c.nodes
    );
    let home = Home::of(&c.name)?;
    if home.exists() {
        bail!(
            "cluster {:?} already exists (`rkube cluster start {0}` starts it if stopped; `rkube cluster delete {0}` removes it)",
            c.name
        );
    }
    if home.dir.exists() {
        // A directory without cluster.json: a create that was cut off. Nothing of it runs
        // (every process's pid file is checked before the directory goes).
        stop_all_pid_files(&home);
        std::fs::remove_dir_all(&home.dir)
            .with_context(|| format!("remove the stale {}", home.dir.display()))?;
    }
    // The apiserver's port is held while the others are chosen, so none is chosen twice.
    let held = match c.port {
        Some(0) => None,
        Some(p) => {
            Some(std::net::TcpListener::bind(("127.0.0.1", p)).map_err(|_| busy_port_error(p))?)
        }
        None => std::net::TcpListener::bind(("127.0.0.1", 6443)).ok(),
    };
    let mut ports = free_ports(5 + c.nodes)?.into_iter();
    let mut next = || ports.next().expect("enough ports");
    let apiserver = match &held {
        Some(l) => l.local_addr()?.port(),
        None => next(),
    };
    drop(held);
    let spec = Spec {
        name: c.name.clone(),
        nodes: c.nodes,
        etcd: c.etcd,
        secure: !c.insecure,
        ports: Ports {
            apiserver,
            store: next(),
            store_peer: next(),
            controller_manager: next(),
            scheduler: next(),
            nodes: (0..c.nodes).map(|_| next()).collect(),
        },
        created: home::now(),
    };
    // Checked before anything is written.
    etcd_exe(&spec)?;
    steps.say(&format!(
        "Creating cluster {:?} ({} node(s), {}, {}) …",
        c.name,
        c.nodes,
        if spec.etcd { "etcd" } else { "rkube-store" },
        if spec.secure { "secure" } else { "insecure" }
    ));
    home.create_dirs()?;
    let made = interruptible(async {
        write_credentials(&spec, &home, steps).await?;
        home.save(&spec)?;
        launch(&spec, &home, steps).await
    })
    .await;
    if let Err(e) = made {
        stop_all_pid_files(&home);
        let _ = std::fs::remove_dir_all(&home.dir);
        return Err(e);
    }
    print_ready(&spec, &home, steps);
    Ok(())
}

/// The PKI (secure) and the admin kubeconfig.
async fn write_credentials(spec: &Spec, home: &Home, steps: &Steps) -> anyhow::Result<()> {
    if spec.secure {
        let step = steps.start("certificates and kubeconfigs written");
        generate_pki(spec, home).await?;
        std::fs::copy(home.pki().join("admin.kubeconfig"), home.kubeconfig())
            .context("copy the admin kubeconfig")?;
        step.done_with(&home.pki().display().to_string());
    } else {
        let text = rkube_api::kubeconfig::kubeconfig_yaml(&spec.name, &spec.server(), None);
        crate::cluster::write_private(&home.kubeconfig(), &text)?;
    }
    Ok(())
}

async fn generate_pki(spec: &Spec, home: &Home) -> anyhow::Result<()> {
    let plan = rkube_apiserver::pki::Plan {
        dir: home.pki(),
        server: spec.server(),
        admin_server: None,
        hosts: vec!["127.0.0.1".into()],
        nodes: spec.node_names(),
        admin_owner: None,
    };
    tokio::task::spawn_blocking(move || rkube_apiserver::pki::generate(&plan))
        .await?
        .context("writing the cluster's certificates")?;
    Ok(())
}

fn print_ready(spec: &Spec, home: &Home, steps: &Steps) {
    steps.say(&format!(
        "\nCluster {:?} is up: {}\n  export KUBECONFIG={}\n  kubectl get nodes\n",
        spec.name,
        spec.server(),
        home.kubeconfig().display()
    ));
    if which("kubectl").is_none() {
        steps.say("kubectl is not on PATH: install it to use the cluster (https://kubernetes.io/docs/tasks/tools/)");
    }
}

const ALL_STAGES: [Stage; 4] = [
    Stage::Storage,
    Stage::Apiserver,
    Stage::Controllers,
    Stage::Nodes,
];

async fn launch(spec: &Spec, home: &Home, steps: &Steps) -> anyhow::Result<()> {
    launch_stages(spec, home, &ALL_STAGES, steps).await
}

/// Starts every process of `stages` that is not running, stage by stage, each stage ready
/// before the next. On an error, what this call started is stopped again.
pub async fn launch_stages(
    spec: &Spec,
    home: &Home,
    stages: &[Stage],
    steps: &Steps,
) -> anyhow::Result<()> {
    let all = processes(spec, home)?;
    let mut started: Vec<String> = Vec::new();
    let result = async {
        for &stage in stages {
            let procs: Vec<&Proc> = all.iter().filter(|p| p.stage == stage).collect();
            if procs.is_empty() {
                continue;
            }
            let step = steps.start(stage_label(spec, stage));
            match start_and_wait(home, &procs, &mut started).await {
                Ok(()) => step.done(),
                Err(e) => {
                    step.fail();
                    return Err(e);
                }
            }
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        started.reverse();
        procs::stop(home, &started, STOP_GRACE);
    }
    result
}

fn stage_label(spec: &Spec, stage: Stage) -> String {
    match stage {
        Stage::Storage if spec.etcd => format!("etcd ready at {}", spec.store_url()),
        Stage::Storage => format!("rkube-store ready at {}", spec.store_url()),
        Stage::Apiserver => format!("apiserver ready at {}", spec.server()),
        Stage::Controllers => "controller-manager and scheduler ready".into(),
        Stage::Nodes => format!("{} node(s) Ready", spec.nodes),
    }
}

/// Starts `procs` (those not already running) and waits until all are ready.
async fn start_and_wait(
    home: &Home,
    procs: &[&Proc],
    started: &mut Vec<String>,
) -> anyhow::Result<()> {
    for p in procs {
        if procs::running(home, &p.name).is_some() {
            continue;
        }
        if let Some(port) = own_port(p) {
            if !port_free(port) {
                bail!(
                    "{}: port {port} is in use by another program; stop it, or `rkube cluster stop {1} && rkube cluster start {1}` (ports other than the apiserver's are chosen afresh, the data kept)",
                    p.name,
                    home.name()
                );
            }
        }
        procs::spawn(home, p)?;
        started.push(p.name.clone());
    }
    let deadline = Instant::now() + STAGE_TIMEOUT;
    let probe = Probe::new(home)?;
    for p in procs {
        loop {
            if procs::running(home, &p.name).is_none() {
                bail!("{}", exited(home, &p.name));
            }
            if probe.ready(&p.ready).await {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} not ready after {} s; its log ends:\n{}\n(all of it: `rkube cluster logs {} {0}`)",
                    p.name,
                    STAGE_TIMEOUT.as_secs(),
                    procs::log_tail(home, &p.name, 15),
                    home.name()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// The port a process listens on that must be free before it starts.
fn own_port(p: &Proc) -> Option<u16> {
    match p.ready {
        Ready::Listening(port) | Ready::Readyz(port) => Some(port),
        _ => None,
    }
}

fn exited(home: &Home, name: &str) -> String {
    let tail = procs::log_tail(home, name, 15);
    let hint = if tail.contains("Address already in use") || tail.contains("address already in use")
    {
        "\n(a port it needs is taken: stop what holds it; `rkube cluster stop NAME && rkube cluster start NAME` chooses the others afresh)"
    } else {
        ""
    };
    format!(
        "{name} exited while starting; its log ends:\n{tail}{hint}\n(all of it: `rkube cluster logs {} {name}`)",
        home.name()
    )
}

/// Readiness checks against one cluster.
struct Probe {
    http: reqwest::Client,
    admin: Option<rkube_client::Client>,
}

impl Probe {
    fn new(home: &Home) -> anyhow::Result<Probe> {
        let admin = match home.kubeconfig().exists() {
            true => {
                let mut cfg = rkube_client::Config::from_kubeconfig(&home.kubeconfig())?;
                cfg.timeout = Duration::from_secs(2);
                cfg.user_agent = "rkube-cluster".into();
                Some(rkube_client::Client::new(cfg)?)
            }
            false => None,
        };
        Ok(Probe {
            http: reqwest::Client::builder()
                .http1_only()
                .timeout(Duration::from_secs(2))
                .build()?,
            admin,
        })
    }

    async fn ready(&self, r: &Ready) -> bool {
        match r {
            Ready::Listening(port) => tokio::net::TcpStream::connect(("127.0.0.1", *port))
                .await
                .is_ok(),
            Ready::Readyz(port) => self
                .http
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
            Ready::Apiserver => match &self.admin {
                Some(c) => c.send(reqwest::Method::GET, "/readyz", None).await.is_ok(),
                None => false,
            },
            Ready::Node(name) => match &self.admin {
                Some(c) => rkube_client::Api::<Node>::all(c)
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|n| node_ready(&n)),
                None => false,
            },
        }
    }
}

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What runs of a cluster.
#[derive(Debug, PartialEq)]
pub enum State {
    Running,
    Stopped,
    /// Some processes run, others do not (the names that do not).
    Degraded(Vec<String>),
}

pub fn state(spec: &Spec, home: &Home) -> anyhow::Result<State> {
    let all = processes(spec, home).unwrap_or_else(|_| {
        // etcd gone from PATH since: still list the cluster.
        plan::processes(spec, home, Path::new("rkube"), Path::new("etcd"))
    });
    let down: Vec<String> = all
        .iter()
        .filter(|p| procs::running(home, &p.name).is_none())
        .map(|p| p.name.clone())
        .collect();
    Ok(if down.is_empty() {
        State::Running
    } else if down.len() == all.len() {
        State::Stopped
    } else {
        State::Degraded(down)
    })
}

pub async fn start(name: &str, steps: &Steps) -> anyhow::Result<()> {
    let home = Home::of(name)?;
    let mut spec = home.load()?;
    match state(&spec, &home)? {
        State::Running => {
            steps.say(&format!(
                "cluster {name:?} is already running at {}",
                spec.server()
            ));
            return Ok(());
        }
        // Whatever still runs is stopped first: everything then starts on ports known free.
        State::Degraded(down) => {
            steps.say(&format!(
                "cluster {name:?} is degraded ({} not running): stopping the rest first",
                down.join(", ")
            ));
            stop(name, steps)?;
        }
        State::Stopped => {}
    }
    // Ports taken since the cluster last ran are chosen afresh, except the apiserver's: it is
    // in every kubeconfig.
    if !port_free(spec.ports.apiserver) {
        bail!(
            "port {} of cluster {name:?}'s apiserver is in use by another program: stop it, then `rkube cluster start {name}`",
            spec.ports.apiserver
        );
    }
    refresh_ports(&mut spec)?;
    home.save(&spec)?;
    steps.say(&format!("Starting cluster {name:?} …"));
    if let Err(e) = interruptible(launch(&spec, &home, steps)).await {
        stop(name, &Steps::new(true))?;
        return Err(e);
    }
    print_ready(&spec, &home, steps);
    Ok(())
}

/// `work`, or an error once Ctrl-C (SIGINT) or SIGTERM arrives: the caller then stops what
/// was started rather than leave it running half-made.
pub(crate) async fn interruptible<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => bail!("interrupted: what had started is stopped"),
        _ = term.recv() => bail!("terminated: what had started is stopped"),
    }
}

/// Replaces every internal port that is no longer free (nothing of the cluster runs).
fn refresh_ports(spec: &mut Spec) -> anyhow::Result<()> {
    let p = &mut spec.ports;
    let mut taken: Vec<&mut u16> = vec![
        &mut p.store,
        &mut p.store_peer,
        &mut p.controller_manager,
        &mut p.scheduler,
    ];
    taken.extend(p.nodes.iter_mut());
    taken.retain(|port| !port_free(**port));
    let fresh = free_ports(taken.len())?;
    for (port, new) in taken.into_iter().zip(fresh) {
        *port = new;
    }
    Ok(())
}

/// Stops every process of the cluster: nodes and controllers first, then the apiserver,
/// storage last.
pub fn stop(name: &str, steps: &Steps) -> anyhow::Result<()> {
    let home = Home::of(name)?;
    let spec = home.load()?;
    let all = plan::processes(&spec, &home, Path::new("rkube"), Path::new("etcd"));
    let step = steps.start(format!("cluster {name:?} stopped"));
    let mut killed = Vec::new();
    for stages in [
        &[Stage::Nodes, Stage::Controllers][..],
        &[Stage::Apiserver],
        &[Stage::Storage],
    ] {
        let names: Vec<String> = all
            .iter()
            .filter(|p| stages.contains(&p.stage))
            .map(|p| p.name.clone())
            .collect();
        killed.extend(procs::stop(&home, &names, STOP_GRACE));
    }
    if killed.is_empty() {
        step.done();
    } else {
        step.done_with(&format!(
            "killed after {} s: {}",
            STOP_GRACE.as_secs(),
            killed.join(", ")
        ));
    }
    Ok(())
}

/// Stops whatever a pid file names (a cluster without a readable spec).
fn stop_all_pid_files(home: &Home) {
    let names = home::stems(&home.dir.join("run"), ".pid");
    procs::stop(home, &names, STOP_GRACE);
}

/// Stops the cluster and removes its directory.
pub fn delete(name: &str, steps: &Steps) -> anyhow::Result<()> {
    let home = Home::of(name)?;
    if !home.dir.exists() {
        bail!("no cluster named {name:?} (`rkube cluster list` shows them)");
    }
    match home.load() {
        Ok(_) => stop(name, steps)?,
        Err(_) => stop_all_pid_files(&home),
    }
    std::fs::remove_dir_all(&home.dir).with_context(|| format!("remove {}", home.dir.display()))?;
    steps.say(&format!("Deleted cluster {name:?}"));
    Ok(())
}

/// Adds or removes simulated nodes of a running cluster. New nodes get their identity and a
/// port and are waited for until Ready; removed ones (the highest-numbered) stop and their
/// Node objects are deleted, so their pods are collected and replaced elsewhere.
pub async fn scale(name: &str, replicas: usize, steps: &Steps) -> anyhow::Result<()> {
    anyhow::ensure!(
        replicas <= MAX_NODES,
        "--replicas {replicas}: at most {MAX_NODES} (each node is a process)"
    );
    let home = Home::of(name)?;
    let mut spec = home.load()?;
    match state(&spec, &home)? {
        State::Running => {}
        State::Stopped => bail!("cluster {name:?} is stopped: `rkube cluster start {name}` first"),
        State::Degraded(down) => bail!(
            "cluster {name:?} is degraded ({} not running): `rkube cluster start {name}` restarts it",
            down.join(", ")
        ),
    }
    let rkube = rkube_exe()?;
    let before = spec.nodes;
    if replicas > before {
        let step = steps.start(format!("{} node(s) added", replicas - before));
        // The spec is saved only once the new nodes are Ready.
        let mut grown = spec.clone();
        grown.ports.nodes.truncate(before);
        grown.ports.nodes.extend(free_ports(replicas - before)?);
        grown.nodes = replicas;
        if grown.secure {
            generate_pki(&grown, &home).await?;
        }
        let procs: Vec<Proc> = (before..replicas)
            .map(|i| plan::node(&grown, &home, &rkube, i))
            .collect();
        let refs: Vec<&Proc> = procs.iter().collect();
        let mut started = Vec::new();
        if let Err(e) = interruptible(start_and_wait(&home, &refs, &mut started)).await {
            procs::stop(&home, &started, STOP_GRACE);
            step.fail();
            return Err(e);
        }
        home.save(&grown)?;
        step.done();
    } else if replicas < before {
        let step = steps.start(format!("{} node(s) removed", before - replicas));
        let names: Vec<String> = (replicas..before)
            .map(|i| plan::node(&spec, &home, &rkube, i).name)
            .collect();
        procs::stop(&home, &names, STOP_GRACE);
        // Their processes are gone: the spec says so even if a Node object below is not.
        spec.nodes = replicas;
        spec.ports.nodes.truncate(replicas);
        home.save(&spec)?;
        for n in &names {
            let _ = std::fs::remove_file(home.log(n));
        }
        let probe = Probe::new(&home)?;
        let admin = probe.admin.context("the cluster's kubeconfig is missing")?;
        let nodes = rkube_client::Api::<Node>::all(&admin);
        for i in replicas..before {
            let node = Spec::node_name(i);
            match nodes.delete(&node, &Default::default()).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    step.fail();
                    bail!("node {node} stopped, but its Node object was not deleted ({e}): `kubectl delete node {node}`");
                }
            }
        }
        step.done();
    } else {
        steps.say(&format!("cluster {name:?} already has {replicas} node(s)"));
    }
    Ok(())
}

/// `cluster list`'s table.
pub fn list() -> anyhow::Result<String> {
    let mut rows = vec![["NAME", "STATE", "API", "NODES", "STORAGE", "AGE"].map(String::from)];
    let now = home::now();
    for name in home::names()? {
        let home = Home::of(&name)?;
        let Ok(spec) = home.load() else {
            rows.push([
                name,
                "Damaged".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        };
        let st = match state(&spec, &home)? {
            State::Running => "Running".to_string(),
            State::Stopped => "Stopped".to_string(),
            State::Degraded(down) => format!("Degraded ({} down)", down.join(",")),
        };
        rows.push([
            name,
            st,
            spec.server(),
            spec.nodes.to_string(),
            if spec.etcd { "etcd" } else { "rkube-store" }.into(),
            age(now.saturating_sub(spec.created)),
        ]);
    }
    Ok(table(&rows))
}

/// kubectl's age format: `45s`, `12m`, `5h`, `3d`.
pub fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn table(rows: &[[String; 6]]) -> String {
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(5 * 86400), "5d");
    }

    #[test]
    fn tables_align_columns() {
        let rows = [
            ["NAME", "STATE", "API", "NODES", "STORAGE", "AGE"].map(String::from),
            ["a", "Running", "http://x", "3", "etcd", "1s"].map(String::from),
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0].find("STATE"), lines[1].find("Running"));
        assert_eq!(lines[0].rfind("AGE"), lines[1].find("1s"));
    }
}
