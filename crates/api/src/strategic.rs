//! Strategic merge patch (`application/strategic-merge-patch+json`) for the served types:
//! lists merge by their patch merge key (containers by `name`, container ports by
//! `containerPort`, env by `name`, volumeMounts by `mountPath`, conditions by `type`, …),
//! lists without a strategy are replaced, and the directives `$patch: delete|replace|merge`,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys` are honoured.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// How the list at `path` (field names from the object root, list indices dropped) merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// Elements are matched by this key and merged.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    MergePrimitives,
    /// Replaced as a whole (no patch strategy).
    Replace,
}

/// How one kind's lists merge: upstream's `patchStrategy`/`patchMergeKey` tags common to the
/// served types, with the kind's own exceptions first (a Service's `spec.ports` merge by
/// `port`). The kind's strategy supplies them.
#[derive(Clone, Copy, Debug)]
pub struct Lists(pub &'static [ListOverride]);

/// A list field `(parent, field)` that merges its own way in one kind.
pub type ListOverride = (&'static str, &'static str, ListStrategy);

/// In a kind's overrides: every list not named otherwise is atomic outside `metadata`
/// (custom resources, whose schemas say which lists merge).
pub const OTHERWISE_ATOMIC: ListOverride = ("*", "*", ListStrategy::Replace);

impl Lists {
    /// The tags every served type shares.
    pub const GENERIC: Lists = Lists(&[]);

    /// The strategy of the list at `path` (field names from the object root, indices dropped).
    pub fn strategy(self, path: &[&str]) -> ListStrategy {
        let last = path.last().copied().unwrap_or("");
        let parent = if path.len() >= 2 {
            path[path.len() - 2]
        } else {
            ""
        };
        if let Some((_, _, s)) = self.0.iter().find(|(p, f, _)| *p == parent && *f == last) {
            return *s;
        }
        if path.first() != Some(&"metadata") && self.0.contains(&OTHERWISE_ATOMIC) {
            return ListStrategy::Replace;
        }
        list_strategy(path)
    }
}

/// The patch strategy of a list field common to the served types (upstream's
/// `patchStrategy`/`patchMergeKey` tags).
pub fn list_strategy(path: &[&str]) -> ListStrategy {
    use ListStrategy::*;
    let last = path.last().copied().unwrap_or("");
    let parent = if path.len() >= 2 {
        path[path.len() - 2]
    } else {
        ""
    };
    match (parent, last) {
        ("metadata", "finalizers") => MergePrimitives,
        ("metadata", "ownerReferences") => MergeByKey("uid"),
        (_, "containers") | (_, "initContainers") | (_, "ephemeralContainers") => {
            MergeByKey("name")
        }
        ("containers", "ports")
        | ("initContainers", "ports")
        | ("ephemeralContainers", "ports") => MergeByKey("containerPort"),
        (_, "env") => MergeByKey("name"),
        (_, "volumeMounts") => MergeByKey("mountPath"),
        (_, "volumeDevices") => MergeByKey("devicePath"),
        ("spec", "volumes") => MergeByKey("name"),
        ("spec", "imagePullSecrets") => MergeByKey("name"),
        ("spec", "hostAliases") => MergeByKey("ip"),
        ("spec", "topologySpreadConstraints") => MergeByKey("topologyKey"),
        ("spec", "resourceClaims") => MergeByKey("name"),
        ("spec", "schedulingGates") => MergeByKey("name"),
        ("status", "conditions") => MergeByKey("type"),
        ("status", "addresses") => MergeByKey("type"),
        ("status", "podIPs") | ("status", "hostIPs") => MergeByKey("ip"),
        _ => Replace,
    }
}

/// Applies `patch` to `target` in place.
pub fn apply(lists: Lists, target: &mut Value, patch: &Value) -> Result<(), String> {
    let mut path = Vec::new();
    merge_value(lists, target, patch, &mut path)
}

fn merge_value(
    lists: Lists,
    target: &mut Value,
    patch: &Value,
    path: &mut Vec<String>,
) -> Result<(), String> {
    match patch {
        Value::Object(p) => {
            match p.get("$patch").and_then(|v| v.as_str()) {
                Some("replace") => {
                    let mut m = p.clone();
                    m.remove("$patch");
                    *target = Value::Object(m);
                    return Ok(());
                }
                Some("delete") => {
                    *target = Value::Null;
                    return Ok(());
                }
                Some("merge") | None => {}
                Some(other) => return Err(format!("Unknown patch type: {other}")),
            }
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            merge_map(lists, target.as_object_mut().expect("object"), p, path)
        }
        other => {
            *target = other.clone();
            Ok(())
        }
    }
}

fn merge_map(
    lists: Lists,
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), String> {
    // `$retainKeys`: keys of the target not listed are cleared.
    if let Some(keep) = patch.get("$retainKeys").and_then(|k| k.as_array()) {
        let keep: HashSet<&str> = keep.iter().filter_map(|k| k.as_str()).collect();
        target.retain(|k, _| keep.contains(k.as_str()));
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        path.push(k.clone());
        let result = merge_field(lists, target, k, v, patch, path);
        path.pop();
        result?;
    }
    Ok(())
}

fn merge_field(
    lists: Lists,
    target: &mut Map<String, Value>,
    key: &str,
    v: &Value,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), String> {
    if v.is_null() {
        target.remove(key);
        return Ok(());
    }
    let segs: Vec<&str> = path.iter().map(|s| s.as_str()).collect();
    match v {
        Value::Array(items) => {
            let strategy = lists.strategy(&segs);
            let delete_from = patch
                .get(&format!("$deleteFromPrimitiveList/{key}"))
                .and_then(|d| d.as_array())
                .cloned();
            let order = patch
                .get(&format!("$setElementOrder/{key}"))
                .and_then(|d| d.as_array())
                .cloned();
            let current = target.remove(key).unwrap_or(Value::Array(Vec::new()));
            let mut list = match current {
                Value::Array(a) => a,
                _ => Vec::new(),
            };
            match strategy {
                ListStrategy::Replace => {
                    // A `$patch: replace` marker inside is dropped; the list replaces.
                    list = items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect();
                }
                ListStrategy::MergePrimitives => {
                    // Linear: a set of what is there, not a scan per element.
                    let mut seen: HashSet<String> = list.iter().map(Value::to_string).collect();
                    for i in items {
                        if seen.insert(i.to_string()) {
                            list.push(i.clone());
                        }
                    }
                }
                ListStrategy::MergeByKey(mk) => {
                    if items
                        .iter()
                        .any(|i| i.get("$patch").and_then(|p| p.as_str()) == Some("replace"))
                    {
                        list = items
                            .iter()
                            .filter(|i| i.get("$patch").is_none())
                            .cloned()
                            .collect();
                    } else {
                        list = merge_keyed(lists, list, items, mk, path)?;
                    }
                    if let Some(order) = &order {
                        list = reorder(list, order, mk);
                    }
                }
            }
            if let Some(del) = delete_from {
                let del: HashSet<String> = del.iter().map(Value::to_string).collect();
                list.retain(|x| !del.contains(&x.to_string()));
            }
            target.insert(key.to_string(), Value::Array(list));
            Ok(())
        }
        Value::Object(_) => {
            let entry = target.entry(key.to_string()).or_insert(Value::Null);
            merge_value(lists, entry, v, path)?;
            if entry.is_null() {
                target.remove(key);
            } else {
                strip_directives(entry);
            }
            Ok(())
        }
        other => {
            target.insert(key.to_string(), other.clone());
            Ok(())
        }
    }
}

/// Merges patch elements into a list keyed by `mk`, in time linear in both: elements are
/// found through an index of their keys, deletions leave holes that are squeezed out once.
fn merge_keyed(
    lists: Lists,
    list: Vec<Value>,
    items: &[Value],
    mk: &str,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, String> {
    let mut slots: Vec<Option<Value>> = list.into_iter().map(Some).collect();
    let mut index: HashMap<String, usize> = HashMap::with_capacity(slots.len());
    for (i, e) in slots.iter().enumerate() {
        if let Some(k) = e.as_ref().and_then(|e| e.get(mk)) {
            index.entry(k.to_string()).or_insert(i);
        }
    }
    for item in items {
        let Some(kv) = item.get(mk) else {
            return Err(format!(
                "map: {item} does not contain declared merge key: {mk}"
            ));
        };
        let key = kv.to_string();
        let delete = item.get("$patch").and_then(|p| p.as_str()) == Some("delete");
        match (index.get(&key).copied(), delete) {
            (Some(p), true) => {
                slots[p] = None;
                index.remove(&key);
            }
            (None, true) => {}
            (Some(p), false) => {
                // List indices are not part of the path.
                let slot = slots[p].get_or_insert(Value::Null);
                merge_value(lists, slot, item, path)?;
                strip_directives(slot);
            }
            (None, false) => {
                let mut fresh = Value::Object(Map::new());
                merge_value(lists, &mut fresh, item, path)?;
                strip_directives(&mut fresh);
                index.insert(key, slots.len());
                slots.push(Some(fresh));
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// Orders a merged list by `$setElementOrder`: listed elements first, in that order, then the
/// rest in their current order (linear, through an index of keys).
fn reorder(list: Vec<Value>, order: &[Value], mk: &str) -> Vec<Value> {
    let mut slots: Vec<Option<Value>> = list.into_iter().map(Some).collect();
    let mut index: HashMap<String, usize> = HashMap::with_capacity(slots.len());
    for (i, e) in slots.iter().enumerate() {
        if let Some(k) = e.as_ref().and_then(|e| e.get(mk)) {
            index.entry(k.to_string()).or_insert(i);
        }
    }
    let mut out = Vec::with_capacity(slots.len());
    for o in order {
        let Some(key) = o.get(mk) else { continue };
        if let Some(p) = index.remove(&key.to_string()) {
            if let Some(v) = slots[p].take() {
                out.push(v);
            }
        }
    }
    out.extend(slots.into_iter().flatten());
    out
}

fn strip_directives(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|k, _| !k.starts_with('$'));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: Lists = Lists(&[("spec", "ports", ListStrategy::MergeByKey("port"))]);
    use serde_json::json;

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [
                    {"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80, "protocol": "TCP"}], "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "busybox"}],
                "tolerations": [{"key": "x", "operator": "Exists"}]}}}})
    }

    #[test]
    fn long_lists_merge_in_linear_time() {
        // 20k env vars patched into 20k (quadratic merging took minutes; nextest's slow-test
        // limit stops a regression).
        let n = 20_000;
        let env = |off: usize| -> Vec<Value> {
            (0..n)
                .map(|i| json!({"name": format!("V{}", i + off), "value": "x"}))
                .collect()
        };
        let mut d =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": env(0)}]}}}});
        apply(
            Lists::GENERIC,
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "env": env(n / 2),
            "$setElementOrder/env": env(n / 2)}]}}}}),
        )
        .unwrap();
        let merged = d
            .pointer("/spec/template/spec/containers/0/env")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(merged.len(), n + n / 2);
        assert_eq!(merged[0]["name"], format!("V{}", n / 2));
        assert_eq!(merged[n + n / 2 - 1]["name"], format!("V{}", n / 2 - 1));
    }

    #[test]
    fn set_image_merges_containers_by_name() {
        let mut d = deployment();
        apply(Lists::GENERIC, &mut d, &json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.16.1"}]}}}})).unwrap();
        let cs = d
            .pointer("/spec/template/spec/containers")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["image"], "nginx:1.16.1");
        assert_eq!(
            cs[0]["ports"][0]["containerPort"], 80,
            "untouched fields stay"
        );
        assert_eq!(cs[1]["image"], "busybox");
    }

    #[test]
    fn keyed_lists_env_ports_and_directives() {
        let mut d = deployment();
        apply(
            Lists::GENERIC,
            &mut d,
            &json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "nginx"}],
                "containers": [{"name": "nginx", "env": [{"name": "B", "value": "2"}, {"name": "A", "$patch": "delete"}], "ports": [{"containerPort": 443}]},
                               {"name": "sidecar", "$patch": "delete"}],
                "tolerations": [{"key": "y", "operator": "Exists"}]}}}}),
        )
        .unwrap();
        let cs = d
            .pointer("/spec/template/spec/containers")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(cs.len(), 1, "sidecar deleted");
        assert_eq!(cs[0]["env"], json!([{"name": "B", "value": "2"}]));
        assert_eq!(
            cs[0]["ports"].as_array().unwrap().len(),
            2,
            "ports merge by containerPort"
        );
        assert_eq!(
            d.pointer("/spec/template/spec/tolerations"),
            Some(&json!([{"key": "y", "operator": "Exists"}])),
            "tolerations replace"
        );
    }

    #[test]
    fn maps_nulls_primitives_and_replace() {
        let mut d = deployment();
        apply(
            Lists::GENERIC,
            &mut d,
            &json!({"metadata": {"labels": {"app": null, "tier": "web"}, "finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
                    "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}}}),
        )
        .unwrap();
        assert_eq!(d["metadata"]["labels"], json!({"tier": "web"}));
        assert_eq!(d["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(
            d.pointer("/spec/template/metadata/annotations/kubectl.kubernetes.io~1restartedAt"),
            Some(&json!("now"))
        );
        apply(Lists::GENERIC, &mut d, &json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}}})).unwrap();
        assert_eq!(
            d.pointer("/spec/template/spec/containers")
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            1
        );
        apply(
            Lists::GENERIC,
            &mut d,
            &json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}),
        )
        .unwrap();
        assert_eq!(d["metadata"]["labels"], json!({"only": "this"}));
        assert!(apply(
            Lists::GENERIC,
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}})
        )
        .is_err());
    }

    #[test]
    fn service_ports_merge_by_port() {
        let mut s = json!({"spec": {"ports": [{"port": 80, "name": "http"}]}});
        apply(
            SERVICE,
            &mut s,
            &json!({"spec": {"ports": [{"port": 443, "name": "https"}]}}),
        )
        .unwrap();
        assert_eq!(s["spec"]["ports"].as_array().unwrap().len(), 2);
    }
}
