//! The binder's decisions (pure): which Available volume fits a claim (class, access modes,
//! volume mode, size; the smallest that fits, a volume pre-bound to the claim first), the
//! volume a simulated provisioner makes for a claim, and the bound objects on both sides.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{json, Value};

/// The annotation the scheduler sets on a `WaitForFirstConsumer` claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Classes with this provisioner get no volumes made for them (static volumes only).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The class a claim asks for ("" for none).
pub fn claim_class(pvc: &PersistentVolumeClaim) -> String {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .cloned()
        .or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

/// The class of a volume ("" for none).
pub fn volume_class(pv: &PersistentVolume) -> String {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .cloned()
        .or_else(|| pv.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

fn bytes(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    q.and_then(|q| rkube_api::quantity::parse_value(&q.0))
        .map_or(0, i128::from)
}

/// The storage a claim requests, in bytes.
pub fn requested(pvc: &PersistentVolumeClaim) -> i128 {
    bytes(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )
}

fn capacity(pv: &PersistentVolume) -> i128 {
    bytes(
        pv.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

fn mode<T: AsRef<str>>(m: Option<T>) -> String {
    m.map_or("Filesystem".into(), |m| m.as_ref().to_string())
}

/// Whether `pv` can hold `pvc`.
pub fn fits(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let (Some(vs), Some(cs)) = (pv.spec.as_ref(), pvc.spec.as_ref()) else {
        return false;
    };
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let claimed_by_other = vs.claim_ref.as_ref().is_some_and(|r| {
        r.name.as_deref() != pvc.metadata.name.as_deref()
            || r.namespace.as_deref() != pvc.metadata.namespace.as_deref()
            || r.uid
                .as_deref()
                .is_some_and(|u| Some(u) != pvc.metadata.uid.as_deref())
    });
    let wanted_volume = cs.volume_name.as_deref().filter(|v| !v.is_empty());
    if wanted_volume.is_some_and(|v| Some(v) != pv.metadata.name.as_deref()) {
        return false;
    }
    let modes_ok = cs
        .access_modes
        .iter()
        .flatten()
        .all(|m| vs.access_modes.iter().flatten().any(|v| v == m));
    pv.metadata.deletion_timestamp.is_none()
        && matches!(phase, None | Some("Available") | Some("Pending"))
        && !claimed_by_other
        && volume_class(pv) == claim_class(pvc)
        && modes_ok
        && mode(vs.volume_mode.as_ref()) == mode(cs.volume_mode.as_ref())
        && capacity(pv) >= requested(pvc)
}

/// The volume for a claim among `pvs`: one already bound to it (by uid), else one pre-bound
/// to it, else the smallest that fits.
pub fn find<'a>(
    pvc: &PersistentVolumeClaim,
    pvs: impl IntoIterator<Item = &'a PersistentVolume>,
) -> Option<&'a PersistentVolume> {
    let pvs: Vec<&PersistentVolume> = pvs.into_iter().collect();
    let uid = pvc.metadata.uid.as_deref();
    if let Some(mine) = pvs.iter().find(|pv| {
        uid.is_some()
            && pv.metadata.deletion_timestamp.is_none()
            && pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.as_deref())
                == uid
    }) {
        return Some(mine);
    }
    let fitting: Vec<&PersistentVolume> = pvs.into_iter().filter(|pv| fits(pv, pvc)).collect();
    fitting
        .iter()
        .find(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some()
        })
        .copied()
        .or_else(|| fitting.into_iter().min_by_key(|pv| capacity(pv)))
}

/// The volume a simulated provisioner makes for a claim: its size and modes, the class's
/// reclaim policy, pre-bound to the claim, on the selected node for `WaitForFirstConsumer`.
pub fn provision(pvc: &PersistentVolumeClaim, class: &StorageClass) -> Value {
    let spec = pvc.spec.clone().unwrap_or_default();
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or("0".to_string(), |q| q.0.clone());
    let mut pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: class.provisioner}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": spec.access_modes.unwrap_or_default(),
            "persistentVolumeReclaimPolicy": class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into()),
            "storageClassName": claim_class(pvc),
            "volumeMode": mode(spec.volume_mode.as_ref()),
            "claimRef": {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                "namespace": pvc.metadata.namespace, "name": pvc.metadata.name, "uid": uid,
            },
            "csi": {"driver": class.provisioner, "volumeHandle": name},
        },
    });
    if let Some(node) = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SELECTED_NODE))
    {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}});
    }
    pv
}

/// Whether the class makes volumes (a simulated one for every provisioner but the static one).
pub fn provisions(class: &StorageClass) -> bool {
    class.provisioner != NO_PROVISIONER
}

/// Whether the class waits for a pod before binding.
pub fn waits_for_consumer(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, size: &str, class: &str) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"], "storageClassName": class, "hostPath": {"path": "/x"}},
            "status": {"phase": "Available"}})).unwrap()
    }

    fn pvc(size: &str, class: &str) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "c", "namespace": "d", "uid": "u1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": size}}}}),
        )
        .unwrap()
    }

    #[test]
    fn the_smallest_fitting_volume_of_the_class() {
        let pvs = [
            pv("big", "10Gi", "fast"),
            pv("small", "2Gi", "fast"),
            pv("tiny", "1Mi", "fast"),
            pv("other", "2Gi", "slow"),
        ];
        assert_eq!(
            find(&pvc("1Gi", "fast"), &pvs).and_then(|p| p.metadata.name.as_deref()),
            Some("small")
        );
        assert!(find(&pvc("20Gi", "fast"), &pvs).is_none());
        let class: StorageClass = serde_json::from_value(json!({"metadata": {"name": "fast"}, "provisioner": "example.com/disk", "reclaimPolicy": "Retain"})).unwrap();
        let made = provision(&pvc("1Gi", "fast"), &class);
        assert_eq!(made["metadata"]["name"], "pvc-u1");
        assert_eq!(made["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(made["spec"]["claimRef"]["name"], "c");
        let made: PersistentVolume = serde_json::from_value(made).unwrap();
        assert!(fits(&made, &pvc("1Gi", "fast")));
    }
}
