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

/// Every top-level resource (no subresources) of the core group and of each group's
/// preferred version, as upstream's `ServerPreferredResources`.
pub async fn discover(client: &Client) -> Result<Vec<ApiResource>, Error> {
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

impl k8s_openapi::Resource for PartialObjectMeta {
    const API_VERSION: &'static str = "meta.k8s.io/v1";
    const GROUP: &'static str = "meta.k8s.io";
    const KIND: &'static str = "PartialObjectMetadata";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for PartialObjectMeta {
    const LIST_KIND: &'static str = "PartialObjectMetadataList";
}

impl k8s_openapi::Metadata for PartialObjectMeta {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

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
