//! Field management (`metadata.managedFields`) and server-side apply, as pure functions over
//! JSON objects.
//!
//! A field set is the set of paths a manager owns, written as upstream's `FieldsV1`: `f:<name>`
//! for an object field, `k:{"name":"nginx"}` for an item of a list merged by key, `v:<json>` for
//! a member of a set of scalars, and `.` for a list item or map owned as a whole. Lists follow
//! the same strategies as strategic merge patch ([`crate::strategic::Lists`]): keyed,
//! set, or atomic.
//!
//! - An **update** (create, PUT, non-apply PATCH) gives its manager every field it added or
//!   changed, and takes those fields (and removed ones) from every other manager.
//! - An **apply** makes the applied configuration's fields the manager's set: it conflicts with
//!   other managers owning a field it sets to a different value (unless forced, which takes the
//!   field), merges the configuration into the live object, and removes the fields the manager
//!   applied before but no longer does, unless someone else owns them too.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::strategic::{ListStrategy, Lists};

/// One step of a path: `f:spec`, `k:{"name":"nginx"}`, `v:"kubernetes"`, or `.`.
pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;
/// Field paths with their leaf values.
pub type Values<'a> = std::collections::BTreeMap<Path, Option<&'a Value>>;

/// Object fields that hold maps (owned as a whole and per key), not structs.
const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "stringData",
    "nodeSelector",
    "matchLabels",
    "limits",
    "requests",
    "capacity",
    "allocatable",
];

/// Metadata fields no manager owns.
const UNMANAGED_META: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// Which part of an object a write manages: the main resource leaves `status` alone, the
/// `status` subresource manages only `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main,
    Status,
}

impl Scope {
    pub fn of(subresource: Option<&str>) -> Self {
        if subresource == Some("status") {
            Scope::Status
        } else {
            Scope::Main
        }
    }

    fn manages(self, top: &str) -> bool {
        match self {
            Scope::Main => !matches!(top, "status" | "apiVersion" | "kind"),
            Scope::Status => top == "status",
        }
    }

    fn subresource(self) -> &'static str {
        match self {
            Scope::Main => "",
            Scope::Status => "status",
        }
    }
}

/// The fields `obj` sets, within `scope`.
pub fn fields_of(lists: Lists, obj: &Value, scope: Scope) -> FieldSet {
    values_of(lists, obj, scope).into_keys().collect()
}

/// Every field path `obj` sets, within `scope`, with the value of each leaf (`None` for the
/// `.` entries that stand for an item or map itself): one walk, so comparing two objects'
/// fields costs time linear in their size, never a lookup per path.
pub fn values_of(lists: Lists, obj: &Value, scope: Scope) -> Values<'_> {
    let mut out = Values::new();
    if let Value::Object(map) = obj {
        for (k, v) in map {
            if !scope.manages(k) {
                continue;
            }
            if k == "metadata" {
                if let Value::Object(meta) = v {
                    for (mk, mv) in meta {
                        if !UNMANAGED_META.contains(&mk.as_str()) {
                            let mut names = vec!["metadata", mk.as_str()];
                            walk(
                                lists,
                                mv,
                                &mut names,
                                &mut vec!["f:metadata".into(), format!("f:{mk}")],
                                &mut out,
                            );
                        }
                    }
                }
                continue;
            }
            walk(
                lists,
                v,
                &mut vec![k.as_str()],
                &mut vec![format!("f:{k}")],
                &mut out,
            );
        }
    }
    out
}

