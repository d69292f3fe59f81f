//! Structural schemas (upstream's `apiextensions-apiserver/pkg/apiserver/schema`): a custom
//! resource version's `openAPIV3Schema` validates, prunes and defaults its objects. Pure
//! functions over JSON; messages and field paths as upstream's (`spec.replicas in body must be
//! of type integer: "string"`). Work is bounded by the object and the schema, both of which
//! passed the body limits; causes stop at [`MAX_CAUSES`].

use std::collections::HashMap;

use regex::Regex;
use rkube_api::StatusCause;
use serde_json::{Map, Value};

/// Field errors reported at most for one object.
pub const MAX_CAUSES: usize = 100;

/// The compiled patterns of a schema, by source.
#[derive(Default)]
pub struct Patterns(HashMap<String, Regex>);

impl Patterns {
    /// Compiles every `pattern` in `schema`; the first that does not compile is the error.
    pub fn compile(schema: &Value) -> Result<Patterns, String> {
        let mut out = HashMap::new();
        let mut err = None;
        walk(schema, &mut |node| {
            if let Some(p) = node.get("pattern").and_then(Value::as_str) {
                if !out.contains_key(p) && err.is_none() {
                    match regex::RegexBuilder::new(p).size_limit(1 << 20).build() {
                        Ok(r) => {
                            out.insert(p.to_string(), r);
                        }
                        Err(e) => err = Some(format!("{p:?}: {e}")),
                    }
                }
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(Patterns(out)),
        }
    }
}

/// Visits every schema node (properties, items, additionalProperties, the junctors).
pub fn walk(schema: &Value, f: &mut dyn FnMut(&Value)) {
    walk_depth(schema, f, 0)
}

fn walk_depth(schema: &Value, f: &mut dyn FnMut(&Value), depth: usize) {
    if depth > 256 || !schema.is_object() {
        return;
    }
    f(schema);
    for child in children(schema) {
        walk_depth(child, f, depth + 1);
    }
}

fn children(schema: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        out.extend(p.values());
    }
    if let Some(i) = schema.get("items") {
        match i {
            Value::Array(items) => out.extend(items.iter()),
            other => out.push(other),
        }
    }
    if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        out.push(a);
    }
    for j in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = schema.get(j).and_then(Value::as_array) {
            out.extend(list.iter());
        }
    }
    if let Some(n) = schema.get("not") {
        out.push(n);
    }
    out
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn type_of(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The schema of a property of an object node: its `properties` entry, else
/// `additionalProperties` when that is a schema.
fn property<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Whether unknown fields of an object node stay.
fn preserves(schema: &Value) -> bool {
    flag(schema, "x-kubernetes-preserve-unknown-fields")
        || schema
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == &Value::Bool(true))
}

/// How server-side apply merges a custom resource's lists: `x-kubernetes-list-type: map`
/// by its (first) key, `set` as a set, everything else atomic, as upstream reads the schema.
pub fn lists(schema: &Value) -> rkube_api::strategic::Lists {
    use rkube_api::strategic::{ListStrategy, OTHERWISE_ATOMIC};
    let mut out: Vec<(String, String, Option<String>)> = Vec::new();
    fn visit(
        s: &Value,
        parent: &str,
        field: &str,
        out: &mut Vec<(String, String, Option<String>)>,
        depth: usize,
    ) {
        if depth > 64 || !s.is_object() || out.len() > 256 {
            return;
        }
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let key = s
                    .pointer("/x-kubernetes-list-map-keys/0")
                    .and_then(Value::as_str)
                    .map(String::from);
                out.push((parent.to_string(), field.to_string(), key));
            }
            Some("set") => out.push((parent.to_string(), field.to_string(), None)),
            _ => {}
        }
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            for (k, child) in p {
                visit(child, field, k, out, depth + 1);
            }
        }
        if let Some(i) = s.get("items").filter(|i| i.is_object()) {
            // Items keep their list's name as their parent's (indices are dropped).
            if let Some(p) = i.get("properties").and_then(Value::as_object) {
                for (k, child) in p {
                    visit(child, field, k, out, depth + 1);
                }
            }
        }
        if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
            visit(a, parent, field, out, depth + 1);
        }
    }
    visit(schema, "", "", &mut out, 0);
    let mut overrides: Vec<rkube_api::strategic::ListOverride> = out
        .iter()
        .map(|(p, f, key)| {
            let strategy = match key {
                Some(k) => ListStrategy::MergeByKey(rkube_api::intern::str(k)),
                None => ListStrategy::MergePrimitives,
            };
            (
                rkube_api::intern::str(p),
                rkube_api::intern::str(f),
                strategy,
            )
        })
        .collect();
    overrides.push(OTHERWISE_ATOMIC);
    rkube_api::strategic::Lists(rkube_api::intern::list_overrides(overrides))
}

