//! The garbage collector, for the kinds the controllers' informers hold (Deployments,
//! ReplicaSets, Pods, Services, EndpointSlices): deletes dependents whose owners are gone (background), deletes dependents of an owner
//! being deleted in the foreground and then lifts its `foregroundDeletion` finalizer, and strips
//! owner references when an owner is deleted with `orphan`. An owner missing from the cache is
//! confirmed absent with a live GET before anything is deleted; deletes carry a UID precondition.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rkube_client::informer::{index, Change};
use rkube_client::{Client, Error, Resource, Store, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// One kind the collector sees, through its informer's store.
trait Watched: Send + Sync {
    fn kind(&self) -> &'static str;
    fn api_version(&self) -> &'static str;
    fn meta(&self, ns: &str, name: &str) -> Option<ObjectMeta>;
    /// Objects with an owner reference to `uid`.
    fn owned_by(&self, uid: &str) -> Vec<ObjectMeta>;
}

struct Kind<K: Resource> {
    kind: &'static str,
    api_version: &'static str,
    store: Arc<Store<K>>,
}

impl<K: Resource> Watched for Kind<K> {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn api_version(&self) -> &'static str {
        self.api_version
    }

    fn meta(&self, ns: &str, name: &str) -> Option<ObjectMeta> {
        self.store.get_in(ns, name).map(|o| o.metadata().clone())
    }

    fn owned_by(&self, uid: &str) -> Vec<ObjectMeta> {
        self.store
            .by_index(index::OWNER_UID, uid)
            .iter()
            .map(|o| o.metadata().clone())
            .collect()
    }
}

pub struct GarbageCollector {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    kinds: Vec<Box<dyn Watched>>,
}

/// `Kind|namespace|name`.
fn item(kind: &str, m: &ObjectMeta) -> String {
    format!(
        "{kind}|{}|{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
}

fn has_finalizer(m: &ObjectMeta, f: &str) -> bool {
    m.finalizers.iter().flatten().any(|x| x == f)
}

/// `/api/v1/namespaces/ns/pods/name` for an apiVersion/kind, if rkube serves it.
fn path(api_version: &str, kind: &str, ns: &str, name: &str) -> Option<String> {
    let def = rkube_api::resources::find_kind(api_version, kind)?;
    let mut p = if def.group.is_empty() {
        format!("/api/{}", def.version)
    } else {
        format!("/apis/{}/{}", def.group, def.version)
    };
    if def.namespaced {
        p.push_str(&format!("/namespaces/{ns}"));
    }
    p.push_str(&format!("/{}/{name}", def.plural));
    Some(p)
}

enum OwnerState {
    Solid,
    Dangling,
    /// Being deleted in the foreground, waiting for its dependents.
    Waiting,
}

impl GarbageCollector {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        fn kind<K: Resource>(
            kind: &'static str,
            api_version: &'static str,
            store: &Arc<Store<K>>,
        ) -> Box<dyn Watched> {
            Box::new(Kind {
                kind,
                api_version,
                store: store.clone(),
            })
        }
        let gc = Arc::new(GarbageCollector {
            ctx: ctx.clone(),
            queue: WorkQueue::new("garbagecollector"),
            kinds: vec![
                kind("Deployment", "apps/v1", &ctx.deployments),
                kind("ReplicaSet", "apps/v1", &ctx.replicasets),
                kind("Pod", "v1", &ctx.pods),
                kind("Service", "v1", &ctx.services),
                kind("EndpointSlice", "discovery.k8s.io/v1", &ctx.endpoint_slices),
            ],
        });
        gc.watch(&ctx.deployments, "Deployment");
        gc.watch(&ctx.replicasets, "ReplicaSet");
        gc.watch(&ctx.pods, "Pod");
        gc.watch(&ctx.services, "Service");
        gc.watch(&ctx.endpoint_slices, "EndpointSlice");
        gc
    }

    fn watched(&self, kind: &str) -> Option<&dyn Watched> {
        self.kinds.iter().find(|k| k.kind() == kind).map(|k| &**k)
    }

    fn api_version_of(&self, kind: &str) -> &'static str {
        self.watched(kind).map_or("v1", |k| k.api_version())
    }

    fn watch<K: Resource>(self: &Arc<Self>, store: &Arc<Store<K>>, kind: &'static str) {
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
                    if me.watched(&r.kind).is_some() {
                        me.queue.add(format!(
                            "{}|{}|{}",
                            r.kind,
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
                me.queue.add(item(kind, m));
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
        let mut out = Vec::new();
        for k in &self.kinds {
            for m in k.owned_by(uid) {
                out.push((item(k.kind(), &m), m));
            }
        }
        out
    }

    fn cached(&self, kind: &str, ns: &str, name: &str) -> Option<ObjectMeta> {
        self.watched(kind)?.meta(ns, name)
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "garbagecollector", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
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
        let mut waiting = 0;
        let mut drop_refs = Vec::new();
        for r in &refs {
            match self.owner_state(r, ns).await? {
                OwnerState::Solid => solid += 1,
                OwnerState::Waiting => {
                    waiting += 1;
                    drop_refs.push(r.uid.clone());
                }
                OwnerState::Dangling => drop_refs.push(r.uid.clone()),
            }
        }
        let Some(p) = path(self.api_version_of(kind), kind, ns, name) else {
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
        let meta = match self.cached(&r.kind, ns, &r.name) {
            Some(m) if m.uid.as_deref() == Some(r.uid.as_str()) => Some(m),
            _ => {
                // Not (yet) in the cache: ask the apiserver before calling it gone.
                let Some(p) = path(&r.api_version, &r.kind, ns, &r.name) else {
                    return Ok(OwnerState::Solid); // a kind we do not know: never delete for it
                };
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
            let kind = it.split('|').next().unwrap_or("");
            let Some(p) = path(
                self.api_version_of(kind),
                kind,
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default(),
            ) else {
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
                if let Some(p) = path(
                    self.api_version_of(dk),
                    dk,
                    dm.namespace.as_deref().unwrap_or_default(),
                    dm.name.as_deref().unwrap_or_default(),
                ) {
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
        let Some(p) = path(
            self.api_version_of(kind),
            kind,
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        ) else {
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
