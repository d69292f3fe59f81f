//! Storage admission (upstream's `DefaultStorageClass` and `StorageObjectInUseProtection`
//! plugins): a claim that names no class gets the default one; claims and volumes get the
//! protection finalizers the controller-manager lifts once they are no longer in use.

use rkube_api::meta;
use serde_json::{json, Value};

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// Whether a StorageClass is marked default.
fn is_default(class: &Value) -> bool {
    let a = meta::annotations(class);
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| a.get(*k).map(String::as_str) == Some("true"))
}

/// A new claim without `spec.storageClassName` (absent, not `""`) gets the default class: the
/// newest, if several are marked (upstream's tie-break).
pub fn default_class(pvc: &mut Value, classes: &[Value]) {
    if pvc
        .pointer("/spec/storageClassName")
        .is_some_and(|v| !v.is_null())
    {
        return;
    }
    if meta::annotations(pvc).contains_key("volume.beta.kubernetes.io/storage-class") {
        return;
    }
    let Some(class) = classes.iter().filter(|c| is_default(c)).max_by(|a, b| {
        meta::meta_str(a, "creationTimestamp")
            .cmp(meta::meta_str(b, "creationTimestamp"))
            .then_with(|| meta::name(b).cmp(meta::name(a)))
    }) else {
        return;
    };
    if let Some(spec) = pvc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("storageClassName".into(), json!(meta::name(class)));
    }
}

/// Adds `finalizer` unless present.
pub fn protect(obj: &mut Value, finalizer: &str) {
    let mut list: Vec<Value> = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
        list.push(json!(finalizer));
        meta::set_meta(obj, "finalizers", json!(list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_get_the_default_class_and_protection() {
        let classes = vec![
            json!({"metadata": {"name": "slow", "creationTimestamp": "2026-01-01T00:00:00Z"}}),
            json!({"metadata": {"name": "std", "creationTimestamp": "2026-01-02T00:00:00Z",
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}}),
        ];
        let mut pvc = json!({"metadata": {"name": "c"}, "spec": {}});
        default_class(&mut pvc, &classes);
        assert_eq!(pvc["spec"]["storageClassName"], "std");
        let mut none = json!({"metadata": {"name": "c"}, "spec": {"storageClassName": ""}});
        default_class(&mut none, &classes);
        assert_eq!(none["spec"]["storageClassName"], "");
        protect(&mut pvc, PVC_PROTECTION);
        protect(&mut pvc, PVC_PROTECTION);
        assert_eq!(pvc["metadata"]["finalizers"], json!([PVC_PROTECTION]));
    }
}
