//! The Informer: a Reflector feeding a shared cache (`Store`) with indexers and change handlers.
//! The reflector holds the writer half (`Sink`); everyone else reads `Arc<K>` snapshots.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use tokio_util::sync::CancellationToken;

use crate::client::{Api, ListParams, Resource};
use crate::reflector::{Options, Reflector, Sink, Stats};

/// `namespace/name`, or `name` for cluster-scoped objects.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let m = obj.metadata();
    let name = m.name.as_deref().unwrap_or_default();
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Splits a key into (namespace, name).
pub fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// One change seen by the cache.
pub enum Change<K> {
    Added(Arc<K>),
    Updated { old: Arc<K>, new: Arc<K> },
    Deleted(Arc<K>),
}

type IndexFn<K> = Box<dyn Fn(&K) -> Vec<String> + Send + Sync>;
type Handler<K> = Box<dyn Fn(&Change<K>) + Send + Sync>;

struct Index<K> {
    name: &'static str,
    func: IndexFn<K>,
    map: HashMap<String, HashSet<String>>,
}

struct Inner<K> {
    items: HashMap<String, Arc<K>>,
    indexes: Vec<Index<K>>,
}

impl<K> Inner<K> {
    fn unindex(&mut self, key: &str, obj: &K) {
        for idx in &mut self.indexes {
            for v in (idx.func)(obj) {
                if let Some(set) = idx.map.get_mut(&v) {
                    set.remove(key);
                    if set.is_empty() {
                        idx.map.remove(&v);
                    }
                }
            }
        }
    }

    fn index(&mut self, key: &str, obj: &K) {
        for idx in &mut self.indexes {
            for v in (idx.func)(obj) {
                idx.map.entry(v).or_default().insert(key.to_string());
            }
        }
    }

    fn put(&mut self, key: String, obj: Arc<K>) -> Option<Arc<K>> {
        let old = self.items.insert(key.clone(), obj.clone());
        if let Some(o) = &old {
            self.unindex(&key, o);
        }
        self.index(&key, &obj);
        old
    }

    fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.items.remove(key);
        if let Some(o) = &old {
            self.unindex(key, o);
        }
        old
    }
}

/// The shared cache.
pub struct Store<K> {
    inner: RwLock<Inner<K>>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: AtomicBool,
    synced_notify: tokio::sync::Notify,
    /// What the owner drops from every object before caching it (client-go's TransformFunc).
    transform: std::sync::OnceLock<Transform<K>>,
}

type Transform<K> = Box<dyn Fn(&mut K) + Send + Sync>;

impl<K: Resource> Default for Store<K> {
    fn default() -> Self {
        Store {
            inner: RwLock::new(Inner {
                items: HashMap::new(),
                indexes: Vec::new(),
            }),
            handlers: RwLock::new(Vec::new()),
            synced: AtomicBool::new(false),
            synced_notify: tokio::sync::Notify::new(),
            transform: std::sync::OnceLock::new(),
        }
    }
}

impl<K: Resource> Store<K> {
    /// Sets, once and before the informer starts, what is dropped from every object before it
    /// is cached (fields the store's readers never look at, to save memory). Handlers see the
    /// transformed objects too.
    pub fn set_transform(&self, f: impl Fn(&mut K) + Send + Sync + 'static) {
        let _ = self.transform.set(Box::new(f));
    }

    /// `strip`, then the owner's transform.
    fn prepare(&self, obj: K) -> K {
        let mut obj = strip(obj);
        if let Some(t) = self.transform.get() {
            t(&mut obj);
        }
        obj
    }

    /// Adds an index; objects already cached are indexed too.
    pub fn add_index(
        &self,
        name: &'static str,
        func: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) {
        let mut g = self.inner.write().unwrap();
        let mut idx = Index {
            name,
            func: Box::new(func),
            map: HashMap::new(),
        };
        for (k, o) in &g.items {
            for v in (idx.func)(o) {
                idx.map.entry(v).or_default().insert(k.clone());
            }
        }
        g.indexes.push(idx);
    }

