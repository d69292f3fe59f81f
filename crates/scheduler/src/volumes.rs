//! Volume binding (upstream's `VolumeBinding` plugin, reduced): every claim a pod uses must
//! exist; a claim bound to a volume pinned to other nodes rules those nodes out while filtering
//! (from the claim and volume informers) and again before binding; an unbound claim of a `WaitForFirstConsumer` class is given the chosen node
//! (`volume.kubernetes.io/selected-node`) so the volume is made there; the pod is bound only
//! once its claims are.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use rkube_client::pod::Pod;
use rkube_client::{Api, Client, Patch, Store};
use serde_json::json;

pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// How long a pod's bind waits for its claims to be bound.
const BIND_WAIT: Duration = Duration::from_secs(30);

/// Whether a volume's node affinity admits a node (any of its terms matches the node's
/// labels and name).
pub fn admits(pv: &PersistentVolume, labels: &BTreeMap<String, String>, node: &str) -> bool {
    let Some(terms) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| &r.node_selector_terms)
    else {
        return true;
    };
    terms
        .iter()
        .any(|t| crate::plugins::term_matches(t, labels, node))
}

/// The volumes the pod's bound claims use (they pin the pod to their nodes), from the
/// informers' caches; the missing claim, if one is missing.
pub fn pinned(
    pod: &Pod,
    claims_cache: &Store<PersistentVolumeClaim>,
    volumes_cache: &Store<PersistentVolume>,
) -> Result<Vec<Arc<PersistentVolume>>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = Vec::new();
    for name in pod.claims() {
        let Some(pvc) = claims_cache.get_in(ns, &name) else {
            return Err(name);
        };
        let bound_to = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        if let Some(pv) = bound_to.and_then(|v| volumes_cache.get(v)) {
            out.push(pv);
        }
    }
    Ok(out)
}

/// Gets the pod's claims ready for `node`; the reason it cannot, as the scheduler reports it.
pub async fn prepare(
    client: &Client,
    pod: &Pod,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let names = pod.claims();
    if names.is_empty() {
        return Ok(());
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client, ns);
    let pvs: Api<PersistentVolume> = Api::all(client);
    let classes: Api<StorageClass> = Api::all(client);
    let deadline = tokio::time::Instant::now() + BIND_WAIT;
    for name in names {
        let mut asked = false;
        loop {
            let pvc = pvcs
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("persistentvolumeclaim \"{name}\" not found"))?;
            let spec = pvc.spec.clone().unwrap_or_default();
            if let Some(v) = spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                if let Some(pv) = pvs.get_opt(v).await.map_err(|e| e.to_string())? {
                    if !admits(&pv, labels, node) {
                        return Err(crate::plugins::R_VOLUME_AFFINITY.into());
                    }
                    if bound {
                        break;
                    }
                }
            } else if !asked {
                let class = match spec.storage_class_name.as_deref().filter(|c| !c.is_empty()) {
                    Some(c) => classes.get_opt(c).await.map_err(|e| e.to_string())?,
                    None => None,
                };
                let waits = class
                    .as_ref()
                    .and_then(|c| c.volume_binding_mode.as_deref())
                    == Some("WaitForFirstConsumer");
                let selected = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(SELECTED_NODE))
                    .map(String::as_str);
                if waits && selected != Some(node) {
                    pvcs.patch(
                        &name,
                        &Patch::Merge(json!({"metadata": {"annotations": {SELECTED_NODE: node}}})),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
                asked = true;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "pod has unbound PersistentVolumeClaims (\"{name}\" is not bound yet)"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