fn walk<'a>(
    lists: Lists,
    v: &'a Value,
    names: &mut Vec<&'a str>,
    path: &mut Path,
    out: &mut Values<'a>,
) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            if names.last().is_some_and(|n| MAP_FIELDS.contains(n)) {
                out.insert(with(path, "."), None);
            }
            walk_fields(lists, map, names, path, out);
        }
        Value::Array(items) => match lists.strategy(names) {
            ListStrategy::MergeByKey(key) => {
                for item in items {
                    let Some(seg) = item_key(item, key) else {
                        out.insert(path.clone(), Some(v));
                        return;
                    };
                    path.push(seg);
                    if out.contains_key(&with(path, ".")) {
                        // A duplicate key: the first item is the one that counts.
                        path.pop();
                        continue;
                    }
                    out.insert(with(path, "."), None);
                    if let Value::Object(fields) = item {
                        walk_fields(lists, fields, names, path, out);
                    }
                    path.pop();
                }
            }
            ListStrategy::MergePrimitives => {
                for item in items {
                    out.insert(with(path, &format!("v:{item}")), Some(item));
                }
            }
            ListStrategy::Replace => {
                out.insert(path.clone(), Some(v));
            }
        },
        _ => {
            out.insert(path.clone(), Some(v));
        }
    }
}

/// The fields `new` sets that `old` did not (or set to another value), and the fields `old`
/// set that `new` no longer does, within `scope`: as comparing `values_of` both, but parts
/// equal in both are skipped (a status update walks the status, not the whole object).
pub fn changes(
    lists: Lists,
    old: Option<&Value>,
    new: &Value,
    scope: Scope,
) -> (FieldSet, FieldSet) {
    let empty = Map::new();
    fn object(v: Option<&Value>) -> Option<&Map<String, Value>> {
        v.and_then(Value::as_object)
    }
    let (om, nm) = (
        object(old).unwrap_or(&empty),
        object(Some(new)).unwrap_or(&empty),
    );
    let mut d = Diff::default();
    for k in union(om, nm) {
        if !scope.manages(k) {
            continue;
        }
        if k == "metadata" {
            let (o, n) = (
                object(om.get(k)).unwrap_or(&empty),
                object(nm.get(k)).unwrap_or(&empty),
            );
            for mk in union(o, n) {
                if !UNMANAGED_META.contains(&mk) {
                    let mut path = vec!["f:metadata".into(), format!("f:{mk}")];
                    d.walk(
                        lists,
                        o.get(mk),
                        n.get(mk),
                        &mut vec!["metadata", mk],
                        &mut path,
                    );
                }
            }
            continue;
        }
        d.walk(
            lists,
            om.get(k),
            nm.get(k),
            &mut vec![k],
            &mut vec![format!("f:{k}")],
        );
    }
    (d.changed, d.removed)
}

/// The keys of two maps, each once.
fn union<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = a.keys().chain(b.keys()).map(String::as_str).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[derive(Default)]
struct Diff {
    changed: FieldSet,
    removed: FieldSet,
}

impl Diff {
    /// Two versions of the field at `path`. A non-empty map on both sides contributes the
    /// same `.` entry to both and differs only in its children; anything else is walked on
    /// both sides and compared path by path.
    fn walk<'a>(
        &mut self,
        lists: Lists,
        old: Option<&'a Value>,
        new: Option<&'a Value>,
        names: &mut Vec<&'a str>,
        path: &mut Path,
    ) {
        if old == new {
            return;
        }
        if let (Some(Value::Object(o)), Some(Value::Object(n))) = (old, new) {
            if !o.is_empty() && !n.is_empty() {
                for k in union(o, n) {
                    names.push(k);
                    path.push(format!("f:{k}"));
                    self.walk(lists, o.get(k), n.get(k), names, path);
                    path.pop();
                    names.pop();
                }
                return;
            }
        }
        let mut before = Values::new();
        let mut after = Values::new();
        if let Some(o) = old {
            walk(lists, o, names, path, &mut before);
        }
        if let Some(n) = new {
            walk(lists, n, names, path, &mut after);
        }
        for (p, v) in &after {
            let differs = match before.get(p) {
                None => true,
                Some(was) => p.last().is_some_and(|s| s != ".") && was != v,
            };
            if differs {
                self.changed.insert(p.clone());
            }
        }
        for p in before.keys() {
            if !after.contains_key(p) {
                self.removed.insert(p.clone());
            }
        }
    }
}

