//! `admissionregistration.k8s.io` kinds, stored and served here (enforced by the extensibility
//! work): webhook configurations with upstream's defaults and the fields a webhook must
//! name, ValidatingAdmissionPolicies and their bindings, and their columns.

use rkube_api::k8s::api::admissionregistration::v1 as ar;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use rkube_api::strategic::{ListStrategy, Lists};

use super::print::{self, s, Column};
use super::{reset_status, set_default, Strategy};

pub struct MutatingWebhookConfiguration;
pub struct ValidatingWebhookConfiguration;
pub struct ValidatingAdmissionPolicy;
pub struct ValidatingAdmissionPolicyBinding;

/// Webhooks merge by name (upstream's `patchMergeKey`).
const WEBHOOK_LISTS: Lists = Lists(&[("", "webhooks", ListStrategy::MergeByKey("name"))]);

fn webhook_defaults(obj: &mut Value, mutating: bool) {
    for w in obj
        .get_mut("webhooks")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        set_default(w, "/failurePolicy", json!("Fail"));
        set_default(w, "/matchPolicy", json!("Equivalent"));
        set_default(w, "/namespaceSelector", json!({}));
        set_default(w, "/objectSelector", json!({}));
        set_default(w, "/timeoutSeconds", json!(10));
        if mutating {
            set_default(w, "/reinvocationPolicy", json!("Never"));
        }
        if let Some(svc) = w.pointer_mut("/clientConfig/service") {
            set_default(svc, "/port", json!(443));
        }
        for r in w
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            set_default(r, "/scope", json!("*"));
        }
    }
}

fn validate_webhooks(obj: &Value, causes: &mut Vec<StatusCause>) {
    let mut names = std::collections::HashSet::new();
    for (n, w) in obj
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("webhooks[{n}]");
        compile_all(
            w,
            "/matchConditions",
            &format!("{at}.matchConditions"),
            "expression",
            causes,
        );
        let name = w.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(StatusCause::required(&format!("{at}.name")));
        } else if !names.insert(name) {
            causes.push(StatusCause::duplicate(&format!("{at}.name"), name));
        } else if name.split('.').count() < 3 {
            causes.push(StatusCause::invalid(
                &format!("{at}.name"),
                name,
                "should be a domain with at least three segments separated by dots",
            ));
        }
        let effects = w.get("sideEffects").and_then(Value::as_str).unwrap_or("");
        if effects.is_empty() {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: must specify one of None, NoneOnDryRun".into(),
                field: format!("{at}.sideEffects"),
            });
        } else if !["None", "NoneOnDryRun"].contains(&effects) {
            causes.push(StatusCause::not_supported(
                &format!("{at}.sideEffects"),
                effects,
                &["None", "NoneOnDryRun"],
            ));
        }
        let versions = w.get("admissionReviewVersions").and_then(Value::as_array);
        if versions.is_none_or(|v| v.is_empty()) {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: must specify one of v1, v1beta1".into(),
                field: format!("{at}.admissionReviewVersions"),
            });
        }
        let cc = w.get("clientConfig");
        let url = cc.and_then(|c| c.get("url")).is_some();
        let svc = cc.and_then(|c| c.get("service")).is_some();
        if url == svc {
            causes.push(StatusCause::required(&format!("{at}.clientConfig")));
        }
        if let Some(t) = w.get("timeoutSeconds").and_then(Value::as_i64) {
            if !(1..=30).contains(&t) {
                causes.push(StatusCause::invalid_raw(
                    &format!("{at}.timeoutSeconds"),
                    &t.to_string(),
                    "the timeout value must be between 1 and 30 seconds",
                ));
            }
        }
    }
}

fn webhook_cells(obj: &Value, now: i64) -> Vec<Value> {
    let n = obj
        .get("webhooks")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    vec![
        json!(meta::name(obj)),
        json!(n),
        json!(print::age(obj, now)),
    ]
}

impl Strategy for MutatingWebhookConfiguration {
    crate::typed_kind!(ar::MutatingWebhookConfiguration);

    fn defaults(&self, obj: &mut Value) {
        webhook_defaults(obj, true);
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_webhooks(obj, causes);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        new.get("webhooks") != old.get("webhooks")
    }

    fn lists(&self) -> Lists {
        WEBHOOK_LISTS
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::integer("Webhooks"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        webhook_cells(obj, now)
    }
}

impl Strategy for ValidatingWebhookConfiguration {
    crate::typed_kind!(ar::ValidatingWebhookConfiguration);

