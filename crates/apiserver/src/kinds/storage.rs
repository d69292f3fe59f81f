//! Storage kinds (`pkg/registry/core/persistentvolume{,claim}`, `pkg/registry/storage`):
//! PersistentVolumes and PersistentVolumeClaims (phase `Pending` on create, what a claim's
//! update may change), StorageClasses (the default-class marker in the name column),
//! CSIDrivers, CSINodes, VolumeAttachments and CSIStorageCapacities, with their columns.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::k8s::api::storage::v1 as storage;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, or_none, s, Column};
use super::{set_at, set_default, Strategy};

pub struct PersistentVolume;
pub struct PersistentVolumeClaim;
pub struct StorageClass;
pub struct CsiDriver;
pub struct CsiNode;
pub struct VolumeAttachment;
pub struct CsiStorageCapacity;

/// The annotation that marks the default StorageClass.
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// kubectl's short form of access modes: `RWO,ROX,RWX,RWOP`.
fn access_modes(v: Option<&Value>) -> String {
    v.and_then(Value::as_array)
        .map(|a| {
            let mut out: Vec<&str> = Vec::new();
            for (mode, short) in ACCESS_MODES.iter().zip(["RWO", "ROX", "RWX", "RWOP"]) {
                if a.iter().any(|m| m.as_str() == Some(mode)) {
                    out.push(short);
                }
            }
            out.join(",")
        })
        .unwrap_or_default()
}

