//! rkube-scheduler: takes pending pods (`spec.schedulerName=default-scheduler`, no node) from
//! a priority queue, filters and scores nodes from its cache, assumes the winner and binds
//! through `pods/{name}/binding` in the background; unschedulable pods get the `PodScheduled`
//! condition and a `FailedScheduling` event and wait for a cluster event.

pub mod cache;
pub mod cli;
pub mod interpod;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod volumes;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rand::Rng;
use rkube_client::events::{object_ref, Recorder};
use rkube_client::informer::{key_of, split_key, Change};
use rkube_client::leader::{run_component, Settings};
use rkube_client::pod::Pod;
use rkube_client::{Api, Client, Informer, ListParams, Patch, Store};
use rkube_daemon::health::Ready;
use rkube_daemon::metrics::{Counter, Registry, LATENCY_BUCKETS};
use rkube_daemon::ShutdownToken;
use serde_json::json;
use tokio::net::TcpListener;

use cache::Cache;
use queue::SchedulingQueue;

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

#[derive(Clone, Debug)]
pub struct Config {
    pub client: rkube_client::Config,
    /// Leader election on this lease; `None` runs without (`--leader-elect=false`).
    pub leader: Option<Settings>,
    /// 0: upstream's adaptive percentage.
    pub percentage_of_nodes_to_score: u32,
    pub scheduler_name: String,
    /// Events per second (Scheduled, FailedScheduling); 0 = unlimited. Over it, events are
    /// dropped rather than slow binding down (upstream's events share the client's 50 qps).
    pub event_qps: f32,
    pub event_burst: u32,
}

impl Config {
    pub fn new(client: rkube_client::Config) -> Self {
        Config {
            client: client.capped(rkube_client::COMPONENT_MAX_IN_FLIGHT),
            leader: None,
            percentage_of_nodes_to_score: 0,
            scheduler_name: DEFAULT_SCHEDULER.into(),
            event_qps: 50.0,
            event_burst: 100,
        }
    }
}

/// Serves health and metrics on `listener` and schedules until `shutdown` (or until leadership
/// is lost, which is an error).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownToken,
) -> anyhow::Result<()> {
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
            Scheduler::new(config, c, metrics).run(ready, token).await;
        },
    )
    .await;
    served.stop(&shutdown).await;
    Ok(result?)
}

struct Metrics {
    scheduled: Counter,
    unschedulable: Counter,
    errors: Counter,
    attempt: rkube_daemon::metrics::Histogram,
}

pub struct Scheduler {
    config: Config,
    client: Client,
    metrics: Arc<Registry>,
    cache: Arc<Mutex<Cache>>,
    queue: Arc<SchedulingQueue>,
    next_start: AtomicUsize,
    m: Metrics,
    /// Bindings in flight: backpressure for the scheduling loop, and a bounded number of
    /// connections to the apiserver.
    binds: Arc<tokio::sync::Semaphore>,
    /// Claims and volumes, for the volume filter (set once the informers start).
    storage: std::sync::OnceLock<StorageCaches>,
    /// Namespaces, for affinity terms' `namespaceSelector`s (set once the informers start).
    namespaces: std::sync::OnceLock<Arc<Store<Namespace>>>,
    /// PodDisruptionBudgets, which preemption honours (set once the informers start).
    budgets: std::sync::OnceLock<Arc<Store<PodDisruptionBudget>>>,
    /// A pod was found unschedulable for want of other pods (pod affinity, spread skew): the
    /// next pod placed on a node wakes the parked ones.
    waiting_on_pods: std::sync::atomic::AtomicBool,
    /// Such wake-ups at most once a second: the last, and whether one is already due.
    last_wake: Mutex<Option<std::time::Instant>>,
    wake_due: Arc<std::sync::atomic::AtomicBool>,
}

/// The claim and volume informers' caches.
type StorageCaches = (
    Arc<Store<PersistentVolumeClaim>>,
    Arc<Store<PersistentVolume>>,
);

