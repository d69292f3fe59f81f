//! One home per kind (upstream's `pkg/registry/<group>/<kind>/strategy.go`): each served kind
//! implements [`Strategy`] in its own file — its typed round trip and schema, defaults,
//! PrepareForCreate/PrepareForUpdate, validation, generation tracking, graceful deletion,
//! table columns, selectable fields, quota usage and watch-cache index — and [`KINDS`] is the
//! one table that finds it. Nothing outside this folder branches on a kind's name: adding a
//! kind is one file here, one row in [`KINDS`] and its row in `rkube_api::RESOURCES`.
//!
//! Strategies are pure functions over JSON objects; the registry calls them and does the I/O.

pub mod admissionregistration;
pub mod apiextensions;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod autoscaling_v1;
pub mod batch;
pub mod certificates;
pub mod componentstatus;
pub mod config;
pub mod custom;
pub mod endpoints;
pub mod event;
pub mod flowcontrol;
pub mod lease;
pub mod namespace;
pub mod networking;
pub mod node;
pub mod pod;
pub mod podspec;
pub mod podtemplate;
pub mod policy;
pub mod print;
pub mod quota;
pub mod rbac;
pub mod scheduling;
pub mod service;
pub mod sets;
pub mod storage;

use rkube_api::strategic::Lists;
use rkube_api::validation as v;
use rkube_api::{meta, ResourceDef, StatusCause};
use schemars::gen::SchemaGenerator;
use serde_json::{json, Value};

pub use print::Column;

/// How a kind's `metadata.name` is validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain (most kinds).
    Subdomain,
    /// DNS-1123 label (namespaces, services).
    Label,
    /// Any path segment (RBAC's `system:node`).
    PathSegment,
}

/// What a kind is and how it behaves. Every method but the first two has the behaviour most
/// kinds share.
pub trait Strategy: Send + Sync {
    /// Decodes the object into its k8s-openapi type and back: wrong field types are errors,
    /// undeclared fields are dropped, as upstream's decoder.
    fn round_trip(&self, obj: Value) -> Result<Value, String>;

    /// Registers the type's OpenAPI schema (and everything it references).
    fn schema(&self, gen: &mut SchemaGenerator);

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    /// A stored object as this resource serves it, when the resource is a view of another
    /// version's storage (events.k8s.io Events are stored as core Events).
    fn storage_to_served(&self, _obj: &mut Value) -> Result<(), String> {
        Ok(())
    }

    /// `storage_to_served` changes nothing: the watch cache may serve the stored bytes with
    /// only the resourceVersion written in. Every kind that overrides `storage_to_served`
    /// says false here.
    fn served_as_stored(&self) -> bool {
        true
    }

    /// The storage form of an object of this resource; None when it is stored as served.
    fn served_to_storage(&self, _obj: &Value) -> Result<Option<Value>, String> {
        Ok(None)
    }

    /// Upstream's defaulting (`SetDefaults_*`), on every create and update.
    fn defaults(&self, _obj: &mut Value) {}

