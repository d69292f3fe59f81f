//! Patches of a stored object: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! strategic merge patch (`crate::strategic`), each giving a new object within the bounds.
//!
//! JSON patch is where a small body can build a huge or deep object, so it is bounded as it
//! runs, as upstream's: at most 10,000 operations, `copy` may add at most 3 MiB in all, no
//! `copy`/`move` into its own subtree, no value placed deeper than `bounds::MAX_DEPTH`, and a
//! budget on the work (values walked, array elements shifted) of the whole patch.

use serde_json::Value;

use crate::bounds::{self, MAX_DEPTH};
use crate::strategic::Lists;

/// Which patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
}

/// Why a patch was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchError {
    /// Not a patch of this kind at all (400).
    Malformed(String),
    /// Over the operation limit (413).
    TooManyOperations(String),
    /// A patch that does not apply, or whose result would break the bounds (422).
    Invalid(String),
}

/// Upstream's limits (`maxJSONPatchOperations`, `JSONPatchMaxCopyBytes`).
pub const MAX_OPS: usize = 10_000;
pub const MAX_COPIED_BYTES: usize = 3 * 1024 * 1024;
/// Values visited and elements shifted by one JSON patch, in all.
const MAX_WORK: usize = 50_000_000;

/// `cur` with `patch` applied.
pub fn apply(
    kind: PatchKind,
    lists: Lists,
    cur: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let mut target = cur.clone();
    match kind {
        PatchKind::Merge => merge_patch(&mut target, patch),
        PatchKind::Strategic => {
            crate::strategic::apply(lists, &mut target, patch).map_err(PatchError::Invalid)?
        }
        PatchKind::Json => json_patch(&mut target, patch)?,
    }
    bounds::check(&target).map_err(|c| PatchError::Invalid(c.message))?;
    Ok(target)
}

/// Applies a merge patch in place: objects merge recursively, `null` removes, anything else
/// replaces. (Its depth is the patch's, which decoding bounded.)
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

/// What a JSON patch has used of its allowances.
#[derive(Default)]
struct Budget {
    copied: usize,
    work: usize,
}

impl Budget {
    fn spend(&mut self, work: usize) -> Result<(), PatchError> {
        self.work = self.work.saturating_add(work);
        if self.work > MAX_WORK {
            return Err(PatchError::Invalid(
                "the JSON patch does too much work".into(),
            ));
        }
        Ok(())
    }

    /// Checks that `v`, placed at `path`, keeps the object within the bounds.
    fn place(&mut self, path: &str, v: &Value) -> Result<(), PatchError> {
        let at = tokens(path);
        let room = MAX_DEPTH.saturating_sub(at);
        let remaining = MAX_WORK.saturating_sub(self.work);
        match bounds::measure(v, room, usize::MAX, remaining) {
            Some(shape) => self.spend(shape.nodes),
            None if bounds::measure(v, usize::MAX, usize::MAX, remaining).is_some() => {
                Err(PatchError::Invalid(format!(
                    "the value placed at {path:?} would nest the object more than {MAX_DEPTH} levels deep"
                )))
            }
            None => Err(PatchError::Invalid(
                "the JSON patch does too much work".into(),
            )),
        }
    }
}

/// The number of reference tokens in a JSON pointer.
fn tokens(path: &str) -> usize {
    path.bytes().filter(|b| *b == b'/').count()
}

/// Applies an RFC 6902 JSON patch (a list of operations) to `doc`, within the limits above.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| PatchError::Malformed("json patch must be an array of operations".into()))?;
    if ops.len() > MAX_OPS {
        return Err(PatchError::TooManyOperations(format!(
            "The allowed maximum operations in a JSON patch is {MAX_OPS}, got {}",
            ops.len()
        )));
    }
    let mut budget = Budget::default();
    let invalid = |m: String| PatchError::Invalid(m);
    for (i, op) in ops.iter().enumerate() {
        let kind = op
            .get("op")
            .and_then(|o| o.as_str())
            .ok_or_else(|| invalid(format!("operation {i}: missing \"op\"")))?;
        let path = op
            .get("path")
            .and_then(|p| p.as_str())
            .ok_or_else(|| invalid(format!("operation {i}: missing \"path\"")))?;
        let from = || {
            op.get("from")
                .and_then(|p| p.as_str())
                .ok_or_else(|| invalid(format!("operation {i}: missing \"from\"")))
        };
        match kind {
            "add" => {
                let v = value_of(op, i)?;
                budget.place(path, &v)?;
                add(doc, path, v, &mut budget)?;
            }
            "remove" => {
                remove(doc, path, &mut budget)?;
            }
            "replace" => {
                let v = value_of(op, i)?;
                budget.place(path, &v)?;
                let slot = pointer_mut(doc, path).ok_or_else(|| {
                    invalid(format!(
                        "replace operation does not apply: doc is missing key: {path}"
                    ))
                })?;
                *slot = v;
            }
            "move" => {
                let from = from()?;
                if from != path && is_within(path, from) {
                    return Err(invalid(format!(
                        "move operation does not apply: {path:?} is inside {from:?}"
                    )));
                }
                let v = remove(doc, from, &mut budget)?;
                budget.place(path, &v)?;
                add(doc, path, v, &mut budget)?;
            }
            "copy" => {
                let from = from()?;
                if is_within(path, from) {
                    return Err(invalid(format!(
                        "copy operation does not apply: {path:?} is inside {from:?}"
                    )));
                }
                let source = doc.pointer(from).ok_or_else(|| {
                    invalid(format!(
                        "copy operation does not apply: doc is missing from path: {from}"
                    ))
                })?;
                let room = MAX_COPIED_BYTES.saturating_sub(budget.copied);
                let remaining = MAX_WORK.saturating_sub(budget.work);
                let shape = bounds::measure(source, usize::MAX, room, remaining).ok_or_else(|| {
                    invalid(format!(
                        "Unable to complete the copy, the accumulated size increase of copy exceeds the limit {MAX_COPIED_BYTES}"
                    ))
                })?;
                budget.copied += shape.bytes;
                budget.spend(shape.nodes)?;
                if tokens(path) + shape.depth > MAX_DEPTH {
                    return Err(invalid(format!(
                        "the value placed at {path:?} would nest the object more than {MAX_DEPTH} levels deep"
                    )));
                }
                let v = source.clone();
                add(doc, path, v, &mut budget)?;
            }
            "test" => {
                let v = value_of(op, i)?;
                budget.place(path, &v)?;
                // A missing value tests equal to null, as upstream's json-patch (kube-rs's
                // finalizer helper tests `/metadata/finalizers` against null).
                let found = doc.pointer(path).unwrap_or(&Value::Null);
                if *found != v {
                    return Err(invalid(format!("testing value {path} failed: test failed")));
                }
            }
            other => return Err(PatchError::Malformed(format!("Unexpected kind: {other}"))),
        }
    }
    Ok(())
}

