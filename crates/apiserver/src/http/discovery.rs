//! Legacy API discovery: `/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`, generated from
//! the resource table, so clients such as kubectl can map kinds and short names to paths.

use rkube_api::{resources, ResourceDef, RESOURCES};
use serde_json::{json, Value};

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entry(r: &ResourceDef) -> Value {
    let mut e = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    e
}

fn subresource_entry(r: &ResourceDef, sub: &str) -> Value {
    let (kind, group, version, verbs): (&str, Option<&str>, Option<&str>, &[&str]) = match sub {
        "status" => (r.kind, None, None, &["get", "patch", "update"]),
        "scale" => (
            "Scale",
            Some("autoscaling"),
            Some("v1"),
            &["get", "patch", "update"],
        ),
        "binding" => ("Binding", None, None, &["create"]),
        "eviction" => ("Eviction", Some("policy"), Some("v1"), &["create"]),
        "log" => ("Pod", None, None, &["get"]),
        "finalize" => ("Namespace", None, None, &["update"]),
        _ => (r.kind, None, None, &["get"]),
    };
    let mut e = json!({
        "name": format!("{}/{sub}", r.plural),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if let (Some(g), Some(v)) = (group, version) {
        e["group"] = json!(g);
        e["version"] = json!(v);
    }
    e
}

/// `/api/v1` or `/apis/<group>/<version>`: the APIResourceList.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let defs: Vec<&ResourceDef> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for r in &defs {
        list.push(resource_entry(r));
        for sub in r.subresources {
            list.push(subresource_entry(r, sub));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

/// `/api`: the core group's versions.
pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

/// `/apis`: every named group.
pub fn group_list() -> Value {
    let mut groups: Vec<Value> = Vec::new();
    for (g, v) in resources::group_versions() {
        if g.is_empty() {
            continue;
        }
        let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
        groups.push(json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv}));
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`: one group.
pub fn group(name: &str) -> Option<Value> {
    let (_, v) = resources::group_versions()
        .into_iter()
        .find(|(g, _)| *g == name)?;
    let gv = json!({"groupVersion": format!("{name}/{v}"), "version": v});
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv.clone()], "preferredVersion": gv}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_pods_and_subresources() {
        let l = resource_list("", "v1").unwrap();
        let res = l["resources"].as_array().unwrap();
        let pods = res.iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert!(res.iter().any(|r| r["name"] == "pods/status"));
        let apps = resource_list("apps", "v1").unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert!(resource_list("nope", "v1").is_none());
        assert!(group_list()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps"));
        assert_eq!(
            group("apps").unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
    }
}