fn walk_fields<'a>(
    lists: Lists,
    fields: &'a Map<String, Value>,
    names: &mut Vec<&'a str>,
    path: &mut Path,
    out: &mut Values<'a>,
) {
    for (k, child) in fields {
        names.push(k);
        path.push(format!("f:{k}"));
        walk(lists, child, names, path, out);
        path.pop();
        names.pop();
    }
}

fn with(path: &Path, seg: &str) -> Path {
    let mut p = path.clone();
    p.push(seg.to_string());
    p
}

fn item_key(item: &Value, key: &str) -> Option<String> {
    let k = item.get(key)?;
    Some(format!("k:{}", json!({ key: k })))
}

/// The paths an apply no longer sets, as a tree of steps to walk once.
#[derive(Default)]
struct Drops<'a> {
    children: std::collections::BTreeMap<&'a str, Drops<'a>>,
    /// This node itself is dropped (a field, or an item or map by its `.` entry).
    drop: bool,
    /// Another manager owns something below this node: it stays (its key fields too), and
    /// only what is dropped inside it goes.
    owned_below: bool,
}

/// Removes what an apply dropped, in one walk of the object: the fields the applier alone
/// owned; items, maps and structs nobody owns anything in any more (upstream's
/// `EnsureNamedFieldsAreMembers`: a field the drop emptied goes with it, below the top level);
/// and nothing another manager still has fields in (such an item stays, with its key). Lists
/// are indexed once per visit, so the cost is linear in the object and the paths.
fn remove_dropped<'p>(
    lists: Lists,
    obj: &mut Value,
    dropped: &[&'p Path],
    kept: impl Iterator<Item = &'p Path>,
) {
    let mut root = Drops::default();
    for p in dropped {
        let target = match p.last().map(String::as_str) {
            Some(".") => &p[..p.len() - 1],
            _ => &p[..],
        };
        // The named fields on the way (not the top-level ones, nor items) go too, unless
        // something below them is kept.
        let mut cur = &mut root;
        for (depth, seg) in target.iter().enumerate() {
            cur = cur.children.entry(seg.as_str()).or_default();
            if depth >= 1 && seg.starts_with("f:") && !target[0].eq("f:metadata") {
                cur.drop = true;
            }
        }
        cur.drop = true;
    }
    for p in kept {
        // Mark the nodes the drops reach on a kept path: all of them stay.
        let mut cur = &mut root;
        for seg in p {
            match cur.children.get_mut(seg.as_str()) {
                Some(next) => {
                    next.owned_below = true;
                    cur = next;
                }
                None => break,
            }
        }
    }
    apply_drops(obj, &root, lists, &mut Vec::new(), None);
}

/// Applies `node` to `v`, whose field names from the top are `names`; `key` (the merge key of
/// the item `v` is) stays whatever is dropped.
fn apply_drops<'a>(
    v: &mut Value,
    node: &Drops<'a>,
    lists: Lists,
    names: &mut Vec<&'a str>,
    key: Option<&str>,
) {
    match v {
        Value::Object(m) => {
            for (seg, child) in &node.children {
                let Some(name) = seg.strip_prefix("f:") else {
                    continue;
                };
                if key == Some(name) {
                    continue;
                }
                if child.drop && !child.owned_below {
                    m.remove(name);
                } else if let Some(next) = m.get_mut(name) {
                    names.push(name);
                    apply_drops(next, child, lists, names, None);
                    names.pop();
                }
            }
        }
        Value::Array(items) => {
            let keep: Vec<bool> = match lists.strategy(names) {
                ListStrategy::MergeByKey(key) => {
                    let mut seen = std::collections::HashSet::new();
                    items
                        .iter_mut()
                        .map(|item| {
                            let Some(seg) = item_key(item, key) else {
                                return true;
                            };
                            let child = node.children.get(seg.as_str());
                            // With duplicate keys only the first item counts, as in `walk`.
                            if !seen.insert(seg) {
                                return true;
                            }
                            match child {
                                Some(c) if c.drop && !c.owned_below => false,
                                Some(c) => {
                                    apply_drops(item, c, lists, names, Some(key));
                                    true
                                }
                                None => true,
                            }
                        })
                        .collect()
                }
                ListStrategy::MergePrimitives if !node.children.is_empty() => items
                    .iter()
                    .map(|item| {
                        !node
                            .children
                            .get(format!("v:{item}").as_str())
                            .is_some_and(|c| c.drop && !c.owned_below)
                    })
                    .collect(),
                _ => return,
            };
            let mut it = keep.into_iter();
            items.retain(|_| it.next().unwrap_or(true));
        }
        _ => {}
    }
}

