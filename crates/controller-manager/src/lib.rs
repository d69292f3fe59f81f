//! rkube-controller-manager: the workload (Deployment, ReplicaSet, DaemonSet, Job, CronJob, TTL-after-finished), garbage-collector, pod-garbage-collector, node-lifecycle, namespace,
//! Endpoints, EndpointSlice (and mirroring), ServiceAccount, root-CA, volume, disruption and
//! CSR-signing controllers over shared informers, optionally behind a leader-election Lease.

pub mod cli;
pub mod context;
pub mod cronjob;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod expectations;
pub mod gc;
pub mod history;
pub mod hpa;
pub mod job;
pub mod namespace;
pub mod nodelifecycle;
pub mod objects;
pub mod podcontrol;
pub mod podgc;
pub mod replicaset;
pub mod revisions;
pub mod rootca;
pub mod serviceaccount;
pub mod statefulset;
pub mod ttlafterfinished;
pub mod volume;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ReplicationController;
use rkube_client::leader::{run_component, Settings};
use rkube_client::Client;
use rkube_daemon::health::Ready;
use rkube_daemon::metrics::Registry;
use rkube_daemon::ShutdownToken;
use tokio::net::TcpListener;

pub const CONTROLLERS: [&str; 22] = [
    "deployment",
    "replicaset",
    "replicationcontroller",
    "statefulset",
    "daemonset",
    "job",
    "cronjob",
    "horizontalpodautoscaling",
    "ttl-after-finished",
    "garbagecollector",
    "pod-garbage-collector",
    "nodelifecycle",
    "namespace",
    "endpoint",
    "endpointslice",
    "endpointslicemirroring",
    "serviceaccount",
    "root-ca-cert-publisher",
    "persistentvolume-binder",
    "pvc-protection",
    "disruption",
    "csrsigning",
];

/// The controllers' idea of now (the CronJob controller's schedule); tests move it.
pub type Clock =
    Arc<dyn Fn() -> k8s_openapi::chrono::DateTime<k8s_openapi::chrono::Utc> + Send + Sync>;

#[derive(Clone)]
pub struct Config {
    pub client: rkube_client::Config,
    /// Controller names; `*` means all, `-name` turns one off.
    pub controllers: Vec<String>,
    /// Leader election on this lease; `None` runs without (`--leader-elect=false`).
    pub leader: Option<Settings>,
    pub deployment_workers: usize,
    pub replicaset_workers: usize,
    pub gc_workers: usize,
    pub job_workers: usize,
    /// The delay after a Job's first failed pod, doubling after each (upstream: 10 s; tests
    /// shorten it).
    pub job_backoff: std::time::Duration,
    pub clock: Clock,
    /// `--horizontal-pod-autoscaler-sync-period` (upstream: 15 s).
    pub hpa_sync_period: Duration,
    /// `--terminated-pod-gc-threshold`; 0 keeps every finished pod.
    pub terminated_pod_gc_threshold: usize,
    /// How often the pod collector runs, and how long a node must be gone before its pods
    /// are (upstream: 20 s, 40 s; tests shorten them).
    pub podgc_period: std::time::Duration,
    pub podgc_quarantine: std::time::Duration,
    pub node_monitor_grace_period: Duration,
    pub node_monitor_period: Duration,
    /// `--root-ca-file`'s PEM, published in every namespace (default: the CA the client
    /// trusts the apiserver by).
    pub root_ca: Option<String>,
    /// `--cluster-signing-cert-file` / `--cluster-signing-key-file`: the CA approved
    /// CertificateSigningRequests are signed with (none: csrsigning does not run).
    pub signing: Option<csrsigning::SigningCa>,
}

impl Config {
    pub fn new(client: rkube_client::Config) -> Self {
        Config {
            client: client.capped(rkube_client::COMPONENT_MAX_IN_FLIGHT),
            controllers: vec!["*".into()],
            leader: None,
            deployment_workers: 5,
            replicaset_workers: 5,
            gc_workers: 20,
            job_workers: 5,
            job_backoff: job::logic::BACKOFF_BASE,
            clock: Arc::new(rkube_client::now),
            hpa_sync_period: Duration::from_secs(15),
            terminated_pod_gc_threshold: 12_500,
            podgc_period: podgc::PERIOD,
            podgc_quarantine: podgc::QUARANTINE,
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            root_ca: None,
            signing: None,
        }
    }

    pub fn enabled(&self, name: &str) -> bool {
        if self
            .controllers
            .iter()
            .any(|c| c.strip_prefix('-') == Some(name))
        {
            return false;
        }
        self.controllers.iter().any(|c| c == "*" || c == name)
    }
}

/// Serves health and metrics on `listener` and runs the controllers until `shutdown` (or until
/// leadership is lost, which is an error: the process should restart and campaign again).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
    for c in &config.controllers {
        let n = c.trim_start_matches('-');
        if n != "*" && !CONTROLLERS.contains(&n) {
            anyhow::bail!(
                "unknown controller {n:?}; known: {}",
                CONTROLLERS.join(", ")
            );
        }
    }
    let served = rkube_daemon::health::spawn(listener, shutdown.clone());
    let (metrics, ready) = (served.metrics.clone(), served.ready.clone());
    let (mut client, leader) = (config.client.clone(), config.leader.clone());
    client.observer = Some(rkube_daemon::metrics::rest_client_observer(
        metrics.clone(),
        &client.server,
    ));
    let result = run_component(
        &client,
        leader,
        shutdown.clone(),
        move |c, token| async move {
            run_controllers(config, c, metrics, ready, token).await;
        },
    )
    .await;
    served.stop(&shutdown).await;
    Ok(result?)
}

