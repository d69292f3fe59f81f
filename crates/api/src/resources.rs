//! The resource table: every resource rkube serves, with what discovery, storage keys and
//! routing need. Adding a resource is a row here plus a strategy in the apiserver.

/// One served resource.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ResourceDef {
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    /// The plural name used in URLs.
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub subresources: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// The key segment under `--etcd-prefix` (upstream's resource prefix, e.g. `minions`).
    pub storage_prefix: &'static str,
    /// Served from the watch cache (every resource but Events, as upstream).
    pub watch_cached: bool,
}

impl ResourceDef {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn group_resource(&self) -> crate::status::GroupResource {
        crate::status::GroupResource::new(self.group, self.plural)
    }

    /// `<prefix>/<resource>/` — every object of this resource lives under it.
    pub fn key_prefix(&self, etcd_prefix: &str) -> String {
        format!(
            "{}/{}/",
            etcd_prefix.trim_end_matches('/'),
            self.storage_prefix
        )
    }

    /// `<prefix>/<resource>/<ns>/<name>` or `<prefix>/<resource>/<name>`.
    pub fn key(&self, etcd_prefix: &str, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{}{namespace}/{name}", self.key_prefix(etcd_prefix))
        } else {
            format!("{}{name}", self.key_prefix(etcd_prefix))
        }
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.contains(&sub)
    }
}

macro_rules! res {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $ns:expr, $short:expr, $subs:expr, $cats:expr, $prefix:expr, $cached:expr) => {
        ResourceDef {
            group: $group,
            version: $version,
            kind: $kind,
            list_kind: concat!($kind, "List"),
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            short_names: $short,
            subresources: $subs,
            categories: $cats,
            storage_prefix: $prefix,
            watch_cached: $cached,
        }
    };
}