/// Bindings in flight at once.
const MAX_BINDS_IN_FLIGHT: usize = 64;

impl Scheduler {
    pub fn new(config: Config, client: Client, metrics: Arc<Registry>) -> Arc<Self> {
        let result = |r: &str| {
            metrics.counter(
                "scheduler_schedule_attempts_total",
                "Scheduling attempts by result.",
                &[("result", r)],
            )
        };
        let m = Metrics {
            scheduled: result("scheduled"),
            unschedulable: result("unschedulable"),
            errors: result("error"),
            attempt: metrics.histogram(
                "scheduler_scheduling_attempt_duration_seconds",
                "Time to pick a node for one pod (filter + score).",
                &[],
                LATENCY_BUCKETS,
            ),
        };
        let queue: Arc<SchedulingQueue> = Arc::default();
        for (i, q) in ["active", "backoff", "unschedulable"]
            .into_iter()
            .enumerate()
        {
            let queue = queue.clone();
            metrics.gauge_fn(
                "scheduler_pending_pods",
                "Pending pods by queue.",
                &[("queue", q)],
                move || {
                    let s = queue.sizes();
                    [s.0, s.1, s.2][i] as f64
                },
            );
        }
        Arc::new(Scheduler {
            config,
            client,
            metrics,
            cache: Arc::default(),
            queue,
            next_start: AtomicUsize::new(0),
            m,
            binds: Arc::new(tokio::sync::Semaphore::new(MAX_BINDS_IN_FLIGHT)),
            storage: std::sync::OnceLock::new(),
            namespaces: std::sync::OnceLock::new(),
            budgets: std::sync::OnceLock::new(),
            waiting_on_pods: std::sync::atomic::AtomicBool::new(false),
            last_wake: Mutex::new(None),
            wake_due: Arc::default(),
        })
    }

    fn is_ours(&self, p: &Pod) -> bool {
        let spec = p.spec.as_ref();
        let name = spec
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(DEFAULT_SCHEDULER);
        // A pod with scheduling gates waits until they are all removed.
        let gated = spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        name == self.config.scheduler_name && p.metadata.deletion_timestamp.is_none() && !gated
    }