    /// The kind's PrepareForCreate (after the generic part has set uid, timestamps, …):
    /// typically resets status.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// The kind's PrepareForUpdate of the main resource: what an ordinary update may not
    /// change beyond status (e.g. a Namespace's `spec.finalizers`, owned by `finalize`).
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// PrepareForUpdate of the `status` subresource: `new` becomes `old` with only what a
    /// status update may change.
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        status_only(new, old, false);
    }

    /// Validation of a new or updated object beyond its metadata.
    fn validate(&self, _obj: &Value, _causes: &mut Vec<StatusCause>) {}

    /// Checks on creates only (after `validate`).
    fn validate_create(&self, _obj: &Value, _causes: &mut Vec<StatusCause>) {}

    /// Checks on updates only (immutable fields).
    fn validate_update(&self, _new: &Value, _old: &Value, _causes: &mut Vec<StatusCause>) {}

    /// Whether `metadata.generation` tracks spec changes.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// Whether an update changed what `generation` tracks.
    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        new.get("spec") != old.get("spec")
    }

    /// PUT of a missing object creates it (upstream's `AllowCreateOnUpdate`).
    fn allow_create_on_update(&self) -> bool {
        false
    }

    /// Objects expire (`--event-ttl`): written with a lease.
    fn expires(&self) -> bool {
        false
    }

    /// Graceful deletion: the grace period a delete gets, `None` for immediate deletion.
    fn grace_period(&self, _obj: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// Deletion waits for something besides `metadata.finalizers` (a namespace's
    /// `spec.finalizers`).
    fn deletion_blocked(&self, _obj: &Value) -> bool {
        false
    }

    /// Creation is refused, and why (a custom resource whose definition is being deleted).
    fn create_refused(&self) -> Option<String> {
        None
    }

    /// What an object whose deletion is blocked shows (a namespace turns `Terminating`).
    fn begin_deletion(&self, _obj: &mut Value) {}

    /// PrepareForUpdate of a subresource other than `status` and `scale` (a namespace's
    /// `finalize`): `new` becomes `old` with only what the subresource may change.
    fn prepare_for_subresource_update(&self, _sub: &str, new: &mut Value, old: &Value) {
        *new = old.clone();
    }

    /// A delete answers with the object (pods) rather than a Status.
    fn delete_returns_object(&self) -> bool {
        false
    }

    /// How lists merge in strategic merge patches and server-side apply.
    fn lists(&self) -> Lists {
        Lists::GENERIC
    }

    /// Fields besides `metadata.name`/`metadata.namespace` lists and watches can select by.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Legacy field names and what they mean now (`spec.host` → `spec.nodeName`).
    fn field_aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// A selectable field's value ("" when absent), when it is not simply the value at its
    /// path.
    fn field_value(&self, obj: &Value, field: &str) -> String {
        rkube_api::fields::field_at(obj, field)
    }

    /// The watch cache indexes objects and watchers by `spec.nodeName` (pods).
    fn node_indexed(&self) -> bool {
        false
    }

    /// kubectl's columns (`Name` and `Age` unless the kind has its own).
    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::AGE]
    }

    /// One row's cells, matching `columns`.
    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![json!(meta::name(obj)), json!(print::age(obj, now))]
    }

    /// What the object uses of a quota's compute resource (`requests.cpu`, `limits.memory`,
    /// …): `None` when the kind uses none; an error when a quantity is unusable.
    fn compute_usage(&self, _obj: &Value, _resource: &str) -> Option<Result<i64, String>> {
        None
    }

    /// Whether the object still counts against quota (a finished pod does not).
    fn counts_against_quota(&self, _obj: &Value) -> bool {
        true
    }

    /// The warning every request to this version carries (a deprecated custom resource
    /// version's `deprecationWarning`).
    fn deprecation(&self) -> Option<String> {
        None
    }

    /// Strategic merge patches apply (built-in kinds; custom resources refuse them).
    fn strategic_merge(&self) -> bool {
        true
    }

    /// A custom resource's OpenAPI schema (built-in kinds register theirs through `schema`).
    fn openapi_schema(&self) -> Option<Value> {
        None
    }

    /// Where a custom resource's `scale` subresource reads and writes; `None`: the built-in
    /// workloads' `spec.replicas`, `status.replicas` and `spec.selector`.
    fn scale_paths(&self) -> Option<ScalePaths> {
        None
    }

    /// Upstream's startup reconciliation of the apiserver's own bootstrap objects: the stored
    /// object brought up to `desired`, or None when nothing changes (or the kind has none).
    fn reconcile_bootstrap(&self, _current: &Value, _desired: &Value) -> Option<Value> {
        None
    }
}

