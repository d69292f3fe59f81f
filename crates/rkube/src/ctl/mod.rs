//! The cluster CLI, kind- and kwokctl-style: `rkube cluster create|list|start|stop|delete|
//! kubeconfig|logs`, `rkube nodes scale`, `rkube snapshot save|restore`, and `rkube record`
//! / `rkube replay` (a cluster's changes as a YAML stream, and played back). A cluster is a
//! set of detached processes of this binary (`rkube store`, `rkube apiserver`, …, one
//! `rkube kubelet-agent` per node; or etcd) with its state under [`home::root`]; the
//! commands find them again from there.

pub mod dashboard;
pub mod home;
pub mod lifecycle;
pub mod logs;
pub mod plan;
pub mod procs;
pub mod record;
pub mod replay;
pub mod snapshot;
pub mod steps;

use std::path::PathBuf;

use clap::Subcommand;

use steps::Steps;

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Start a new cluster in the background and wait until it is ready.
    Create {
        name: String,
        /// Simulated nodes (each one process).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// A real etcd (Debian's etcd-server, on PATH) as storage instead of rkube-store.
        #[arg(long)]
        etcd: bool,
        /// Plain HTTP, anonymous access and AlwaysAllow (else HTTPS, client certificates,
        /// Node+RBAC and priority and fairness, as kubeadm sets a cluster up).
        #[arg(long)]
        insecure: bool,
        /// The apiserver's port (default 6443 if free, else any free port; 0 for any).
        #[arg(long)]
        port: Option<u16>,
        /// Print nothing but errors.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List clusters: name, state, API URL, nodes, storage, age.
    List,
    /// Start a stopped cluster again (its data kept).
    Start {
        name: String,
        #[arg(long, short)]
        quiet: bool,
    },
    /// Stop a cluster's processes (its data kept).
    Stop {
        name: String,
        #[arg(long, short)]
        quiet: bool,
    },
    /// Stop a cluster and remove everything of it.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, short)]
        quiet: bool,
    },
    /// Print the cluster's admin kubeconfig (or with --path, where it is).
    Kubeconfig {
        name: String,
        #[arg(long)]
        path: bool,
    },
    /// Print a component's log, or every component's with each line prefixed.
    Logs {
        name: String,
        /// store|etcd, apiserver, controller-manager, scheduler, node-<i>.
        component: Option<String>,
        /// Keep printing new lines.
        #[arg(long, short)]
        follow: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum NodesCmd {
    /// Add or remove simulated nodes of a running cluster.
    Scale {
        name: String,
        #[arg(long)]
        replicas: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Write every key of the cluster's store, at one revision, to FILE.
    Save { name: String, file: PathBuf },
    /// Replace the cluster's store with FILE's keys and start it.
    Restore { name: String, file: PathBuf },
}

/// `rkube record`.
#[derive(clap::Args, Debug)]
pub struct RecordFlags {
    pub name: String,
    pub file: PathBuf,
    /// Resources to record, `plural[.group]`.
    #[arg(long, value_delimiter = ',', default_values_t = record::DEFAULT_RESOURCES.iter().map(|s| s.to_string()))]
    pub resources: Vec<String>,
}

/// `rkube replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayFlags {
    /// The cluster to replay into.
    pub name: String,
    pub file: PathBuf,
    /// Time compression: a change recorded at t s is applied at t/speed s (0: no waiting).
    #[arg(long, default_value_t = 10.0)]
    pub speed: f64,
}

pub async fn record(f: RecordFlags) -> anyhow::Result<()> {
    record::record(&f.name, &f.file, &f.resources, &Steps::new(false))
        .await
        .map(drop)
}

pub async fn replay(f: ReplayFlags) -> anyhow::Result<()> {
    replay::replay(&f.name, &f.file, f.speed, &Steps::new(false))
        .await
        .map(drop)
}

pub async fn cluster(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Create {
            name,
            nodes,
            etcd,
            insecure,
            port,
            quiet,
        } => {
            let c = lifecycle::Create {
                name,
                nodes,
                etcd,
                insecure,
                port,
            };
            lifecycle::create(c, &Steps::new(quiet)).await
        }
        ClusterCmd::List => {
            print!("{}", lifecycle::list()?);
            Ok(())
        }
        ClusterCmd::Start { name, quiet } => lifecycle::start(&name, &Steps::new(quiet)).await,
        ClusterCmd::Stop { name, quiet } => lifecycle::stop(&name, &Steps::new(quiet)),
        ClusterCmd::Delete { names, quiet } => {
            for name in names {
                lifecycle::delete(&name, &Steps::new(quiet))?;
            }
            Ok(())
        }
        ClusterCmd::Kubeconfig { name, path } => {
            let home = home::Home::of(&name)?;
            home.load()?;
            if path {
                println!("{}", home.kubeconfig().display());
            } else {
                print!("{}", std::fs::read_to_string(home.kubeconfig())?);
            }
            Ok(())
        }
        ClusterCmd::Logs {
            name,
            component,
            follow,
        } => logs::logs(&name, component.as_deref(), follow),
    }
}

pub async fn nodes(cmd: NodesCmd) -> anyhow::Result<()> {
    match cmd {
        NodesCmd::Scale { name, replicas } => {
            lifecycle::scale(&name, replicas, &Steps::new(false)).await
        }
    }
}

pub async fn snapshot(cmd: SnapshotCmd) -> anyhow::Result<()> {
    match cmd {
        SnapshotCmd::Save { name, file } => snapshot::save(&name, &file, &Steps::new(false))
            .await
            .map(drop),
        SnapshotCmd::Restore { name, file } => snapshot::restore(&name, &file, &Steps::new(false))
            .await
            .map(drop),
    }
}