fn validate_access_modes(v: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    let modes: Vec<&str> = v
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if modes.is_empty() {
        causes.push(StatusCause::required(path));
    }
    for m in &modes {
        if !ACCESS_MODES.contains(m) {
            causes.push(StatusCause::not_supported(path, m, &ACCESS_MODES));
        }
    }
    if modes.contains(&"ReadWriteOncePod") && modes.len() > 1 {
        causes.push(StatusCause::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

/// A volume's or claim's class: the beta annotation when present, else `spec.storageClassName`.
pub fn class_name(obj: &Value) -> String {
    meta::annotations(obj)
        .get("volume.beta.kubernetes.io/storage-class")
        .cloned()
        .unwrap_or_else(|| s(obj, "/spec/storageClassName"))
}

impl Strategy for PersistentVolume {
    crate::typed_kind!(core::PersistentVolume);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/persistentVolumeReclaimPolicy", json!("Retain"));
        set_default(obj, "/spec/volumeMode", json!("Filesystem"));
        set_default(obj, "/status/phase", json!("Pending"));
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        set_at(obj, "/status", json!({"phase": "Pending"}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_access_modes(obj.pointer("/spec/accessModes"), "spec.accessModes", causes);
        if obj.pointer("/spec/capacity/storage").is_none() {
            causes.push(StatusCause::required("spec.capacity"));
        }
        let sources = [
            "hostPath",
            "local",
            "nfs",
            "csi",
            "iscsi",
            "fc",
            "awsElasticBlockStore",
            "gcePersistentDisk",
            "azureDisk",
            "azureFile",
            "cephfs",
            "rbd",
            "cinder",
            "flexVolume",
            "glusterfs",
            "portworxVolume",
            "quobyte",
            "scaleIO",
            "storageos",
            "vsphereVolume",
            "photonPersistentDisk",
            "flocker",
        ];
        let n = sources
            .iter()
            .filter(|src| obj.pointer(&format!("/spec/{src}")).is_some())
            .count();
        if n == 0 {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: must specify a volume type".into(),
                field: "spec".into(),
            });
        } else if n > 1 {
            causes.push(StatusCause::forbidden(
                "spec",
                "may not specify more than 1 volume type",
            ));
        }
        let policy = s(obj, "/spec/persistentVolumeReclaimPolicy");
        if !["Retain", "Delete", "Recycle"].contains(&policy.as_str()) {
            causes.push(StatusCause::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                &policy,
                &["Delete", "Recycle", "Retain"],
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.pointer("/spec/volumeMode") != old.pointer("/spec/volumeMode") {
            causes.push(StatusCause::invalid(
                "spec.volumeMode",
                &s(new, "/spec/volumeMode"),
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Capacity"),
            Column::text("Access Modes"),
            Column::text("Reclaim Policy"),
            Column::text("Status"),
            Column::text("Claim"),
            Column::text("StorageClass"),
            Column::text("VolumeAttributesClass"),
            Column::text("Reason"),
            Column::AGE,
            Column::wide("VolumeMode"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let claim = match obj.pointer("/spec/claimRef") {
            Some(r) => format!(
                "{}/{}",
                r.get("namespace").and_then(Value::as_str).unwrap_or(""),
                r.get("name").and_then(Value::as_str).unwrap_or("")
            ),
            None => String::new(),
        };
        let mode = s(obj, "/spec/volumeMode");
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/capacity/storage")),
            json!(access_modes(obj.pointer("/spec/accessModes"))),
            json!(s(obj, "/spec/persistentVolumeReclaimPolicy")),
            json!(s(obj, "/status/phase")),
            json!(claim),
            json!(class_name(obj)),
            json!(unset(s(obj, "/spec/volumeAttributesClassName"))),
            json!(s(obj, "/status/reason")),
            json!(print::age(obj, now)),
            json!(if mode.is_empty() {
                "<unset>".into()
            } else {
                mode
            }),
        ]
    }
}

fn unset(v: String) -> String {
    if v.is_empty() {
        "<unset>".into()
    } else {
        v
    }
}

impl Strategy for PersistentVolumeClaim {
    crate::typed_kind!(core::PersistentVolumeClaim);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/volumeMode", json!("Filesystem"));
        set_default(obj, "/status/phase", json!("Pending"));
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        set_at(obj, "/status", json!({"phase": "Pending"}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_access_modes(obj.pointer("/spec/accessModes"), "spec.accessModes", causes);
        if obj.pointer("/spec/resources/requests/storage").is_none() {
            causes.push(StatusCause::required("spec.resources[storage]"));
        }
        let mode = s(obj, "/spec/volumeMode");
        if !["Filesystem", "Block"].contains(&mode.as_str()) {
            causes.push(StatusCause::not_supported(
                "spec.volumeMode",
                &mode,
                &["Block", "Filesystem"],
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        let strip = |v: &Value| {
            let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
            super::remove_at(&mut spec, "/resources/requests");
            super::remove_at(&mut spec, "/volumeAttributesClassName");
            // A claim bound by the binder gains its volume name once; a claim that named no
            // class gets the default one (retroactive default class).
            if old.pointer("/spec/volumeName").is_none() {
                super::remove_at(&mut spec, "/volumeName");
            }
            if old
                .pointer("/spec/storageClassName")
                .is_none_or(Value::is_null)
            {
                super::remove_at(&mut spec, "/storageClassName");
            }
            spec
        };
        if strip(new) != strip(old) {
            causes.push(StatusCause::forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Status"),
            Column::text("Volume"),
            Column::text("Capacity"),
            Column::text("Access Modes"),
            Column::text("StorageClass"),
            Column::text("VolumeAttributesClass"),
            Column::AGE,
            Column::wide("VolumeMode"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let phase = if meta::meta_str(obj, "deletionTimestamp").is_empty() {
            s(obj, "/status/phase")
        } else {
            "Terminating".into()
        };
        let bound = !s(obj, "/spec/volumeName").is_empty();
        let (capacity, modes) = if bound {
            (
                s(obj, "/status/capacity/storage"),
                access_modes(obj.pointer("/status/accessModes")),
            )
        } else {
            (String::new(), String::new())
        };
        let mode = s(obj, "/spec/volumeMode");
        vec![
            json!(meta::name(obj)),
            json!(phase),
            json!(s(obj, "/spec/volumeName")),
            json!(capacity),
            json!(modes),
            json!(class_name(obj)),
            json!(unset(s(obj, "/spec/volumeAttributesClassName"))),
            json!(print::age(obj, now)),
            json!(if mode.is_empty() {
                "<unset>".into()
            } else {
                mode
            }),
        ]
    }
}

impl Strategy for StorageClass {
    crate::typed_kind!(storage::StorageClass);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/reclaimPolicy", json!("Delete"));
        set_default(obj, "/volumeBindingMode", json!("Immediate"));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let provisioner = s(obj, "/provisioner");
        if provisioner.is_empty() {
            causes.push(StatusCause::required("provisioner"));
        } else if let Err(e) = rkube_api::validation::qualified_name(&provisioner.to_lowercase()) {
            causes.push(StatusCause::invalid("provisioner", &provisioner, &e));
        }
        let policy = s(obj, "/reclaimPolicy");
        if !["Delete", "Retain"].contains(&policy.as_str()) {
            causes.push(StatusCause::not_supported(
                "reclaimPolicy",
                &policy,
                &["Delete", "Retain"],
            ));
        }
        let mode = s(obj, "/volumeBindingMode");
        if !["Immediate", "WaitForFirstConsumer"].contains(&mode.as_str()) {
            causes.push(StatusCause::not_supported(
                "volumeBindingMode",
                &mode,
                &["Immediate", "WaitForFirstConsumer"],
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        for f in [
            "parameters",
            "provisioner",
            "reclaimPolicy",
            "volumeBindingMode",
        ] {
            if new.get(f) != old.get(f) {
                let shown = new.get(f).map_or("null".into(), |v| match v.as_str() {
                    Some(s) => format!("{s:?}"),
                    None => v.to_string(),
                });
                let why = if f == "parameters" {
                    "updates to parameters are forbidden."
                } else {
                    "field is immutable"
                };
                causes.push(if f == "parameters" {
                    StatusCause::forbidden(f, why)
                } else {
                    StatusCause::invalid_raw(f, &shown, why)
                });
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Provisioner"),
            Column::text("ReclaimPolicy"),
            Column::text("VolumeBindingMode"),
            Column::text("AllowVolumeExpansion"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let mut name = meta::name(obj).to_string();
        if is_default_class(obj) {
            name.push_str(" (default)");
        }
        let expansion = obj
            .get("allowVolumeExpansion")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        vec![
            json!(name),
            json!(s(obj, "/provisioner")),
            json!(s(obj, "/reclaimPolicy")),
            json!(s(obj, "/volumeBindingMode")),
            json!(if expansion { "true" } else { "false" }),
            json!(print::age(obj, now)),
        ]
    }
}

/// Whether a StorageClass carries the default-class annotation (or its beta spelling).
pub fn is_default_class(obj: &Value) -> bool {
    let a = meta::annotations(obj);
    [
        DEFAULT_CLASS,
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|k| a.get(*k).map(String::as_str) == Some("true"))
}

impl Strategy for CsiDriver {
    crate::typed_kind!(storage::CSIDriver);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/attachRequired", json!(true));
        set_default(obj, "/spec/podInfoOnMount", json!(false));
        set_default(obj, "/spec/storageCapacity", json!(false));
        set_default(obj, "/spec/fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
        set_default(obj, "/spec/requiresRepublish", json!(false));
        set_default(obj, "/spec/volumeLifecycleModes", json!(["Persistent"]));
        set_default(obj, "/spec/seLinuxMount", json!(false));
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        for f in ["attachRequired", "podInfoOnMount", "volumeLifecycleModes"] {
            let p = format!("/spec/{f}");
            if new.pointer(&p) != old.pointer(&p) {
                causes.push(StatusCause::invalid_raw(
                    &format!("spec.{f}"),
                    &new.pointer(&p).map_or("null".into(), Value::to_string),
                    "field is immutable",
                ));
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column("AttachRequired", "boolean", 0, ""),
            Column("PodInfoOnMount", "boolean", 0, ""),
            Column("StorageCapacity", "boolean", 0, ""),
            Column::text("TokenRequests"),
            Column("RequiresRepublish", "boolean", 0, ""),
            Column::text("Modes"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let b = |p: &str| obj.pointer(p).and_then(Value::as_bool).unwrap_or(false);
        let tokens = obj
            .pointer("/spec/tokenRequests")
            .and_then(Value::as_array)
            .map_or("<unset>".to_string(), |a| {
                a.iter()
                    .map(|t| t.get("audience").and_then(Value::as_str).unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join(",")
            });
        let modes = obj
            .pointer("/spec/volumeLifecycleModes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        vec![
            json!(meta::name(obj)),
            json!(b("/spec/attachRequired")),
            json!(b("/spec/podInfoOnMount")),
            json!(b("/spec/storageCapacity")),
            json!(tokens),
            json!(b("/spec/requiresRepublish")),
            json!(or_none(modes)),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for CsiNode {
    crate::typed_kind!(storage::CSINode);

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::integer("Drivers"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let n = obj
            .pointer("/spec/drivers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        vec![
            json!(meta::name(obj)),
            json!(n),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for VolumeAttachment {
    crate::typed_kind!(storage::VolumeAttachment);

    fn prepare_for_create(&self, obj: &mut Value) {
        super::reset_status(obj, json!({"attached": false}));
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("spec") != old.get("spec") {
            causes.push(StatusCause::invalid_raw(
                "spec",
                "storage.VolumeAttachmentSpec{...}",
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column("Attacher", "string", 0, "name"),
            Column::text("PV"),
            Column::text("Node"),
            Column("Attached", "boolean", 0, ""),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let attached = obj
            .pointer("/status/attached")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/attacher")),
            json!(s(obj, "/spec/source/persistentVolumeName")),
            json!(s(obj, "/spec/nodeName")),
            json!(attached),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for CsiStorageCapacity {
    crate::typed_kind!(storage::CSIStorageCapacity);

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("StorageClassName"),
            Column::text("Capacity"),
        ]
    }

    fn cells(&self, obj: &Value, _now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/storageClassName")),
            json!(obj
                .get("capacity")
                .and_then(Value::as_str)
                .unwrap_or("<unset>")),
        ]
    }
}
