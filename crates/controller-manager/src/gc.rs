//! The garbage collector, over every resource the apiserver serves — discovered, not listed:
//! the controllers' own informers where they have one, a metadata-only informer for every
//! other listable, watchable, deletable resource (found again every 30 s, so custom
//! resources join and leave). It deletes dependents whose owners are gone (background),
//! deletes dependents of an owner being deleted in the foreground and then lifts its
//! `foregroundDeletion` finalizer, and strips owner references when an owner is deleted with
//! `orphan`. An owner missing from the cache is confirmed absent with a live GET before
//! anything is deleted; deletes carry a UID precondition.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rkube_client::dynamic::{self, ApiResource, PartialObjectMeta};
use rkube_client::informer::{index, Change};
use rkube_client::{Api, Client, Error, Informer, ListParams, Resource, Store, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// How often the served resources are discovered again.
const REDISCOVERY: Duration = Duration::from_secs(30);

/// When a dependent whose owner is of an unknown kind is looked at again.
const UNKNOWN_RETRY: Duration = Duration::from_secs(3);

/// Resources upstream's collector ignores: events, in both groups.
fn ignored(r: &ApiResource) -> bool {
    r.plural == "events" && (r.group.is_empty() || r.group == "events.k8s.io")
}

/// A group and kind as one key: `ReplicaSet.apps`, or `Pod` for the core group.
fn group_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// One resource the collector sees, through an informer's store.
trait Watched: Send + Sync {
    fn resource(&self) -> &ApiResource;
    fn meta(&self, ns: &str, name: &str) -> Option<ObjectMeta>;
    /// Objects with an owner reference to `uid`.
    fn owned_by(&self, uid: &str) -> Vec<ObjectMeta>;
    /// Has the informer listed once?
    fn synced(&self) -> bool;
}

struct Kind<K: Resource> {
    resource: ApiResource,
    store: Arc<Store<K>>,
}

impl<K: Resource> Watched for Kind<K> {
    fn resource(&self) -> &ApiResource {
        &self.resource
    }

    fn meta(&self, ns: &str, name: &str) -> Option<ObjectMeta> {
        let ns = if self.resource.namespaced { ns } else { "" };
        self.store.get_in(ns, name).map(|o| o.metadata().clone())
    }

    fn owned_by(&self, uid: &str) -> Vec<ObjectMeta> {
        self.store
            .by_index(index::OWNER_UID, uid)
            .iter()
            .map(|o| o.metadata().clone())
            .collect()
    }

    fn synced(&self) -> bool {
        self.store.has_synced()
    }
}

/// A watched resource and, for the collector's own informers, what stops them.
struct Entry {
    watched: Arc<dyn Watched>,
    stop: Option<CancellationToken>,
    added: std::time::Instant,
}

/// How long the collector waits for a new informer's first list before going on without it
/// (a resource that cannot be listed must not stop collection everywhere).
const SYNC_GRACE: Duration = Duration::from_secs(30);

pub struct GarbageCollector {
    ctx: Arc<Ctx>,
    /// The collector's own client (own rate limit), for discovery and its informers.
    client: Client,
    queue: Arc<WorkQueue<String>>,
    /// By group-kind.
    kinds: RwLock<HashMap<String, Entry>>,
    /// Discover again now (an owner of an unknown kind turned up).
    rediscover: tokio::sync::Notify,
}

/// `GroupKind|namespace|name`.
fn item(gk: &str, m: &ObjectMeta) -> String {
    format!(
        "{gk}|{}|{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

fn has_finalizer(m: &ObjectMeta, f: &str) -> bool {
    m.finalizers.iter().flatten().any(|x| x == f)
}

enum OwnerState {
    Solid,
    /// Of a kind not discovered (yet): a custom resource created a moment ago. Decided
    /// again after discovery.
    Unknown,
    Dangling,
    /// Being deleted in the foreground, waiting for its dependents.
    Waiting,
}

impl GarbageCollector {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let gc = Arc::new(GarbageCollector {
            client: ctx.client.with_own_rate_limit(),
            ctx: ctx.clone(),
            queue: WorkQueue::new("garbagecollector"),
            kinds: RwLock::default(),
            rediscover: tokio::sync::Notify::new(),
        });
        // The controllers' informers that see every object of their resource.
        gc.add_typed(&ctx.deployments);
        gc.add_typed(&ctx.replicasets);
        gc.add_typed(&ctx.replication_controllers);
        gc.add_typed(&ctx.statefulsets);
        gc.add_typed(&ctx.daemonsets);
        gc.add_typed(&ctx.revisions);
        gc.add_typed(&ctx.jobs);
        gc.add_typed(&ctx.cronjobs);
        gc.add_typed(&ctx.pods);
        gc.add_typed(&ctx.nodes);
        gc.add_typed(&ctx.namespaces);
        gc.add_typed(&ctx.services);
        gc.add_typed(&ctx.endpoints);
        gc.add_typed(&ctx.endpoint_slices);
        gc.add_typed(&ctx.service_accounts);
        gc.add_typed(&ctx.claims);
        gc.add_typed(&ctx.volumes);
        gc.add_typed(&ctx.storage_classes);
        gc.add_typed(&ctx.pdbs);
        gc.add_typed(&ctx.csrs);
        gc
    }

    fn add_typed<K: Resource>(self: &Arc<Self>, store: &Arc<Store<K>>) {
        let namespaced =
            rkube_api::resources::find_kind(K::API_VERSION, K::KIND).is_none_or(|d| d.namespaced);
        let resource = ApiResource {
            group: K::GROUP.into(),
            version: K::VERSION.into(),
            plural: K::URL_PATH_SEGMENT.into(),
            kind: K::KIND.into(),
            namespaced,
            verbs: Vec::new(),
        };
        self.add(resource, store.clone(), None);
    }

    fn add<K: Resource>(
        self: &Arc<Self>,
        resource: ApiResource,
        store: Arc<Store<K>>,
        stop: Option<CancellationToken>,
    ) {
        let gk = group_kind(&resource.group, &resource.kind);
        self.watch(&store, gk.clone());
        let watched = Arc::new(Kind { resource, store });
        self.kinds.write().unwrap().insert(
            gk,
            Entry {
                watched,
                stop,
                added: std::time::Instant::now(),
            },
        );
    }

    /// Discovers the served resources now and every `REDISCOVERY`, starting a metadata-only
    /// informer for each one not yet watched and stopping those of resources gone.
    async fn run_discovery(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let last = std::time::Instant::now();
            match dynamic::discover(&self.client).await {
                Ok(found) => self.follow(found, &shutdown),
                Err(e) => {
                    tracing::warn!(error = %e, "discovery failed; collector keeps what it watches")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(REDISCOVERY) => {}
                _ = self.rediscover.notified() => {
                    // Early discoveries at most every two seconds, however many owners of
                    // unknown kinds turn up.
                    tokio::time::sleep(Duration::from_secs(2).saturating_sub(last.elapsed())).await;
                }
            }
        }
    }

    fn follow(self: &Arc<Self>, found: Vec<ApiResource>, shutdown: &CancellationToken) {
        let wanted: Vec<ApiResource> = found
            .into_iter()
            .filter(|r| r.has_verbs(&["list", "watch", "delete"]) && !ignored(r))
            .collect();
        let gone: Vec<String> = {
            let kinds = self.kinds.read().unwrap();
            kinds
                .iter()
                .filter(|(gk, e)| {
                    e.stop.is_some()
                        && !wanted.iter().any(|r| group_kind(&r.group, &r.kind) == **gk)
                })
                .map(|(gk, _)| gk.clone())
                .collect()
        };
        for gk in gone {
            if let Some(e) = self.kinds.write().unwrap().remove(&gk) {
                tracing::info!(resource = %gk, "resource no longer served; collector stops watching it");
                if let Some(stop) = e.stop {
                    stop.cancel();
                }
            }
        }
        for r in wanted {
            let gk = group_kind(&r.group, &r.kind);
            if self.kinds.read().unwrap().contains_key(&gk) {
                continue;
            }
            tracing::debug!(resource = %gk, "collector watches a discovered resource");
            let api = Api::<PartialObjectMeta>::dynamic(&self.client, r.clone());
            let inf = Informer::new(api, ListParams::default());
            let store = inf.store();
            store.add_index(index::OWNER_UID, index::owner_uid::<PartialObjectMeta>);
            let stop = shutdown.child_token();
            self.add(r, store, Some(stop.clone()));
            inf.spawn(stop);
        }
    }

    fn watched(&self, gk: &str) -> Option<Arc<dyn Watched>> {
        self.kinds
            .read()
            .unwrap()
            .get(gk)
            .map(|e| e.watched.clone())
    }

    /// The resource of `gk`: from discovery, else from rkube's own table.
    fn resource_of(&self, gk: &str, api_version: &str) -> Option<ApiResource> {
        if let Some(w) = self.watched(gk) {
            return Some(w.resource().clone());
        }
        let kind = gk.split('.').next().unwrap_or(gk);
        let def = rkube_api::resources::find_kind(api_version, kind)?;
        Some(ApiResource {
            group: def.group.into(),
            version: def.version.into(),
            plural: def.plural.into(),
            kind: kind.into(),
            namespaced: def.namespaced,
            verbs: Vec::new(),
        })
    }

    fn owner_gk(r: &OwnerReference) -> String {
        group_kind(dynamic::group_of(&r.api_version), &r.kind)
    }

    fn watch<K: Resource>(self: &Arc<Self>, store: &Arc<Store<K>>, gk: String) {
        let me = self.clone();
        store.on_change(move |ch| {
            let (obj, deleted) = match ch {
                Change::Added(o) | Change::Updated { new: o, .. } => (o, false),
                Change::Deleted(o) => (o, true),
            };
            let m = obj.metadata();
            if deleted {
                // Its dependents may now be dangling; an owner waiting on it may be done.
                me.enqueue_dependents(m.uid.as_deref().unwrap_or_default());
                for r in m.owner_references.iter().flatten() {
                    let owner = Self::owner_gk(r);
                    if me.watched(&owner).is_some() {
                        me.queue.add(format!(
                            "{owner}|{}|{}",
                            m.namespace.as_deref().unwrap_or_default(),
                            r.name
                        ));
                    }
                }
                return;
            }
            let deleting = m.deletion_timestamp.is_some()
                && (has_finalizer(m, "orphan") || has_finalizer(m, "foregroundDeletion"));
            if deleting || m.owner_references.as_ref().is_some_and(|r| !r.is_empty()) {
                me.queue.add(item(&gk, m));
            }
        });
    }

    fn enqueue_dependents(&self, uid: &str) {
        for m in self.dependents(uid) {
            self.queue.add(m.0);
        }
    }

    /// (item, metadata) of every cached object with an owner reference to `uid`.
    fn dependents(&self, uid: &str) -> Vec<(String, ObjectMeta)> {
        let kinds: Vec<(String, Arc<dyn Watched>)> = self
            .kinds
            .read()
            .unwrap()
            .iter()
            .map(|(gk, e)| (gk.clone(), e.watched.clone()))
            .collect();
        let mut out = Vec::new();
        for (gk, k) in kinds {
            for m in k.owned_by(uid) {
                out.push((item(&gk, &m), m));
            }
        }
        out
    }

    fn cached(&self, gk: &str, ns: &str, name: &str) -> Option<ObjectMeta> {
        self.watched(gk)?.meta(ns, name)
    }

    /// The path of a watched object, from its item's parts.
    fn object_path(&self, gk: &str, m: &ObjectMeta) -> Option<String> {
        let w = self.watched(gk)?;
        Some(w.resource().object_path(
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        ))
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        tokio::spawn(self.clone().run_discovery(shutdown.clone()));
        crate::worker::serve!(self, "garbagecollector", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        // Dependents are looked up in every cache: decide nothing until all have listed (a
        // resource discovered just now is still listing), as upstream's collector waits.
        let unsynced = self
            .kinds
            .read()
            .unwrap()
            .values()
            .any(|e| !e.watched.synced() && e.added.elapsed() < SYNC_GRACE);
        if unsynced {
            return Ok(Some(Duration::from_millis(100)));
        }
        let mut parts = key.splitn(3, '|');
        let (kind, ns, name) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let Some(m) = self.cached(kind, ns, name) else {
            return Ok(None);
        };
        let uid = m.uid.clone().unwrap_or_default();
        if m.deletion_timestamp.is_some() {
            if has_finalizer(&m, "orphan") {
                self.orphan_dependents(&uid).await?;
                self.remove_finalizer(kind, &m, "orphan").await?;
                return Ok(None);
            }
            if has_finalizer(&m, "foregroundDeletion") {
                return self.delete_dependents_foreground(kind, &m).await;
            }
            return Ok(None);
        }
        let refs: Vec<OwnerReference> = m.owner_references.clone().unwrap_or_default();
        if refs.is_empty() {
            return Ok(None);
        }
        let mut solid = 0;
        let mut unknown = 0;
        let mut waiting = 0;
        let mut drop_refs = Vec::new();
        for r in &refs {
            match self.owner_state(r, ns).await? {
                OwnerState::Solid => solid += 1,
                OwnerState::Unknown => unknown += 1,
                OwnerState::Waiting => {
                    waiting += 1;
                    drop_refs.push(r.uid.clone());
                }
                OwnerState::Dangling => drop_refs.push(r.uid.clone()),
            }
        }
        if solid == 0 && unknown > 0 {
            return Ok(Some(UNKNOWN_RETRY));
        }
        let Some(p) = self.object_path(kind, &m) else {
            return Ok(None);
        };
        if solid > 0 {
            if !drop_refs.is_empty() {
                let keep: Vec<&OwnerReference> = refs
                    .iter()
                    .filter(|r| !drop_refs.contains(&r.uid))
                    .collect();
                let patch = json!({"metadata": {"ownerReferences": keep, "uid": uid}});
                self.patch(&p, patch).await?;
            }
            return Ok(None);
        }
        let policy = if has_finalizer(&m, "orphan") {
            "Orphan"
        } else if waiting > 0 || has_finalizer(&m, "foregroundDeletion") {
            "Foreground"
        } else {
            "Background"
        };
        tracing::debug!(
            kind,
            namespace = ns,
            name,
            policy,
            "deleting object whose owners are gone"
        );
        self.delete(&p, &uid, policy).await?;
        Ok(None)
    }

    async fn owner_state(&self, r: &OwnerReference, ns: &str) -> Result<OwnerState, Error> {
        let gk = Self::owner_gk(r);
        let Some(resource) = self.resource_of(&gk, &r.api_version) else {
            // A kind not known yet: never delete for it; find out and look again.
            self.rediscover.notify_one();
            return Ok(OwnerState::Unknown);
        };
        if ns.is_empty() && resource.namespaced {
            // A cluster-scoped dependent cannot have a namespaced owner: the reference is
            // invalid, and upstream's collector leaves it alone too.
            return Ok(OwnerState::Solid);
        }
        let meta = match self.cached(&gk, ns, &r.name) {
            Some(m) if m.uid.as_deref() == Some(r.uid.as_str()) => Some(m),
            _ => {
                // Not (yet) in the cache: ask the apiserver before calling it gone.
                let p = resource.object_path(ns, &r.name);
                match self
                    .ctx
                    .client
                    .send_json::<Value>(rkube_client::Method::GET, &p, None)
                    .await
                {
                    Ok(v) => serde_json::from_value::<ObjectMeta>(v["metadata"].clone()).ok(),
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(match meta {
            Some(m) if m.uid.as_deref() == Some(r.uid.as_str()) => {
                if m.deletion_timestamp.is_some() && has_finalizer(&m, "foregroundDeletion") {
                    OwnerState::Waiting
                } else {
                    OwnerState::Solid
                }
            }
            _ => OwnerState::Dangling,
        })
    }

    async fn orphan_dependents(&self, uid: &str) -> Result<(), Error> {
        for (it, m) in self.dependents(uid) {
            let gk = it.split('|').next().unwrap_or("");
            let Some(p) = self.object_path(gk, &m) else {
                continue;
            };
            let keep: Vec<&OwnerReference> = m
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.uid != uid)
                .collect();
            let patch = json!({"metadata": {"ownerReferences": keep, "uid": m.uid}});
            self.patch(&p, patch).await?;
        }
        Ok(())
    }

    async fn delete_dependents_foreground(&self, kind: &str, m: &ObjectMeta) -> Reconciled {
        let uid = m.uid.clone().unwrap_or_default();
        let deps = self.dependents(&uid);
        let mut blocking = 0;
        for (it, dm) in &deps {
            let blocks = dm
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid && r.block_owner_deletion == Some(true));
            if blocks {
                blocking += 1;
            }
            if dm.deletion_timestamp.is_none() {
                let dk = it.split('|').next().unwrap_or("");
                if let Some(p) = self.object_path(dk, dm) {
                    self.delete(&p, dm.uid.as_deref().unwrap_or_default(), "Foreground")
                        .await?;
                }
            }
        }
        if blocking == 0 {
            self.remove_finalizer(kind, m, "foregroundDeletion").await?;
        }
        Ok(None)
    }

    async fn remove_finalizer(&self, kind: &str, m: &ObjectMeta, f: &str) -> Result<(), Error> {
        let Some(p) = self.object_path(kind, m) else {
            return Ok(());
        };
        let rest: Vec<&String> = m.finalizers.iter().flatten().filter(|x| *x != f).collect();
        let patch =
            json!({"metadata": {"finalizers": rest, "resourceVersion": m.resource_version}});
        self.patch(&p, patch).await
    }

    async fn patch(&self, path: &str, patch: Value) -> Result<(), Error> {
        let body = serde_json::to_vec(&patch).expect("JSON");
        match send(
            &self.ctx.client,
            rkube_client::Method::PATCH,
            path,
            ("application/merge-patch+json", body),
        )
        .await
        {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, path: &str, uid: &str, policy: &str) -> Result<(), Error> {
        let body = serde_json::to_vec(
            &json!({"propagationPolicy": policy, "preconditions": {"uid": uid}}),
        )
        .expect("JSON");
        match send(
            &self.ctx.client,
            rkube_client::Method::DELETE,
            path,
            ("application/json", body),
        )
        .await
        {
            Ok(()) => Ok(()),
            // Gone already, or a new object took the name (UID precondition): nothing to do.
            Err(e) if e.is_not_found() || e.code() == Some(409) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

async fn send(
    client: &Client,
    m: rkube_client::Method,
    path: &str,
    body: (&'static str, Vec<u8>),
) -> Result<(), Error> {
    client.send(m, path, Some(body)).await.map(|_| ())
}
