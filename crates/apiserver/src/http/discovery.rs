//! API discovery, generated from the resource table and the custom resources served now, so
//! clients such as kubectl can map kinds and short names to paths: legacy (`/api`, `/apis`,
//! `/api/v1`, `/apis/<group>/<version>`) and aggregated (`/api` and `/apis` as an
//! `APIGroupDiscoveryList`, one round trip, with an ETag that changes with its content).

use std::cmp::Ordering;

use rkube_api::{resources, ResourceDef};
use serde_json::{json, Value};

/// Custom resources served now (each served version), beside the built-in table.
pub type Custom<'a> = &'a [&'static ResourceDef];

fn all<'a>(custom: Custom<'a>) -> impl Iterator<Item = &'static ResourceDef> + 'a {
    resources::discoverable().chain(custom.iter().copied())
}

/// Upstream's version priority (`v1` > `v1beta2` > `v1beta1` > `v1alpha1` > anything else):
/// GA before beta before alpha, higher numbers first, others last by name.
pub fn version_order(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: u64 = rest.get(..digits)?.parse().ok()?;
        match &rest[digits..] {
            "" => Some((3, major, 0)),
            t => {
                let (level, n) = if let Some(n) = t.strip_prefix("beta") {
                    (2, n)
                } else {
                    (1, t.strip_prefix("alpha")?)
                };
                Some((level, major, n.parse().ok()?))
            }
        }
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Every group and its versions, preferred first; core first, then the built-in groups,
/// then custom groups by name.
pub fn groups(custom: Custom) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out = resources::discoverable_groups();
    let mut extra: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in custom {
        if let Some((_, vs)) = out.iter_mut().find(|(g, _)| *g == r.group) {
            if !vs.contains(&r.version) {
                vs.push(r.version);
            }
            continue;
        }
        match extra.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) if vs.contains(&r.version) => {}
            Some((_, vs)) => vs.push(r.version),
            None => extra.push((r.group, vec![r.version])),
        }
    }
    for (_, vs) in &mut extra {
        vs.sort_by(|a, b| version_order(a, b));
    }
    extra.sort_by_key(|(g, _)| *g);
    out.extend(extra);
    out
}

fn resource_entry(r: &ResourceDef) -> Value {
    let mut e = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": resources::verbs(r),
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    e
}

/// (kind, group, version, verbs) of a subresource's response.
fn subresource_kind<'a>(
    r: &'a ResourceDef,
    sub: &str,
) -> (
    &'a str,
    Option<&'static str>,
    Option<&'static str>,
    &'static [&'static str],
) {
    let verbs = resources::subresource_verbs(sub);
    match sub {
        "scale" => ("Scale", Some("autoscaling"), Some("v1"), verbs),
        "binding" => ("Binding", None, None, verbs),
        "eviction" => ("Eviction", Some("policy"), Some("v1"), verbs),
        "exec" => ("PodExecOptions", None, None, verbs),
        "attach" => ("PodAttachOptions", None, None, verbs),
        "portforward" => ("PodPortForwardOptions", None, None, verbs),
        // status, log, finalize: the resource's own kind.
        _ => (r.kind, None, None, verbs),
    }
}

fn subresource_entry(r: &ResourceDef, sub: &str) -> Value {
    let (kind, group, version, verbs) = subresource_kind(r, sub);
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
pub fn resource_list(group: &str, version: &str, custom: Custom) -> Option<Value> {
    let defs: Vec<&ResourceDef> = all(custom)
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
pub fn group_list(custom: Custom) -> Value {
    let groups: Vec<Value> = groups(custom)
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// A group's name, versions and preferred (first) version.
fn group_entry(name: &str, versions: &[&str]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": gvs, "preferredVersion": gvs[0]})
}

/// `/apis/<group>`: one group.
pub fn group(name: &str, custom: Custom) -> Option<Value> {
    let (_, vs) = groups(custom).into_iter().find(|(g, _)| *g == name)?;
    let mut g = group_entry(name, &vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// The aggregated discovery content type for `version` (`v2` or `v2beta1`).
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// Which aggregated discovery version an `Accept` header asks for, if any (v2 preferred).
pub fn wants_aggregated(accept: &str) -> Option<&'static str> {
    let asks = |v: &str| {
        accept.split(',').any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"g=apidiscovery.k8s.io")
                && params.contains(&"as=APIGroupDiscoveryList")
                && params.contains(&format!("v={v}").as_str())
        })
    };
    ["v2", "v2beta1"].into_iter().find(|v| asks(v))
}

/// `/api` (`core`) or `/apis` as an `APIGroupDiscoveryList`.
pub fn aggregated(core: bool, version: &str, custom: Custom) -> Value {
    let mut items = Vec::new();
    for (g, vs) in groups(custom) {
        if g.is_empty() != core {
            continue;
        }
        let versions: Vec<Value> = vs
            .iter()
            .map(|v| aggregated_version(g, v, custom))
            .collect();
        let mut meta = json!({"creationTimestamp": null});
        if !g.is_empty() {
            meta["name"] = json!(g);
        }
        items.push(json!({"metadata": meta, "versions": versions}));
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items})
}

