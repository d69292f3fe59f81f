//! `pvc-protection` and `pv-protection`: a deleted claim keeps its finalizer while a pod that
//! has not finished uses it; a deleted volume keeps its finalizer while it is bound.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use rkube_client::informer::{index, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, Patch, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

pub struct Protection {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

/// The claims a pod uses.
fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

impl Protection {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(Protection {
            ctx: ctx.clone(),
            queue: WorkQueue::new("pvc_protection"),
        });
        let q = c.queue.clone();
        ctx.claims.on_change(move |ch| {
            if let Change::Added(p) | Change::Updated { new: p, .. } = ch {
                if p.metadata.deletion_timestamp.is_some() {
                    q.add(format!(
                        "pvc:{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or(""),
                        p.metadata.name.as_deref().unwrap_or("")
                    ));
                }
            }
        });
        let q = c.queue.clone();
        ctx.volumes.on_change(move |ch| {
            if let Change::Added(v) | Change::Updated { new: v, .. } = ch {
                if v.metadata.deletion_timestamp.is_some() {
                    q.add(format!("pv:{}", v.metadata.name.as_deref().unwrap_or("")));
                }
            }
        });
        let q = c.queue.clone();
        ctx.pods.on_change(move |ch| {
            let p = match ch {
                Change::Deleted(p) | Change::Updated { new: p, .. } => p,
                Change::Added(_) => return,
            };
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            for claim in p.claims() {
                q.add(format!("pvc:{ns}/{claim}"));
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "pvc-protection", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        match key.split_once(':') {
            Some(("pvc", k)) => {
                let (ns, name) = split_key(k);
                let Some(pvc) = self.ctx.claims.get_in(ns, name) else {
                    return Ok(None);
                };
                let in_use = self
                    .ctx
                    .pods
                    .by_index(index::NAMESPACE, ns)
                    .iter()
                    .any(|p| !finished(p) && p.claims().iter().any(|c| c == name));
                if pvc.metadata.deletion_timestamp.is_none() || in_use {
                    return Ok(None);
                }
                let api: Api<PersistentVolumeClaim> = Api::namespaced(&self.ctx.client, ns);
                release(&api, name, &pvc.metadata, PVC_PROTECTION).await
            }
            Some(("pv", name)) => {
                let Some(pv) = self.ctx.volumes.get(name) else {
                    return Ok(None);
                };
                let bound = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                if pv.metadata.deletion_timestamp.is_none() || bound {
                    return Ok(None);
                }
                let api: Api<PersistentVolume> = Api::all(&self.ctx.client);
                release(&api, name, &pv.metadata, PV_PROTECTION).await
            }
            _ => Ok(None),
        }
    }
}

/// Removes `finalizer` (the object's other finalizers kept, its version a precondition).
async fn release<K: rkube_client::Resource>(
    api: &Api<K>,
    name: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    finalizer: &str,
) -> Reconciled {
    let list: Vec<&String> = meta.finalizers.iter().flatten().collect();
    if !list.iter().any(|f| *f == finalizer) {
        return Ok(None);
    }
    let rest: Vec<&String> = list.into_iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": meta.resource_version}});
    match api.patch(name, &Patch::Merge(patch)).await {
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}
