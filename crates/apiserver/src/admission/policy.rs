//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1; upstream's
//! `plugin/policy/validating`): policies and their bindings from the watch cache, parsed
//! and compiled again when either changes. A request a binding's policy matches — the
//! policy's `matchConstraints` and the binding's `matchResources` (rules with resource
//! names, exclusions, namespace and object selectors) — has the policy's `matchConditions`
//! and then its `validations` evaluated with `object`, `oldObject`, `request`,
//! `namespaceObject`, `params` (from `paramKind`/`paramRef`, by name or selector) and
//! `variables`; failures act as the binding's `validationActions` say (Deny, Warn, Audit),
//! errors as the policy's `failurePolicy`; messages as upstream's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rkube_api::authz::UserInfo;
use rkube_api::{meta, ApiError, LabelSelector};
use serde_json::{json, Value};

use super::webhook::matching::{self, Request, Rule};
use crate::cache::object::Filter;
use crate::cel::{self, Expr};
use crate::registry::{Attributes, Operation, Registries};
use rkube_api::meta::string_list as strs;

const GROUP: &str = "admissionregistration.k8s.io";

/// Resource rules with names and exclusions, and the selectors.
#[derive(Default)]
struct Match {
    /// `matchPolicy: Equivalent` (the default).
    equivalent: bool,
    rules: Vec<(Rule, Vec<String>)>,
    excluded: Vec<(Rule, Vec<String>)>,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
}

struct Validation {
    expr: Result<Arc<Expr>, String>,
    source: String,
    message: String,
    message_expr: Option<Arc<Expr>>,
    reason: String,
}

struct Policy {
    name: String,
    fail_closed: bool,
    param_kind: Option<(String, String)>,
    constraints: Match,
    conditions: Vec<(String, Result<Arc<Expr>, String>)>,
    variables: Vec<(String, Result<Arc<Expr>, String>)>,
    validations: Vec<Validation>,
    /// `auditAnnotations`: key and value expression.
    audit_annotations: Vec<(String, Result<Arc<Expr>, String>)>,
}

struct Binding {
    name: String,
    policy: String,
    resources: Option<Match>,
    param_ref: Option<Value>,
    deny: bool,
    warn: bool,
    audit: bool,
}

/// The policies and bindings in force.
type Loaded = (Arc<Vec<Policy>>, Arc<Vec<Binding>>);

#[derive(Default)]
struct Snapshot {
    versions: Option<(u64, u64)>,
    policies: Arc<Vec<Policy>>,
    bindings: Arc<Vec<Binding>>,
}

pub struct Policies {
    registries: Arc<Registries>,
    snapshot: Mutex<Snapshot>,
}

fn rules(v: Option<&Value>) -> Vec<(Rule, Vec<String>)> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            (
                Rule {
                    operations: strs(r.get("operations")),
                    groups: strs(r.get("apiGroups")),
                    versions: strs(r.get("apiVersions")),
                    resources: strs(r.get("resources")),
                    scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").into(),
                },
                strs(r.get("resourceNames")),
            )
        })
        .collect()
}

/// A selector when one is given (an unparsable one selects nothing).
fn selector(v: Option<&Value>) -> Option<LabelSelector> {
    v.filter(|s| !s.is_null())
        .map(|s| matching::selector(Some(s)))
}

fn parse_match(v: &Value) -> Match {
    Match {
        equivalent: v.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
        rules: rules(v.get("resourceRules")),
        excluded: rules(v.get("excludeResourceRules")),
        namespace_selector: selector(v.get("namespaceSelector")),
        object_selector: selector(v.get("objectSelector")),
    }
}

