//! Storage without storage (upstream's `persistentvolume-binder`, with a simulated provisioner
//! for every StorageClass, and the `pvc-protection` / `pv-protection` controllers): a claim is
//! bound to a fitting Available volume, or gets a volume of its size made for it (for a
//! `WaitForFirstConsumer` class once the scheduler picked its pod's node, the volume pinned to
//! that node); a released volume is deleted or kept by its reclaim policy; claims and volumes
//! in use keep their protection finalizers. A `standard` default class exists when no class
//! does. The decisions are in `logic` (pure).

pub mod logic;
pub mod protection;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use rkube_client::informer::{split_key, Change};
use rkube_client::{Api, DeleteParams, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// The class made when a cluster has none.
pub const DEFAULT_CLASS: &str = "standard";
pub const SIMULATED_PROVISIONER: &str = "rkube.io/simulated";

pub struct VolumeBinder {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

fn claim_key(ns: &str, name: &str) -> String {
    format!("pvc:{ns}/{name}")
}

impl VolumeBinder {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(VolumeBinder {
            ctx: ctx.clone(),
            queue: WorkQueue::new("persistentvolume-binder"),
        });
        let q = c.queue.clone();
        ctx.claims.on_change(move |ch| {
            let p = match ch {
                Change::Added(p) | Change::Updated { new: p, .. } => p,
                Change::Deleted(p) => {
                    // Its volume is released now.
                    if let Some(v) = p.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
                        q.add(format!("pv:{v}"));
                    }
                    p
                }
            };
            q.add(claim_key(
                p.metadata.namespace.as_deref().unwrap_or(""),
                p.metadata.name.as_deref().unwrap_or(""),
            ));
        });
        let q = c.queue.clone();
        let claims = ctx.claims.clone();
        ctx.volumes.on_change(move |ch| {
            let (v, gone) = match ch {
                Change::Added(v) | Change::Updated { new: v, .. } => (v, false),
                Change::Deleted(v) => (v, true),
            };
            q.add(format!("pv:{}", v.metadata.name.as_deref().unwrap_or("")));
            match v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                Some(r) => q.add(claim_key(
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or(""),
                )),
                // A volume free to bind: the claims still waiting may fit it now (a claim
                // synced before this volume reached the cache found nothing to bind).
                None if !gone => {
                    for pvc in claims.list() {
                        let unbound = pvc
                            .spec
                            .as_ref()
                            .and_then(|s| s.volume_name.as_deref())
                            .is_none_or(str::is_empty);
                        if unbound {
                            q.add(claim_key(
                                pvc.metadata.namespace.as_deref().unwrap_or(""),
                                pvc.metadata.name.as_deref().unwrap_or(""),
                            ));
                        }
                    }
                }
                None => {}
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        let me = self.clone();
        tokio::spawn(async move { me.ensure_default_class().await });
        crate::worker::serve!(self, "persistentvolume-binder", workers, shutdown);
    }

    /// Creates the `standard` default class when the cluster has no class at all.
    async fn ensure_default_class(&self) {
        if !self.ctx.storage_classes.list().is_empty() {
            return;
        }
        let class: StorageClass = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": DEFAULT_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": SIMULATED_PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }))
        .expect("class");
        match Api::<StorageClass>::all(&self.ctx.client)
            .create(&class)
            .await
        {
            Ok(_) => tracing::info!(class = DEFAULT_CLASS, "created the default StorageClass"),
            Err(e) if e.code() == Some(409) => {}
            Err(e) => tracing::warn!(error = %e, "could not create the default StorageClass"),
        }
    }

    async fn sync(&self, key: &str) -> Reconciled {
        match key.split_once(':') {
            Some(("pvc", k)) => self.sync_claim(k).await,
            Some(("pv", name)) => self.sync_volume(name).await,
            _ => Ok(None),
        }
    }

    async fn sync_claim(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let Some(pvc) = self.ctx.claims.get_in(ns, name) else {
            return Ok(None);
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let bound_to = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let phase = pvc.status.as_ref().and_then(|s| s.phase.clone());
        if let Some(v) = &bound_to {
            match self.ctx.volumes.get(v) {
                Some(pv) => return self.bind(&pv, &pvc).await,
                None if phase.as_deref() == Some("Bound") => {
                    return self.set_claim_status(&pvc, json!({"phase": "Lost"})).await;
                }
                None => {}
            }
        }
        // Retroactive default class (GA in 1.28): a claim that named no class gets today's.
        let unset = pvc
            .spec
            .as_ref()
            .is_none_or(|s| s.storage_class_name.is_none())
            && !pvc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("volume.beta.kubernetes.io/storage-class"));
        if unset && bound_to.is_none() {
            if let Some(default) = self.default_class() {
                let mut next = (*pvc).clone();
                next.spec
                    .get_or_insert_with(Default::default)
                    .storage_class_name = Some(default);
                Api::<PersistentVolumeClaim>::namespaced(&self.ctx.client, ns)
                    .replace(name, &next)
                    .await?;
                return Ok(None);
            }
        }
        let volumes = self.ctx.volumes.list();
        if let Some(pv) = logic::find(&pvc, volumes.iter().map(|v| &**v)) {
            return self.bind(pv, &pvc).await;
        }
        let class_name = logic::claim_class(&pvc);
        let Some(class) = self.ctx.storage_classes.get(&class_name) else {
            return Ok(None);
        };
        if !logic::provisions(&class) {
            return Ok(None);
        }
        let selected = pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(logic::SELECTED_NODE));
        if logic::waits_for_consumer(Some(&class)) && !selected {
            return Ok(None);
        }
        let pv: PersistentVolume = serde_json::from_value(logic::provision(&pvc, &class))
            .map_err(|e| rkube_client::Error::Decode(e.to_string()))?;
        match Api::<PersistentVolume>::all(&self.ctx.client)
            .create(&pv)
            .await
        {
            Ok(_) => {
                tracing::debug!(claim = key, "provisioned a volume");
                Ok(None)
            }
            Err(e) if e.code() == Some(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The default StorageClass (the newest, if several are marked).
    fn default_class(&self) -> Option<String> {
        self.ctx
            .storage_classes
            .list()
            .into_iter()
            .filter(|c| {
                c.metadata.annotations.as_ref().is_some_and(|a| {
                    a.get("storageclass.kubernetes.io/is-default-class")
                        .map(String::as_str)
                        == Some("true")
                })
            })
            .max_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            })
            .and_then(|c| c.metadata.name.clone())
    }

    /// Completes the binding on both sides (each step idempotent).
    async fn bind(&self, pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> Reconciled {
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let name = pvc.metadata.name.clone().unwrap_or_default();
        let volumes: Api<PersistentVolume> = Api::all(&self.ctx.client);
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.and_then(|r| r.uid.as_deref()) != pvc.metadata.uid.as_deref() {
            let mut next = pv.clone();
            next.spec.get_or_insert_with(Default::default).claim_ref = Some(
                serde_json::from_value(json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "namespace": ns, "name": name, "uid": pvc.metadata.uid,
                    "resourceVersion": pvc.metadata.resource_version}))
                .expect("reference"),
            );
            next.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(logic::BOUND_BY_CONTROLLER.into(), "yes".into());
            volumes.replace(&pv_name, &next).await?;
            return Ok(None); // the update brings the volume back here
        }
        if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
            let mut next = pv.clone();
            next.status.get_or_insert_with(Default::default).phase = Some("Bound".into());
            volumes.replace_status(&pv_name, &next).await?;
            return Ok(None);
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(&self.ctx.client, &ns);
        if pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()) != Some(pv_name.as_str()) {
            let mut next = pvc.clone();
            next.spec.get_or_insert_with(Default::default).volume_name = Some(pv_name.clone());
            let a = next
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            a.insert(logic::BIND_COMPLETED.into(), "yes".into());
            a.insert(logic::BOUND_BY_CONTROLLER.into(), "yes".into());
            claims.replace(&name, &next).await?;
            return Ok(None);
        }
        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
            let spec = pv.spec.clone().unwrap_or_default();
            return self
                .set_claim_status(
                    pvc,
                    json!({"phase": "Bound", "accessModes": spec.access_modes, "capacity": spec.capacity}),
                )
                .await;
        }
        Ok(None)
    }

    async fn set_claim_status(&self, pvc: &PersistentVolumeClaim, status: Value) -> Reconciled {
        let ns = pvc.metadata.namespace.clone().unwrap_or_default();
        let mut next = serde_json::to_value(pvc).expect("claim");
        next["status"] = status;
        let next: PersistentVolumeClaim =
            serde_json::from_value(next).map_err(|e| rkube_client::Error::Decode(e.to_string()))?;
        Api::<PersistentVolumeClaim>::namespaced(&self.ctx.client, &ns)
            .replace_status(pvc.metadata.name.as_deref().unwrap_or(""), &next)
            .await
            .map(|_| None)
    }

    /// A volume whose claim is gone is released: deleted (`Delete`) or kept `Released`.
    async fn sync_volume(&self, name: &str) -> Reconciled {
        let Some(pv) = self.ctx.volumes.get(name) else {
            return Ok(None);
        };
        if pv.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let api: Api<PersistentVolume> = Api::all(&self.ctx.client);
        let spec = pv.spec.clone().unwrap_or_default();
        let phase = pv.status.as_ref().and_then(|s| s.phase.clone());
        let Some(r) = spec.claim_ref.as_ref() else {
            if phase.as_deref() != Some("Available") {
                let mut next = (*pv).clone();
                next.status.get_or_insert_with(Default::default).phase = Some("Available".into());
                api.replace_status(name, &next).await?;
            }
            return Ok(None);
        };
        let claim = self.ctx.claims.get_in(
            r.namespace.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or(""),
        );
        let claim_gone = match (&claim, r.uid.as_deref()) {
            (None, _) => true,
            (Some(c), Some(uid)) => c.metadata.uid.as_deref() != Some(uid),
            (Some(_), None) => false,
        };
        if !claim_gone || !matches!(phase.as_deref(), Some("Bound") | Some("Released")) {
            return Ok(None);
        }
        // Confirm with the apiserver before letting a volume go.
        let live = Api::<PersistentVolumeClaim>::namespaced(
            &self.ctx.client,
            r.namespace.as_deref().unwrap_or(""),
        )
        .get_opt(r.name.as_deref().unwrap_or(""))
        .await?;
        if live.is_some_and(|c| c.metadata.uid.as_deref() == r.uid.as_deref()) {
            return Ok(None);
        }
        // Released first (so nothing counts it in use), then deleted if its policy says so.
        if phase.as_deref() == Some("Bound") {
            let mut next = (*pv).clone();
            next.status.get_or_insert_with(Default::default).phase = Some("Released".into());
            return api.replace_status(name, &next).await.map(|_| None);
        }
        match spec.persistent_volume_reclaim_policy.as_deref() {
            Some("Delete") => match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => Ok(None),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            },
            _ => Ok(None),
        }
    }
}
