//! PriorityClasses and RuntimeClasses (`pkg/registry/scheduling`, `pkg/registry/node`): a
//! priority's bounds, the reserved `system-` prefix and immutable value, the preemption policy
//! default, the two built-in classes, and columns.

use rkube_api::k8s::api::node::v1 as node;
use rkube_api::k8s::api::scheduling::v1 as scheduling;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, s, Column};
use super::{set_default, Strategy};

pub struct PriorityClass;
pub struct RuntimeClass;

/// Priorities above this are reserved for the system classes.
pub const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// The built-in classes every cluster has: (name, value, description).
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The built-in PriorityClass objects.
pub fn system_classes() -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            })
        })
        .collect()
}

impl Strategy for PriorityClass {
    crate::typed_kind!(scheduling::PriorityClass);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/preemptionPolicy", json!("PreemptLowerPriority"));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let name = meta::name(obj);
        let value = i(obj, "/value");
        let system = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name);
        match system {
            Some((_, v, _)) if *v != value => causes.push(StatusCause::forbidden(
                "metadata.name",
                &format!("priority class {name} is reserved for system use; its value must be {v}"),
            )),
            Some(_) => {}
            None if name.starts_with("system-") => causes.push(StatusCause::forbidden(
                "metadata.name",
                "priority class names with 'system-' prefix are reserved",
            )),
            None if value > HIGHEST_USER_PRIORITY => causes.push(StatusCause::forbidden(
                "value",
                &format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
                ),
            )),
            None => {}
        }
        let p = s(obj, "/preemptionPolicy");
        if !["PreemptLowerPriority", "Never"].contains(&p.as_str()) {
            causes.push(StatusCause::not_supported(
                "preemptionPolicy",
                &p,
                &["Never", "PreemptLowerPriority"],
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("value") != old.get("value") {
            causes.push(StatusCause::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        if new.get("preemptionPolicy") != old.get("preemptionPolicy") {
            causes.push(StatusCause::invalid(
                "preemptionPolicy",
                &s(new, "/preemptionPolicy"),
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::integer("Value"),
            Column("Global-Default", "boolean", 0, ""),
            Column::AGE,
            Column::text("PreemptionPolicy"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let global = obj
            .get("globalDefault")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        vec![
            json!(meta::name(obj)),
            json!(i(obj, "/value")),
            json!(global),
            json!(print::age(obj, now)),
            json!(s(obj, "/preemptionPolicy")),
        ]
    }

    fn reconcile_bootstrap(&self, current: &Value, desired: &Value) -> Option<Value> {
        (current.get("value") != desired.get("value")).then(|| {
            let mut v = current.clone();
            v["value"] = desired["value"].clone();
            v
        })
    }
}

impl Strategy for RuntimeClass {
    crate::typed_kind!(node::RuntimeClass);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let h = s(obj, "/handler");
        if h.is_empty() {
            causes.push(StatusCause::required("handler"));
        } else if let Err(e) = rkube_api::validation::dns1123_label(&h) {
            causes.push(StatusCause::invalid("handler", &h, &e));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("handler") != old.get("handler") {
            causes.push(StatusCause::invalid(
                "handler",
                &s(new, "/handler"),
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("Handler"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/handler")),
            json!(print::age(obj, now)),
        ]
    }
}