/// JSON pointers of a custom resource's scale subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec: String,
    pub status: String,
    /// Where the serialized label selector is (`labelSelectorPath`), if anywhere.
    pub selector: Option<String>,
}

/// A built-in kind's schema name in OpenAPI's `components.schemas` (k8s-openapi's type
/// name; custom resources are named by their reversed group).
pub fn schema_name(def: &ResourceDef) -> String {
    if !rkube_api::resources::RESOURCES
        .iter()
        .any(|r| r.group == def.group)
    {
        let reversed: Vec<&str> = def.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), def.version, def.kind);
    }
    let group = match def.group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("io.k8s.api.{group}.{}.{}", def.version, def.kind)
}

/// A built-in kind's schema and every schema it references, by name.
pub fn schemas(def: &ResourceDef) -> serde_json::Map<String, Value> {
    let mut gen = schemars::gen::SchemaSettings::openapi3().into_generator();
    of(def).schema(&mut gen);
    gen.take_definitions()
        .into_iter()
        .filter_map(|(n, s)| Some((n, serde_json::to_value(s).ok()?)))
        .collect()
}

/// The two methods every strategy spells the same way: its k8s-openapi type's round trip and
/// schema.
#[macro_export]
macro_rules! typed_kind {
    ($t:ty) => {
        fn round_trip(&self, obj: serde_json::Value) -> Result<serde_json::Value, String> {
            $crate::kinds::typed::<$t>(obj)
        }

        fn schema(&self, gen: &mut schemars::gen::SchemaGenerator) {
            gen.subschema_for::<$t>();
        }
    };
}

/// Decodes into `T` and re-encodes.
pub fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: Value,
) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Every served kind: (API group, kind, strategy). One row per kind.
#[rustfmt::skip]
pub static KINDS: &[(&str, &str, &dyn Strategy)] = &[
    ("", "Namespace", &namespace::Namespace),
    ("", "Pod", &pod::Pod),
    ("", "Node", &node::Node),
    ("", "Event", &event::Event),
    ("", "ConfigMap", &config::ConfigMap),
    ("", "Secret", &config::Secret),
    ("", "Service", &service::Service),
    ("", "ServiceAccount", &service::ServiceAccount),
    ("", "LimitRange", &quota::LimitRange),
    ("", "ResourceQuota", &quota::ResourceQuota),
    ("", "Endpoints", &endpoints::Endpoints),
    ("", "PersistentVolumeClaim", &storage::PersistentVolumeClaim),
    ("", "PersistentVolume", &storage::PersistentVolume),
    ("", "PodTemplate", &podtemplate::PodTemplate),
    ("", "ReplicationController", &podtemplate::ReplicationController),
    ("apps", "Deployment", &apps::Deployment),
    ("apps", "ReplicaSet", &apps::ReplicaSet),
    ("apps", "StatefulSet", &sets::StatefulSet),
    ("apps", "DaemonSet", &sets::DaemonSet),
    ("apps", "ControllerRevision", &sets::ControllerRevision),
    ("batch", "Job", &batch::Job),
    ("batch", "CronJob", &batch::CronJob),
    ("autoscaling", "HorizontalPodAutoscaler", &autoscaling::HorizontalPodAutoscaler),
    ("policy", "PodDisruptionBudget", &policy::PodDisruptionBudget),
    ("coordination.k8s.io", "Lease", &lease::Lease),
    ("discovery.k8s.io", "EndpointSlice", &endpoints::EndpointSlice),
    ("events.k8s.io", "Event", &event::EventsV1),
    ("networking.k8s.io", "Ingress", &networking::Ingress),
    ("networking.k8s.io", "IngressClass", &networking::IngressClass),
    ("networking.k8s.io", "NetworkPolicy", &networking::NetworkPolicy),
    ("networking.k8s.io", "ServiceCIDR", &networking::ServiceCidr),
    ("networking.k8s.io", "IPAddress", &networking::IpAddress),
    ("storage.k8s.io", "StorageClass", &storage::StorageClass),
    ("storage.k8s.io", "CSIDriver", &storage::CsiDriver),
    ("storage.k8s.io", "CSINode", &storage::CsiNode),
    ("storage.k8s.io", "VolumeAttachment", &storage::VolumeAttachment),
    ("storage.k8s.io", "CSIStorageCapacity", &storage::CsiStorageCapacity),
    ("scheduling.k8s.io", "PriorityClass", &scheduling::PriorityClass),
    ("node.k8s.io", "RuntimeClass", &scheduling::RuntimeClass),
    ("certificates.k8s.io", "CertificateSigningRequest", &certificates::CertificateSigningRequest),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", &admissionregistration::MutatingWebhookConfiguration),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", &admissionregistration::ValidatingWebhookConfiguration),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", &admissionregistration::ValidatingAdmissionPolicy),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", &admissionregistration::ValidatingAdmissionPolicyBinding),
    ("apiregistration.k8s.io", "APIService", &apiregistration::ApiService),
    ("apiextensions.k8s.io", "CustomResourceDefinition", &apiextensions::CustomResourceDefinition),
    ("rbac.authorization.k8s.io", "Role", &rbac::Role),
    ("rbac.authorization.k8s.io", "RoleBinding", &rbac::RoleBinding),
    ("rbac.authorization.k8s.io", "ClusterRole", &rbac::ClusterRole),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", &rbac::ClusterRoleBinding),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema", &flowcontrol::FlowSchema),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration", &flowcontrol::PriorityLevelConfiguration),
];