    /// Registers a change handler. Handlers run on the reflector's task, after the cache has
    /// changed; they must be quick (enqueue a key, not reconcile).
    pub fn on_change(&self, f: impl Fn(&Change<K>) + Send + Sync + 'static) {
        self.handlers.write().unwrap().push(Box::new(f));
    }

    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().unwrap().items.get(key).cloned()
    }

    pub fn get_in(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        if namespace.is_empty() {
            self.get(name)
        } else {
            self.get(&format!("{namespace}/{name}"))
        }
    }

    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().unwrap().items.values().cloned().collect()
    }

    pub fn keys(&self) -> Vec<String> {
        self.inner.read().unwrap().items.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.inner.read().unwrap().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Objects whose index `name` yields `value`.
    pub fn by_index(&self, name: &str, value: &str) -> Vec<Arc<K>> {
        let g = self.inner.read().unwrap();
        let Some(idx) = g.indexes.iter().find(|i| i.name == name) else {
            return Vec::new();
        };
        idx.map
            .get(value)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| g.items.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// True once the first list has been applied.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Waits for the first list.
    pub async fn wait_synced(&self) {
        loop {
            let n = self.synced_notify.notified();
            if self.has_synced() {
                return;
            }
            n.await;
        }
    }

    fn notify(&self, changes: &[Change<K>]) {
        let hs = self.handlers.read().unwrap();
        for c in changes {
            for h in hs.iter() {
                h(c);
            }
        }
    }

    fn upsert(&self, obj: K) {
        let obj = self.prepare(obj);
        let key = key_of(&obj);
        let new = Arc::new(obj);
        let old = self.inner.write().unwrap().put(key, new.clone());
        self.notify(&[match old {
            Some(old) => Change::Updated { old, new },
            None => Change::Added(new),
        }]);
    }
}

/// Cached objects go without `metadata.managedFields` (as upstream's components strip them
/// with `TransformStripManagedFields`): controllers never read them, they are often larger
/// than the rest of the object, and an update that omits them keeps the stored ones.
fn strip<K: Resource>(mut obj: K) -> K {
    obj.metadata_mut().managed_fields = None;
    obj
}

impl<K: Resource> Sink<K> for Store<K> {
    fn replace(&self, items: Vec<K>) {
        let mut changes = Vec::new();
        {
            let mut g = self.inner.write().unwrap();
            let mut fresh: HashSet<String> = HashSet::with_capacity(items.len());
            for obj in items {
                let key = key_of(&obj);
                fresh.insert(key.clone());
                // Unchanged (the same resourceVersion): the cached copy stays, so whoever holds
                // it (an index, the scheduler's node entries) shares one copy with the store
                // instead of keeping the old one beside a new one no change was sent for.
                let rv = &obj.metadata().resource_version;
                if g.items
                    .get(&key)
                    .is_some_and(|old| old.metadata().resource_version == *rv)
                {
                    continue;
                }
                let new = Arc::new(self.prepare(obj));
                match g.put(key, new.clone()) {
                    Some(old) => changes.push(Change::Updated { old, new }),
                    None => changes.push(Change::Added(new)),
                }
            }
            let gone: Vec<String> = g
                .items
                .keys()
                .filter(|k| !fresh.contains(*k))
                .cloned()
                .collect();
            for k in gone {
                if let Some(old) = g.remove(&k) {
                    changes.push(Change::Deleted(old));
                }
            }
        }
        self.notify(&changes);
        if !self.synced.swap(true, Ordering::AcqRel) {
            self.synced_notify.notify_waiters();
        }
    }

    fn added(&self, obj: K) {
        self.upsert(obj);
    }

    fn modified(&self, obj: K) {
        self.upsert(obj);
    }

    fn deleted(&self, obj: K) {
        let key = key_of(&obj);
        let old = self.inner.write().unwrap().remove(&key);
        // Hand on the final state the server sent, which is newer than what was cached.
        let _ = old;
        self.notify(&[Change::Deleted(Arc::new(obj))]);
    }
}

/// Standard index functions.
pub mod index {
    use super::*;

    pub const NAMESPACE: &str = "namespace";
    pub const OWNER_UID: &str = "owner-uid";
    /// Objects with no controller reference, by namespace: what a controller may adopt
    /// (upstream's orphan entries of its controller-UID index).
    pub const ORPHANS: &str = "orphans";
    pub const NODE_NAME: &str = "spec.nodeName";

    pub fn namespace<K: Resource>(o: &K) -> Vec<String> {
        o.metadata().namespace.clone().into_iter().collect()
    }

    pub fn owner_uid<K: Resource>(o: &K) -> Vec<String> {
        o.metadata()
            .owner_references
            .iter()
            .flatten()
            .map(|r| r.uid.clone())
            .collect()
    }

    pub fn orphans<K: Resource>(o: &K) -> Vec<String> {
        let controlled = o
            .metadata()
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.controller == Some(true));
        match controlled {
            true => Vec::new(),
            false => namespace(o),
        }
    }

    pub fn pod_node_name(p: &crate::pod::Pod) -> Vec<String> {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect()
    }
}

