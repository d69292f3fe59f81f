//! `x-kubernetes-validations` (upstream's `apiextensions-apiserver/pkg/apiserver/schema/cel`):
//! CEL rules on schema nodes, run with `self` bound to the value there and — for transition
//! rules, which name `oldSelf` — `oldSelf` bound to the old object's value at the same place
//! (correlated through object properties, map values, and `map`/`set` lists; rules under
//! atomic lists have no old value). Failures become causes with the rule's `reason`,
//! `fieldPath` and `message` or `messageExpression`, as upstream words them.

use std::collections::HashMap;
use std::sync::Arc;

use rkube_api::StatusCause;
use serde_json::Value;

use crate::cel::{self, Expr};

/// Every rule and message expression of a schema, compiled.
#[derive(Default)]
pub struct Rules(HashMap<String, Arc<Expr>>);

/// One rule as written.
struct Rule<'a> {
    rule: &'a str,
    message: Option<&'a str>,
    message_expression: Option<&'a str>,
    reason: &'a str,
    field_path: &'a str,
    optional_old_self: bool,
}

fn rules_of(schema: &Value) -> Vec<Rule<'_>> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |f: &str| r.get(f).and_then(Value::as_str);
            Rule {
                rule: s("rule").unwrap_or(""),
                message: s("message").filter(|m| !m.is_empty()),
                message_expression: s("messageExpression").filter(|m| !m.is_empty()),
                reason: s("reason").unwrap_or("FieldValueInvalid"),
                field_path: s("fieldPath").unwrap_or(""),
                optional_old_self: r.get("optionalOldSelf") == Some(&Value::Bool(true)),
            }
        })
        .collect()
}