/// A served resource's strategy: a built-in kind's, or a custom resource's built from its
/// CustomResourceDefinition.
#[derive(Clone)]
pub enum StrategyRef {
    Builtin(&'static dyn Strategy),
    Custom(std::sync::Arc<dyn Strategy>),
}

impl std::ops::Deref for StrategyRef {
    type Target = dyn Strategy;

    fn deref(&self) -> &(dyn Strategy + 'static) {
        match self {
            StrategyRef::Builtin(s) => *s,
            StrategyRef::Custom(s) => &**s,
        }
    }
}

/// The strategy of a built-in resource.
///
/// # Panics
/// When the resource table names a kind this table lacks (a unit test keeps them in step).
pub fn of(def: &ResourceDef) -> &'static dyn Strategy {
    if let Some((_, _, _, s)) = VIEWS
        .iter()
        .find(|(g, v, k, _)| *g == def.group && *v == def.version && *k == def.kind)
    {
        return *s;
    }
    KINDS
        .iter()
        .find(|(g, k, _)| *g == def.group && *k == def.kind)
        .map(|(_, _, s)| *s)
        .unwrap_or_else(|| panic!("no strategy for {}/{}", def.group, def.kind))
}

/// Kinds served in a second version of their group, as a view of the storage version's
/// objects: (API group, version, kind, strategy).
#[rustfmt::skip]
pub static VIEWS: &[(&str, &str, &str, &dyn Strategy)] = &[
    ("autoscaling", "v1", "HorizontalPodAutoscaler", &autoscaling_v1::HorizontalPodAutoscalerV1),
];