/// Transforms for `Store::set_transform`.
pub mod transform {
    use crate::pod::Pod;
    use k8s_openapi::api::core::v1::PodSecurityContext;

    /// What the components cache of a pod: without the ServiceAccount admission's projected
    /// token volume (`kube-api-access-*`) and its mounts — every pod carries them and no
    /// controller, scheduler or simulated kubelet of ours reads them (in typed form they are
    /// the larger part of a small pod) — and with every list exactly sized. A decoded list
    /// grows by doubling from four, so a pod's one container, one container status or two
    /// tolerations kept room for four: at 10,000 pods, over a third of a component's heap.
    pub fn compact_pod(p: &mut Pod) {
        without_token_volume(p);
        fit(&mut p.metadata.owner_references);
        fit(&mut p.metadata.finalizers);
        if let Some(spec) = p.spec.as_mut() {
            // Defaulting gives every pod an empty `securityContext` (a 440-byte box here), and
            // no reader tells it from none.
            if spec.security_context.as_deref() == Some(&PodSecurityContext::default()) {
                spec.security_context = None;
            }
            spec.containers.shrink_to_fit();
            let containers = spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten());
            for c in containers {
                fit(&mut c.args);
                fit(&mut c.command);
                fit(&mut c.env);
                fit(&mut c.ports);
                fit(&mut c.volume_mounts);
            }
            fit(&mut spec.init_containers);
            fit(&mut spec.volumes);
            fit(&mut spec.tolerations);
        }
        if let Some(status) = p.status.as_mut() {
            fit(&mut status.conditions);
            fit(&mut status.container_statuses);
            fit(&mut status.init_container_statuses);
            fit(&mut status.pod_ips);
            fit(&mut status.host_ips);
        }
    }

    fn fit<T>(v: &mut Option<Vec<T>>) {
        if let Some(v) = v {
            v.shrink_to_fit();
        }
    }

    fn without_token_volume(p: &mut Pod) {
        let Some(spec) = p.spec.as_mut() else { return };
        let is_token = |name: &str| name.starts_with("kube-api-access-");
        let Some(volumes) = spec.volumes.as_mut() else {
            return;
        };
        volumes.retain(|v| !(is_token(&v.name) && v.projected.is_some()));
        if volumes.is_empty() {
            spec.volumes = None;
        }
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            if let Some(m) = c.volume_mounts.as_mut() {
                m.retain(|m| !is_token(&m.name));
                if m.is_empty() {
                    c.volume_mounts = None;
                }
            }
        }
    }
}

/// A reflector and its store, started together.
pub struct Informer<K: Resource> {
    store: Arc<Store<K>>,
    reflector: Reflector<K, Store<K>>,
}

impl<K: Resource> Informer<K> {
    pub fn new(api: Api<K>, params: ListParams) -> Self {
        Self::with_options(api, params, Options::default())
    }

    pub fn with_options(api: Api<K>, params: ListParams, opts: Options) -> Self {
        let store: Arc<Store<K>> = Arc::default();
        store.add_index(index::NAMESPACE, index::namespace::<K>);
        let reflector = Reflector::new(api, params, store.clone(), opts);
        Informer { store, reflector }
    }

    pub fn store(&self) -> Arc<Store<K>> {
        self.store.clone()
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.reflector.stats()
    }

    pub fn last_rv(&self) -> Arc<std::sync::Mutex<String>> {
        self.reflector.last_rv()
    }

