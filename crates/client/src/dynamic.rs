//! Resources known only at run time: what discovery says an apiserver serves
//! (`ApiResource`, `discover`), and `PartialObjectMeta`, any object read for its metadata
//! alone, so one informer type watches every kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, ObjectMeta};
use serde::{Deserialize, Serialize};

use crate::{Client, Error, Method};

/// One resource an apiserver serves, as its discovery document names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiResource {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl ApiResource {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_verbs(&self, verbs: &[&str]) -> bool {
        verbs.iter().all(|v| self.verbs.iter().any(|x| x == v))
    }

    /// The object's path (`namespace` ignored for cluster-scoped resources).
    pub fn object_path(&self, namespace: &str, name: &str) -> String {
        format!("{}/{name}", self.collection_path(namespace))
    }

    /// The collection's path in `namespace` (all namespaces when empty or cluster-scoped).
    pub fn collection_path(&self, namespace: &str) -> String {
        let mut p = group_version_path(&self.group, &self.version);
        if self.namespaced && !namespace.is_empty() {
            p.push_str("/namespaces/");
            p.push_str(namespace);
        }
        p.push('/');
        p.push_str(&self.plural);
        p
    }
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// The group of an `apiVersion` (`""` for `v1`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The aggregated discovery document's media type (v2).
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Every top-level resource (no subresources) of the core group and of each group's
/// preferred version, as upstream's `ServerPreferredResources`: from aggregated discovery
/// (`/api` and `/apis`, two requests), or group by group from a server without it.
pub async fn discover(client: &Client) -> Result<Vec<ApiResource>, Error> {
    let mut out = Vec::new();
    for path in ["/api", "/apis"] {
        let bytes = client
            .send_accepting(Method::GET, path, None, AGGREGATED)
            .await?;
        let doc: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::Decode(format!("{path}: {e}")))?;
        if doc.get("kind").and_then(|k| k.as_str()) != Some("APIGroupDiscoveryList") {
            return discover_legacy(client).await;
        }
        out.extend(from_aggregated(&doc));
    }
    Ok(out)
}

/// The preferred (first) version's resources of each group of an `APIGroupDiscoveryList`.
pub fn from_aggregated(doc: &serde_json::Value) -> Vec<ApiResource> {
    let mut out = Vec::new();
    let str_of = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    for item in doc["items"].as_array().into_iter().flatten() {
        let group = item["metadata"]["name"].as_str().unwrap_or_default();
        let Some(preferred) = item["versions"].as_array().and_then(|v| v.first()) else {
            continue;
        };
        let version = str_of(preferred, "version");
        for r in preferred["resources"].as_array().into_iter().flatten() {
            out.push(ApiResource {
                group: group.to_string(),
                version: version.clone(),
                plural: str_of(r, "resource"),
                kind: str_of(&r["responseKind"], "kind"),
                namespaced: r["scope"].as_str() == Some("Namespaced"),
                verbs: r["verbs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect(),
            });
        }
    }
    out
}

/// Legacy discovery: `/apis`, then each group's preferred version.
async fn discover_legacy(client: &Client) -> Result<Vec<ApiResource>, Error> {
    let mut versions = vec![(String::new(), "v1".to_string())];
    let groups: APIGroupList = client.send_json(Method::GET, "/apis", None).await?;
    for g in groups.groups {
        let v = match g.preferred_version {
            Some(p) => p.version,
            None => match g.versions.first() {
                Some(v) => v.version.clone(),
                None => continue,
            },
        };
        versions.push((g.name, v));
    }
    let mut out = Vec::new();
    for (group, version) in versions {
        let list: APIResourceList = match client
            .send_json(Method::GET, &group_version_path(&group, &version), None)
            .await
        {
            Ok(l) => l,
            // A group removed between the two reads (a CRD deleted): skip it.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        for r in list.resources {
            if r.name.contains('/') {
                continue;
            }
            out.push(ApiResource {
                group: group.clone(),
                version: version.clone(),
                plural: r.name,
                kind: r.kind,
                namespaced: r.namespaced,
                verbs: r.verbs,
            });
        }
    }
    Ok(out)
}

/// Any object, read for its metadata alone (the rest of the body is skipped while decoding).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PartialObjectMeta {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

impl_resource!(
    PartialObjectMeta,
    "meta.k8s.io",
    "v1",
    "PartialObjectMetadata",
    "",
    ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_object_reads_as_its_metadata() {
        let o: PartialObjectMeta = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "uid": "u"},
            "spec": {"replicas": 2}
        }))
        .unwrap();
        assert_eq!(o.metadata.name.as_deref(), Some("d"));
        let l: crate::ObjectList<PartialObjectMeta> = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"resourceVersion": "7"},
            "items": [{"metadata": {"name": "a"}, "data": {"k": "v"}}]
        }))
        .unwrap();
        assert_eq!(l.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(l.items[0].metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn aggregated_discovery_gives_each_groups_preferred_version() {
        let doc = serde_json::json!({"kind": "APIGroupDiscoveryList", "items": [
            {"metadata": {"name": "autoscaling"}, "versions": [
                {"version": "v2", "resources": [{"resource": "horizontalpodautoscalers",
                    "responseKind": {"kind": "HorizontalPodAutoscaler"}, "scope": "Namespaced",
                    "verbs": ["list", "watch", "delete"]}]},
                {"version": "v1", "resources": []}]}]});
        let r = from_aggregated(&doc);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].group.as_str(), r[0].version.as_str()),
            ("autoscaling", "v2")
        );
        assert!(r[0].namespaced && r[0].has_verbs(&["list", "watch"]));
    }

    #[test]
    fn paths() {
        let r = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            plural: "deployments".into(),
            kind: "Deployment".into(),
            namespaced: true,
            verbs: vec!["list".into()],
        };
        assert_eq!(
            r.object_path("n", "d"),
            "/apis/apps/v1/namespaces/n/deployments/d"
        );
        assert_eq!(r.collection_path(""), "/apis/apps/v1/deployments");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("v1"), "");
    }
}
