//! Namespaces (`pkg/registry/core/namespace`): `spec.finalizers` defaults to `kubernetes`, a
//! new namespace is `Active`, deletion waits for the namespace controller to empty it and
//! clear `spec.finalizers` through the `finalize` subresource, meanwhile it is `Terminating`.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::meta;
use serde_json::{json, Value};

use super::print::{self, s, Column};
use super::{set_at, set_default, NameRule, Strategy};

pub struct Namespace;

impl Strategy for Namespace {
    crate::typed_kind!(core::Namespace);

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    /// `spec.finalizers` gets `kubernetes` on create only (upstream's PrepareForCreate): an
    /// update or `finalize` that empties it must not get it back.
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, "/spec/finalizers", json!(["kubernetes"]));
        obj["status"] = json!({"phase": "Active"});
    }

    /// An update keeps `spec.finalizers` as it was (upstream's PrepareForUpdate): only
    /// `finalize` changes them.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        match old.pointer("/spec/finalizers") {
            Some(f) => {
                // `spec: null` (or any non-object) must not shed them either.
                if let Some(m) = new.as_object_mut() {
                    if !m.get("spec").is_some_and(Value::is_object) {
                        m.insert("spec".into(), json!({}));
                    }
                }
                set_at(new, "/spec/finalizers", f.clone())
            }
            None => {
                if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("finalizers");
                }
            }
        }
    }

    fn deletion_blocked(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers")
            .and_then(|f| f.as_array())
            .is_some_and(|a| !a.is_empty())
    }

    fn begin_deletion(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Terminating"});
    }

    /// `finalize`: only `spec.finalizers` change.
    fn prepare_for_subresource_update(&self, _sub: &str, new: &mut Value, old: &Value) {
        let finalizers = new.pointer("/spec/finalizers").cloned();
        *new = old.clone();
        match finalizers {
            Some(f) => new["spec"]["finalizers"] = f,
            None => {
                if let Some(spec) = new.get_mut("spec").and_then(|s| s.as_object_mut()) {
                    spec.remove("finalizers");
                }
            }
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("Status"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/status/phase")),
            json!(print::age(obj, now)),
        ]
    }
}

/// Namespaces that may never be deleted (upstream's NamespaceLifecycle immortal set).
pub const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];
