//! Strategic merge patch (`application/strategic-merge-patch+json`) for the served types:
//! lists merge by their patch merge key (containers by `name`, container ports by
//! `containerPort`, env by `name`, volumeMounts by `mountPath`, conditions by `type`, …),
//! lists without a strategy are replaced, and the directives `$patch: delete|replace|merge`,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys` are honoured.

use serde_json::{Map, Value};

/// How the list at `path` (field names from the object root, list indices dropped) merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Elements are matched by this key and merged.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. `metadata.finalizers`).
    MergePrimitives,
    /// Replaced as a whole (no patch strategy).
    Replace,
}

/// The patch strategy of a list field, from upstream's `patchStrategy`/`patchMergeKey` tags.
pub fn list_strategy(kind: &str, path: &[&str]) -> ListStrategy {
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
        ("spec", "ports") if kind == "Service" => MergeByKey("port"),
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
pub fn apply(kind: &str, target: &mut Value, patch: &Value) -> Result<(), String> {
    let mut path = Vec::new();
    merge_value(kind, target, patch, &mut path)
}

fn merge_value(
    kind: &str,
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
            merge_map(kind, target.as_object_mut().expect("object"), p, path)
        }
        other => {
            *target = other.clone();
            Ok(())
        }
    }
}

fn merge_map(
    kind: &str,
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
) -> Result<(), String> {
    // `$retainKeys`: keys of the target not listed are cleared.
    if let Some(keep) = patch.get("$retainKeys").and_then(|k| k.as_array()) {
        let keep: Vec<&str> = keep.iter().filter_map(|k| k.as_str()).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        path.push(k.clone());
        let result = merge_field(kind, target, k, v, patch, path);
        path.pop();
        result?;
    }
    Ok(())
}

fn merge_field(
    kind: &str,
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
            let strategy = list_strategy(kind, &segs);
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
                    for i in items {
                        if !list.contains(i) {
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
                        for item in items {
                            let Some(kv) = item.get(mk) else {
                                return Err(format!(
                                    "map: {item} does not contain declared merge key: {mk}"
                                ));
                            };
                            let pos = list.iter().position(|e| e.get(mk) == Some(kv));
                            let delete =
                                item.get("$patch").and_then(|p| p.as_str()) == Some("delete");
                            match (pos, delete) {
                                (Some(p), true) => {
                                    list.remove(p);
                                }
                                (None, true) => {}
                                (Some(p), false) => {
                                    // List indices are not part of the path.
                                    merge_value(kind, &mut list[p], item, path)?;
                                    strip_directives(&mut list[p]);
                                }
                                (None, false) => {
                                    let mut fresh = Value::Object(Map::new());
                                    merge_value(kind, &mut fresh, item, path)?;
                                    strip_directives(&mut fresh);
                                    list.push(fresh);
                                }
                            }
                        }
                    }
                    if let Some(order) = &order {
                        list = reorder(list, order, mk);
                    }
                }
            }
            if let Some(del) = delete_from {
                list.retain(|x| !del.contains(x));
            }
            target.insert(key.to_string(), Value::Array(list));
            Ok(())
        }
        Value::Object(_) => {
            let entry = target.entry(key.to_string()).or_insert(Value::Null);
            merge_value(kind, entry, v, path)?;
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

/// Orders a merged list by `$setElementOrder`: listed elements first, in that order, then the
/// rest in their current order.
fn reorder(list: Vec<Value>, order: &[Value], mk: &str) -> Vec<Value> {
    let mut rest = list;
    let mut out = Vec::with_capacity(rest.len());
    for o in order {
        let Some(key) = o.get(mk) else { continue };
        if let Some(p) = rest.iter().position(|e| e.get(mk) == Some(key)) {
            out.push(rest.remove(p));
        }
    }
    out.extend(rest);
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
    fn set_image_merges_containers_by_name() {
        let mut d = deployment();
        apply("Deployment", &mut d, &json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.16.1"}]}}}})).unwrap();
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
            "Deployment",
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
            "Deployment",
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
        apply("Deployment", &mut d, &json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}}})).unwrap();
        assert_eq!(
            d.pointer("/spec/template/spec/containers")
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            1
        );
        apply(
            "Deployment",
            &mut d,
            &json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}),
        )
        .unwrap();
        assert_eq!(d["metadata"]["labels"], json!({"only": "this"}));
        assert!(apply(
            "Deployment",
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}})
        )
        .is_err());
    }

    #[test]
    fn service_ports_merge_by_port() {
        let mut s = json!({"spec": {"ports": [{"port": 80, "name": "http"}]}});
        apply(
            "Service",
            &mut s,
            &json!({"spec": {"ports": [{"port": 443, "name": "https"}]}}),
        )
        .unwrap();
        assert_eq!(s["spec"]["ports"].as_array().unwrap().len(), 2);
    }
}