/// Removes fields the schema does not declare (upstream's pruning). At the root and in
/// embedded resources, `apiVersion`, `kind` and `metadata` stay.
pub fn prune(schema: &Value, v: &mut Value, root: bool) {
    prune_depth(schema, v, root, 0)
}

fn prune_depth(schema: &Value, v: &mut Value, root: bool, depth: usize) {
    if depth > 256 {
        return;
    }
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    match v {
        Value::Object(map) => {
            let keep_all = preserves(schema);
            let props = schema.get("properties").and_then(Value::as_object);
            map.retain(|k, v| {
                // A null where the schema allows none and has no default is dropped
                // (upstream's PruneNonNullableNullsWithoutDefaults).
                if v.is_null()
                    && property(schema, k)
                        .is_some_and(|s| !flag(s, "nullable") && s.get("default").is_none())
                {
                    return false;
                }
                keep_all
                    || props.is_some_and(|p| p.contains_key(k))
                    || (embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
            });
            for (k, child) in map.iter_mut() {
                if embedded && k == "metadata" && !props.is_some_and(|p| p.contains_key(k)) {
                    continue;
                }
                if let Some(s) = property(schema, k) {
                    prune_depth(s, child, false, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    prune_depth(s, item, false, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default`s of absent properties (and of `null`s where the schema is not
/// nullable), as upstream's structural defaulting; recursive into what is present.
pub fn default(schema: &Value, v: &mut Value) {
    default_depth(schema, v, 0)
}

fn default_depth(schema: &Value, v: &mut Value, depth: usize) {
    if depth > 256 {
        return;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    let Some(d) = s.get("default") else { continue };
                    match map.get(k) {
                        None => {
                            map.insert(k.clone(), d.clone());
                        }
                        Some(Value::Null) if !flag(s, "nullable") => {
                            map.insert(k.clone(), d.clone());
                        }
                        _ => {}
                    }
                }
            }
            for (k, child) in map.iter_mut() {
                if let Some(s) = property(schema, k) {
                    default_depth(s, child, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    default_depth(s, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Validates `v` against `schema`, adding upstream's causes under `path` (the root object's
/// `apiVersion`, `kind` and `metadata` are validated elsewhere).
pub fn validate(schema: &Value, patterns: &Patterns, v: &Value, causes: &mut Vec<StatusCause>) {
    let mut path = String::new();
    Validator { patterns, causes }.node(schema, v, &mut path, true, 0);
}

struct Validator<'a> {
    patterns: &'a Patterns,
    causes: &'a mut Vec<StatusCause>,
}

/// The JSON type name upstream's messages use for a value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn repr(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn push_field(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

impl Validator<'_> {
    fn full(&self) -> bool {
        self.causes.len() >= MAX_CAUSES
    }

    fn add(&mut self, c: StatusCause) {
        if !self.full() {
            self.causes.push(c);
        }
    }

    fn invalid(&mut self, path: &str, v: &Value, why: String) {
        self.add(StatusCause::invalid_raw(path, &repr(v), &why));
    }

    fn type_ok(schema: &Value, v: &Value) -> Result<(), String> {
        let ty = type_of(schema);
        if flag(schema, "x-kubernetes-int-or-string") {
            return match v {
                Value::Null if flag(schema, "nullable") => Ok(()),
                Value::String(_) => Ok(()),
                Value::Number(n) if n.is_i64() || n.is_u64() => Ok(()),
                _ => Err("integer or string".into()),
            };
        }
        let ok = match (ty, v) {
            ("", _) => true,
            (_, Value::Null) => flag(schema, "nullable"),
            ("object", Value::Object(_)) | ("array", Value::Array(_)) => true,
            ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => true,
            ("number", Value::Number(_)) => true,
            ("integer", Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(ty.to_string())
        }
    }

    fn node(&mut self, schema: &Value, v: &Value, path: &mut String, root: bool, depth: usize) {
        if self.full() || depth > 256 || !schema.is_object() {
            return;
        }
        if let Err(want) = Self::type_ok(schema, v) {
            let shown = if path.is_empty() {
                "body"
            } else {
                path.as_str()
            };
            let mut c = StatusCause::invalid_raw(
                path,
                &format!("{:?}", json_type(v)),
                &format!("{shown} in body must be of type {want}: {:?}", json_type(v)),
            );
            c.reason = "FieldValueTypeInvalid".into();
            self.add(c);
            return;
        }
        if v.is_null() {
            return;
        }
        self.checks(schema, v, path);
        match v {
            Value::Object(map) => self.object(schema, map, path, root, depth),
            Value::Array(items) => {
                if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                    for (i, item) in items.iter().enumerate() {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        self.node(s, item, path, false, depth + 1);
                        path.truncate(len);
                    }
                }
                self.list_type(schema, items, path);
            }
            _ => {}
        }
        // Each junctor's schemas are evaluated once: `allOf` reports its schemas' causes
        // directly, `anyOf`/`oneOf`/`not` count the ones that pass.
        if let Some(list) = schema.get("allOf").and_then(Value::as_array) {
            for s in list {
                self.node(s, v, path, root, depth + 1);
            }
        }
        for j in ["anyOf", "oneOf"] {
            let Some(list) = schema.get(j).and_then(Value::as_array) else {
                continue;
            };
            let passing = list
                .iter()
                .filter(|s| self.passes(s, v, path, depth))
                .count();
            let shown = if path.is_empty() {
                "body"
            } else {
                path.as_str()
            };
            match j {
                "anyOf" if passing == 0 => {
                    self.invalid(
                        path,
                        v,
                        format!("{shown} in body must validate at least one schema (anyOf)"),
                    );
                }
                "oneOf" if passing != 1 => {
                    self.invalid(
                        path,
                        v,
                        format!("{shown} in body must validate one and only one schema (oneOf)"),
                    );
                }
                _ => {}
            }
        }
        if let Some(n) = schema.get("not") {
            if self.passes(n, v, path, depth) {
                let shown = if path.is_empty() {
                    "body"
                } else {
                    path.as_str()
                };
                self.invalid(
                    path,
                    v,
                    format!("{shown} in body must not validate the schema (not)"),
                );
            }
        }
    }

    /// Whether `v` passes `schema` (no causes kept).
    fn passes(&self, schema: &Value, v: &Value, path: &str, depth: usize) -> bool {
        let mut scratch = Vec::new();
        let mut p = path.to_string();
        Validator {
            patterns: self.patterns,
            causes: &mut scratch,
        }
        .node(schema, v, &mut p, false, depth + 1);
        scratch.is_empty()
    }

    fn object(
        &mut self,
        schema: &Value,
        map: &Map<String, Value>,
        path: &mut String,
        root: bool,
        depth: usize,
    ) {
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for r in req.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    let len = path.len();
                    push_field(path, r);
                    self.add(StatusCause::required(path));
                    path.truncate(len);
                }
            }
        }
        let shown = if path.is_empty() {
            "body"
        } else {
            path.as_str()
        }
        .to_string();
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
            if map.len() as u64 > max {
                self.add(StatusCause {
                    reason: "FieldValueTooMany".into(),
                    message: format!("Too many: {}: must have at most {max} items", map.len()),
                    field: shown.clone(),
                });
            }
        }
        if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
            if (map.len() as u64) < min {
                self.invalid(
                    path,
                    &Value::from(map.len()),
                    format!("{shown} in body should have at least {min} properties"),
                );
            }
        }
        let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
        for (k, child) in map {
            if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") && root {
                continue;
            }
            if let Some(s) = property(schema, k) {
                let len = path.len();
                push_field(path, k);
                self.node(s, child, path, false, depth + 1);
                path.truncate(len);
            }
        }
        if !root && flag(schema, "x-kubernetes-embedded-resource") {
            for f in ["apiVersion", "kind"] {
                if map.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                    let len = path.len();
                    push_field(path, f);
                    self.add(StatusCause::required(path));
                    path.truncate(len);
                }
            }
        }
    }

    /// `enum`, `pattern`, bounds, lengths, item counts and formats.
    fn checks(&mut self, schema: &Value, v: &Value, path: &mut String) {
        let shown = if path.is_empty() {
            "body"
        } else {
            path.as_str()
        }
        .to_string();
        if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
            if !choices.contains(v) {
                let supported: Vec<String> = choices
                    .iter()
                    .map(|c| match c {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                let refs: Vec<&str> = supported.iter().map(String::as_str).collect();
                let value = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                self.add(StatusCause::not_supported(path, &value, &refs));
            }
        }
        match v {
            Value::String(s) => {
                let chars = s.chars().count() as u64;
                if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                    if chars > max {
                        self.add(StatusCause {
                            reason: "FieldValueTooLong".into(),
                            message: format!("Too long: may not be more than {max} bytes"),
                            field: path.clone(),
                        });
                    }
                }
                if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                    if chars < min {
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body should be at least {min} chars long"),
                        );
                    }
                }
                if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                    if let Some(re) = self.patterns.0.get(p) {
                        if !re.is_match(s) {
                            self.invalid(path, v, format!("{shown} in body should match '{p}'"));
                        }
                    }
                }
                if let Some(f) = schema.get("format").and_then(Value::as_str) {
                    if let Some(why) = format_error(f, s) {
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body must be of type {f}: {why}"),
                        );
                    }
                }
            }
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                    let excl = flag(schema, "exclusiveMinimum");
                    if x < min || (excl && x == min) {
                        let op = if excl {
                            "greater than"
                        } else {
                            "greater than or equal to"
                        };
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body should be {op} {}", num(min)),
                        );
                    }
                }
                if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                    let excl = flag(schema, "exclusiveMaximum");
                    if x > max || (excl && x == max) {
                        let op = if excl {
                            "less than"
                        } else {
                            "less than or equal to"
                        };
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body should be {op} {}", num(max)),
                        );
                    }
                }
                if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64) {
                    if m > 0.0 && (x / m).fract() != 0.0 {
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body should be a multiple of {}", num(m)),
                        );
                    }
                }
            }
            Value::Array(items) => {
                let n = items.len() as u64;
                if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                    if n > max {
                        self.add(StatusCause {
                            reason: "FieldValueTooMany".into(),
                            message: format!("Too many: {n}: must have at most {max} items"),
                            field: path.clone(),
                        });
                    }
                }
                if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                    if n < min {
                        self.invalid(
                            path,
                            v,
                            format!("{shown} in body should have at least {min} items"),
                        );
                    }
                }
                if flag(schema, "uniqueItems") {
                    let mut seen = std::collections::HashSet::new();
                    for (i, a) in items.iter().enumerate() {
                        // Canonical text: object keys are sorted.
                        if !seen.insert(a.to_string()) {
                            self.add(StatusCause::duplicate(&format!("{path}[{i}]"), &repr(a)));
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// `x-kubernetes-list-type: set` items are unique; `map` items unique by their keys.
    fn list_type(&mut self, schema: &Value, items: &[Value], path: &str) {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                let mut seen = std::collections::HashSet::new();
                for (i, a) in items.iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    if !seen.insert(a.to_string()) {
                        self.add(StatusCause::duplicate(
                            &format!("{path}[{i}]"),
                            repr(a).trim_matches('"'),
                        ));
                    }
                }
            }
            Some("map") => {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let key_of = |v: &Value| -> Vec<Value> {
                    keys.iter()
                        .map(|k| v.get(*k).cloned().unwrap_or(Value::Null))
                        .collect()
                };
                let mut seen = std::collections::HashSet::new();
                for (i, a) in items.iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    let ka = key_of(a);
                    if !seen.insert(Value::Array(ka.clone()).to_string()) {
                        let shown: Vec<String> = keys
                            .iter()
                            .zip(&ka)
                            .map(|(k, v)| {
                                format!(
                                    "{k}={}",
                                    v.as_str()
                                        .map(String::from)
                                        .unwrap_or_else(|| v.to_string())
                                )
                            })
                            .collect();
                        self.add(StatusCause::duplicate(
                            &format!("{path}[{i}]"),
                            &format!("map[{}]", shown.join(" ")),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

/// Why `s` is not of `format`, for the formats upstream checks that objects commonly use.
fn format_error(format: &str, s: &str) -> Option<&'static str> {
    let ok = match format {
        "date-time" | "datetime" => rkube_api::meta::parse_rfc3339(s).is_some(),
        "date" => {
            let b = s.as_bytes();
            b.len() == 10
                && b[4] == b'-'
                && b[7] == b'-'
                && s.split('-').all(|p| p.bytes().all(|c| c.is_ascii_digit()))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "uuid" => {
            s.len() == 36
                && s.chars().enumerate().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => c == '-',
                    _ => c.is_ascii_hexdigit(),
                })
        }
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        _ => true,
    };
    (!ok).then_some(match format {
        "date-time" | "datetime" => "not a valid date-time",
        "date" => "not a valid date",
        "byte" => "not base64 encoded",
        _ => "invalid format",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opt": {"type": "string", "nullable": true},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }})
    }

    fn errors(v: &Value) -> Vec<String> {
        let s = schema();
        let p = Patterns::compile(&s).unwrap();
        let mut causes = Vec::new();
        validate(&s, &p, v, &mut causes);
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn validates_with_upstream_messages() {
        assert!(errors(&json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"}, "spec": {"size": 2, "opt": null}})).is_empty());
        assert_eq!(
            errors(&json!({"spec": {"size": "big"}})),
            ["spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""]
        );
        assert_eq!(errors(&json!({"spec": {}})), ["spec.size: Required value"]);
        assert_eq!(
            errors(&json!({"spec": {"size": 11, "color": "green", "name": "ABC"}})),
            [
                "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
                "spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'",
                "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
            ]
        );
        assert_eq!(errors(&json!({"spec": {"size": 1, "port": 80}})).len(), 0);
        assert_eq!(
            errors(&json!({"spec": {"size": 1, "port": "http"}})).len(),
            0
        );
        assert_eq!(errors(&json!({"spec": {"size": 1, "port": true}})).len(), 1);
        assert_eq!(
            errors(&json!({"spec": {"size": 1, "tags": ["a", "a"]}})),
            ["spec.tags[1]: Duplicate value: \"a\""]
        );
        assert_eq!(
            errors(&json!({"spec": {"size": 1, "labels": {"a": 1}}})),
            ["spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\""]
        );
    }

    #[test]
    fn apply_merges_lists_as_the_schema_says() {
        use rkube_api::strategic::ListStrategy;
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "containers": {"type": "array", "items": {"type": "object"}}}}}});
        let l = lists(&s);
        assert_eq!(
            l.strategy(&["spec", "ports"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(l.strategy(&["spec", "tags"]), ListStrategy::MergePrimitives);
        assert_eq!(
            l.strategy(&["spec", "containers"]),
            ListStrategy::Replace,
            "atomic unless marked"
        );
        assert_eq!(
            l.strategy(&["metadata", "finalizers"]),
            ListStrategy::MergePrimitives
        );
        assert!(std::ptr::eq(l.0, lists(&s).0), "interned");
    }

    #[test]
    fn nested_junctors_cost_linear_time() {
        let mut s = json!({"minimum": 10});
        for _ in 0..60 {
            s = json!({"allOf": [s], "anyOf": [{"type": "integer"}]});
        }
        let p = Patterns::compile(&s).unwrap();
        let started = std::time::Instant::now();
        let mut causes = Vec::new();
        validate(&s, &p, &json!(1), &mut causes);
        assert!(!causes.is_empty());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn prunes_unknown_fields_and_defaults_absent_ones() {
        let s = schema();
        let mut v = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"},
            "bogus": 1, "spec": {"extra": true, "free": {"any": {"thing": 1}}, "labels": {"k": "v"}}});
        prune(&s, &mut v, true);
        default(&s, &mut v);
        let mut nulls = json!({"spec": {"size": 2, "name": null, "opt": null}});
        prune(&s, &mut nulls, true);
        assert_eq!(
            nulls,
            json!({"spec": {"size": 2, "opt": null}}),
            "non-nullable nulls go"
        );
        assert_eq!(
            v,
            json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "a"},
                "spec": {"free": {"any": {"thing": 1}}, "labels": {"k": "v"}, "size": 3, "color": "red"}})
        );
    }
}
