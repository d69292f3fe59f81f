//! An update's managedFields bookkeeping done on the stored `FieldsV1` trees themselves, for
//! the common case where every entry is already in the form [`super::record_update`] writes:
//! the changed and removed paths are taken out of each tree and the changed ones added to the
//! writer's, without turning every entry into a set of paths and back (a pod's status write
//! touches a few paths; its entries hold a hundred). Anything else — an entry a client wrote
//! in another form, a key spelled another way — returns `false`, and the general path runs.
//! Both give the same object (`tests::the_in_place_update_matches_the_general_one`).

use serde_json::{Map, Value};

use super::{Entry, FieldSet, Writer};

/// The keys an entry in written form has (`subresource` only when not empty).
const ENTRY_KEYS: &[&str] = &[
    "apiVersion",
    "fieldsType",
    "fieldsV1",
    "manager",
    "operation",
    "subresource",
    "time",
];

/// Most path lookups (entries × changed and removed paths) done in place: a client can send
/// thousands of entries, and each path is looked up in each; above this the general path,
/// linear in the entries' size, runs.
const MAX_LOOKUPS: usize = 4_096;

/// Records in `new`'s managedFields that `who` changed `changed` and removed `removed`, when
/// something changed and every entry is in written form; `false` (and `new` untouched)
/// otherwise.
pub(super) fn record_update(
    new: &mut Value,
    changed: &FieldSet,
    removed: &FieldSet,
    who: Writer<'_>,
) -> bool {
    let paths = changed.len() + removed.len();
    if paths == 0 {
        return false;
    }
    let Some(list) = new
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    if list.is_empty()
        || list.len().saturating_mul(paths) > MAX_LOOKUPS
        || !list.iter().all(written_form)
    {
        return false;
    }
    let sub = who.scope.subresource();
    let mut mine = None;
    for (i, e) in list.iter_mut().enumerate() {
        if let Some(tree) = e.get_mut("fieldsV1").and_then(Value::as_object_mut) {
            for p in changed.iter().chain(removed) {
                remove(tree, p);
            }
        }
        if mine.is_none() && is(e, who.manager, "Update", sub) {
            mine = Some(i);
        }
    }
    if mine.is_none() && !changed.is_empty() {
        list.push(Entry::update_by(who).to_json());
        mine = Some(list.len() - 1);
    }
    if let Some(Value::Object(e)) = mine.and_then(|i| list.get_mut(i)) {
        if let Some(Value::Object(tree)) = e.get_mut("fieldsV1") {
            for p in changed {
                add(tree, p);
            }
        }
        e.insert("time".into(), who.time.into());
        e.insert("apiVersion".into(), who.api_version.into());
    }
    list.retain(|e| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|t| !t.is_empty())
    });
    if list.is_empty() {
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    true
}

fn is(e: &Value, manager: &str, operation: &str, subresource: &str) -> bool {
    let s = |k| e.get(k).and_then(Value::as_str).unwrap_or("");
    s("manager") == manager && s("operation") == operation && s("subresource") == subresource
}

/// An entry as `Entry::to_json` writes it, whose tree `from_fields_v1` then `canonical` then
/// `to_fields_v1` would give back unchanged.
fn written_form(e: &Value) -> bool {
    let Value::Object(m) = e else { return false };
    let string = |k: &str| m.get(k).is_some_and(Value::is_string);
    m.keys().all(|k| ENTRY_KEYS.contains(&k.as_str()))
        && ["manager", "operation", "apiVersion", "time"]
            .iter()
            .all(|k| string(k))
        && m.get("fieldsType").and_then(Value::as_str) == Some("FieldsV1")
        && m.get("subresource")
            .is_none_or(|s| s.as_str().is_some_and(|s| !s.is_empty()))
        && m.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|t| !t.is_empty() && written_tree(t, 0))
}

/// Deepest tree checked (deeper ones take the general path, which has no such limit).
const MAX_DEPTH: usize = 64;

/// Every node an object (leaves `{}`), every item step spelled as `canonical` spells it.
fn written_tree(t: &Map<String, Value>, depth: usize) -> bool {
    depth < MAX_DEPTH
        && t.iter().all(|(seg, child)| {
            (!seg.starts_with("k:") || canonical_key(&seg[2..]))
                && child
                    .as_object()
                    .is_some_and(|c| written_tree(c, depth + 1))
        })
}

