//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over JSON objects.

use serde_json::Value;

/// Applies a merge patch in place: objects merge recursively, `null` removes, anything else
/// replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Applies an RFC 6902 JSON patch (a list of operations) to `doc`.
/// Upstream's json-patch limits: operations per patch, and bytes that `copy` may add.
const MAX_OPS: usize = 10_000;
const MAX_COPIED_BYTES: usize = 16 * 1024 * 1024;

pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("json patch must be an array of operations")?;
    if ops.len() > MAX_OPS {
        return Err(format!(
            "the allowed maximum operations in a JSON patch is {MAX_OPS}, got {}",
            ops.len()
        ));
    }
    let mut copied = 0usize;
    for (i, op) in ops.iter().enumerate() {
        let kind = op
            .get("op")
            .and_then(|o| o.as_str())
            .ok_or(format!("operation {i}: missing \"op\""))?;
        let path = op
            .get("path")
            .and_then(|p| p.as_str())
            .ok_or(format!("operation {i}: missing \"path\""))?;
        match kind {
            "add" => add(doc, path, value_of(op, i)?)?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                let v = value_of(op, i)?;
                let slot = pointer_mut(doc, path).ok_or(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                ))?;
                *slot = v;
            }
            "move" => {
                let from = op
                    .get("from")
                    .and_then(|p| p.as_str())
                    .ok_or(format!("operation {i}: missing \"from\""))?;
                let v = remove(doc, from)?;
                add(doc, path, v)?;
            }
            "copy" => {
                let from = op
                    .get("from")
                    .and_then(|p| p.as_str())
                    .ok_or(format!("operation {i}: missing \"from\""))?;
                let v = doc.pointer(from).cloned().ok_or(format!(
                    "copy operation does not apply: doc is missing from path: {from}"
                ))?;
                copied += serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0);
                if copied > MAX_COPIED_BYTES {
                    return Err("the JSON patch copies too much data".into());
                }
                add(doc, path, v)?;
            }
            "test" => {
                let v = value_of(op, i)?;
                if doc.pointer(path) != Some(&v) {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            other => return Err(format!("Unexpected kind: {other}")),
        }
    }
    Ok(())
}

fn value_of(op: &Value, i: usize) -> Result<Value, String> {
    op.get("value")
        .cloned()
        .ok_or(format!("operation {i}: missing \"value\""))
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split(path: &str) -> Result<(String, String), String> {
    if path.is_empty() {
        return Ok((String::new(), String::new()));
    }
    let idx = path
        .rfind('/')
        .ok_or(format!("invalid JSON pointer: {path:?}"))?;
    Ok((path[..idx].to_string(), unescape(&path[idx + 1..])))
}

fn pointer_mut<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    if path.is_empty() {
        return Some(doc);
    }
    doc.pointer_mut(path)
}

fn add(doc: &mut Value, path: &str, v: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    let target = pointer_mut(doc, &parent).ok_or(format!(
        "add operation does not apply: doc is missing path: {path:?}"
    ))?;
    match target {
        Value::Object(m) => {
            m.insert(last, v);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(v);
                return Ok(());
            }
            let i: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last:?}"))?;
            if i > a.len() {
                return Err(format!(
                    "add operation does not apply: index {i} out of bounds"
                ));
            }
            a.insert(i, v);
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: {path:?}"
        )),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split(path)?;
    let target = pointer_mut(doc, &parent).ok_or(format!(
        "remove operation does not apply: doc is missing path: {path:?}"
    ))?;
    match target {
        Value::Object(m) => m.remove(&last).ok_or(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        )),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| format!("invalid array index {last:?}"))?;
            if i >= a.len() {
                return Err(format!(
                    "remove operation does not apply: index {i} out of bounds"
                ));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [{"b": "c"}]});
        merge_patch(&mut t, &json!({"a": [1]}));
        assert_eq!(t, json!({"a": [1]}));
        let mut t = json!({"metadata": {"labels": {"x": "1"}}});
        merge_patch(&mut t, &json!({"metadata": {"labels": {"y": "2"}}}));
        assert_eq!(t, json!({"metadata": {"labels": {"x": "1", "y": "2"}}}));
    }

    #[test]
    fn json_patch_ops() {
        let mut d =
            json!({"spec": {"replicas": 1, "list": [1, 2]}, "metadata": {"labels": {"a/b": "x"}}});
        json_patch(
            &mut d,
            &json!([
                {"op": "replace", "path": "/spec/replicas", "value": 3},
                {"op": "add", "path": "/spec/list/-", "value": 3},
                {"op": "add", "path": "/spec/list/0", "value": 0},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "test", "path": "/spec/replicas", "value": 3},
                {"op": "copy", "from": "/spec/replicas", "path": "/spec/copy"},
                {"op": "move", "from": "/spec/copy", "path": "/spec/moved"}
            ]),
        )
        .unwrap();
        assert_eq!(
            d,
            json!({"spec": {"replicas": 3, "list": [0, 1, 2, 3], "moved": 3}, "metadata": {"labels": {}}})
        );
        assert!(json_patch(
            &mut d,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 4}])
        )
        .is_err());
        assert!(json_patch(
            &mut d,
            &json!([{"op": "replace", "path": "/nope", "value": 4}])
        )
        .is_err());
        assert!(json_patch(&mut d, &json!({"op": "add"})).is_err());
        // Doubling a document again and again is refused, not run out of memory.
        let mut big = json!({"a": "x".repeat(1 << 20)});
        let bomb: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        assert!(json_patch(&mut big, &Value::Array(bomb)).is_err());
    }
}