/// Whether the pointer `path` is `base` or inside it.
fn is_within(path: &str, base: &str) -> bool {
    base.is_empty() || path == base || path.starts_with(&format!("{base}/"))
}

fn value_of(op: &Value, i: usize) -> Result<Value, PatchError> {
    op.get("value")
        .cloned()
        .ok_or_else(|| PatchError::Invalid(format!("operation {i}: missing \"value\"")))
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split(path: &str) -> Result<(&str, String), PatchError> {
    if path.is_empty() {
        return Ok(("", String::new()));
    }
    let idx = path
        .rfind('/')
        .ok_or_else(|| PatchError::Invalid(format!("invalid JSON pointer: {path:?}")))?;
    Ok((&path[..idx], unescape(&path[idx + 1..])))
}

fn pointer_mut<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    if path.is_empty() {
        return Some(doc);
    }
    doc.pointer_mut(path)
}

fn add(doc: &mut Value, path: &str, v: Value, budget: &mut Budget) -> Result<(), PatchError> {
    if path.is_empty() {
        *doc = v;
        return Ok(());
    }
    let (parent, last) = split(path)?;
    let missing = || {
        PatchError::Invalid(format!(
            "add operation does not apply: doc is missing path: {path:?}"
        ))
    };
    let target = pointer_mut(doc, parent).ok_or_else(missing)?;
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
                .map_err(|_| PatchError::Invalid(format!("invalid array index {last:?}")))?;
            if i > a.len() {
                return Err(PatchError::Invalid(format!(
                    "add operation does not apply: index {i} out of bounds"
                )));
            }
            budget.spend(a.len() - i)?;
            a.insert(i, v);
            Ok(())
        }
        _ => Err(missing()),
    }
}

fn remove(doc: &mut Value, path: &str, budget: &mut Budget) -> Result<Value, PatchError> {
    let (parent, last) = split(path)?;
    let missing = || {
        PatchError::Invalid(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        ))
    };
    if path.is_empty() {
        return Err(missing());
    }
    let target = pointer_mut(doc, parent).ok_or_else(missing)?;
    match target {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| PatchError::Invalid(format!("invalid array index {last:?}")))?;
            if i >= a.len() {
                return Err(PatchError::Invalid(format!(
                    "remove operation does not apply: index {i} out of bounds"
                )));
            }
            budget.spend(a.len() - i)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
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
                {"op": "test", "path": "/metadata/finalizers", "value": null},
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
        assert!(matches!(
            json_patch(&mut d, &json!({"op": "add"})),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn patch_bombs_are_refused() {
        // Doubling a document again and again.
        let mut big = json!({"a": "x".repeat(1 << 20)});
        let bomb: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "/a", "path": format!("/c{i}")}))
            .collect();
        assert!(json_patch(&mut big, &Value::Array(bomb)).is_err());
        // Copying a subtree into its own leaf doubles the nesting each time.
        let mut d = json!({"a": {"b": {"c": 1}}});
        let e = json_patch(
            &mut d,
            &json!([{"op": "copy", "from": "/a", "path": "/a/b/d"}]),
        )
        .unwrap_err();
        assert!(matches!(e, PatchError::Invalid(m) if m.contains("inside")));
        let e = json_patch(
            &mut d,
            &json!([{"op": "move", "from": "/a", "path": "/a/b/x"}]),
        );
        assert!(e.is_err());
        // A chain nested past the bound, a level at a time.
        let mut chain = json!({});
        let mut path = String::new();
        let mut ops = Vec::new();
        for _ in 0..(MAX_DEPTH + 5) {
            path.push_str("/n");
            ops.push(json!({"op": "add", "path": path, "value": {}}));
        }
        let e = json_patch(&mut chain, &Value::Array(ops)).unwrap_err();
        assert!(matches!(e, PatchError::Invalid(m) if m.contains("levels deep")));
        // Too many operations: upstream's 413.
        let many: Vec<Value> = (0..=MAX_OPS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        assert!(matches!(
            json_patch(&mut json!({}), &Value::Array(many)),
            Err(PatchError::TooManyOperations(_))
        ));
        // Shifting a long array again and again.
        let mut long = json!({"l": vec![0; 100_000]});
        let shifts: Vec<Value> = (0..MAX_OPS)
            .map(|_| json!({"op": "add", "path": "/l/0", "value": 1}))
            .collect();
        assert!(json_patch(&mut long, &Value::Array(shifts)).is_err());
    }
}