    fn defaults(&self, obj: &mut Value) {
        webhook_defaults(obj, false);
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_webhooks(obj, causes);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        new.get("webhooks") != old.get("webhooks")
    }

    fn lists(&self) -> Lists {
        WEBHOOK_LISTS
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::integer("Webhooks"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        webhook_cells(obj, now)
    }
}

/// Where a ValidatingAdmissionPolicy's CEL expressions are: (list under `spec`, field).
pub const POLICY_EXPRESSIONS: [(&str, &str); 5] = [
    ("validations", "expression"),
    ("validations", "messageExpression"),
    ("matchConditions", "expression"),
    ("variables", "expression"),
    ("auditAnnotations", "valueExpression"),
];

/// Every `field` expression of the list at `ptr` compiles (upstream's "compilation failed").
fn compile_all(obj: &Value, ptr: &str, at: &str, field: &str, causes: &mut Vec<StatusCause>) {
    for (i, item) in obj
        .pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(src) = item.get(field).and_then(Value::as_str) else {
            continue;
        };
        if let Err(e) = crate::cel::compile(src) {
            causes.push(StatusCause::invalid(
                &format!("{at}[{i}].{field}"),
                src,
                &format!("compilation failed: {e}"),
            ));
        }
    }
}

impl Strategy for ValidatingAdmissionPolicy {
    crate::typed_kind!(ar::ValidatingAdmissionPolicy);

    fn defaults(&self, obj: &mut Value) {
        if obj.get("spec").is_some_and(Value::is_object) {
            set_default(obj, "/spec/failurePolicy", json!("Fail"));
            set_default(
                obj,
                "/spec/matchConstraints/matchPolicy",
                json!("Equivalent"),
            );
            set_default(obj, "/spec/matchConstraints/namespaceSelector", json!({}));
            set_default(obj, "/spec/matchConstraints/objectSelector", json!({}));
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let has = |f: &str| {
            obj.pointer(&format!("/spec/{f}"))
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        };
        if !has("validations") && !has("auditAnnotations") {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message:
                    "Required value: validations or auditAnnotations must contain at least one item"
                        .into(),
                field: "spec.validations".into(),
            });
        }
        if obj
            .pointer("/spec/matchConstraints/resourceRules")
            .is_none()
        {
            causes.push(StatusCause::required("spec.matchConstraints.resourceRules"));
        }
        for (list, field) in POLICY_EXPRESSIONS {
            compile_all(
                obj,
                &format!("/spec/{list}"),
                &format!("spec.{list}"),
                field,
                causes,
            );
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::integer("Validations"),
            Column::text("ParamKind"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let n = obj
            .pointer("/spec/validations")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let kind = match obj.pointer("/spec/paramKind") {
            Some(k) => format!(
                "{}/{}",
                k.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                k.get("kind").and_then(Value::as_str).unwrap_or("")
            ),
            None => "<unset>".into(),
        };
        vec![
            json!(meta::name(obj)),
            json!(n),
            json!(kind),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for ValidatingAdmissionPolicyBinding {
    crate::typed_kind!(ar::ValidatingAdmissionPolicyBinding);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        if s(obj, "/spec/policyName").is_empty() {
            causes.push(StatusCause::required("spec.policyName"));
        }
        let actions = obj
            .pointer("/spec/validationActions")
            .and_then(Value::as_array);
        if actions.is_none_or(|a| a.is_empty()) {
            causes.push(StatusCause::required("spec.validationActions"));
        }
        for a in actions.into_iter().flatten().filter_map(Value::as_str) {
            if !["Deny", "Warn", "Audit"].contains(&a) {
                causes.push(StatusCause::not_supported(
                    "spec.validationActions",
                    a,
                    &["Audit", "Deny", "Warn"],
                ));
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("PolicyName"),
            Column::text("ParamRef"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let param = match obj.pointer("/spec/paramRef") {
            Some(r) => {
                let ns = r.get("namespace").and_then(Value::as_str).unwrap_or("");
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                match (ns, name) {
                    (_, "") => "<unset>".to_string(),
                    ("", n) => format!("*/{n}"),
                    (ns, n) => format!("{ns}/{n}"),
                }
            }
            None => "<unset>".into(),
        };
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/policyName")),
            json!(param),
            json!(print::age(obj, now)),
        ]
    }
}