/// One row per served resource and version, one line each. A resource served in several
/// versions of its group lists its storage (and preferred) version first; the other rows are
/// views of the same objects, converted by the kind's strategy.
#[rustfmt::skip]
pub const RESOURCES: &[ResourceDef] = &[
    res!("", "v1", "Namespace", "namespaces", "namespace", false, &["ns"], &["status", "finalize"], &[], "namespaces", true),
    res!("", "v1", "Pod", "pods", "pod", true, &["po"], &["status", "binding", "eviction", "log", "ephemeralcontainers", "exec", "attach", "portforward"], &["all"], "pods", true),
    res!("", "v1", "Node", "nodes", "node", false, &["no"], &["status"], &[], "minions", true),
    res!("", "v1", "Event", "events", "event", true, &["ev"], &[], &[], "events", true),
    res!("", "v1", "ConfigMap", "configmaps", "configmap", true, &["cm"], &[], &[], "configmaps", true),
    res!("", "v1", "Secret", "secrets", "secret", true, &[], &[], &[], "secrets", true),
    res!("", "v1", "Service", "services", "service", true, &["svc"], &["status"], &["all"], "services/specs", true),
    res!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", true, &["sa"], &["token"], &[], "serviceaccounts", true),
    res!("", "v1", "LimitRange", "limitranges", "limitrange", true, &["limits"], &[], &[], "limitranges", true),
    res!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", true, &["quota"], &["status"], &[], "resourcequotas", true),
    res!("", "v1", "Endpoints", "endpoints", "endpoints", true, &["ep"], &[], &[], "services/endpoints", true),
    res!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", true, &["pvc"], &["status"], &[], "persistentvolumeclaims", true),
    res!("", "v1", "PersistentVolume", "persistentvolumes", "persistentvolume", false, &["pv"], &["status"], &[], "persistentvolumes", true),
    res!("", "v1", "PodTemplate", "podtemplates", "podtemplate", true, &[], &[], &[], "podtemplates", true),
    res!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", true, &["rc"], &["status", "scale"], &["all"], "controllers", true),
    res!("apps", "v1", "Deployment", "deployments", "deployment", true, &["deploy"], &["status", "scale"], &["all"], "deployments", true),
    res!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, &["rs"], &["status", "scale"], &["all"], "replicasets", true),
    res!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true, &["sts"], &["status", "scale"], &["all"], "statefulsets", true),
    res!("apps", "v1", "DaemonSet", "daemonsets", "daemonset", true, &["ds"], &["status"], &["all"], "daemonsets", true),
    res!("apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", true, &[], &[], &[], "controllerrevisions", true),
    res!("batch", "v1", "Job", "jobs", "job", true, &[], &["status"], &["all"], "jobs", true),
    res!("batch", "v1", "CronJob", "cronjobs", "cronjob", true, &["cj"], &["status"], &["all"], "cronjobs", true),
    res!("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", true, &["hpa"], &["status"], &["all"], "horizontalpodautoscalers", true),
    res!("autoscaling", "v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", "horizontalpodautoscaler", true, &["hpa"], &["status"], &["all"], "horizontalpodautoscalers", true),
    res!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", true, &["pdb"], &["status"], &[], "poddisruptionbudgets", true),
    res!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, &[], &[], &[], "leases", true),
    res!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", true, &[], &[], &[], "endpointslices", true),
    res!("events.k8s.io", "v1", "Event", "events", "event", true, &["ev"], &[], &[], "events", true),
    res!("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", true, &["ing"], &["status"], &[], "ingress", true),
    res!("networking.k8s.io", "v1", "IngressClass", "ingressclasses", "ingressclass", false, &[], &[], &[], "ingressclasses", true),
    res!("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", "networkpolicy", true, &["netpol"], &[], &[], "networkpolicies", true),
    res!("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", "servicecidr", false, &[], &["status"], &[], "servicecidrs", true),
    res!("networking.k8s.io", "v1", "IPAddress", "ipaddresses", "ipaddress", false, &["ip"], &[], &[], "ipaddresses", true),
    res!("storage.k8s.io", "v1", "StorageClass", "storageclasses", "storageclass", false, &["sc"], &[], &[], "storageclasses", true),
    res!("storage.k8s.io", "v1", "CSIDriver", "csidrivers", "csidriver", false, &[], &[], &[], "csidrivers", true),
    res!("storage.k8s.io", "v1", "CSINode", "csinodes", "csinode", false, &[], &[], &[], "csinodes", true),
    res!("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", "volumeattachment", false, &[], &["status"], &[], "volumeattachments", true),
    res!("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", "csistoragecapacity", true, &[], &[], &[], "csistoragecapacities", true),
    res!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", false, &["pc"], &[], &[], "priorityclasses", true),
    res!("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", false, &[], &[], &[], "runtimeclasses", true),
    res!("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest", false, &["csr"], &["status", "approval"], &[], "certificatesigningrequests", true),
    res!("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", false, &[], &[], &["api-extensions"], "mutatingwebhookconfigurations", true),
    res!("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validatingwebhookconfiguration", false, &[], &[], &["api-extensions"], "validatingwebhookconfigurations", true),
    res!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", "validatingadmissionpolicy", false, &[], &["status"], &["api-extensions"], "validatingadmissionpolicies", true),
    res!("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", false, &[], &[], &["api-extensions"], "validatingadmissionpolicybindings", true),
    res!("apiregistration.k8s.io", "v1", "APIService", "apiservices", "apiservice", false, &[], &["status"], &["api-extensions"], "apiregistration.k8s.io/apiservices", true),
    res!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", false, &["crd", "crds"], &["status"], &["api-extensions"], "apiextensions.k8s.io/customresourcedefinitions", true),
    res!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", true, &[], &[], &[], "roles", true),
    res!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", true, &[], &[], &[], "rolebindings", true),
    res!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", false, &[], &[], &[], "clusterroles", true),
    res!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", false, &[], &[], &[], "clusterrolebindings", true),
    res!("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "flowschemas", "flowschema", false, &[], &["status"], &[], "flowschemas", true),
    res!("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration", "prioritylevelconfigurations", "prioritylevelconfiguration", false, &[], &["status"], &[], "prioritylevelconfigurations", true),
];