/// `status` subresource semantics: `new` becomes `old` with `new`'s status (and, with
/// `with_metadata`, its labels and annotations, which pods' status writers may set), keeping
/// the request's resourceVersion and uid preconditions.
pub fn status_only(new: &mut Value, old: &Value, with_metadata: bool) {
    let kept: &[&str] = if with_metadata {
        &["resourceVersion", "uid", "labels", "annotations"]
    } else {
        &["resourceVersion", "uid"]
    };
    let meta_map = |v: &Value| v.get("metadata").is_some_and(Value::is_object);
    if !meta_map(new) || !meta_map(old) {
        return status_copied_onto(new, old, with_metadata);
    }
    let (Some(n), Some(o)) = (new.as_object_mut(), old.as_object()) else {
        return;
    };
    // `new` is usually `old` with another status: only the parts that differ are copied.
    n.retain(|k, _| k == "status" || o.contains_key(k));
    for (k, ov) in o {
        match (k.as_str(), n.get_mut(k), ov) {
            ("status", ..) => {}
            ("metadata", Some(Value::Object(nm)), Value::Object(om)) => {
                nm.retain(|mk, _| kept.contains(&mk.as_str()) || om.contains_key(mk));
                for (mk, mv) in om {
                    if !kept.contains(&mk.as_str()) && nm.get(mk) != Some(mv) {
                        nm.insert(mk.clone(), mv.clone());
                    }
                }
            }
            (_, Some(nv), _) if nv == ov => {}
            _ => {
                n.insert(k.clone(), ov.clone());
            }
        }
    }
}

/// `status_only` by copying `old` whole: for objects whose metadata is not a map.
fn status_copied_onto(new: &mut Value, old: &Value, with_metadata: bool) {
    let status = new.get("status").cloned();
    let labels = new.pointer("/metadata/labels").cloned();
    let annotations = new.pointer("/metadata/annotations").cloned();
    let mut merged = old.clone();
    match status {
        Some(s) => merged["status"] = s,
        None => {
            if let Some(m) = merged.as_object_mut() {
                m.remove("status");
            }
        }
    }
    if with_metadata {
        for (f, v) in [("labels", labels), ("annotations", annotations)] {
            match v {
                Some(v) => meta::set_meta(&mut merged, f, v),
                None => meta::remove_meta(&mut merged, f),
            }
        }
    }
    keep_preconditions(&mut merged, new);
    *new = merged;
}

/// The request's own resourceVersion and uid preconditions, carried onto the object a
/// subresource update built from the stored one.
pub fn keep_preconditions(merged: &mut Value, new: &Value) {
    for f in ["resourceVersion", "uid"] {
        match new.pointer(&format!("/metadata/{f}")).cloned() {
            Some(v) => meta::set_meta(merged, f, v),
            None => meta::remove_meta(merged, f),
        }
    }
}

/// Validation every object gets: its name (by the kind's rule), labels and annotations.
pub fn validate_meta(rule: NameRule, obj: &Value, causes: &mut Vec<StatusCause>) {
    let name = meta::name(obj);
    if name.is_empty() {
        if meta::meta_str(obj, "generateName").is_empty() {
            causes.push(StatusCause::required("metadata.name"));
        }
    } else {
        let r = match rule {
            NameRule::Label => v::dns1123_label(name),
            NameRule::PathSegment => v::path_segment_name(name),
            NameRule::Subdomain => v::dns1123_subdomain(name),
        };
        if let Err(e) = r {
            causes.push(StatusCause::invalid("metadata.name", name, &e));
        }
    }
    for (k, val) in meta::labels(obj) {
        if let Err(e) = v::qualified_name(&k) {
            causes.push(StatusCause::invalid("metadata.labels", &k, &e));
        }
        if let Err(e) = v::label_value(&val) {
            causes.push(StatusCause::invalid("metadata.labels", &val, &e));
        }
    }
    for k in meta::annotations(obj).keys() {
        if let Err(e) = v::qualified_name(&k.to_lowercase()) {
            causes.push(StatusCause::invalid("metadata.annotations", k, &e));
        }
    }
}

