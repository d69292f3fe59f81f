//! Pod workers: one task per pod bound to a simulated node. It drives the pod's `PodSim`,
//! writes status when it changes, records the kubelet's events, and on graceful deletion stops
//! the containers, reports the terminal phase and deletes the pod with grace 0 and a UID
//! precondition (as the kubelet's status manager does).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PodCondition, PodStatus};
use rkube_client::events::{object_ref, Recorder};
use rkube_client::pod::Pod;
use rkube_client::{Api, Client, DeleteParams, Patch};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::node::NodeSpec;
use crate::sim::{PodSim, SimEvent};
use crate::stages::Stages;

/// What the log endpoint needs of a running pod.
pub type SimHandle = Arc<Mutex<PodSim>>;

/// Everything the workers of one node share.
pub struct NodeRuntime {
    pub client: Client,
    pub recorder: Recorder,
    pub spec: NodeSpec,
    pub stages: Arc<Stages>,
    /// Images pulled on this node.
    pub images: Mutex<HashSet<String>>,
    /// Pod addresses in use (host part of the node's /24).
    ips: Mutex<HashSet<u8>>,
    /// uid → the worker's input.
    workers: Mutex<HashMap<String, watch::Sender<Arc<Pod>>>>,
    /// `ns/name` → the pod's simulation, for logs.
    pub sims: Arc<Mutex<HashMap<String, SimHandle>>>,
    pub status_writes: rkube_daemon::metrics::Counter,
    /// API writes in flight across every node of the process: thousands of pod workers share
    /// a bounded number of connections instead of opening one each.
    pub writes: Arc<tokio::sync::Semaphore>,
}

impl NodeRuntime {
    pub fn new(
        client: Client,
        recorder: Recorder,
        spec: NodeSpec,
        stages: Arc<Stages>,
        sims: Arc<Mutex<HashMap<String, SimHandle>>>,
        status_writes: rkube_daemon::metrics::Counter,
        writes: Arc<tokio::sync::Semaphore>,
    ) -> Arc<Self> {
        Arc::new(NodeRuntime {
            client,
            recorder,
            spec,
            stages,
            images: Mutex::default(),
            ips: Mutex::default(),
            workers: Mutex::default(),
            sims,
            status_writes,
            writes,
        })
    }

    /// The lowest free address from .2 to .254; when all are taken (more than 253 pods kept
    /// on one node) addresses are shared, as an exhausted CIDR would leave no choice.
    fn alloc_ip(&self) -> String {
        let mut used = self.ips.lock().unwrap();
        let n = (2..=254u8).find(|n| !used.contains(n)).unwrap_or(254);
        used.insert(n);
        self.spec.pod_ip(n)
    }

    fn free_ip(&self, ip: &str) {
        if let Some(n) = ip.rsplit('.').next().and_then(|n| n.parse::<u8>().ok()) {
            self.ips.lock().unwrap().remove(&n);
        }
    }

