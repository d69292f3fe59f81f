//! StatefulSets, DaemonSets and ControllerRevisions (`pkg/registry/apps`): defaults, what a
//! StatefulSet's update may change, a DaemonSet's `Always` restart policy, and their columns.

use rkube_api::k8s::api::apps::v1 as apps;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, label_map, list_of, or_none, s, selector_string, Column};
use super::{podspec, reset_status, set_default, Strategy};

pub struct StatefulSet;
pub struct DaemonSet;
pub struct ControllerRevision;

impl Strategy for StatefulSet {
    crate::typed_kind!(apps::StatefulSet);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/replicas", json!(1));
        set_default(obj, "/spec/podManagementPolicy", json!("OrderedReady"));
        let rolling = obj
            .pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str)
            .unwrap_or("RollingUpdate")
            == "RollingUpdate";
        set_default(obj, "/spec/updateStrategy/type", json!("RollingUpdate"));
        if rolling {
            set_default(
                obj,
                "/spec/updateStrategy/rollingUpdate/partition",
                json!(0),
            );
        }
        set_default(obj, "/spec/revisionHistoryLimit", json!(10));
        set_default(
            obj,
            "/spec/persistentVolumeClaimRetentionPolicy",
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        );
        if let Some(claims) = obj
            .pointer_mut("/spec/volumeClaimTemplates")
            .and_then(Value::as_array_mut)
        {
            for c in claims {
                set_default(c, "/apiVersion", json!("v1"));
                set_default(c, "/kind", json!("PersistentVolumeClaim"));
                set_default(c, "/spec/volumeMode", json!("Filesystem"));
                set_default(c, "/status/phase", json!("Pending"));
            }
        }
        podspec::template_defaults(obj);
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"replicas": 0, "availableReplicas": 0}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        super::apps::validate_selector_template(obj, causes);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        const MUTABLE: [&str; 6] = [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ];
        let strip = |v: &Value| {
            let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(m) = spec.as_object_mut() {
                for f in MUTABLE {
                    m.remove(f);
                }
            }
            spec
        };
        if strip(new) != strip(old) {
            causes.push(StatusCause::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Ready"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(format!(
                "{}/{}",
                i(obj, "/status/readyReplicas"),
                i(obj, "/spec/replicas")
            )),
            json!(print::age(obj, now)),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
        ]
    }
}

impl Strategy for DaemonSet {
    crate::typed_kind!(apps::DaemonSet);

    fn defaults(&self, obj: &mut Value) {
        let rolling = obj
            .pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str)
            .unwrap_or("RollingUpdate")
            == "RollingUpdate";
        set_default(obj, "/spec/updateStrategy/type", json!("RollingUpdate"));
        if rolling {
            set_default(
                obj,
                "/spec/updateStrategy/rollingUpdate/maxUnavailable",
                json!(1),
            );
            set_default(obj, "/spec/updateStrategy/rollingUpdate/maxSurge", json!(0));
        }
        set_default(obj, "/spec/revisionHistoryLimit", json!(10));
        podspec::template_defaults(obj);
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(
            obj,
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
        );
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let mut with_replicas = obj.clone();
        super::remove_at(&mut with_replicas, "/spec/replicas");
        super::apps::validate_selector_template(&with_replicas, causes);
        let restart = s(obj, "/spec/template/spec/restartPolicy");
        if restart != "Always" {
            causes.push(StatusCause::not_supported(
                "spec.template.spec.restartPolicy",
                &restart,
                &["Always"],
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        super::apps::selector_immutable(new, old, causes);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::integer("Desired"),
            Column::integer("Current"),
            Column::integer("Ready"),
            Column::integer("Up-to-date"),
            Column::integer("Available"),
            Column::text("Node Selector"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
            Column::wide("Selector"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(i(obj, "/status/desiredNumberScheduled")),
            json!(i(obj, "/status/currentNumberScheduled")),
            json!(i(obj, "/status/numberReady")),
            json!(i(obj, "/status/updatedNumberScheduled")),
            json!(i(obj, "/status/numberAvailable")),
            json!(or_none(label_map(
                obj.pointer("/spec/template/spec/nodeSelector")
            ))),
            json!(print::age(obj, now)),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(selector_string(obj)),
        ]
    }
}

impl Strategy for ControllerRevision {
    crate::typed_kind!(apps::ControllerRevision);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        if i(obj, "/revision") < 0 {
            causes.push(StatusCause::invalid_raw(
                "revision",
                &i(obj, "/revision").to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("data") != old.get("data") {
            causes.push(StatusCause::invalid_raw(
                "data",
                "runtime.RawExtension{...}",
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Controller"),
            Column::integer("Revision"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let controller = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            })
            .map(|r| {
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                let group = r
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .and_then(|a| a.rsplit_once('/').map(|(g, _)| g))
                    .unwrap_or("");
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                let lower = kind.to_lowercase();
                if group.is_empty() {
                    format!("{lower}/{name}")
                } else {
                    format!("{lower}.{group}/{name}")
                }
            })
            .unwrap_or_else(|| "<none>".into());
        vec![
            json!(meta::name(obj)),
            json!(controller),
            json!(i(obj, "/revision")),
            json!(print::age(obj, now)),
        ]
    }
}