/// Fields present in `obj` that the kind's type does not declare (what upstream's strict
/// decoding reports), as dotted paths such as `spec.replica`; at most `limit` of them.
pub fn unknown_fields(s: &dyn Strategy, obj: &Value, limit: usize) -> Vec<String> {
    let Ok(known) = s.round_trip(obj.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff_fields(obj, &known, &mut String::new(), &mut out, limit);
    out
}

/// Walks `given` beside its round-tripped form; paths are built only for what is reported.
fn diff_fields(
    given: &Value,
    known: &Value,
    path: &mut String,
    out: &mut Vec<String>,
    limit: usize,
) {
    if out.len() >= limit {
        return;
    }
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, v) in g {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                rkube_api::decode::push_key(path, key);
                match k.get(key) {
                    None if !v.is_null() && out.len() < limit => out.push(path.clone()),
                    Some(kv) => diff_fields(v, kv, path, out, limit),
                    None => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k.iter()).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                diff_fields(gv, kv, path, out, limit);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Sets `ptr` to `value` unless something is there.
pub fn set_default(obj: &mut Value, ptr: &str, value: Value) {
    if obj.pointer(ptr).is_none() {
        set_at(obj, ptr, value);
    }
}

/// Removes what is at `ptr`, if anything.
pub fn remove_at(obj: &mut Value, ptr: &str) {
    let Some((parent, last)) = ptr.rsplit_once('/') else {
        return;
    };
    if let Some(m) = obj.pointer_mut(parent).and_then(Value::as_object_mut) {
        m.remove(last);
    }
}

/// Sets `ptr` to `value`, making the objects on the way; nothing when one is not an object.
pub fn set_at(obj: &mut Value, ptr: &str, value: Value) {
    let (parent, last) = ptr.rsplit_once('/').expect("pointer with a parent");
    if let Some(p) = ensure_object(obj, parent) {
        p.insert(last.to_string(), value);
    }
}

fn ensure_object<'a>(
    obj: &'a mut Value,
    ptr: &str,
) -> Option<&'a mut serde_json::Map<String, Value>> {
    let mut cur = obj;
    for part in ptr.split('/').skip(1) {
        if !cur.is_object() {
            return None;
        }
        cur = cur
            .as_object_mut()?
            .entry(part.to_string())
            .or_insert_with(|| json!({}));
    }
    cur.as_object_mut()
}

/// A resource quantity at `field`, in thousandths; a cause (and `None`) when it is not a
/// quantity, does not fit in 64 bits, or is negative.
pub fn quantity(field: &str, q: &Value, causes: &mut Vec<StatusCause>) -> Option<i64> {
    let text = q
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| q.to_string());
    let why = match q.as_str().and_then(rkube_api::quantity::parse_milli) {
        Some(n) if n >= 0 => return Some(n),
        Some(_) => "must be greater than or equal to 0",
        None => "must be a valid quantity that fits in 64 bits",
    };
    causes.push(StatusCause::invalid(field, &text, why));
    None
}

