//! The scheduler's view of the cluster: per node, its allocatable, what its pods request, the
//! host ports in use and how many pods of each controller run there. Pods are "assumed" on a
//! node as soon as the scheduler picks it (before the binding lands) and confirmed or forgotten
//! afterwards, so the next decision already counts them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PodAffinityTerm};
use rkube_client::pod::{Container, Pod};

use crate::resources::{allocatable, pod_requests, Resources};

/// (protocol, hostIP, hostPort).
pub type HostPort = (String, String, i32);

#[derive(Clone)]
pub struct PodEntry {
    pub node: String,
    pub requested: Resources,
    pub nonzero: Resources,
    pub ports: Vec<HostPort>,
    pub owner: Option<OwnerKey>,
    pub assumed: bool,
    /// The pod as cached (its namespace and labels, for pod (anti-)affinity, topology
    /// spreading and disruption budgets): shared with the informer, not copied.
    pub pod: Arc<Pod>,
    /// Being deleted: not counted by topology spreading.
    pub terminating: bool,
    /// `spec.priority`: who may preempt it.
    pub priority: i32,
}

impl PodEntry {
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static NONE: BTreeMap<String, String> = BTreeMap::new();
        self.pod.metadata.labels.as_ref().unwrap_or(&NONE)
    }
}

#[derive(Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub allocatable: Resources,
    pub requested: Resources,
    pub nonzero: Resources,
    pub ports: HashMap<HostPort, usize>,
    /// Pods per controller (for spreading).
    pub owners: HashMap<OwnerKey, usize>,
    /// Whether the node's Ready condition is True, and whether it is cordoned: read from the
    /// node once, not by every pod's filter on every node.
    pub ready: bool,
    pub unschedulable: bool,
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

impl NodeInfo {
    fn new(node: Arc<Node>) -> Self {
        NodeInfo {
            allocatable: allocatable(&node),
            ready: is_ready(&node),
            unschedulable: is_unschedulable(&node),
            node,
            requested: Resources::default(),
            nonzero: Resources::default(),
            ports: HashMap::new(),
            owners: HashMap::new(),
        }
    }

    pub fn add(&mut self, e: &PodEntry) {
        self.requested.add(&e.requested);
        self.nonzero.add(&e.nonzero);
        for p in &e.ports {
            *self.ports.entry(p.clone()).or_default() += 1;
        }
        if let Some(o) = e.owner {
            *self.owners.entry(o).or_default() += 1;
        }
    }

    pub fn remove(&mut self, e: &PodEntry) {
        self.requested.sub(&e.requested);
        self.nonzero.sub(&e.nonzero);
        for p in &e.ports {
            if let Some(n) = self.ports.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.ports.remove(p);
                }
            }
        }
        if let Some(o) = e.owner {
            if let Some(n) = self.owners.get_mut(&o) {
                *n -= 1;
                if *n == 0 {
                    self.owners.remove(&o);
                }
            }
        }
    }

    pub fn name(&self) -> &str {
        self.node.metadata.name.as_deref().unwrap_or_default()
    }
}

pub fn host_ports(p: &Pod) -> Vec<HostPort> {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| {
            (
                p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                p.host_ip.clone().unwrap_or_else(|| "0.0.0.0".into()),
                p.host_port.unwrap_or(0),
            )
        })
        .collect()
}

/// What the scheduler caches of a pod (its informer's transform): `compact_pod`'s form, each
/// container with only what the plugins read (its name, resources, ports, restart policy),
/// and a pod bound to a node without its status — only pods still to schedule have theirs
/// read (the PodScheduled condition, the nominated node); bound ones count by spec. At 10,000
/// pods the container statuses, conditions and addresses were a fifth of the scheduler's heap.
pub fn cached_pod(p: &mut Pod) {
    rkube_client::informer::transform::compact_pod(p);
    let bound = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if bound {
        p.status = None;
    }
    if let Some(spec) = p.spec.as_mut() {
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            *c = Container {
                name: std::mem::take(&mut c.name),
                resources: c.resources.take(),
                ports: c.ports.take(),
                // Which init containers are sidecars (upstream adds theirs to the pod's
                // requests; ours count as init containers today).
                restart_policy: c.restart_policy.take(),
                ..Default::default()
            };
        }
    }
}

/// A pod's controller as the nodes count its pods for spreading: a fixed-key 64-bit hash of
/// its UID, found once per pod, so scoring the pod on every node compares integers instead
/// of reading each node's own copy of the string (a tenth of the scheduler's time when a
/// Deployment's pods are spread over a thousand nodes). A collision (64 bits, not
/// practical to craft, and a client can name any controller's UID anyway) only nudges a
/// spreading score.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerKey(u64);

impl OwnerKey {
    pub fn of(p: &Pod) -> Option<OwnerKey> {
        use std::hash::Hasher;
        let uid = controller_uid_of(p)?;
        let mut h = std::hash::DefaultHasher::new();
        h.write(uid.as_bytes());
        Some(OwnerKey(h.finish()))
    }
}