/// `set` with each item step spelled as `walk` spells it, `k:{"<merge key>":…}`: upstream
/// keys some lists by two fields (ports by port and protocol), and clients space their JSON.
fn canonical(lists: Lists, set: FieldSet) -> FieldSet {
    set.into_iter()
        .map(|mut p| {
            let mut names: Vec<&str> = Vec::new();
            let mut canon: Vec<(usize, String)> = Vec::new();
            for (i, seg) in p.iter().enumerate() {
                if let Some(name) = seg.strip_prefix("f:") {
                    names.push(name);
                } else if let Some(keys) = seg.strip_prefix("k:") {
                    let ListStrategy::MergeByKey(key) = lists.strategy(&names) else {
                        continue;
                    };
                    let Ok(keys) = serde_json::from_str::<Map<String, Value>>(keys) else {
                        continue;
                    };
                    if let Some(v) = keys.get(key) {
                        canon.push((i, format!("k:{}", json!({ key: v }))));
                    }
                }
            }
            for (i, seg) in canon {
                p[i] = seg;
            }
            p
        })
        .collect()
}

/// A field set as `FieldsV1` JSON.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for seg in path {
            let entry = node.entry(seg.clone()).or_insert_with(|| json!({}));
            node = match entry {
                Value::Object(m) => m,
                _ => unreachable!("FieldsV1 nodes are objects"),
            };
        }
    }
    Value::Object(root)
}

/// `FieldsV1` JSON as a field set.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn go(v: &Value, path: &mut Path, out: &mut FieldSet) {
        let Value::Object(map) = v else { return };
        for (seg, child) in map {
            path.push(seg.clone());
            match child {
                Value::Object(c) if !c.is_empty() => go(child, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = FieldSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

/// A path as upstream prints it: `.spec.template.spec.containers[name="nginx"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if let Some(name) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(name);
        } else if let Some(keys) = seg.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(keys).unwrap_or_default();
            let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = seg.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// A new `Update` entry for `who`, owning nothing yet.
    fn update_by(who: Writer<'_>) -> Entry {
        Entry {
            manager: who.manager.to_string(),
            operation: "Update".into(),
            api_version: who.api_version.to_string(),
            time: who.time.to_string(),
            subresource: who.scope.subresource().to_string(),
            fields: FieldSet::new(),
        }
    }

    fn is(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        m.insert("time".into(), json!(self.time));
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), to_fields_v1(&self.fields));
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }
}

/// Whether `entries` finds any (without parsing their field sets).
fn has_entries(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(kept_entry))
}

/// The entries `entries` keeps: those naming a manager or holding fields.
fn kept_entry(e: &Value) -> bool {
    e.get("manager")
        .and_then(Value::as_str)
        .is_some_and(|m| !m.is_empty())
        || e.get("fieldsV1").is_some()
}

/// The object's managedFields entries (malformed ones are dropped).
pub fn entries(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    list.iter()
        .filter(|e| kept_entry(e))
        .map(|e| Entry {
            manager: s(e, "manager"),
            operation: s(e, "operation"),
            api_version: s(e, "apiVersion"),
            time: s(e, "time"),
            subresource: s(e, "subresource"),
            fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        })
        .collect()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::to_json)
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who writes, and when.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub time: &'a str,
    pub scope: Scope,
}