/// Resets status on create to the kind's `zero` (kinds whose status only controllers write).
/// Upstream's status is a struct, always serialized: `{}` where every field is omitempty,
/// else the zero counters clients require (a ReplicaSet's `replicas: 0`, …).
pub fn reset_status(obj: &mut Value, zero: Value) {
    if let Some(o) = obj.as_object_mut() {
        o.insert("status".into(), zero);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status writer's view: `old` with `new`'s status (and, for pods, labels and
    /// annotations) and `new`'s preconditions, as copying `old` whole makes it.
    #[test]
    fn status_only_is_old_with_the_new_status() {
        let old = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"nodeName": "a"},
            "status": {"phase": "Pending"},
            "metadata": {"name": "p", "uid": "u1", "resourceVersion": "5",
                         "labels": {"a": "1"}, "finalizers": ["f"]}});
        let mut changed = old.clone();
        changed["status"] = json!({"phase": "Running"});
        changed["spec"]["nodeName"] = json!("b");
        changed["extra"] = json!(1);
        changed["metadata"]["labels"] = json!({"b": "2"});
        changed["metadata"]["annotations"] = json!({"c": "3"});
        changed["metadata"]["finalizers"] = json!([]);
        changed["metadata"]["generation"] = json!(9);
        changed["metadata"].as_object_mut().unwrap().remove("uid");
        let mut no_status = old.clone();
        no_status.as_object_mut().unwrap().remove("status");
        no_status.as_object_mut().unwrap().remove("spec");
        let odd = json!({"metadata": 3, "status": {"phase": "Failed"}});
        let bare = json!({"status": {}});
        for new in [&old, &changed, &no_status, &odd, &bare] {
            for base in [&old, &changed, &odd, &bare] {
                for with_metadata in [true, false] {
                    let mut fast = new.clone();
                    status_only(&mut fast, base, with_metadata);
                    let mut copied = new.clone();
                    status_copied_onto(&mut copied, base, with_metadata);
                    assert_eq!(fast, copied, "{new} onto {base} ({with_metadata})");
                }
            }
        }
        let mut fast = changed.clone();
        status_only(&mut fast, &old, true);
        assert_eq!(fast["spec"]["nodeName"], "a");
        assert_eq!(fast["status"]["phase"], "Running");
        assert_eq!(fast["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(fast["metadata"]["finalizers"], json!(["f"]));
        assert!(fast.get("extra").is_none() && fast["metadata"].get("uid").is_none());
    }

    #[test]
    fn every_served_resource_has_a_strategy() {
        for def in rkube_api::RESOURCES {
            let _ = of(def);
        }
        assert_eq!(KINDS.len() + VIEWS.len(), rkube_api::RESOURCES.len());
    }

    #[test]
    fn finds_undeclared_fields_and_stops_at_the_limit() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "bogus": 1},
            "spec": {"replica": 3, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x"}]}}}});
        let mut u = unknown_fields(&apps::Deployment, &d, 100);
        u.sort();
        assert_eq!(
            u,
            [
                "metadata.bogus",
                "spec.replica",
                "spec.template.spec.containers[0].imagePullPolicyy"
            ]
        );
        assert_eq!(unknown_fields(&apps::Deployment, &d, 2).len(), 2);
        assert!(unknown_fields(
            &config::ConfigMap,
            &json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            100
        )
        .is_empty());
    }

    #[test]
    fn bootstrap_objects_are_reconciled_by_kind() {
        let desired =
            json!({"kind": "ClusterRole", "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        let current = json!({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"verbs": ["mine"]}]});
        let got = rbac::ClusterRole
            .reconcile_bootstrap(&current, &desired)
            .unwrap();
        assert_eq!(got["rules"].as_array().unwrap().len(), 3);
        let mut off = current.clone();
        off["metadata"]["annotations"] =
            json!({"rbac.authorization.kubernetes.io/autoupdate": "false"});
        assert_eq!(rbac::ClusterRole.reconcile_bootstrap(&off, &desired), None);
        let binding = json!({"subjects": [{"kind": "Group", "name": "g"}]});
        assert!(rbac::ClusterRoleBinding
            .reconcile_bootstrap(&json!({"subjects": []}), &binding)
            .is_some());
        assert_eq!(rbac::Role.reconcile_bootstrap(&current, &desired), None);
        let fs = json!({"spec": {"matchingPrecedence": 100}});
        let stored = json!({"metadata": {"name": "f"}, "spec": {"matchingPrecedence": 7}});
        assert_eq!(
            flowcontrol::FlowSchema
                .reconcile_bootstrap(&stored, &fs)
                .unwrap()["spec"]["matchingPrecedence"],
            100
        );
        assert_eq!(config::ConfigMap.reconcile_bootstrap(&stored, &fs), None);
    }

    #[test]
    fn round_trips_drop_unknown_fields_and_refuse_wrong_types() {
        assert!(apps::Deployment
            .round_trip(json!({"spec": {"replicas": "x"}}))
            .is_err());
        let pruned = config::ConfigMap
            .round_trip(json!({"metadata": {"name": "a"}, "data": {"k": "v"}, "bogus": 1}))
            .unwrap();
        assert!(pruned.get("bogus").is_none());
    }
}