/// The pod's controller's UID.
pub fn controller_uid_of(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// A pod's required pod-affinity and anti-affinity terms.
pub fn required_terms(p: &Pod) -> (Vec<PodAffinityTerm>, Vec<PodAffinityTerm>) {
    let a = p.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let aff = a
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default();
    let anti = a
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default();
    (aff, anti)
}

#[derive(Default)]
pub struct Cache {
    pub nodes: HashMap<String, NodeInfo>,
    /// Node names in a stable order, for sampling.
    pub order: Vec<String>,
    pods: HashMap<String, PodEntry>,
    assumed: HashSet<String>,
    /// The required anti-affinity terms of the pods that have them.
    anti: HashMap<String, Vec<PodAffinityTerm>>,
}

impl Cache {
    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.nodes.get_mut(&name) {
            Some(info) => {
                info.allocatable = allocatable(&node);
                info.ready = is_ready(&node);
                info.unschedulable = is_unschedulable(&node);
                info.node = node;
            }
            None => {
                self.nodes.insert(name.clone(), NodeInfo::new(node));
                self.order.push(name.clone());
                // Pods seen before their node.
                for e in self.pods.values().filter(|e| e.node == name) {
                    self.nodes.get_mut(&name).expect("inserted").add(e);
                }
            }
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            self.order.retain(|n| n != name);
        }
    }

    fn entry(p: &Arc<Pod>, node: &str, assumed: bool) -> PodEntry {
        let (requested, nonzero) = pod_requests(p);
        PodEntry {
            node: node.to_string(),
            requested,
            nonzero,
            ports: host_ports(p),
            owner: OwnerKey::of(p),
            assumed,
            pod: p.clone(),
            terminating: p.metadata.deletion_timestamp.is_some(),
            priority: p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
        }
    }

    /// Every pod on a node (bound or assumed).
    pub fn entries(&self) -> impl Iterator<Item = &PodEntry> {
        self.pods.values()
    }

    /// Every pod on a node, with its `namespace/name` key.
    pub fn keyed_entries(&self) -> impl Iterator<Item = (&String, &PodEntry)> {
        self.pods.iter()
    }

    /// The pods with required anti-affinity, and their terms.
    pub fn anti_pods(&self) -> impl Iterator<Item = (&PodEntry, &Vec<PodAffinityTerm>)> {
        self.anti
            .iter()
            .filter_map(|(k, t)| Some((self.pods.get(k)?, t)))
    }

    fn put(&mut self, key: &str, p: &Pod, e: PodEntry) {
        self.remove_pod(key);
        let anti = required_terms(p).1;
        if !anti.is_empty() {
            self.anti.insert(key.to_string(), anti);
        }
        if let Some(info) = self.nodes.get_mut(&e.node) {
            info.add(&e);
        }
        self.pods.insert(key.to_string(), e);
    }

    /// A pod bound to a node (from the informer); confirms an assumption.
    pub fn add_pod(&mut self, key: &str, p: &Arc<Pod>, node: &str) {
        self.assumed.remove(key);
        self.put(key, p, Self::entry(p, node, false));
    }

    pub fn remove_pod(&mut self, key: &str) {
        self.assumed.remove(key);
        self.anti.remove(key);
        if let Some(e) = self.pods.remove(key) {
            if let Some(info) = self.nodes.get_mut(&e.node) {
                info.remove(&e);
            }
        }
    }

    /// Counts `p` on `node` before its binding is confirmed.
    pub fn assume(&mut self, key: &str, p: &Arc<Pod>, node: &str) {
        self.put(key, p, Self::entry(p, node, true));
        self.assumed.insert(key.to_string());
    }

    /// Drops an assumption whose binding failed.
    pub fn forget(&mut self, key: &str) {
        if self.assumed.contains(key) {
            self.remove_pod(key);
        }
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.assumed.contains(key)
    }

    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|e| e.node.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "p", "labels": {"app": "a"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": "u-1", "controller": true}]},
            "spec": {"nodeName": node, "priority": 7,
                "containers": [{"name": "c", "image": "nginx", "command": ["sh"],
                    "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "Always",
                    "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "initContainers": [{"name": "i", "image": "busybox",
                    "resources": {"limits": {"cpu": "2"}}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Pending", "nominatedNodeName": "n-2",
                "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false,
                    "restartCount": 0}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_cached_pod_keeps_what_the_scheduler_reads() {
        for node in [None, Some("n-1")] {
            let full = pod(node);
            let mut cached = full.clone();
            cached_pod(&mut cached);
            // What every decision reads of it is unchanged.
            assert_eq!(pod_requests(&cached), pod_requests(&full));
            assert_eq!(host_ports(&cached), host_ports(&full));
            assert_eq!(controller_uid_of(&cached), controller_uid_of(&full));
            assert_eq!(cached.metadata, full.metadata);
            let (spec, was) = (cached.spec.as_ref().unwrap(), full.spec.as_ref().unwrap());
            assert_eq!(spec.node_name, was.node_name);
            assert_eq!(spec.priority, was.priority);
            assert_eq!(spec.tolerations, was.tolerations);
            // What no plugin reads is gone.
            let c = &spec.containers[0];
            assert_eq!((c.image.as_deref(), c.command.as_ref()), (None, None));
            assert_eq!(c.termination_message_path, None);
            assert_eq!(spec.init_containers.as_ref().unwrap()[0].image, None);
        }
        // A pod still to schedule keeps its status (its PodScheduled message, its nomination);
        // a bound one keeps none.
        let mut waiting = pod(None);
        cached_pod(&mut waiting);
        assert_eq!(waiting.status, pod(None).status);
        let mut bound = pod(Some("n-1"));
        cached_pod(&mut bound);
        assert_eq!(bound.status, None);
    }
}