fn policy(obj: &Value, c: &mut cel::Cache) -> Policy {
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let named =
        |list: &str, field: &str, c: &mut cel::Cache| -> Vec<(String, Result<Arc<Expr>, String>)> {
            spec.get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|x| {
                    let name = x
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    (
                        name,
                        c.get(x.get(field).and_then(Value::as_str).unwrap_or("")),
                    )
                })
                .collect()
        };
    let conditions = named("matchConditions", "expression", c);
    let audit_annotations = spec
        .get("auditAnnotations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            let key = a
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            (
                key,
                c.get(
                    a.get("valueExpression")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                ),
            )
        })
        .collect();
    let variables = named("variables", "expression", c);
    let validations = spec
        .get("validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| {
            let source = v
                .get("expression")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Validation {
                expr: c.get(&source),
                message: v
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                message_expr: v
                    .get("messageExpression")
                    .and_then(Value::as_str)
                    .and_then(|m| c.get(m).ok()),
                reason: v
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("Invalid")
                    .to_string(),
                source,
            }
        })
        .collect();
    Policy {
        name: meta::name(obj).to_string(),
        fail_closed: spec.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
        param_kind: spec.get("paramKind").map(|k| {
            let s = |f: &str| k.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            (s("apiVersion"), s("kind"))
        }),
        constraints: spec
            .get("matchConstraints")
            .map(parse_match)
            .unwrap_or_default(),
        conditions,
        variables,
        validations,
        audit_annotations,
    }
}