/// Records an update (create when `old` is None) of `new` by `who` in `new`'s managedFields.
/// `new` arrives with the managedFields the client sent, or with `old`'s when it sent none.
pub fn record_update(lists: Lists, old: Option<&Value>, new: &mut Value, who: Writer<'_>) {
    let (changed, removed) = changes(lists, old, new, who.scope);
    if changed.is_empty() && removed.is_empty() && has_entries(new) {
        return;
    }
    if in_place::record_update(new, &changed, &removed, who) {
        return;
    }
    record_update_by_sets(lists, changed, removed, new, who);
}

/// `record_update` for any managedFields: each entry read as a set of paths, and written back.
fn record_update_by_sets(
    lists: Lists,
    changed: FieldSet,
    removed: FieldSet,
    new: &mut Value,
    who: Writer<'_>,
) {
    let mut list = entries(new);
    for e in &mut list {
        e.fields = canonical(lists, std::mem::take(&mut e.fields));
    }
    if changed.is_empty() && removed.is_empty() && !list.is_empty() {
        return;
    }
    for e in list.iter_mut() {
        e.fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let sub = who.scope.subresource();
    let mine = match list.iter().position(|e| e.is(who.manager, "Update", sub)) {
        Some(i) => &mut list[i],
        None => {
            list.push(Entry::update_by(who));
            list.last_mut().expect("just pushed")
        }
    };
    mine.fields.extend(changed);
    mine.time = who.time.to_string();
    mine.api_version = who.api_version.to_string();
    set_entries(new, &list);
}

/// A field another manager owns with a different value than the applied configuration's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// As upstream prints the manager: `"kubectl-edit" using apps/v1`.
    pub manager: String,
    pub field: String,
}