async fn run_controllers(
    config: Config,
    client: Client,
    metrics: Arc<Registry>,
    ready: Ready,
    shutdown: ShutdownToken,
) {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string());
    let recorder = rkube_client::events::Recorder::new(
        &client,
        "controller-manager",
        host.as_deref(),
        shutdown.clone(),
    );
    let ctx = context::Ctx::new(client.clone(), recorder, metrics);
    let deployments = config
        .enabled("deployment")
        .then(|| deployment::DeploymentController::new(ctx.clone()));
    let replicasets = config
        .enabled("replicaset")
        .then(|| replicaset::ReplicaSetController::<ReplicaSet>::new(ctx.clone()));
    let replication = config
        .enabled("replicationcontroller")
        .then(|| replicaset::ReplicaSetController::<ReplicationController>::new(ctx.clone()));
    let jobs = config
        .enabled("job")
        .then(|| job::JobController::new(ctx.clone(), config.job_backoff));
    let daemonsets = config
        .enabled("daemonset")
        .then(|| daemonset::DaemonSetController::new(ctx.clone()));
    let statefulsets = config
        .enabled("statefulset")
        .then(|| statefulset::StatefulSetController::new(ctx.clone()));
    let cronjobs = config
        .enabled("cronjob")
        .then(|| cronjob::CronJobController::new(ctx.clone(), config.clock.clone()));
    let hpas = config.enabled("horizontalpodautoscaling").then(|| {
        hpa::HpaController::new(ctx.clone(), config.hpa_sync_period, config.clock.clone())
    });
    let podgc = config.enabled("pod-garbage-collector").then(|| {
        podgc::PodGc::new(
            ctx.clone(),
            config.terminated_pod_gc_threshold,
            config.podgc_period,
            config.podgc_quarantine,
        )
    });
    let ttl = config
        .enabled("ttl-after-finished")
        .then(|| ttlafterfinished::TtlAfterFinished::new(ctx.clone()));
    let gc = config
        .enabled("garbagecollector")
        .then(|| gc::GarbageCollector::new(ctx.clone()));
    let namespaces = config
        .enabled("namespace")
        .then(|| namespace::NamespaceController::new(ctx.clone()));
    let nodes = config.enabled("nodelifecycle").then(|| {
        nodelifecycle::NodeLifecycle::new(
            ctx.clone(),
            config.node_monitor_grace_period,
            config.node_monitor_period,
        )
    });
    let endpoints = config
        .enabled("endpoint")
        .then(|| endpoints::EndpointsController::new(ctx.clone()));
    let slices = config
        .enabled("endpointslice")
        .then(|| endpointslice::EndpointSliceController::new(ctx.clone()));
    let mirroring = config
        .enabled("endpointslicemirroring")
        .then(|| endpointslicemirroring::MirroringController::new(ctx.clone()));
    let accounts = config
        .enabled("serviceaccount")
        .then(|| serviceaccount::ServiceAccountsController::new(ctx.clone()));
    let root_ca = config.enabled("root-ca-cert-publisher").then(|| {
        let ca = config.root_ca.clone().unwrap_or_else(|| {
            config
                .client
                .ca_pem
                .as_deref()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        });
        rootca::RootCaPublisher::new(ctx.clone(), ca)
    });
    let binder = config
        .enabled("persistentvolume-binder")
        .then(|| volume::VolumeBinder::new(ctx.clone()));
    let protection = config
        .enabled("pvc-protection")
        .then(|| volume::protection::Protection::new(ctx.clone()));
    let disruption = config
        .enabled("disruption")
        .then(|| disruption::DisruptionController::new(ctx.clone()));
    let signer = match (&config.signing, config.enabled("csrsigning")) {
        (Some(ca), true) => Some(csrsigning::CsrSigner::new(ctx.clone(), ca.clone())),
        _ => None,
    };
    ctx.start_informers(&shutdown);
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = ctx.wait_synced() => {}
    }
    tracing::info!("caches synced; starting controllers");
    if let Some(c) = &deployments {
        c.start(config.deployment_workers, shutdown.clone());
    }
    if let Some(c) = &replicasets {
        c.start(config.replicaset_workers, shutdown.clone());
    }
    if let Some(c) = &replication {
        c.start(config.replicaset_workers, shutdown.clone());
    }
    if let Some(c) = &jobs {
        c.start(config.job_workers, shutdown.clone());
    }
    if let Some(c) = &daemonsets {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &statefulsets {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &cronjobs {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &podgc {
        c.start(shutdown.clone());
    }
    if let Some(c) = &hpas {
        c.start(5, shutdown.clone());
    }
    if let Some(c) = &ttl {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &gc {
        c.start(config.gc_workers, shutdown.clone());
    }
    if let Some(c) = &namespaces {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &nodes {
        c.start(shutdown.clone());
    }
    if let Some(c) = &endpoints {
        c.start(5, shutdown.clone());
    }
    if let Some(c) = &slices {
        c.start(5, shutdown.clone());
    }
    if let Some(c) = &mirroring {
        c.start(5, shutdown.clone());
    }
    if let Some(c) = &accounts {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &root_ca {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &binder {
        c.start(4, shutdown.clone());
    }
    if let Some(c) = &protection {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &disruption {
        c.start(2, shutdown.clone());
    }
    if let Some(c) = &signer {
        c.start(2, shutdown.clone());
    }
    ready.set(true);
    shutdown.cancelled().await;
    ready.set(false);
}