    fn node_name(p: &Pod) -> Option<&str> {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    fn on_pod(&self, ch: &Change<Pod>) {
        match ch {
            Change::Added(p) | Change::Updated { new: p, .. } => {
                let key = key_of(&**p);
                match Self::node_name(p) {
                    Some(node) => {
                        self.queue.delete(&key);
                        let mut cache = self.cache.lock().unwrap();
                        // Newly placed: unknown, or only assumed by this scheduler so far.
                        let placed = cache.node_of(&key).is_none() || cache.is_assumed(&key);
                        cache.add_pod(&key, p, node);
                        drop(cache);
                        if placed && self.waiting_on_pods.swap(false, Ordering::Relaxed) {
                            self.wake_waiting();
                        }
                    }
                    None if self.is_ours(p) => {
                        let prio = p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
                        self.queue.add(&key, prio);
                    }
                    None => self.queue.delete(&key),
                }
            }
            Change::Deleted(p) => {
                let key = key_of(&**p);
                self.queue.delete(&key);
                let assigned = Self::node_name(p).is_some()
                    || self.cache.lock().unwrap().node_of(&key).is_some();
                self.cache.lock().unwrap().remove_pod(&key);
                if assigned {
                    self.queue.move_all(); // its resources are free again
                }
            }
        }
    }

    /// The PodDisruptionBudgets as preemption weighs them (a budget whose selector does not
    /// parse protects nothing, as upstream).
    fn disruption_budgets(&self) -> Vec<preemption::Budget> {
        let Some(store) = self.budgets.get() else {
            return Vec::new();
        };
        store
            .list()
            .iter()
            .filter_map(|b| {
                let selector = b.spec.as_ref()?.selector.as_ref()?;
                Some(preemption::Budget {
                    namespace: b.metadata.namespace.clone().unwrap_or_default(),
                    selector: rkube_api::LabelSelector::from_api(selector).ok()?,
                    allowed: b.status.as_ref().map_or(0, |s| s.disruptions_allowed),
                })
            })
            .collect()
    }

    /// DefaultPreemption for a pod that fits nowhere: nominates the node where evicting
    /// lower-priority pods makes room and deletes them (each marked `DisruptionTarget` and
    /// told `Preempted`); their deletion wakes the pod. Nothing more while an earlier
    /// preemption for it is still terminating pods on its nominated node.
    async fn preempt(&self, pods: &Arc<Store<Pod>>, recorder: &Recorder, pod: &Pod) {
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty());
        let plan = {
            let cache = self.cache.lock().unwrap();
            if nominated
                .as_deref()
                .is_some_and(|n| preemption::in_progress(pod, &cache, n))
            {
                return;
            }
            preemption::plan(pod, &cache, &self.disruption_budgets())
        };
        let Some(plan) = plan else {
            return;
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(&self.client, ns);
        let nominate =
            json!({"metadata": {"uid": uid}, "status": {"nominatedNodeName": plan.node}});
        if let Err(e) = api.patch_status(name, &Patch::Merge(nominate)).await {
            tracing::debug!(pod = name, error = %e, "could not nominate a node");
            return;
        }
        for key in &plan.victims {
            let Some(victim) = pods.get(key) else {
                continue;
            };
            let (vns, vname) = split_key(key);
            let vapi: Api<Pod> = Api::namespaced(&self.client, vns);
            let now =
                rkube_client::now().to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true);
            let target = json!({"metadata": {"uid": victim.metadata.uid},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": "PreemptionByScheduler", "lastTransitionTime": now,
                "message": format!("{}: preempting to accommodate a higher priority pod", self.config.scheduler_name)}]}});
            let _ = vapi.patch_status(vname, &Patch::Strategic(target)).await;
            let dp = rkube_client::DeleteParams::with_uid(
                victim.metadata.uid.as_deref().unwrap_or_default(),
            );
            match vapi.delete(vname, &dp).await {
                Ok(_) => recorder.normal(
                    object_ref(&*victim),
                    "Preempted",
                    format!("Preempted by pod {uid} on node {}", plan.node),
                ),
                Err(e) if e.is_not_found() || e.code() == Some(409) => {}
                Err(e) => tracing::warn!(pod = key, error = %e, "could not preempt"),
            }
        }
    }

    /// Moves the parked pods back to be tried again — at once, or a second after the last
    /// time, so a pod that never fits cannot make every placement re-queue them all.
    fn wake_waiting(&self) {
        const EVERY: Duration = Duration::from_secs(1);
        let now = std::time::Instant::now();
        let mut last = self.last_wake.lock().unwrap();
        let wait = last.map_or(Duration::ZERO, |t| EVERY.saturating_sub(now - t));
        if wait.is_zero() {
            *last = Some(now);
            self.queue.move_all();
        } else if !self.wake_due.swap(true, Ordering::Relaxed) {
            let (queue, due) = (self.queue.clone(), self.wake_due.clone());
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                due.store(false, Ordering::Relaxed);
                queue.move_all();
            });
        }
    }

    fn on_node(&self, ch: &Change<Node>) {
        match ch {
            Change::Added(n) => {
                self.cache.lock().unwrap().set_node(n.clone());
                self.queue.move_all();
            }
            Change::Updated { old, new } => {
                self.cache.lock().unwrap().set_node(new.clone());
                // Only changes that can make a pod fit wake the parked ones.
                let relevant = old.spec != new.spec
                    || old.metadata.labels != new.metadata.labels
                    || scheduling_view(old) != scheduling_view(new);
                if relevant {
                    self.queue.move_all();
                }
            }
            Change::Deleted(n) => self
                .cache
                .lock()
                .unwrap()
                .remove_node(n.metadata.name.as_deref().unwrap_or_default()),
        }
    }

    pub async fn run(self: Arc<Self>, ready: Ready, shutdown: ShutdownToken) {
        let nodes = Informer::new(Api::<Node>::all(&self.client), ListParams::default());
        let pods = Informer::new(
            Api::<Pod>::all(&self.client),
            ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
        );
        pods.store().set_transform(cache::cached_pod);
        let claims = Informer::new(
            Api::<PersistentVolumeClaim>::all(&self.client),
            ListParams::default(),
        );
        let volumes = Informer::new(
            Api::<PersistentVolume>::all(&self.client),
            ListParams::default(),
        );
        export(&self.metrics, "nodes", nodes.stats());
        export(&self.metrics, "pods", pods.stats());
        export(&self.metrics, "persistentvolumeclaims", claims.stats());
        export(&self.metrics, "persistentvolumes", volumes.stats());
        let namespaces = Informer::new(Api::<Namespace>::all(&self.client), ListParams::default());
        export(&self.metrics, "namespaces", namespaces.stats());
        let budgets = Informer::new(
            Api::<PodDisruptionBudget>::all(&self.client),
            ListParams::default(),
        );
        export(&self.metrics, "poddisruptionbudgets", budgets.stats());
        // A claim or volume appearing or binding may make a waiting pod schedulable.
        let q = self.queue.clone();
        claims.store().on_change(move |c| {
            let moved = match c {
                Change::Added(_) => true,
                Change::Updated { old, new } => {
                    old.spec.as_ref().and_then(|s| s.volume_name.as_ref())
                        != new.spec.as_ref().and_then(|s| s.volume_name.as_ref())
                }
                Change::Deleted(_) => false,
            };
            if moved {
                q.move_all();
            }
        });
        let q = self.queue.clone();
        volumes.store().on_change(move |c| {
            let moved = match c {
                Change::Added(_) => true,
                Change::Updated { old, new } => {
                    old.spec.as_ref().map(|s| &s.node_affinity)
                        != new.spec.as_ref().map(|s| &s.node_affinity)
                }
                Change::Deleted(_) => false,
            };
            if moved {
                q.move_all();
            }
        });
        let claims = claims.spawn(shutdown.clone());
        let volumes = volumes.spawn(shutdown.clone());
        let _ = self.storage.set((claims.clone(), volumes.clone()));
        let namespaces = namespaces.spawn(shutdown.clone());
        let _ = self.namespaces.set(namespaces.clone());
        let budgets = budgets.spawn(shutdown.clone());
        let _ = self.budgets.set(budgets.clone());
        let me = self.clone();
        nodes.store().on_change(move |c| me.on_node(c));
        let me = self.clone();
        pods.store().on_change(move |c| me.on_pod(c));
        let nodes = nodes.spawn(shutdown.clone());
        let pods = pods.spawn(shutdown.clone());
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = async {
                nodes.wait_synced().await;
                pods.wait_synced().await;
                claims.wait_synced().await;
                volumes.wait_synced().await;
                namespaces.wait_synced().await;
                budgets.wait_synced().await;
            } => {}
        }
        tracing::info!(nodes = nodes.len(), "caches synced; scheduling");
        let recorder = Recorder::new(&self.client, DEFAULT_SCHEDULER, None, shutdown.clone())
            .with_rate(self.config.event_qps, self.config.event_burst);
        {
            let q = self.queue.clone();
            let s = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                loop {
                    tokio::select! {
                        _ = s.cancelled() => { q.close(); return; }
                        _ = tick.tick() => q.flush(),
                    }
                }
            });
        }
        ready.set(true);
        while let Some((key, cycle)) = self.queue.pop().await {
            self.schedule_one(&pods, &recorder, &key, cycle).await;
        }
        ready.set(false);
    }

    /// Picks a node for `p`, or returns the reasons per node.
    pub fn pick(&self, p: &Pod) -> Result<String, String> {
        let (req, nonzero) = plugins::requests(p);
        let cache = self.cache.lock().unwrap();
        let total = cache.order.len();
        if total == 0 {
            return Err("0/0 nodes are available: no nodes available to schedule pods.".into());
        }
        let pinned = match self.storage.get() {
            Some((claims, volumes)) => volumes::pinned(p, claims, volumes).map_err(|claim| {
                format!(
                    "0/{total} nodes are available: persistentvolumeclaim \"{claim}\" not found."
                )
            })?,
            None => Vec::new(),
        };
        let selected = |sel: &rkube_api::LabelSelector| -> Vec<String> {
            self.namespaces
                .get()
                .map(|ns| {
                    ns.list()
                        .iter()
                        .filter(|n| sel.matches(&n.metadata.labels.clone().unwrap_or_default()))
                        .filter_map(|n| n.metadata.name.clone())
                        .collect()
                })
                .unwrap_or_default()
        };
        let pod_state = interpod::prepare(p, &cache, &selected);
        let want = plugins::nodes_to_find(total, self.config.percentage_of_nodes_to_score);
        let start = self.next_start.load(Ordering::Relaxed) % total;
        let mut feasible = Vec::new();
        let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut checked = 0;
        for i in 0..total {
            let name = &cache.order[(start + i) % total];
            let info = &cache.nodes[name];
            checked += 1;
            let filtered = plugins::filter(p, info, &req)
                .and_then(|()| {
                    let labels = plugins::labels(info);
                    match pinned.iter().all(|pv| volumes::admits(pv, labels, name)) {
                        true => Ok(()),
                        false => Err(vec![plugins::R_VOLUME_AFFINITY]),
                    }
                })
                .and_then(|()| match &pod_state {
                    Some(st) => interpod::filter(st, info).map_err(|r| vec![r]),
                    None => Ok(()),
                });
            match filtered {
                Ok(()) => {
                    feasible.push(info);
                    if feasible.len() >= want {
                        break;
                    }
                }
                Err(rs) => {
                    for r in rs {
                        *reasons.entry(r).or_default() += 1;
                    }
                }
            }
        }
        self.next_start
            .store((start + checked) % total, Ordering::Relaxed);
        if feasible.is_empty() {
            if reasons.contains_key(interpod::R_AFFINITY)
                || reasons.contains_key(interpod::R_SPREAD)
            {
                self.waiting_on_pods.store(true, Ordering::Relaxed);
            }
            return Err(plugins::fit_error(total, &reasons));
        }
        let owner = cache::OwnerKey::of(p);
        let raws: Vec<plugins::Raw> = feasible
            .iter()
            .map(|info| {
                let mut raw = plugins::raw_scores(p, owner, info, &nonzero);
                if let Some(st) = &pod_state {
                    (raw.topology_spread, raw.pod_affinity) = interpod::score(st, info);
                }
                raw
            })
            .collect();
        let totals = plugins::totals(&raws);
        let best = *totals.iter().max().expect("non-empty");
        let top: Vec<usize> = (0..totals.len()).filter(|i| totals[*i] == best).collect();
        let i = top[rand::thread_rng().gen_range(0..top.len())];
        Ok(feasible[i].name().to_string())
    }

    async fn schedule_one(
        self: &Arc<Self>,
        pods: &Arc<Store<Pod>>,
        recorder: &Recorder,
        key: &str,
        cycle: u64,
    ) {
        let Some(pod) = pods.get(key) else {
            self.queue.delete(key);
            return;
        };
        if Self::node_name(&pod).is_some()
            || !self.is_ours(&pod)
            || self.cache.lock().unwrap().is_assumed(key)
        {
            self.queue.delete(key);
            return;
        }
        let start = tokio::time::Instant::now();
        let picked = self.pick(&pod);
        self.m.attempt.observe_duration(start.elapsed());
        let (ns, name) = split_key(key);
        match picked {
            Ok(node) => {
                let labels = {
                    let mut cache = self.cache.lock().unwrap();
                    cache.assume(key, &pod, &node);
                    cache
                        .nodes
                        .get(&node)
                        .map(|i| plugins::labels(i).clone())
                        .unwrap_or_default()
                };
                let Ok(permit) = self.binds.clone().acquire_owned().await else {
                    return;
                };
                let me = self.clone();
                let recorder = recorder.clone();
                let (key, ns, name) = (key.to_string(), ns.to_string(), name.to_string());
                // Bind in the background; the next pod is scheduled meanwhile.
                tokio::spawn(async move {
                    let _permit = permit;
                    if let Err(why) = volumes::prepare(&me.client, &pod, &node, &labels).await {
                        me.m.errors.inc();
                        me.cache.lock().unwrap().forget(&key);
                        me.queue.move_all();
                        tracing::debug!(pod = %key, node, %why, "volumes not ready");
                        recorder.warning(object_ref(&*pod), "FailedScheduling", why);
                        me.queue.backoff(&key);
                        return;
                    }
                    let api: Api<Pod> = Api::namespaced(&me.client, &ns);
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                    match api.create_subresource(&name, "binding", &binding).await {
                        Ok(_) => {
                            me.m.scheduled.inc();
                            me.queue.done(&key);
                            recorder.normal(
                                object_ref(&*pod),
                                "Scheduled",
                                format!("Successfully assigned {ns}/{name} to {node}"),
                            );
                        }
                        Err(e) => {
                            me.m.errors.inc();
                            me.cache.lock().unwrap().forget(&key);
                            // The reservation is gone: parked pods may fit now (as upstream).
                            me.queue.move_all();
                            if !(e.is_not_found() || e.code() == Some(409)) {
                                tracing::warn!(pod = %key, node, error = %e, "binding failed; retrying");
                                recorder.warning(
                                    object_ref(&*pod),
                                    "FailedScheduling",
                                    format!("Binding rejected: {e}"),
                                );
                            }
                            // Retried after backoff; a pod that is gone or bound meanwhile is
                            // dropped then (the key may by now name a re-created pod).
                            me.queue.backoff(&key);
                        }
                    }
                });
            }
            Err(message) => {
                self.m.unschedulable.inc();
                tracing::debug!(pod = %key, %message, "unschedulable");
                recorder.warning(object_ref(&*pod), "FailedScheduling", message.clone());
                let current = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                    .and_then(|c| c.message.clone());
                if current.as_deref() != Some(message.as_str()) {
                    let now = rkube_client::now()
                        .to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true);
                    let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                        "reason": "Unschedulable", "message": message, "lastProbeTime": null, "lastTransitionTime": now}]}});
                    let api: Api<Pod> = Api::namespaced(&self.client, ns);
                    if let Err(e) = api.patch_status(name, &Patch::Strategic(patch)).await {
                        tracing::debug!(pod = %key, error = %e, "could not set PodScheduled");
                    }
                }
                self.preempt(pods, recorder, &pod).await;
                self.queue.unschedulable(key, cycle);
            }
        }
    }
}

/// A node's allocatable resources.
type Allocatable = BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>;

/// What of a node's status matters to scheduling: allocatable and condition statuses.
fn scheduling_view(n: &Node) -> (Option<Allocatable>, Vec<(String, String)>) {
    let st = n.status.as_ref();
    (
        st.and_then(|s| s.allocatable.clone()),
        st.and_then(|s| s.conditions.as_ref())
            .map(|c| {
                c.iter()
                    .map(|c| (c.type_.clone(), c.status.clone()))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// Exports a reflector's counters under `resource`.
fn export(metrics: &Registry, resource: &str, stats: Arc<rkube_client::Stats>) {
    for (name, help, get) in rkube_client::Stats::SERIES {
        let st = stats.clone();
        metrics.gauge_fn(name, help, &[("resource", resource)], move || {
            get(&st) as f64
        });
    }
}