/// Applies `config` for `who` to `live` (None: the object does not exist yet). Returns the
/// merged object with its managedFields, or the conflicts when not `force`d.
pub fn apply(
    lists: Lists,
    live: Option<&Value>,
    config: &Value,
    who: Writer<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let empty = json!({});
    let live_obj = live.unwrap_or(&empty);
    let mut list = entries(live_obj);
    for e in &mut list {
        e.fields = canonical(lists, std::mem::take(&mut e.fields));
    }
    if live.is_some() && list.is_empty() {
        // Fields set before anyone tracked them belong to a placeholder manager, so that an
        // apply cannot silently take them over.
        list.push(Entry {
            manager: "before-first-apply".into(),
            operation: "Update".into(),
            api_version: who.api_version.to_string(),
            time: who.time.to_string(),
            subresource: String::new(),
            fields: fields_of(lists, live_obj, who.scope),
        });
    }
    let sub = who.scope.subresource();
    let config_values = values_of(lists, config, who.scope);
    let live_values = values_of(lists, live_obj, who.scope);
    let applied: FieldSet = config_values.keys().cloned().collect();
    let mut conflicts = Vec::new();
    let mut taken: Vec<(usize, Path)> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        if e.is(who.manager, "Apply", sub) {
            continue;
        }
        for p in applied.intersection(&e.fields) {
            if p.last().is_some_and(|s| s == ".") {
                continue;
            }
            let config_value = config_values.get(p).copied().flatten();
            let live_value = live_values.get(p).copied().flatten();
            if config_value != live_value {
                conflicts.push(Conflict {
                    manager: print_manager(e),
                    field: path_string(p),
                });
                taken.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, p) in taken {
        list[i].fields.remove(&p);
    }
    let mut merged = live_obj.clone();
    let mut names = Vec::new();
    merge(lists, &mut merged, config, &mut names);
    let previous = list
        .iter()
        .find(|e| e.is(who.manager, "Apply", sub))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others: FieldSet = list
        .iter()
        .filter(|e| !e.is(who.manager, "Apply", sub))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let dropped: Vec<&Path> = previous
        .difference(&applied)
        .filter(|p| !others.contains(*p))
        .collect();
    remove_dropped(lists, &mut merged, &dropped, others.iter().chain(&applied));
    match list.iter_mut().find(|e| e.is(who.manager, "Apply", sub)) {
        Some(e) => {
            e.fields = applied;
            e.time = who.time.to_string();
            e.api_version = who.api_version.to_string();
        }
        None => list.push(Entry {
            manager: who.manager.to_string(),
            operation: "Apply".into(),
            api_version: who.api_version.to_string(),
            time: who.time.to_string(),
            subresource: sub.to_string(),
            fields: applied,
        }),
    }
    if merged.get("metadata").is_none() {
        merged["metadata"] = json!({});
    }
    set_entries(&mut merged, &list);
    Ok(merged)
}

/// Merges an applied configuration into an object: objects field by field, keyed lists item
/// by item, sets as a union, anything else replaced.
fn merge<'a>(lists: Lists, target: &mut Value, config: &'a Value, names: &mut Vec<&'a str>) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, cv) in c {
                if names.is_empty() && k == "metadata" {
                    // managedFields are ours to write; the rest of metadata merges.
                    if let Value::Object(cm) = cv {
                        let tm = t.entry("metadata").or_insert_with(|| json!({}));
                        for (mk, mv) in cm {
                            if mk == "managedFields" {
                                continue;
                            }
                            names.extend(["metadata", mk.as_str()]);
                            match tm.get_mut(mk) {
                                Some(existing) => merge(lists, existing, mv, names),
                                None => {
                                    tm[mk.as_str()] = mv.clone();
                                }
                            }
                            names.truncate(names.len() - 2);
                        }
                    }
                    continue;
                }
                names.push(k);
                match t.get_mut(k) {
                    Some(existing) => merge(lists, existing, cv, names),
                    None => {
                        t.insert(k.clone(), cv.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(t), Value::Array(c)) => match lists.strategy(names) {
            ListStrategy::MergeByKey(key) => {
                // Items found through an index of their keys: linear, not a scan per item.
                let mut index: std::collections::HashMap<String, usize> = Default::default();
                for (i, x) in t.iter().enumerate() {
                    if let Some(k) = x.get(key) {
                        // A duplicate key: the first item is the one that counts.
                        index.entry(k.to_string()).or_insert(i);
                    }
                }
                for item in c {
                    let found = item
                        .get(key)
                        .and_then(|k| index.get(&k.to_string()).copied());
                    match found {
                        Some(i) => merge(lists, &mut t[i], item, names),
                        None => {
                            if let Some(k) = item.get(key) {
                                index.insert(k.to_string(), t.len());
                            }
                            t.push(item.clone());
                        }
                    }
                }
            }
            ListStrategy::MergePrimitives => {
                let mut seen: std::collections::HashSet<String> =
                    t.iter().map(Value::to_string).collect();
                for item in c {
                    if seen.insert(item.to_string()) {
                        t.push(item.clone());
                    }
                }
            }
            ListStrategy::Replace => *t = c.clone(),
        },
        (t, c) => *t = c.clone(),
    }
}

/// The manager as upstream's conflict messages print it.
fn print_manager(e: &Entry) -> String {
    let mut s = format!("{:?}", e.manager);
    if !e.subresource.is_empty() {
        s = format!("{s} with subresource {:?}", e.subresource);
    }
    if e.operation == "Update" {
        s = if e.time.is_empty() {
            format!("{s} using {}", e.api_version)
        } else {
            format!("{s} using {} at {}", e.api_version, e.time)
        };
    }
    s
}

/// Upstream's message for an apply that conflicts.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    let body = if n == 1 {
        format!(
            "conflict with {}: {}",
            conflicts[0].manager, conflicts[0].field
        )
    } else {
        let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for c in conflicts.iter().filter(|c| c.manager == m) {
                lines.push(format!("- {}", c.field));
            }
        }
        lines.join("\n")
    };
    format!(
        "Apply failed with {n} conflict{}: {body}",
        if n == 1 { "" } else { "s" }
    )
}

mod in_place;
#[cfg(test)]
mod tests;