fn binding(obj: &Value) -> Binding {
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let actions = strs(spec.get("validationActions"));
    Binding {
        name: meta::name(obj).to_string(),
        policy: spec
            .get("policyName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        resources: spec
            .get("matchResources")
            .filter(|m| !m.is_null())
            .map(parse_match),
        param_ref: spec.get("paramRef").filter(|p| !p.is_null()).cloned(),
        deny: actions.iter().any(|a| a == "Deny"),
        warn: actions.iter().any(|a| a == "Warn"),
        audit: actions.iter().any(|a| a == "Audit"),
    }
}

impl Match {
    /// Whether the request is in (an empty rule list matches every resource, as a binding's
    /// `matchResources` without rules does).
    fn matches(
        &self,
        r: &Request,
        name: &str,
        ns_labels: Option<&BTreeMap<String, String>>,
        new: Option<&Value>,
        old: Option<&Value>,
        rules_required: bool,
    ) -> bool {
        let hit = |list: &[(Rule, Vec<String>)]| {
            list.iter().any(|(rule, names)| {
                rule.matches_policy(r, self.equivalent)
                    && (names.is_empty() || names.iter().any(|n| n == name))
            })
        };
        if (rules_required || !self.rules.is_empty()) && !hit(&self.rules) {
            return false;
        }
        if hit(&self.excluded) {
            return false;
        }
        if let (Some(sel), Some(labels)) = (&self.namespace_selector, ns_labels) {
            if !sel.matches(labels) {
                return false;
            }
        }
        if let Some(sel) = &self.object_selector {
            let (n, o) = (matching::labels(new), matching::labels(old));
            if !((new.is_some() && sel.matches(&n)) || (old.is_some() && sel.matches(&o))) {
                return false;
            }
        }
        true
    }
}

/// The HTTP code of a validation's reason.
fn code_of(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

impl Policies {
    pub fn new(registries: Arc<Registries>) -> Self {
        Policies {
            registries,
            snapshot: Mutex::default(),
        }
    }

    fn current(&self) -> Result<Loaded, ApiError> {
        let (caches, versions) = super::webhook::configurations(
            &self.registries,
            [
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ],
        )?;
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if snap.versions != Some(versions) {
            let mut c = cel::Cache::default();
            let values = |i: usize| caches[i].as_ref().map(|c| c.values()).unwrap_or_default();
            snap.policies = Arc::new(values(0).iter().map(|p| policy(p, &mut c)).collect());
            let mut bindings: Vec<Binding> = values(1).iter().map(binding).collect();
            bindings.sort_by(|a, b| a.name.cmp(&b.name));
            snap.bindings = Arc::new(bindings);
            snap.versions = Some(versions);
        }
        Ok((snap.policies.clone(), snap.bindings.clone()))
    }

    /// The params a binding selects for a request.
    fn params(
        &self,
        kind: &(String, String),
        param_ref: &Value,
        request_ns: &str,
    ) -> Result<Vec<Value>, String> {
        let def = rkube_api::resources::find_kind(&kind.0, &kind.1)
            .or_else(|| {
                self.registries
                    .custom_defs()
                    .into_iter()
                    .find(|d| d.api_version() == kind.0 && d.kind == kind.1)
            })
            .ok_or_else(|| {
                format!(
                    "failed to find resource referenced by paramKind: '{}, Kind={}'",
                    kind.0, kind.1
                )
            })?;
        let reg = self
            .registries
            .served(def)
            .ok_or_else(|| format!("paramKind {} is not served", kind.1))?;
        let cache = reg.cache.as_ref().ok_or("the param kind has no cache")?;
        let ns = match param_ref.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ if def.namespaced => request_ns.to_string(),
            _ => String::new(),
        };
        if let Some(name) = param_ref
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            let (found, _) = cache
                .get(&reg.key(&ns, name))
                .map_err(|e| e.status().message.clone())?;
            return Ok(found.map(|o| vec![o.value()]).unwrap_or_default());
        }
        let sel = selector(param_ref.get("selector")).unwrap_or_default();
        let filter = Filter {
            namespace: (!ns.is_empty()).then_some(ns),
            labels: sel,
            ..Default::default()
        };
        let list = cache
            .list(&filter, None, 0)
            .map_err(|e| e.status().message.clone())?;
        Ok(list.items.iter().map(|o| o.value()).collect())
    }

    /// Evaluates every binding that applies; denials are errors, warnings and audit annotations go to `said`.
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &Value,
        old: Option<&Value>,
        request: impl Fn() -> Value,
        ns_object: impl Fn() -> Option<Value>,
        said: &mut super::webhook::Said,
    ) -> Result<(), ApiError> {
        if a.def.group == GROUP {
            return Ok(());
        }
        let (policies, bindings) = self.current()?;
        if bindings.is_empty() {
            return Ok(());
        }
        let (new, old) = match a.operation {
            Operation::Delete => (None, Some(obj)),
            _ => (Some(obj), old),
        };
        let op = a.operation.as_str();
        let req = Request {
            operation: op,
            group: a.def.group,
            version: a.def.version,
            resource: a.def.plural,
            subresource: a.subresource.unwrap_or(""),
            namespaced: a.def.namespaced,
        };
        let name = match (a.name, new) {
            ("", Some(o)) => meta::name(o),
            (n, _) => n,
        };
        let mut ns_obj: Option<Option<Value>> = None;
        let mut request_json: Option<Value> = None;
        let _ = user;
        for b in bindings.iter() {
            let Some(p) = policies.iter().find(|p| p.name == b.policy) else {
                continue;
            };
            let ns = ns_obj.get_or_insert_with(&ns_object).clone();
            let ns_labels = if a.def.namespaced {
                Some(matching::labels(ns.as_ref()))
            } else if a.def.group.is_empty() && a.def.plural == "namespaces" {
                Some(matching::labels(new.or(old)))
            } else {
                None
            };
            if !p
                .constraints
                .matches(&req, name, ns_labels.as_ref(), new, old, true)
            {
                continue;
            }
            if let Some(m) = &b.resources {
                if !m.matches(&req, name, ns_labels.as_ref(), new, old, false) {
                    continue;
                }
            }
            let request = request_json.get_or_insert_with(&request).clone();
            let params: Vec<Value> = match (&p.param_kind, &b.param_ref) {
                (Some(kind), Some(r)) => match self.params(kind, r, a.namespace) {
                    Ok(ps) if ps.is_empty() => {
                        let allow = r.get("parameterNotFoundAction").and_then(Value::as_str)
                            == Some("Allow");
                        if allow {
                            continue;
                        }
                        self.fail(p, b, "no params found for policy binding with `Deny` parameterNotFoundAction".into(), said)?;
                        continue;
                    }
                    Ok(ps) => ps,
                    Err(e) => {
                        self.fail(p, b, e, said)?;
                        continue;
                    }
                },
                (Some(_), None) => {
                    self.fail(
                        p,
                        b,
                        "policy has paramKind but the binding has no paramRef".into(),
                        said,
                    )?;
                    continue;
                }
                _ => vec![Value::Null],
            };
            for param in &params {
                self.evaluate(p, b, new, old, &request, ns.as_ref(), param, said)?;
            }
        }
        Ok(())
    }

    /// An error evaluating a policy: refused when it fails closed (and denies).
    fn fail(
        &self,
        p: &Policy,
        b: &Binding,
        why: String,
        said: &mut super::webhook::Said,
    ) -> Result<(), ApiError> {
        if !p.fail_closed {
            return Ok(());
        }
        let message = format!(
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {why}",
            p.name, b.name
        );
        if b.deny {
            return Err(ApiError::new(422, "Invalid", message, None));
        }
        if b.warn {
            said.warnings.push(message);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &self,
        p: &Policy,
        b: &Binding,
        new: Option<&Value>,
        old: Option<&Value>,
        request: &Value,
        ns: Option<&Value>,
        params: &Value,
        said: &mut super::webhook::Said,
    ) -> Result<(), ApiError> {
        let null = Value::Null;
        let mut variables = serde_json::Map::new();
        let base: Vec<(&str, &Value)> = vec![
            ("object", new.unwrap_or(&null)),
            ("oldObject", old.unwrap_or(&null)),
            ("request", request),
            ("namespaceObject", ns.unwrap_or(&null)),
            ("params", params),
        ];
        for (name, expr) in &p.variables {
            let vars_value = Value::Object(variables.clone());
            let mut vars = base.clone();
            vars.push(("variables", &vars_value));
            let v = match expr {
                Ok(e) => cel::eval(e, &vars).map(|v| cel::to_json(&v)),
                Err(e) => Err(e.clone()),
            };
            match v {
                Ok(v) => {
                    variables.insert(name.clone(), v);
                }
                Err(e) => {
                    return self.fail(
                        p,
                        b,
                        format!("variable {name:?} resulted in error: {e}"),
                        said,
                    )
                }
            }
        }
        let vars_value = Value::Object(variables);
        let mut vars = base;
        vars.push(("variables", &vars_value));
        for (name, cond) in &p.conditions {
            let r = match cond {
                Ok(e) => cel::eval_bool(e, &vars),
                Err(e) => Err(e.clone()),
            };
            match r {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => {
                    return self.fail(
                        p,
                        b,
                        format!("failed to evaluate match condition {name:?}: {e}"),
                        said,
                    )
                }
            }
        }
        for (index, v) in p.validations.iter().enumerate() {
            let r = match &v.expr {
                Ok(e) => cel::eval_bool(e, &vars),
                Err(e) => Err(e.clone()),
            };
            let why = match r {
                Ok(true) => continue,
                Ok(false) => v
                    .message_expr
                    .as_ref()
                    .and_then(|m| cel::eval_string(m, &vars).ok())
                    .filter(|m| !m.trim().is_empty())
                    .or_else(|| (!v.message.is_empty()).then(|| v.message.clone()))
                    .unwrap_or_else(|| format!("failed expression: {}", v.source)),
                Err(e) => {
                    self.fail(
                        p,
                        b,
                        format!("expression '{}' resulted in error: {e}", v.source),
                        said,
                    )?;
                    continue;
                }
            };
            if b.audit {
                let mut actions = Vec::new();
                for (on, name) in [(b.deny, "Deny"), (b.warn, "Warn"), (b.audit, "Audit")] {
                    if on {
                        actions.push(name);
                    }
                }
                let failure = json!([{"message": why, "policy": p.name, "binding": b.name,
                    "expressionIndex": index, "validationActions": actions}]);
                said.annotations.push((
                    "validation.policy.admission.k8s.io/validation_failure".into(),
                    failure.to_string(),
                ));
            }
            if b.warn {
                said.warnings.push(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {why}",
                    p.name, b.name
                ));
            }
            if b.deny {
                return Err(ApiError::new(
                    code_of(&v.reason),
                    &v.reason,
                    format!(
                        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {why}",
                        p.name, b.name
                    ),
                    None,
                ));
            }
        }
        // Audit annotations: `<policy>/<key>`, for values that are not null.
        for (key, expr) in &p.audit_annotations {
            if let Ok(e) = expr {
                if let Ok(cel::CelValue::String(text)) = cel::eval(e, &vars) {
                    said.annotations
                        .push((format!("{}/{key}", p.name), text.to_string()));
                }
            }
        }
        Ok(())
    }
}
