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
            Column::wide("Subobject"),
            Column::wide("Source"),
            Column::text("Message"),
            Column::wide("First Seen"),
            Column::wide("Count"),
            Column("Name", "string", 1, "name"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let first = if !s(obj, "/firstTimestamp").is_empty() {
            age_at(obj, "/firstTimestamp", now)
        } else {
            age_at(obj, "/eventTime", now)
        };
        let last = if obj.get("series").is_some_and(|v| !v.is_null()) {
            age_at(obj, "/series/lastObservedTime", now)
        } else if !s(obj, "/lastTimestamp").is_empty() {
            age_at(obj, "/lastTimestamp", now)
        } else {
            first.clone()
        };
        let kind = s(obj, "/involvedObject/kind").to_lowercase();
        let name = s(obj, "/involvedObject/name");
        let object = if name.is_empty() {
            kind
        } else {
            format!("{kind}/{name}")
        };
        let first_non_empty = |a: String, b: String| if a.is_empty() { b } else { a };
        let component = first_non_empty(s(obj, "/source/component"), s(obj, "/reportingComponent"));
        let host = first_non_empty(s(obj, "/source/host"), s(obj, "/reportingInstance"));
        let source = if host.is_empty() {
            component
        } else {
            format!("{component}, {host}")
        };
        let count = match obj.pointer("/series/count").and_then(Value::as_i64) {
            Some(c) => c,
            None => obj
                .get("count")
                .and_then(Value::as_i64)
                .filter(|c| *c != 0)
                .unwrap_or(1),
        };
        vec![
            json!(last),
            json!(s(obj, "/type")),
            json!(s(obj, "/reason")),
            json!(object),
            json!(s(obj, "/involvedObject/fieldPath")),
            json!(source),
            json!(s(obj, "/message").trim()),
            json!(first),
            json!(count),
            json!(rkube_api::meta::name(obj)),
        ]
    }
}

/// `events.k8s.io/v1` Events: the same objects as core Events (stored as them), with the
/// newer field names — `note`, `regarding`, `reportingController`, `deprecated*` — and the
/// newer API's required fields.
pub struct EventsV1;

/// (events.k8s.io/v1 field, core/v1 field) pairs that differ only in name.
const RENAMED: [(&str, &str); 7] = [
    ("note", "message"),
    ("regarding", "involvedObject"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(
    obj: &mut Value,
    api_version: &str,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    for (from, to) in pairs {
        match m.remove(from) {
            Some(v) => {
                m.insert(to.to_string(), v);
            }
            None => {
                m.remove(to);
            }
        }
    }
    if m.contains_key("apiVersion") {
        m.insert("apiVersion".into(), json!(api_version));
    }
}

/// A core/v1 Event as events.k8s.io/v1 shows it.
pub fn to_events_v1(obj: &mut Value) {
    rename(
        obj,
        "events.k8s.io/v1",
        RENAMED.iter().map(|(a, b)| (*b, *a)),
    );
}

/// An events.k8s.io/v1 Event as core/v1 stores it.
pub fn to_core(obj: &mut Value) {
    rename(obj, "v1", RENAMED.iter().copied());
}

impl Strategy for EventsV1 {
    crate::typed_kind!(rkube_api::k8s::api::events::v1::Event);

    fn served_as_stored(&self) -> bool {
        false
    }

    fn storage_to_served(&self, obj: &mut Value) -> Result<(), String> {
        to_events_v1(obj);
        Ok(())
    }

    fn served_to_storage(&self, obj: &Value) -> Result<Option<Value>, String> {
        let mut core = obj.clone();
        to_core(&mut core);
        Ok(Some(core))
    }

    fn allow_create_on_update(&self) -> bool {
        true
    }

    fn expires(&self) -> bool {
        true
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<rkube_api::StatusCause>) {
        use rkube_api::StatusCause;
        for f in [
            "eventTime",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
        ] {
            if s(obj, &format!("/{f}")).is_empty() {
                causes.push(StatusCause::required(f));
            }
        }
        let ty = s(obj, "/type");
        if !["Normal", "Warning"].contains(&ty.as_str()) {
            causes.push(StatusCause::not_supported(
                "type",
                &ty,
                &["Normal", "Warning"],
            ));
        }
        if s(obj, "/note").len() > 1024 {
            causes.push(StatusCause {
                reason: "FieldValueTooLong".into(),
                message: "Too long: may not be more than 1024 bytes".into(),
                field: "note".into(),
            });
        }
    }

    /// events.k8s.io's own names for the core Event field selectors (upstream's
    /// `pkg/apis/events/v1/conversion.go`).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "source",
            "type",
        ]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "source" => {
                let c = s(obj, "/deprecatedSource/component");
                if c.is_empty() {
                    s(obj, "/reportingController")
                } else {
                    c
                }
            }
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn columns(&self) -> Vec<Column> {
        Event.columns()
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let mut core = obj.clone();
        to_core(&mut core);
        Event.cells(&core, now)
    }
}
