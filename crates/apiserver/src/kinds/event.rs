//! Events (`pkg/registry/core/event`): they expire (`--event-ttl`), a PUT may create one, and
//! they are selected by their involved object, reason, source and type.

use rkube_api::k8s::api::core::v1 as core;
use serde_json::{json, Value};

use super::print::{age_at, s, Column};
use super::Strategy;

pub struct Event;

impl Strategy for Event {
    crate::typed_kind!(core::Event);

    fn allow_create_on_update(&self) -> bool {
        true
    }

    fn expires(&self) -> bool {
        true
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "source" => {
                let c = s(obj, "/source/component");
                if c.is_empty() {
                    s(obj, "/reportingComponent")
                } else {
                    c
                }
            }
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::text("Last Seen"),
            Column::text("Type"),
            Column::text("Reason"),
            Column::text("Object"),
            Column::text("Message"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let last = if !s(obj, "/lastTimestamp").is_empty() {
            age_at(obj, "/lastTimestamp", now)
        } else if !s(obj, "/eventTime").is_empty() {
            age_at(obj, "/eventTime", now)
        } else {
            super::print::age(obj, now)
        };
        let object = format!(
            "{}/{}",
            s(obj, "/involvedObject/kind").to_lowercase(),
            s(obj, "/involvedObject/name")
        );
        vec![
            json!(last),
            json!(s(obj, "/type")),
            json!(s(obj, "/reason")),
            json!(object),
            json!(s(obj, "/message")),
        ]
    }
}
