//! Deployments and ReplicaSets (`pkg/registry/apps`): defaults, the selector that must match
//! the template and may not change, generation (a Deployment's also follows its annotations:
//! `rollout restart`, change-cause), status reset on create, columns, the `scale` view.

use rkube_api::k8s::api::apps::v1 as apps;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, list_of, selector_string, Column};
use super::{podspec, reset_status, set_default, Strategy};

pub struct Deployment;
pub struct ReplicaSet;

/// What every workload with a pod template shares: status reset on create, a selector that
/// matches the template and never changes, generation tracking.
macro_rules! workload {
    ($zero:expr) => {
        fn prepare_for_create(&self, obj: &mut Value) {
            reset_status(obj, $zero);
        }

        fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
            validate_selector_template(obj, causes);
        }

        fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
            selector_immutable(new, old, causes);
        }

        fn tracks_generation(&self) -> bool {
            true
        }
    };
}

impl Strategy for Deployment {
    crate::typed_kind!(apps::Deployment);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/replicas", json!(1));
        let rolling = obj
            .pointer("/spec/strategy/type")
            .and_then(|t| t.as_str())
            .unwrap_or("RollingUpdate")
            == "RollingUpdate";
        set_default(obj, "/spec/strategy/type", json!("RollingUpdate"));
        if rolling {
            set_default(
                obj,
                "/spec/strategy/rollingUpdate/maxUnavailable",
                json!("25%"),
            );
            set_default(obj, "/spec/strategy/rollingUpdate/maxSurge", json!("25%"));
        }
        set_default(obj, "/spec/revisionHistoryLimit", json!(10));
        set_default(obj, "/spec/progressDeadlineSeconds", json!(600));
        podspec::template_defaults(obj);
    }

    workload!(json!({}));

    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        new.get("spec") != old.get("spec")
            || new.pointer("/metadata/annotations") != old.pointer("/metadata/annotations")
    }

    /// As upstream's deploymentStatusStrategy: the spec and labels stay as stored, while
    /// annotations may change (the controller writes its revision annotation with the status,
    /// and a status write never bumps the generation).
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        super::status_only(new, old, true);
        match old.pointer("/metadata/labels") {
            Some(l) => meta::set_meta(new, "labels", l.clone()),
            None => meta::remove_meta(new, "labels"),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Ready"),
            Column::integer("Up-to-date"),
            Column::integer("Available"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
            Column::wide("Selector"),
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
            json!(i(obj, "/status/updatedReplicas")),
            json!(i(obj, "/status/availableReplicas")),
            json!(print::age(obj, now)),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(selector_string(obj)),
        ]
    }
}

impl Strategy for ReplicaSet {
    crate::typed_kind!(apps::ReplicaSet);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/replicas", json!(1));
        podspec::template_defaults(obj);
    }

    workload!(json!({"replicas": 0}));

    // No `status.replicas` field selector: the registry has the attribute, but apps/v1
    // registers no field-label conversion, so 1.33 refuses it (docs/research/field-selectors-1.33.txt).

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
            json!(selector_string(obj)),
        ]
    }
}

pub fn selector_immutable(new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
    if new.pointer("/spec/selector") != old.pointer("/spec/selector") {
        causes.push(StatusCause::invalid_raw(
            "spec.selector",
            "<selector>",
            "field is immutable",
        ));
    }
}

fn string_map(v: Option<&Value>) -> std::collections::BTreeMap<String, String> {
    v.and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A workload's selector: present, not empty, valid, matching its template's labels; its
/// replicas not negative; its template's pod spec valid.
pub fn validate_selector_template(obj: &Value, causes: &mut Vec<StatusCause>) {
    let Some(sel) = obj.pointer("/spec/selector") else {
        causes.push(StatusCause::required("spec.selector"));
        return;
    };
    let empty = |k: &str| {
        sel.get(k).is_none_or(|v| {
            v.as_object().is_some_and(|m| m.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())
        })
    };
    if empty("matchLabels") && empty("matchExpressions") {
        causes.push(StatusCause::invalid_raw("spec.selector", "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}", "empty selector is invalid for deployment"));
        return;
    }
    match rkube_api::LabelSelector::from_json(sel) {
        Err(e) => causes.push(StatusCause::invalid("spec.selector", "", &e)),
        Ok(s) => {
            let labels = string_map(obj.pointer("/spec/template/metadata/labels"));
            if !s.matches(&labels) {
                let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                causes.push(StatusCause::invalid_raw(
                    "spec.template.metadata.labels",
                    &format!("map[string]string{{{}}}", shown.join(", ")),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    if let Some(r) = obj.pointer("/spec/replicas").and_then(|r| r.as_i64()) {
        if r < 0 {
            causes.push(StatusCause::invalid_raw(
                "spec.replicas",
                &r.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    podspec::validate(
        obj.pointer("/spec/template/spec"),
        "spec.template.spec",
        causes,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_status_write_takes_annotations_but_not_the_spec_or_labels() {
        let old = json!({"metadata": {"name": "web", "labels": {"a": "1"}, "annotations": {"x": "1"}},
            "spec": {"replicas": 1}, "status": {"replicas": 0}});
        let mut new = json!({"metadata": {"name": "web", "labels": {"a": "2"},
                "annotations": {"x": "1", "deployment.kubernetes.io/revision": "1"}},
            "spec": {"replicas": 5}, "status": {"replicas": 1}});
        Deployment.prepare_for_status_update(&mut new, &old);
        assert_eq!(
            new,
            json!({"metadata": {"name": "web", "labels": {"a": "1"},
                    "annotations": {"x": "1", "deployment.kubernetes.io/revision": "1"}},
                "spec": {"replicas": 1}, "status": {"replicas": 1}})
        );
        let mut unlabelled =
            json!({"metadata": {"name": "web", "labels": {"b": "1"}}, "status": {}});
        Deployment
            .prepare_for_status_update(&mut unlabelled, &json!({"metadata": {"name": "web"}}));
        assert_eq!(unlabelled.pointer("/metadata/labels"), None);
    }

    #[test]
    fn deployment_defaults_and_validation() {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        Deployment.defaults(&mut d);
        assert_eq!(
            d.pointer("/spec/strategy/rollingUpdate/maxSurge"),
            Some(&json!("25%"))
        );
        assert_eq!(d.pointer("/spec/revisionHistoryLimit"), Some(&json!(10)));
        assert_eq!(
            d.pointer("/spec/progressDeadlineSeconds"),
            Some(&json!(600))
        );
        let mut causes = Vec::new();
        Deployment.validate(&d, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        Deployment.validate(&d, &mut causes);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }
}