    /// A new or changed pod from the node's informer.
    pub fn pod_changed(self: &Arc<Self>, pod: Arc<Pod>, shutdown: &CancellationToken) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut workers = self.workers.lock().unwrap();
        if let Some(tx) = workers.get(&uid) {
            let _ = tx.send(pod);
            return;
        }
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminal {
            // Finished before this worker existed (an agent restart): nothing runs again, and
            // the phase is never reported back to a non-terminal one. Asked to delete it, the
            // kubelet removes the object at once.
            if pod.metadata.deletion_timestamp.is_some() {
                let me = self.clone();
                tokio::spawn(async move { me.remove_finished(&pod).await });
            }
            return;
        }
        let (tx, rx) = watch::channel(pod);
        workers.insert(uid.clone(), tx);
        let me = self.clone();
        let stop = shutdown.child_token();
        tokio::spawn(async move {
            me.clone().run_pod(rx, stop).await;
            me.workers.lock().unwrap().remove(&uid);
        });
    }

    /// Deletes a finished pod's object (grace 0, UID precondition), retrying a few times.
    async fn remove_finished(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(&self.client, ns);
        for _ in 0..5 {
            let permit = self.writes.acquire().await;
            let r = api
                .delete(name, &DeleteParams::with_uid(uid).grace(0))
                .await;
            drop(permit);
            match r {
                Ok(_) => return,
                Err(e) if e.is_not_found() || e.code() == Some(409) => return,
                Err(e) => {
                    tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "final delete failed; will retry");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// The pod object is gone: its worker ends.
    pub fn pod_deleted(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.workers.lock().unwrap().remove(&uid);
    }

    fn record(&self, regarding: &ObjectReference, evs: Vec<SimEvent>) {
        for e in evs {
            let mut r = regarding.clone();
            r.field_path = e.field_path;
            if e.warning {
                self.recorder.warning(r, e.reason, e.message);
            } else {
                self.recorder.normal(r, e.reason, e.message);
            }
        }
    }

    async fn run_pod(self: Arc<Self>, mut rx: watch::Receiver<Arc<Pod>>, stop: CancellationToken) {
        let pod = rx.borrow_and_update().clone();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(
            &self.client,
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let ip = self.alloc_ip();
        let sim: SimHandle = Arc::new(Mutex::new(PodSim::new(
            &pod,
            ip.clone(),
            &self.stages,
            Instant::now(),
            rkube_client::now(),
        )));
        self.sims.lock().unwrap().insert(key.clone(), sim.clone());
        let nudge = sim.lock().unwrap().nudge();
        // Boxed, as the API calls' futures below: ten thousand idle workers hold only what
        // their wait needs (a worker's task was 1.5 KB, now 0.9).
        let regarding = Box::new(object_ref(&*pod));
        let mut pod = pod;
        // A hash of the last status written: ten thousand workers keep 8 bytes each, not a copy.
        let mut last_sent: Option<u64> = None;
        // The resourceVersion our last status write made.
        let mut last_rv: u64 = 0;
        // A status write failed: try again soon (not only on the next change).
        let mut unsent = false;
        let mut deleted_api = false;
        loop {
            // This step's events go out after its status write: sent first, on a busy plane
            // they queue ahead of it (upstream's kubelet sends both asynchronously).
            let mut events = Vec::new();
            // Deletion asked for: stop the containers within the grace period.
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = Duration::from_secs(
                    pod.metadata
                        .deletion_grace_period_seconds
                        .unwrap_or(30)
                        .max(0) as u64,
                );
                let evs = sim
                    .lock()
                    .unwrap()
                    .delete(Instant::now(), grace, &self.stages);
                events.extend(evs);
            }
            let (evs, next) = {
                let mut images = self.images.lock().unwrap();
                sim.lock().unwrap().advance(
                    Instant::now(),
                    rkube_client::now(),
                    &self.stages,
                    &mut images,
                )
            };
            events.extend(evs);
            events.extend(sim.lock().unwrap().ephemeral(&pod, rkube_client::now()));
            // Only a digest of the status outlives this block: ten thousand workers waiting
            // for a write permit would otherwise each hold their status and its patch.
            let (digest, overwritten) = {
                let status = sim.lock().unwrap().status(&pod, &self.spec.ip);
                // Someone else changed it after our last write (the node lifecycle controller
                // marks a pod not ready while its node is not reporting): said again, as a
                // kubelet's status manager compares with the API's status, not only with its
                // own last write. Never over a terminal phase someone else set (PodGC's Failed).
                let terminal = matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                );
                let overwritten = last_sent.is_some()
                    && !terminal
                    && resource_version(&pod) > last_rv
                    && !agrees(pod.status.as_deref(), &status);
                (digest_of(&status), overwritten)
            };
            if last_sent != Some(digest) || overwritten {
                let permit = self.writes.acquire().await;
                // Built once the permit is held, from the simulation as it is now.
                let status = sim.lock().unwrap().status(&pod, &self.spec.ip);
                let digest = digest_of(&status);
                // The UID makes it a precondition: never onto a re-created pod of the same name.
                let patch = Patch::Merge(json!({"metadata": {"uid": uid}, "status": status}));
                drop(status);
                let written = Box::pin(api.patch_status(&name, &patch)).await;
                drop(permit);
                self.record(&regarding, std::mem::take(&mut events));
                match written {
                    Ok(written) => {
                        self.status_writes.inc();
                        last_sent = Some(digest);
                        last_rv = resource_version(&written);
                        unsent = false;
                    }
                    Err(e) if e.is_not_found() || e.code() == Some(409) => break,
                    Err(e) => {
                        unsent = true;
                        tracing::debug!(pod = %key, error = %e, "status update failed; will retry")
                    }
                }
            }
            self.record(&regarding, events);
            let finished = sim.lock().unwrap().finished();
            if finished
                && pod.metadata.deletion_timestamp.is_some()
                && last_sent.is_some()
                && !deleted_api
            {
                // The terminal status is written: remove the object.
                let permit = self.writes.acquire().await;
                let deleted =
                    Box::pin(api.delete(&name, &DeleteParams::with_uid(&uid).grace(0))).await;
                drop(permit);
                match deleted {
                    Ok(_) => deleted_api = true,
                    Err(e) if e.is_not_found() || e.code() == Some(409) => break,
                    Err(e) => {
                        tracing::debug!(pod = %key, error = %e, "final delete failed; will retry")
                    }
                }
            }
            let wake = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None if last_sent.is_none()
                        || unsent
                        || (finished
                            && !deleted_api
                            && pod.metadata.deletion_timestamp.is_some()) =>
                    {
                        tokio::time::sleep(Duration::from_millis(500)).await // retry a failed write
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                changed = rx.changed() => {
                    if changed.is_err() {
                        break; // the pod object is gone
                    }
                    pod = rx.borrow_and_update().clone();
                }
                _ = wake => {}
                _ = nudge.notified() => {}
            }
        }
        {
            // Only our own entry: a re-created pod of the same name has its own.
            let mut sims = self.sims.lock().unwrap();
            if sims.get(&key).is_some_and(|s| Arc::ptr_eq(s, &sim)) {
                sims.remove(&key);
            }
        }
        self.free_ip(&ip);
    }
}

/// What the agent caches of a pod (its node informers' transform): `compact_pod`'s form
/// without the status parts the simulation reports itself and never reads back — container
/// statuses and addresses (it keeps the phase, the conditions others own and the QoS class).
/// At 10,000 pods they were a sixth of the agent's heap.
pub fn cached_pod(p: &mut Pod) {
    rkube_client::informer::transform::compact_pod(p);
    if let Some(s) = p.status.as_mut() {
        s.container_statuses = None;
        s.init_container_statuses = None;
        s.ephemeral_container_statuses = None;
        s.pod_ip = None;
        s.pod_ips = None;
        s.host_ip = None;
        s.host_ips = None;
        s.start_time = None;
    }
}

fn resource_version(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A hash of the status as it would be written: what the last write is remembered by.
fn digest_of(status: &PodStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let bytes = serde_json::to_vec(status).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Whether the API's status (as cached) says what ours says where others write too: the
/// phase and each condition's status.
fn agrees(api: Option<&rkube_client::pod::PodStatus>, ours: &PodStatus) -> bool {
    let conditions = |c: &Option<Vec<PodCondition>>| {
        let mut c: Vec<(String, String)> = c
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect();
        c.sort_unstable();
        c
    };
    api.is_some_and(|a| {
        a.phase == ours.phase && conditions(&a.conditions) == conditions(&ours.conditions)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;
    use serde_json::json;

    fn status(phase: &str, ready: &str) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn the_cached_pod_gives_the_same_status_writes() {
        use crate::sim::PodSim;
        let full: Pod = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "p", "uid": "u1", "resourceVersion": "7"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Running", "qosClass": "BestEffort", "podIP": "10.244.0.2",
                "podIPs": [{"ip": "10.244.0.2"}], "hostIP": "127.0.0.1",
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "False"},
                    {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": true,
                    "restartCount": 0}]}
        }))
        .unwrap();
        let mut cached = full.clone();
        cached_pod(&mut cached);
        assert_eq!(cached.status.as_ref().unwrap().container_statuses, None);
        let stages = Stages::fast();
        let (now, wall) = (Instant::now(), rkube_client::now());
        let sim = PodSim::new(&full, "10.244.0.2".into(), &stages, now, wall);
        let ours = sim.status(&full, "127.0.0.1");
        // The status written (conditions others own kept, QoS) and the comparison with the
        // API's status do not change.
        assert_eq!(sim.status(&cached, "127.0.0.1"), ours);
        assert_eq!(
            agrees(cached.status.as_deref(), &ours),
            agrees(full.status.as_deref(), &ours)
        );
        assert_eq!(resource_version(&cached), 7);
    }

    #[test]
    fn a_status_someone_else_changed_disagrees() {
        let ours = status("Running", "True");
        // The API's status as the agent caches it.
        let status = |phase: &str, ready: &str| -> rkube_client::pod::PodStatus {
            serde_json::from_value(serde_json::to_value(status(phase, ready)).unwrap()).unwrap()
        };
        assert!(agrees(Some(&status("Running", "True")), &ours));
        assert!(
            !agrees(Some(&status("Running", "False")), &ours),
            "marked not ready by the node controller"
        );
        assert!(!agrees(Some(&status("Pending", "True")), &ours));
        assert!(!agrees(None, &ours));
    }
}