    /// Starts the reflector; it stops with `shutdown`.
    pub fn spawn(self, shutdown: CancellationToken) -> Arc<Store<K>> {
        let store = self.store.clone();
        tokio::spawn(self.reflector.run(shutdown));
        store
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Pod;
    use k8s_openapi::api::core::v1::PodSecurityContext;
    use std::sync::Mutex;

    fn pod(ns: &str, name: &str, rv: &str, node: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": name, "resourceVersion": rv},
            "spec": {"nodeName": node, "containers": []}
        }))
        .unwrap()
    }

    #[test]
    fn a_transform_drops_the_token_volume_and_spare_room_before_caching() {
        let s: Store<Pod> = Store::default();
        s.set_transform(transform::compact_pod);
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "a", "name": "p", "resourceVersion": "1"},
            "spec": {"securityContext": {}, "containers": [{"name": "c", "volumeMounts": [
                {"name": "kube-api-access-x2b4z", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                {"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "kube-api-access-x2b4z", "projected": {"sources": []}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]}
        }))
        .unwrap();
        s.modified(p);
        let cached = s.get("a/p").unwrap();
        let spec = cached.spec.as_ref().unwrap();
        assert_eq!(spec.volumes.as_ref().unwrap().len(), 1);
        assert_eq!(spec.volumes.as_ref().unwrap()[0].name, "data");
        assert_eq!(spec.containers[0].volume_mounts.as_ref().unwrap().len(), 1);
        assert_eq!(spec.containers.capacity(), 1, "decoded with room for four");
        assert_eq!(spec.volumes.as_ref().unwrap().capacity(), 1);
        assert_eq!(
            spec.security_context, None,
            "an empty securityContext is none"
        );
        let mut set = s.get("a/p").unwrap().as_ref().clone();
        set.metadata.resource_version = Some("2".into());
        set.spec.as_mut().unwrap().security_context = Some(Box::new(PodSecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        }));
        s.modified(set);
        let kept = s
            .get("a/p")
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .security_context
            .clone();
        assert_eq!(kept.and_then(|c| c.run_as_user), Some(1000));
    }

    #[test]
    fn cached_objects_carry_no_managed_fields() {
        let s: Store<Pod> = Store::default();
        let with_fields = |name: &str, rv: &str| {
            let mut p = pod("a", name, rv, "n1");
            p.metadata.managed_fields = Some(vec![Default::default()]);
            p
        };
        s.replace(vec![with_fields("p1", "1")]);
        s.modified(with_fields("p2", "2"));
        for key in ["a/p1", "a/p2"] {
            assert_eq!(s.get(key).expect(key).metadata.managed_fields, None);
        }
    }

    #[test]
    fn replace_diffs_and_indexes_follow() {
        let s: Store<Pod> = Store::default();
        s.add_index(index::NODE_NAME, index::pod_node_name);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        s.on_change(move |c| {
            seen2.lock().unwrap().push(match c {
                Change::Added(p) => format!("add {}", key_of(&**p)),
                Change::Updated { new, .. } => format!("upd {}", key_of(&**new)),
                Change::Deleted(p) => format!("del {}", key_of(&**p)),
            })
        });
        s.replace(vec![pod("a", "p1", "1", "n1"), pod("a", "p2", "1", "n1")]);
        assert!(s.has_synced());
        assert_eq!(s.by_index(index::NODE_NAME, "n1").len(), 2);
        s.modified(pod("a", "p1", "2", "n2"));
        assert_eq!(s.by_index(index::NODE_NAME, "n1").len(), 1);
        assert_eq!(s.by_index(index::NODE_NAME, "n2").len(), 1);
        // A relist: p1 unchanged (same RV), p2 gone, p3 new.
        let p1 = s.get("a/p1").unwrap();
        s.replace(vec![pod("a", "p1", "2", "n2"), pod("a", "p3", "3", "n1")]);
        assert_eq!(s.len(), 2);
        assert!(
            Arc::ptr_eq(&p1, &s.get("a/p1").unwrap()),
            "an unchanged object keeps its cached copy, which holders of it share"
        );
        assert_eq!(
            s.by_index(index::NODE_NAME, "n1")[0]
                .metadata
                .name
                .as_deref(),
            Some("p3")
        );
        let mut log = seen.lock().unwrap().clone();
        log[..2].sort();
        assert_eq!(
            log,
            ["add a/p1", "add a/p2", "upd a/p1", "add a/p3", "del a/p2"]
        );
        s.deleted(pod("a", "p3", "4", "n1"));
        assert!(s.by_index(index::NODE_NAME, "n1").is_empty());
        assert_eq!(
            s.by_index(index::NAMESPACE, "a").len(),
            0,
            "index added only by Informer"
        );
    }
}