/// The resource served at `group`/`version` under `plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of an `apiVersion` + `kind` pair.
pub fn find_kind(api_version: &str, kind: &str) -> Option<&'static ResourceDef> {
    RESOURCES
        .iter()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

/// Resources answered on the spot and never stored: `bindings` (create), `componentstatuses`
/// and `metrics.k8s.io`'s node and pod metrics (read-only), token reviews, the access reviews (`kubectl auth can-i` sends the self ones)
/// and the SelfSubjectReview of `kubectl auth whoami`. Their `storage_prefix` is empty.
#[rustfmt::skip]
pub const REVIEWS: &[ResourceDef] = &[
    res!("", "v1", "Binding", "bindings", "binding", true, &[], &[], &[], "", false),
    res!("", "v1", "ComponentStatus", "componentstatuses", "componentstatus", false, &["cs"], &[], &[], "", false),
    res!("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview", false, &[], &[], &[], "", false),
    res!("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", "selfsubjectreview", false, &[], &[], &[], "", false),
    res!("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", "localsubjectaccessreview", true, &[], &[], &[], "", false),
    res!("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "selfsubjectaccessreview", false, &[], &[], &[], "", false),
    res!("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "selfsubjectrulesreview", false, &[], &[], &[], "", false),
    res!("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview", false, &[], &[], &[], "", false),
    res!("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", "", false, &[], &[], &[], "", false),
    res!("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", "", true, &[], &[], &[], "", false),
];

/// Every stored and review resource, for discovery.
pub fn discoverable() -> impl Iterator<Item = &'static ResourceDef> {
    RESOURCES.iter().chain(REVIEWS)
}

/// The verbs a resource serves.
pub fn verbs(r: &ResourceDef) -> &'static [&'static str] {
    if r.plural == "componentstatuses" || r.group == "metrics.k8s.io" {
        &["get", "list"]
    } else if r.storage_prefix.is_empty() {
        &["create"]
    } else if r.group.is_empty() && r.plural == "namespaces" {
        // Upstream's namespace storage has no DeleteCollection.
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    } else {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// The verbs a subresource serves (what discovery lists and the apiserver dispatches).
pub fn subresource_verbs(sub: &str) -> &'static [&'static str] {
    match sub {
        "status" | "scale" | "approval" | "ephemeralcontainers" => &["get", "patch", "update"],
        "token" => &["create"],
        "binding" | "eviction" => &["create"],
        "log" => &["get"],
        "exec" | "attach" | "portforward" => &["create", "get"],
        "finalize" => &["update"],
        _ => &[],
    }
}

/// Every `group/version` with discoverable resources, core first.
pub fn discoverable_group_versions() -> Vec<(&'static str, &'static str)> {
    distinct_group_versions(discoverable())
}

/// Every `group/version` stored, core first.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    distinct_group_versions(RESOURCES.iter())
}

/// Every group with discoverable resources and its versions, preferred first; core first.
pub fn discoverable_groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for (g, v) in discoverable_group_versions() {
        match out.iter_mut().find(|(og, _)| *og == g) {
            Some((_, vs)) => vs.push(v),
            None => out.push((g, vec![v])),
        }
    }
    out
}

fn distinct_group_versions(
    defs: impl Iterator<Item = &'static ResourceDef>,
) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in defs {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_upstream_layout() {
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(
            pods.key("/registry", "default", "nginx"),
            "/registry/pods/default/nginx"
        );
        let nodes = find("", "v1", "nodes").unwrap();
        assert_eq!(
            nodes.key("/registry", "", "node-1"),
            "/registry/minions/node-1"
        );
        let deploy = find("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.group_resource().to_string(), "deployments.apps");
        assert_eq!(
            find_kind("v1", "Service")
                .unwrap()
                .key("/registry", "default", "k"),
            "/registry/services/specs/default/k"
        );
        assert_eq!(group_versions()[0], ("", "v1"));
    }
}
