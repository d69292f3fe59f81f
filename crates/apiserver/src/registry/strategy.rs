//! Per-resource strategies: upstream's defaults, PrepareForCreate / PrepareForUpdate (the
//! spec/status split), validation, generation bumps and graceful deletion. Objects are JSON;
//! `canonicalize` round-trips them through the k8s-openapi type, which rejects wrong field types
//! and drops unknown fields exactly as upstream's decoder does.

use rkube_api::k8s::api::apps::v1 as apps;
use rkube_api::k8s::api::coordination::v1 as coord;
use rkube_api::k8s::api::core::v1 as core;
use rkube_api::k8s::api::flowcontrol::v1 as flowcontrol;
use rkube_api::k8s::api::rbac::v1 as rbac;
use rkube_api::validation as v;
use rkube_api::{meta, ResourceDef, StatusCause};
use serde_json::{json, Value};

/// Decodes into `T` and re-encodes.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: Value,
) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

pub fn canonicalize(kind: &str, obj: Value) -> Result<Value, String> {
    match kind {
        "Namespace" => round_trip::<core::Namespace>(obj),
        "Pod" => round_trip::<core::Pod>(obj),
        "Node" => round_trip::<core::Node>(obj),
        "Event" => round_trip::<core::Event>(obj),
        "ConfigMap" => round_trip::<core::ConfigMap>(obj),
        "Secret" => round_trip::<core::Secret>(obj),
        "Service" => round_trip::<core::Service>(obj),
        "ServiceAccount" => round_trip::<core::ServiceAccount>(obj),
        "LimitRange" => round_trip::<core::LimitRange>(obj),
        "ResourceQuota" => round_trip::<core::ResourceQuota>(obj),
        "Deployment" => round_trip::<apps::Deployment>(obj),
        "ReplicaSet" => round_trip::<apps::ReplicaSet>(obj),
        "Lease" => round_trip::<coord::Lease>(obj),
        "Role" => round_trip::<rbac::Role>(obj),
        "RoleBinding" => round_trip::<rbac::RoleBinding>(obj),
        "ClusterRole" => round_trip::<rbac::ClusterRole>(obj),
        "ClusterRoleBinding" => round_trip::<rbac::ClusterRoleBinding>(obj),
        "FlowSchema" => round_trip::<flowcontrol::FlowSchema>(obj),
        "PriorityLevelConfiguration" => round_trip::<flowcontrol::PriorityLevelConfiguration>(obj),
        _ => Ok(obj),
    }
}

/// Whether the resource has a status subresource (then the main resource ignores status and
/// `/status` ignores everything but status).
pub fn has_status(def: &ResourceDef) -> bool {
    def.has_subresource("status")
}

/// Kinds whose `metadata.generation` tracks spec changes.
pub fn tracks_generation(kind: &str) -> bool {
    matches!(kind, "Pod" | "Deployment" | "ReplicaSet" | "Service")
}

/// Names must be DNS-1123 labels for these kinds, subdomains for the rest.
fn name_is_label(kind: &str) -> bool {
    matches!(kind, "Namespace" | "Service")
}

/// An update without a resourceVersion is unconditional for every kind served here (upstream's
/// `AllowUnconditionalUpdate` is true for all of them).
pub fn allow_unconditional_update(_kind: &str) -> bool {
    true
}

// ---- defaults ------------------------------------------------------------------------

fn set_default(obj: &mut Value, ptr: &str, value: Value) {
    if obj.pointer(ptr).is_none() {
        let (parent, last) = ptr.rsplit_once('/').expect("pointer with a parent");
        if let Some(p) = ensure_object(obj, parent) {
            p.insert(last.to_string(), value);
        }
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

fn image_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    let name = name.split('@').next().unwrap_or(name);
    match name.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ if image.contains('@') => "IfNotPresent",
        _ => "Always",
    }
}