/// Whether an expression names `oldSelf` (a transition rule).
fn is_transition(rule: &str) -> bool {
    rule.match_indices("oldSelf").any(|(i, _)| {
        let before = rule[..i].chars().next_back();
        let after = rule[i + 7..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

impl Rules {
    /// Compiles every rule and message expression in `schema`; the errors are
    /// (where, why), `where` a path like `properties[spec].x-kubernetes-validations[0].rule`.
    pub fn compile(schema: &Value) -> (Rules, Vec<(String, String)>) {
        let mut out = HashMap::new();
        let mut errors = Vec::new();
        let mut cache = cel::Cache::default();
        compile_at(schema, "", &mut out, &mut errors, &mut cache, 0);
        (Rules(out), errors)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs the rules on `new` (and, for transition rules, `old`).
    pub fn validate(
        &self,
        schema: &Value,
        new: &Value,
        old: Option<&Value>,
        causes: &mut Vec<StatusCause>,
    ) {
        if self.0.is_empty() {
            return;
        }
        let mut path = String::new();
        self.node(schema, new, old, &mut path, causes, 0);
    }

    fn node(
        &self,
        schema: &Value,
        v: &Value,
        old: Option<&Value>,
        path: &mut String,
        causes: &mut Vec<StatusCause>,
        depth: usize,
    ) {
        if depth > 256 || causes.len() >= super::schema::MAX_CAUSES || v.is_null() {
            return;
        }
        for r in rules_of(schema) {
            self.run(&r, schema, v, old, path, causes);
        }
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let s = schema
                        .get("properties")
                        .and_then(|p| p.get(k))
                        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
                    let Some(s) = s else { continue };
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    let old_child = old.and_then(|o| o.get(k));
                    self.node(s, child, old_child, path, causes, depth + 1);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                let Some(s) = schema.get("items").filter(|s| s.is_object()) else {
                    return;
                };
                let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                // Old items indexed once by their key (map) or value (set): correlation is
                // linear in the list, not quadratic.
                let key_of = |x: &Value| -> String {
                    match list_type {
                        Some("map") => Value::Array(
                            keys.iter()
                                .map(|k| x.get(*k).cloned().unwrap_or(Value::Null))
                                .collect(),
                        )
                        .to_string(),
                        _ => x.to_string(),
                    }
                };
                let olds: HashMap<String, &Value> = match (list_type, old.and_then(Value::as_array))
                {
                    (Some("map" | "set"), Some(o)) => o.iter().map(|x| (key_of(x), x)).collect(),
                    _ => HashMap::new(),
                };
                for (i, item) in items.iter().enumerate() {
                    let old_item = if olds.is_empty() {
                        None
                    } else {
                        olds.get(&key_of(item)).copied()
                    };
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.node(s, item, old_item, path, causes, depth + 1);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    fn run(
        &self,
        r: &Rule,
        schema: &Value,
        v: &Value,
        old: Option<&Value>,
        path: &str,
        causes: &mut Vec<StatusCause>,
    ) {
        let Some(expr) = self.0.get(r.rule) else {
            return;
        };
        let transition = is_transition(r.rule);
        if transition && old.is_none() && !r.optional_old_self {
            return;
        }
        let null = Value::Null;
        let mut vars: Vec<(&str, &Value)> = vec![("self", v)];
        if transition {
            vars.push(("oldSelf", old.unwrap_or(&null)));
        }
        let field = match r.field_path.trim_start_matches('.') {
            "" => path.to_string(),
            f if path.is_empty() => f.to_string(),
            f => format!("{path}.{f}"),
        };
        let ty = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object");
        match cel::eval_bool(expr, &vars) {
            Ok(true) => {}
            Ok(false) => {
                let message = r
                    .message_expression
                    .and_then(|m| self.0.get(m))
                    .and_then(|m| cel::eval_string(m, &vars).ok())
                    .filter(|m| !m.trim().is_empty())
                    .or_else(|| r.message.map(String::from))
                    .unwrap_or_else(|| format!("failed rule: {}", r.rule));
                causes.push(cause(r.reason, &field, ty, &message));
            }
            Err(e) => causes.push(StatusCause::invalid_raw(
                &field,
                &format!("{ty:?}"),
                &format!("{e} evaluating rule: {}", r.rule),
            )),
        }
    }
}

fn cause(reason: &str, field: &str, ty: &str, message: &str) -> StatusCause {
    match reason {
        "FieldValueForbidden" => StatusCause::forbidden(field, message),
        "FieldValueRequired" => StatusCause {
            reason: "FieldValueRequired".into(),
            message: format!("Required value: {message}"),
            field: field.into(),
        },
        "FieldValueDuplicate" => StatusCause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {message:?}"),
            field: field.into(),
        },
        _ => StatusCause::invalid_raw(field, &format!("{ty:?}"), message),
    }
}

fn compile_at(
    schema: &Value,
    at: &str,
    out: &mut HashMap<String, Arc<Expr>>,
    errors: &mut Vec<(String, String)>,
    cache: &mut cel::Cache,
    depth: usize,
) {
    if depth > 256 || !schema.is_object() || errors.len() > 20 {
        return;
    }
    for (i, r) in rules_of(schema).iter().enumerate() {
        let here = format!("{at}x-kubernetes-validations[{i}]");
        if r.rule.trim().is_empty() {
            errors.push((format!("{here}.rule"), "Required value".into()));
            continue;
        }
        for (field, src) in [
            ("rule", Some(r.rule)),
            ("messageExpression", r.message_expression),
        ] {
            let Some(src) = src else { continue };
            match cache.get(src) {
                Ok(e) => {
                    out.insert(src.to_string(), e);
                }
                Err(e) => errors.push((
                    format!("{here}.{field}"),
                    format!("compilation failed: {e}"),
                )),
            }
        }
        if !matches!(
            r.reason,
            "FieldValueInvalid"
                | "FieldValueForbidden"
                | "FieldValueRequired"
                | "FieldValueDuplicate"
        ) {
            errors.push((format!("{here}.reason"), format!("Unsupported value: {:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"", r.reason)));
        }
    }
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in p {
            compile_at(
                s,
                &format!("{at}properties[{k}]."),
                out,
                errors,
                cache,
                depth + 1,
            );
        }
    }
    if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
        compile_at(s, &format!("{at}items."), out, errors, cache, depth + 1);
    }
    if let Some(s) = schema.get("additionalProperties").filter(|s| s.is_object()) {
        compile_at(
            s,
            &format!("{at}additionalProperties."),
            out,
            errors,
            cache,
            depth + 1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "self.name == oldSelf.name", "reason": "FieldValueForbidden", "message": "name is immutable", "fieldPath": ".name"},
                {"rule": "self.max < 100", "messageExpression": "'max is ' + string(self.max)"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "name": {"type": "string"},
                "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                    "items": {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v", "message": "v may only grow"}]}}}}}})
    }

    fn errors(new: Value, old: Option<Value>) -> Vec<String> {
        let (rules, errs) = Rules::compile(&schema());
        assert!(errs.is_empty(), "{errs:?}");
        let mut causes = Vec::new();
        rules.validate(&schema(), &new, old.as_ref(), &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn rules_and_transition_rules() {
        assert!(errors(json!({"spec": {"min": 1, "max": 2, "name": "a"}}), None).is_empty());
        assert_eq!(
            errors(json!({"spec": {"min": 300, "max": 200, "name": "a"}}), None),
            [
                "spec: Invalid value: \"object\": min must not exceed max",
                "spec: Invalid value: \"object\": max is 200"
            ]
        );
        let old = json!({"spec": {"min": 1, "max": 2, "name": "a", "items": [{"k": "x", "v": 5}]}});
        assert_eq!(
            errors(
                json!({"spec": {"min": 1, "max": 2, "name": "b", "items": [{"k": "x", "v": 4}, {"k": "y", "v": 0}]}}),
                Some(old)
            ),
            [
                "spec.name: Forbidden: name is immutable",
                "spec.items[0]: Invalid value: \"object\": v may only grow"
            ]
        );
        let (_, errs) = Rules::compile(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.("}]}),
        );
        assert_eq!(errs[0].0, "x-kubernetes-validations[0].rule");
        assert!(errs[0].1.starts_with("compilation failed"));
        assert!(is_transition("oldSelf == self") && !is_transition("self.oldSelfish == 1"));
    }
}
