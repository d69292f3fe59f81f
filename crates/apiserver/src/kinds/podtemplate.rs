//! The core group's pod-template kinds (`pkg/registry/core/{podtemplate,replicationcontroller}`):
//! PodTemplates, and ReplicationControllers with their map selector (defaulted from the
//! template's labels), generation and columns.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, label_map, list_of, or_none, Column};
use super::{podspec, reset_status, set_default, Strategy};

pub struct PodTemplate;
pub struct ReplicationController;

impl Strategy for PodTemplate {
    crate::typed_kind!(core::PodTemplate);

    fn defaults(&self, obj: &mut Value) {
        if let Some(spec) = obj.pointer_mut("/template/spec").filter(|s| s.is_object()) {
            podspec::defaults(spec);
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        podspec::validate(obj.pointer("/template/spec"), "template.spec", causes);
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Containers"),
            Column::text("Images"),
            Column::text("Pod Labels"),
        ]
    }

    fn cells(&self, obj: &Value, _now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(list_of(obj, "/template/spec/containers", "name")),
            json!(list_of(obj, "/template/spec/containers", "image")),
            json!(or_none(label_map(obj.pointer("/template/metadata/labels")))),
        ]
    }
}

impl Strategy for ReplicationController {
    crate::typed_kind!(core::ReplicationController);

    fn defaults(&self, obj: &mut Value) {
        let labels = obj.pointer("/spec/template/metadata/labels").cloned();
        if let Some(labels) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
            let empty =
                |v: Option<&Value>| v.and_then(Value::as_object).is_none_or(|m| m.is_empty());
            if empty(obj.pointer("/spec/selector")) {
                super::set_at(obj, "/spec/selector", labels.clone());
            }
            if empty(obj.pointer("/metadata/labels")) {
                meta::set_meta(obj, "labels", labels);
            }
        }
        set_default(obj, "/spec/replicas", json!(1));
        podspec::template_defaults(obj);
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"replicas": 0}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let selector = obj.pointer("/spec/selector").and_then(Value::as_object);
        match selector.filter(|m| !m.is_empty()) {
            None => causes.push(StatusCause::required("spec.selector")),
            Some(sel) => {
                let labels = obj.pointer("/spec/template/metadata/labels");
                let matches = sel
                    .iter()
                    .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
                if !matches {
                    causes.push(StatusCause::invalid_raw(
                        "spec.template.metadata.labels",
                        &format!(
                            "map[string]string{{{}}}",
                            label_map(labels).replace('=', ":")
                        ),
                        "selector does not match labels in spec.template",
                    ));
                }
            }
        }
        if i(obj, "/spec/replicas") < 0 {
            causes.push(StatusCause::invalid_raw(
                "spec.replicas",
                &i(obj, "/spec/replicas").to_string(),
                "must be greater than or equal to 0",
            ));
        }
        match obj.pointer("/spec/template") {
            None => causes.push(StatusCause::required("spec.template")),
            Some(t) => {
                let restart = t
                    .pointer("/spec/restartPolicy")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if restart != "Always" {
                    causes.push(StatusCause::not_supported(
                        "spec.template.spec.restartPolicy",
                        restart,
                        &["Always"],
                    ));
                }
                podspec::validate(t.get("spec"), "spec.template.spec", causes);
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "status.replicas" => i(obj, "/status/replicas").to_string(),
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::integer("Desired"),
            Column::integer("Current"),
            Column::integer("Ready"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
            Column::wide("Selector"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(i(obj, "/spec/replicas")),
            json!(i(obj, "/status/replicas")),
            json!(i(obj, "/status/readyReplicas")),
            json!(print::age(obj, now)),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(or_none(label_map(obj.pointer("/spec/selector")))),
        ]
    }
}