fn default_containers(spec: &mut Value, field: &str) {
    let Some(list) = spec.get_mut(field).and_then(|c| c.as_array_mut()) else {
        return;
    };
    for c in list {
        let image = c
            .get("image")
            .and_then(|i| i.as_str())
            .unwrap_or("")
            .to_string();
        set_default(c, "/imagePullPolicy", json!(image_pull_policy(&image)));
        set_default(c, "/terminationMessagePath", json!("/dev/termination-log"));
        set_default(c, "/terminationMessagePolicy", json!("File"));
        set_default(c, "/resources", json!({}));
        if let Some(ports) = c.get_mut("ports").and_then(|p| p.as_array_mut()) {
            for p in ports {
                set_default(p, "/protocol", json!("TCP"));
            }
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if let Some(p) = c.get_mut(probe) {
                set_default(p, "/timeoutSeconds", json!(1));
                set_default(p, "/periodSeconds", json!(10));
                set_default(p, "/successThreshold", json!(1));
                set_default(p, "/failureThreshold", json!(3));
            }
        }
    }
}

/// `SetDefaults_PodSpec` and its containers.
pub fn default_pod_spec(spec: &mut Value) {
    set_default(spec, "/restartPolicy", json!("Always"));
    set_default(spec, "/terminationGracePeriodSeconds", json!(30));
    set_default(spec, "/dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "/securityContext", json!({}));
    set_default(spec, "/schedulerName", json!("default-scheduler"));
    set_default(spec, "/enableServiceLinks", json!(true));
    default_containers(spec, "containers");
    default_containers(spec, "initContainers");
}

fn default_template(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

/// Upstream's `DefaultTolerationSeconds` admission: tolerate not-ready and unreachable nodes
/// for 300 s unless the pod says otherwise.
fn default_tolerations(spec: &mut Value) {
    let tolerations = spec
        .as_object_mut()
        .map(|s| s.entry("tolerations").or_insert_with(|| json!([])));
    let Some(Value::Array(list)) = tolerations else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let present = list.iter().any(|t| {
            let k = t.get("key").and_then(|k| k.as_str()).unwrap_or("");
            let effect = t.get("effect").and_then(|e| e.as_str()).unwrap_or("");
            (k == key
                || k.is_empty() && t.get("operator").and_then(|o| o.as_str()) == Some("Exists"))
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !present {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// The QoS class kubelets and the scheduler report (`GetPodQOS`).
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec.get(*f).and_then(|c| c.as_array()))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(|r| r.as_object());
        let lim = c.pointer("/resources/limits").and_then(|r| r.as_object());
        for res in ["cpu", "memory"] {
            let r = req
                .and_then(|m| m.get(res))
                .or_else(|| lim.and_then(|m| m.get(res)));
            let l = lim.and_then(|m| m.get(res));
            if r.is_some() || l.is_some() {
                any = true;
            }
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Defaults applied to every create and update of `kind`.
/// A Secret's write-only `stringData` goes into `data` (base64), overriding keys there, and
/// is not stored; `type` defaults to Opaque.
fn merge_string_data(obj: &mut Value) {
    use base64::Engine as _;
    set_default(obj, "/type", json!("Opaque"));
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in strings {
        let text = v.as_str().unwrap_or("").to_string();
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

pub fn apply_defaults(kind: &str, obj: &mut Value) {
    match kind {
        "Secret" => merge_string_data(obj),
        "Pod" => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        "Deployment" => {
            set_default(obj, "/spec/replicas", json!(1));
            let rolling = obj
                .pointer("/spec/strategy/type")
                .and_then(|t| t.as_str())
                .unwrap_or("RollingUpdate")
                == "RollingUpdate";
            set_default(obj, "/spec/strategy/type", json!("RollingUpdate"));
            if rolling {
                set_default(
                    obj,
                    "/spec/strategy/rollingUpdate/maxUnavailable",
                    json!("25%"),
                );
                set_default(obj, "/spec/strategy/rollingUpdate/maxSurge", json!("25%"));
            }
            set_default(obj, "/spec/revisionHistoryLimit", json!(10));
            set_default(obj, "/spec/progressDeadlineSeconds", json!(600));
            default_template(obj);
        }
        "ReplicaSet" => {
            set_default(obj, "/spec/replicas", json!(1));
            default_template(obj);
        }
        "Service" => {
            set_default(obj, "/spec/type", json!("ClusterIP"));
            set_default(obj, "/spec/sessionAffinity", json!("None"));
            if let Some(ports) = obj
                .pointer_mut("/spec/ports")
                .and_then(|p| p.as_array_mut())
            {
                for p in ports {
                    set_default(p, "/protocol", json!("TCP"));
                    if p.get("targetPort").is_none() {
                        if let Some(port) = p.get("port").cloned() {
                            p["targetPort"] = port;
                        }
                    }
                }
            }
        }
        "Namespace" => {
            set_default(obj, "/spec/finalizers", json!(["kubernetes"]));
        }
        _ => {}
    }
}

/// Kind-specific PrepareForCreate (after the generic part has set uid, timestamps and so on).
pub fn prepare_for_create(kind: &str, obj: &mut Value) {
    match kind {
        "Pod" => {
            if let Some(spec) = obj.get_mut("spec") {
                default_tolerations(spec);
            }
            let qos = obj.get("spec").map(qos_class).unwrap_or("BestEffort");
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        "Namespace" => obj["status"] = json!({"phase": "Active"}),
        "Deployment" | "ReplicaSet" | "Service" if obj.get("status").is_some() => {
            obj["status"] = json!({});
        }
        _ => {}
    }
}

/// The spec-like part of an object that bumps `generation` when it changes.
fn spec_of(kind: &str, obj: &Value) -> Value {
    match kind {
        // Deployments also bump on annotation changes (rollout restart, change-cause).
        "Deployment" => json!([obj.get("spec"), obj.pointer("/metadata/annotations")]),
        _ => obj.get("spec").cloned().unwrap_or(Value::Null),
    }
}

pub fn spec_changed(kind: &str, new: &Value, old: &Value) -> bool {
    spec_of(kind, new) != spec_of(kind, old)
}

/// PrepareForUpdate of `/status`: only status (plus labels and annotations for pods) change.
pub fn prepare_for_status_update(kind: &str, new: &mut Value, old: &Value) {
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
    if kind == "Pod" {
        for (f, v) in [("labels", labels), ("annotations", annotations)] {
            match v {
                Some(v) => meta::set_meta(&mut merged, f, v),
                None => meta::remove_meta(&mut merged, f),
            }
        }
    }
    // resourceVersion and uid preconditions travel with the request.
    for f in ["resourceVersion", "uid"] {
        match new.pointer(&format!("/metadata/{f}")).cloned() {
            Some(v) => meta::set_meta(&mut merged, f, v),
            None => meta::remove_meta(&mut merged, f),
        }
    }
    *new = merged;
}

// ---- validation ----------------------------------------------------------------------

pub fn validate_meta(def: &ResourceDef, obj: &Value, causes: &mut Vec<StatusCause>) {
    let name = meta::name(obj);
    if name.is_empty() {
        if meta::meta_str(obj, "generateName").is_empty() {
            causes.push(StatusCause::required("metadata.name"));
        }
    } else {
        let r = if name_is_label(def.kind) {
            v::dns1123_label(name)
        } else if def.group == "rbac.authorization.k8s.io" {
            // RBAC names are path segments (`system:node`), as upstream's ValidateRBACName.
            v::path_segment_name(name)
        } else {
            v::dns1123_subdomain(name)
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

fn validate_pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(|c| c.as_array());
    match containers {
        None => causes.push(StatusCause::required(&format!("{path}.containers"))),
        Some(list) if list.is_empty() => {
            causes.push(StatusCause::required(&format!("{path}.containers")))
        }
        Some(list) => {
            let mut names = std::collections::HashSet::new();
            for (i, c) in list.iter().enumerate() {
                let name = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let p = format!("{path}.containers[{i}]");
                if name.is_empty() {
                    causes.push(StatusCause::required(&format!("{p}.name")));
                } else if let Err(e) = v::dns1123_label(name) {
                    causes.push(StatusCause::invalid(&format!("{p}.name"), name, &e));
                } else if !names.insert(name.to_string()) {
                    causes.push(StatusCause::duplicate(&format!("{p}.name"), name));
                }
                if c.get("image")
                    .and_then(|i| i.as_str())
                    .unwrap_or("")
                    .trim()
                    .is_empty()
                {
                    causes.push(StatusCause::required(&format!("{p}.image")));
                }
            }
        }
    }
    if let Some(rp) = spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(|r| r.as_str())
    {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            causes.push(StatusCause::not_supported(
                &format!("{path}.restartPolicy"),
                rp,
                &["Always", "OnFailure", "Never"],
            ));
        }
    }
}

fn validate_selector_template(obj: &Value, causes: &mut Vec<StatusCause>) {
    let Some(sel) = obj.pointer("/spec/selector") else {
        causes.push(StatusCause::required("spec.selector"));
        return;
    };
    let match_labels: std::collections::BTreeMap<String, String> = sel
        .get("matchLabels")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let exprs: Vec<(String, String, Vec<String>)> = sel
        .get("matchExpressions")
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e.get("key")
                            .and_then(|k| k.as_str())
                            .unwrap_or("")
                            .to_string(),
                        e.get("operator")
                            .and_then(|k| k.as_str())
                            .unwrap_or("")
                            .to_string(),
                        e.get("values")
                            .and_then(|v| v.as_array())
                            .map(|v| {
                                v.iter()
                                    .filter_map(|x| x.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if match_labels.is_empty() && exprs.is_empty() {
        causes.push(StatusCause::invalid_raw("spec.selector", "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}", "empty selector is invalid for deployment"));
        return;
    }
    match rkube_api::LabelSelector::from_parts(&match_labels, &exprs) {
        Err(e) => causes.push(StatusCause::invalid("spec.selector", "", &e)),
        Ok(s) => {
            let labels: std::collections::BTreeMap<String, String> = obj
                .pointer("/spec/template/metadata/labels")
                .and_then(|l| l.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            if !s.matches(&labels) {
                let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                causes.push(StatusCause::invalid_raw(
                    "spec.template.metadata.labels",
                    &format!("map[string]string{{{}}}", shown.join(", ")),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    if let Some(r) = obj.pointer("/spec/replicas").and_then(|r| r.as_i64()) {
        if r < 0 {
            causes.push(StatusCause::invalid_raw(
                "spec.replicas",
                &r.to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    validate_pod_spec(
        obj.pointer("/spec/template/spec"),
        "spec.template.spec",
        causes,
    );
}

/// Validation of a new or updated object.
pub fn validate(def: &ResourceDef, obj: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    validate_meta(def, obj, &mut causes);
    match def.kind {
        "Pod" => validate_pod_spec(obj.get("spec"), "spec", &mut causes),
        "Deployment" | "ReplicaSet" => validate_selector_template(obj, &mut causes),
        _ => {}
    }
    causes
}

/// Checks on updates only: immutable fields.
pub fn validate_update(def: &ResourceDef, new: &Value, old: &Value) -> Vec<StatusCause> {
    let mut causes = validate(def, new);
    match def.kind {
        "Pod" => {
            // Only images, activeDeadlineSeconds and tolerations additions may change in a
            // pod spec; compare with those normalised away.
            let strip = |v: &Value| {
                let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
                if let Some(cs) = s.get_mut("containers").and_then(|c| c.as_array_mut()) {
                    for c in cs {
                        if let Some(m) = c.as_object_mut() {
                            m.remove("image");
                        }
                    }
                }
                if let Some(m) = s.as_object_mut() {
                    m.remove("activeDeadlineSeconds");
                    m.remove("tolerations");
                }
                s
            };
            if strip(new) != strip(old) {
                causes.push(StatusCause::forbidden(
                    "spec",
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                ));
            }
        }
        "Deployment" | "ReplicaSet"
            if new.pointer("/spec/selector") != old.pointer("/spec/selector") =>
        {
            causes.push(StatusCause::invalid_raw(
                "spec.selector",
                "<selector>",
                "field is immutable",
            ));
        }
        _ => {}
    }
    causes
}

/// Graceful deletion: the grace period a delete gets, `None` for immediate deletion.
pub fn grace_period(kind: &str, obj: &Value, requested: Option<i64>) -> Option<i64> {
    if kind != "Pod" {
        return None;
    }
    let mut grace = requested
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(|g| g.as_i64())
        })
        .unwrap_or(30);
    if grace < 0 {
        grace = 1;
    }
    let unscheduled = obj
        .pointer("/spec/nodeName")
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .is_empty();
    let phase = obj
        .pointer("/status/phase")
        .and_then(|p| p.as_str())
        .unwrap_or("");
    if unscheduled || phase == "Succeeded" || phase == "Failed" {
        grace = 0;
    }
    Some(grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_qos() {
        let mut pod = json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}, {"name": "b", "image": "busybox"}]}});
        apply_defaults("Pod", &mut pod);
        assert_eq!(pod.pointer("/spec/restartPolicy"), Some(&json!("Always")));
        assert_eq!(
            pod.pointer("/spec/schedulerName"),
            Some(&json!("default-scheduler"))
        );
        assert_eq!(
            pod.pointer("/spec/containers/0/imagePullPolicy"),
            Some(&json!("IfNotPresent"))
        );
        assert_eq!(
            pod.pointer("/spec/containers/1/imagePullPolicy"),
            Some(&json!("Always"))
        );
        assert_eq!(
            pod.pointer("/spec/containers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
        assert_eq!(qos_class(&pod["spec"]), "BestEffort");
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
        prepare_for_create("Pod", &mut pod);
        assert_eq!(
            pod.pointer("/spec/tolerations/0/tolerationSeconds"),
            Some(&json!(300))
        );
        assert_eq!(pod.pointer("/status/phase"), Some(&json!("Pending")));
    }

    #[test]
    fn deployment_defaults_and_validation() {
        let def = rkube_api::resources::find("apps", "v1", "deployments").unwrap();
        let mut d = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        apply_defaults("Deployment", &mut d);
        assert_eq!(
            d.pointer("/spec/strategy/rollingUpdate/maxSurge"),
            Some(&json!("25%"))
        );
        assert_eq!(d.pointer("/spec/revisionHistoryLimit"), Some(&json!(10)));
        assert_eq!(
            d.pointer("/spec/progressDeadlineSeconds"),
            Some(&json!(600))
        );
        assert!(validate(def, &d).is_empty());
        d["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let causes = validate(def, &d);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
        assert!(canonicalize("Deployment", json!({"spec": {"replicas": "x"}})).is_err());
        let pruned = canonicalize(
            "ConfigMap",
            json!({"metadata": {"name": "a"}, "data": {"k": "v"}, "bogus": 1}),
        )
        .unwrap();
        assert!(pruned.get("bogus").is_none());
    }

    #[test]
    fn pod_grace() {
        let scheduled = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}, "status": {"phase": "Running"}});
        assert_eq!(grace_period("Pod", &scheduled, None), Some(10));
        assert_eq!(grace_period("Pod", &scheduled, Some(3)), Some(3));
        assert_eq!(grace_period("Pod", &json!({"spec": {}}), None), Some(0));
        assert_eq!(grace_period("ConfigMap", &scheduled, None), None);
    }
}

/// Fields present in `obj` that the kind's type does not declare (what upstream's strict
/// decoding reports), as dotted paths such as `spec.replica`.
pub fn unknown_fields(kind: &str, obj: &Value) -> Vec<String> {
    let Ok(known) = canonicalize(kind, obj.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    diff_fields(obj, &known, "", &mut out);
    out
}

fn diff_fields(given: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (given, known) {
        (Value::Object(g), Value::Object(k)) => {
            for (key, v) in g {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    None if !v.is_null() => out.push(p),
                    Some(kv) => diff_fields(v, kv, &p, out),
                    None => {}
                }
            }
        }
        (Value::Array(g), Value::Array(k)) => {
            for (i, (gv, kv)) in g.iter().zip(k.iter()).enumerate() {
                diff_fields(gv, kv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod unknown_field_tests {
    use super::*;

    #[test]
    fn finds_undeclared_fields() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "bogus": 1},
            "spec": {"replica": 3, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x"}]}}}});
        let mut u = unknown_fields("Deployment", &d);
        u.sort();
        assert_eq!(
            u,
            [
                "metadata.bogus",
                "spec.replica",
                "spec.template.spec.containers[0].imagePullPolicyy"
            ]
        );
        assert!(unknown_fields(
            "ConfigMap",
            &json!({"metadata": {"name": "a"}, "data": {"k": "v"}})
        )
        .is_empty());
    }
}