/// `{"<field>":<value>}` as serde_json prints a one-field object whose value is a plain string
/// or an integer: `canonical` leaves such a step as it is, whatever the list's merge key.
fn canonical_key(s: &str) -> bool {
    let Some(body) = s.strip_prefix("{\"").and_then(|b| b.strip_suffix('}')) else {
        return false;
    };
    if body.contains(['\\', ' ', '\t', '\n', '\r', ',']) || body.chars().any(char::is_control) {
        return false;
    }
    let Some((field, value)) = body.split_once("\":") else {
        return false;
    };
    if field.contains('"') {
        return false;
    }
    let plain_string = value.len() >= 2
        && value.starts_with('"')
        && value.ends_with('"')
        && !value[1..value.len() - 1].contains('"');
    let digits = value.strip_prefix('-').unwrap_or(value);
    let integer = !digits.is_empty()
        && digits.len() <= 18
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" && value == "0" || !digits.starts_with('0'));
    plain_string || integer
}

/// Takes `path` out of the set `tree` holds: its leaf goes, and every node left empty by it.
/// Returns whether `tree` is empty afterwards.
fn remove(tree: &mut Map<String, Value>, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return tree.is_empty();
    };
    let Some(Value::Object(child)) = tree.get_mut(first.as_str()) else {
        return tree.is_empty();
    };
    if rest.is_empty() {
        // A member only as a leaf: a node with children stands for them, not for itself.
        if child.is_empty() {
            tree.remove(first.as_str());
        }
    } else if !child.is_empty() && remove(child, rest) {
        tree.remove(first.as_str());
    }
    tree.is_empty()
}

/// Puts `path` in the set `tree` holds, as `to_fields_v1` would.
fn add(tree: &mut Map<String, Value>, path: &[String]) {
    let mut node = tree;
    for seg in path {
        if !node.contains_key(seg.as_str()) {
            node.insert(seg.clone(), Value::Object(Map::new()));
        }
        node = match node.get_mut(seg.as_str()) {
            Some(Value::Object(m)) => m,
            _ => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::to_fields_v1;
    use super::*;

    #[test]
    fn one_field_keys_as_serde_json_prints_them_are_canonical() {
        for ok in [
            r#"{"name":"nginx"}"#,
            r#"{"containerPort":80}"#,
            r#"{"type":"Ready"}"#,
            r#"{"port":-1}"#,
            r#"{"x":0}"#,
            r#"{"name":"ünïcode"}"#,
        ] {
            assert!(canonical_key(ok), "{ok}");
        }
        for not in [
            r#"{"containerPort":80,"protocol":"TCP"}"#,
            r#"{"name": "nginx"}"#,
            r#"{"name":"a\"b"}"#,
            r#"{"name":"\u0041"}"#,
            r#"{"port":080}"#,
            r#"{"port":-0}"#,
            r#"{"port":8e1}"#,
            r#"{"port":80.0}"#,
            r#"{"on":true}"#,
            r#"{"name":"nginx""#,
            r#"{"na"me":"x"}"#,
            r#"{}"#,
            r#"{"x":1234567890123456789}"#,
        ] {
            assert!(!canonical_key(not), "{not}");
        }
    }

    #[test]
    fn a_leaf_goes_with_the_nodes_it_alone_kept() {
        let mut t = to_fields_v1(
            &[
                vec!["f:status".into(), "f:phase".into()],
                vec![
                    "f:status".into(),
                    "f:conditions".into(),
                    "k:{\"type\":\"Ready\"}".into(),
                    ".".into(),
                ],
            ]
            .into_iter()
            .collect(),
        );
        let tree = t.as_object_mut().unwrap();
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Not a member (a node with children): nothing goes.
        assert!(!remove(tree, &path(&["f:status", "f:conditions"])));
        assert!(!remove(
            tree,
            &path(&["f:status", "f:conditions", "k:{\"type\":\"Ready\"}", "."])
        ));
        assert_eq!(
            Value::Object(tree.clone()),
            serde_json::json!({"f:status": {"f:phase": {}}})
        );
        assert!(remove(tree, &path(&["f:status", "f:phase"])));
    }
}