/// One group version of the aggregated document.
fn aggregated_version(g: &str, v: &str, custom: Custom) -> Value {
    {
        let resources: Vec<Value> = all(custom)
            .filter(|r| r.group == g && r.version == v)
            .map(|r| {
                let subs: Vec<Value> = r
                    .subresources
                    .iter()
                    .map(|sub| {
                        let (kind, sg, sv, verbs) = subresource_kind(r, sub);
                        json!({"subresource": sub, "verbs": verbs,
                            "responseKind": {"group": sg.unwrap_or(r.group), "version": sv.unwrap_or(r.version), "kind": kind}})
                    })
                    .collect();
                let mut e = json!({
                    "resource": r.plural,
                    "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                    "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": r.singular,
                    "verbs": resources::verbs(r),
                });
                if !r.short_names.is_empty() {
                    e["shortNames"] = json!(r.short_names);
                }
                if !r.categories.is_empty() {
                    e["categories"] = json!(r.categories);
                }
                if !subs.is_empty() {
                    e["subresources"] = json!(subs);
                }
                e
            })
            .collect();
        json!({"version": v, "resources": resources, "freshness": "Current"})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_discovery_has_every_group_with_kinds_and_subresources() {
        let core = aggregated(true, "v2", &[]);
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
        let res = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap();
        let pods = res.iter().find(|r| r["resource"] == "pods").unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "log"));
        let apis = aggregated(false, "v2beta1", &[]);
        let apps = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .unwrap();
        let d = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        assert_eq!(
            d["subresources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["subresource"] == "scale")
                .unwrap()["responseKind"]["group"],
            "autoscaling"
        );
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(kubectl), Some("v2"));
        assert_eq!(wants_aggregated("application/json"), None);
    }

    #[test]
    fn custom_groups_follow_the_built_in_ones_with_their_preferred_version_first() {
        let mk = |v: &str| {
            rkube_api::intern::def(ResourceDef {
                group: "example.com",
                version: rkube_api::intern::str(v),
                kind: "Widget",
                list_kind: "WidgetList",
                plural: "widgets",
                singular: "widget",
                namespaced: true,
                short_names: &["wd"],
                subresources: &["status"],
                categories: &[],
                storage_prefix: "example.com/widgets",
                watch_cached: true,
            })
        };
        let custom = [mk("v1beta1"), mk("v1"), mk("v2alpha1")];
        let g = group("example.com", &custom).unwrap();
        assert_eq!(g["preferredVersion"]["version"], "v1");
        let versions: Vec<&str> = g["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["v1", "v1beta1", "v2alpha1"]);
        let l = resource_list("example.com", "v1beta1", &custom).unwrap();
        assert!(l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "widgets/status"));
        let agg = aggregated(false, "v2", &custom);
        let last = agg["items"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["metadata"]["name"], "example.com");
        assert_eq!(version_order("v10", "v2"), Ordering::Less);
    }

    #[test]
    fn core_resource_list_has_pods_and_subresources() {
        let l = resource_list("", "v1", &[]).unwrap();
        let res = l["resources"].as_array().unwrap();
        let pods = res.iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert!(res.iter().any(|r| r["name"] == "pods/status"));
        let apps = resource_list("apps", "v1", &[]).unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert!(resource_list("nope", "v1", &[]).is_none());
        assert!(group_list(&[])["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps"));
        assert_eq!(
            group("apps", &[]).unwrap()["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
    }
}
