//! Type checking of ValidatingAdmissionPolicy expressions (upstream's `status.typeChecking`):
//! each field an expression reads through `object` or `oldObject` is looked up in the OpenAPI
//! schema of every built-in kind the policy's rules name exactly (no wildcards); a field the
//! schema does not declare is an expression warning, as upstream's checker reports
//! `undefined field`. Custom resources and wildcard rules are not checked (upstream checks
//! them against their schemas; nothing is reported here rather than something wrong).

use cel::common::ast::Expr as E;
use serde_json::{json, Value};

/// The resources a policy's rules name exactly: (group, version, plural).
fn exact_resources(policy: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let strs = rkube_api::meta::string_list;
    for r in policy
        .pointer("/spec/matchConstraints/resourceRules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for g in strs(r.get("apiGroups")) {
            for v in strs(r.get("apiVersions")) {
                for res in strs(r.get("resources")) {
                    if g != "*" && v != "*" && !res.contains('*') && !res.contains('/') {
                        out.push((g.clone(), v.clone(), res));
                    }
                }
            }
        }
    }
    out.truncate(16);
    out
}

/// Field paths read from `object` / `oldObject` in a compiled expression.
fn paths(e: &cel::IdedExpr, out: &mut Vec<Vec<String>>, depth: usize) {
    if depth > 200 {
        return;
    }
    if let E::Select(_) = &e.expr {
        // The whole chain: object.a.b.c.
        let mut fields = Vec::new();
        let mut cur = e;
        while let E::Select(s) = &cur.expr {
            fields.push(s.field.clone());
            cur = &s.operand;
        }
        if let E::Ident(root) = &cur.expr {
            if root == "object" || root == "oldObject" {
                fields.reverse();
                out.push(fields);
                return;
            }
        }
    }
    match &e.expr {
        E::Call(c) => {
            if let Some(t) = &c.target {
                paths(t, out, depth + 1);
            }
            c.args.iter().for_each(|a| paths(a, out, depth + 1));
        }
        E::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                paths(x, out, depth + 1);
            }
        }
        E::List(l) => l.elements.iter().for_each(|x| paths(x, out, depth + 1)),
        E::Select(s) => paths(&s.operand, out, depth + 1),
        _ => {}
    }
}

/// The schema a node refers to (`$ref`, or the `allOf: [{$ref}]` described references use).
fn deref<'a>(schemas: &'a Value, node: &'a Value) -> &'a Value {
    let r = node
        .get("$ref")
        .or_else(|| node.pointer("/allOf/0/$ref"))
        .and_then(Value::as_str);
    match r
        .and_then(|r| r.rsplit('/').next())
        .and_then(|n| schemas.get(n))
    {
        Some(s) => s,
        None => node,
    }
}

/// The first field of `path` the schema at `root` does not declare.
fn undefined<'p>(schemas: &Value, root: &Value, path: &'p [String]) -> Option<&'p str> {
    let mut node = deref(schemas, root);
    for f in path {
        if let Some(p) = node.get("properties").and_then(Value::as_object) {
            match p.get(f) {
                Some(next) => node = deref(schemas, next),
                None if node.get("additionalProperties").is_some() => return None,
                None if f == "metadata" || f == "apiVersion" || f == "kind" => return None,
                None => return Some(f),
            }
        } else if let Some(a) = node.get("additionalProperties").filter(|a| a.is_object()) {
            node = deref(schemas, a);
        } else {
            return None;
        }
    }
    None
}

/// The expression warnings of a policy (`status.typeChecking.expressionWarnings`).
pub fn expression_warnings(policy: &Value) -> Vec<Value> {
    let mut kinds = Vec::new();
    for (g, v, res) in exact_resources(policy) {
        let Some(def) = rkube_api::resources::find(&g, &v, &res) else {
            continue;
        };
        kinds.push((def, Value::Object(crate::kinds::schemas(def))));
    }
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (list, field) in crate::kinds::admissionregistration::POLICY_EXPRESSIONS {
        for (i, item) in policy
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let Some(src) = item.get(field).and_then(Value::as_str) else {
                continue;
            };
            let Ok(expr) = crate::cel::compile(src) else {
                continue;
            };
            let mut found = Vec::new();
            paths(expr.tree(), &mut found, 0);
            let mut problems = Vec::new();
            for (def, schemas) in &kinds {
                let root = &schemas[crate::kinds::schema_name(def)];
                for p in &found {
                    if let Some(f) = undefined(schemas, root, p) {
                        problems.push(format!(
                            "{}, Kind={}: ERROR: <input>: undefined field '{f}'",
                            def.api_version(),
                            def.kind
                        ));
                    }
                }
            }
            problems.dedup();
            if !problems.is_empty() {
                out.push(json!({"fieldRef": format!("spec.{list}[{i}].{field}"), "warning": problems.join("\n")}));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_fields_are_warned_about() {
        let policy = json!({"spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"], "operations": ["CREATE"]}]},
            "validations": [
                {"expression": "object.spec.replicas <= 5 && object.metadata.name != ''"},
                {"expression": "object.spec.replicass <= 5"},
                {"expression": "object.spec.template.spec.containers.all(c, c.image != '') && has(object.spec.selector.matchLabels)"}]}});
        let w = expression_warnings(&policy);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0]["fieldRef"], "spec.validations[1].expression");
        assert!(w[0]["warning"]
            .as_str()
            .unwrap()
            .contains("undefined field 'replicass'"));
        let wild = json!({"spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "object.whatever"}]}});
        assert!(expression_warnings(&wild).is_empty());
    }
}
