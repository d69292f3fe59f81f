//! Pods (`pkg/registry/core/pod`): spec defaults, PrepareForCreate (Pending, QoS class),
//! status updates that may also set labels and annotations, the narrow set of spec fields an
//! update may change, graceful deletion, binding to a node, kubectl's columns, the selectable
//! fields, compute usage for quota, and the watch cache's node index.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::quantity::{parse_milli, parse_value};
use rkube_api::{meta, ApiError, GroupResource, StatusCause};
use serde_json::{json, Value};

use super::print::{self, or_none, s, Column};
use super::{podspec, Strategy};

pub struct Pod;

const UPDATABLE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

impl Strategy for Pod {
    crate::typed_kind!(core::Pod);

    fn defaults(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec") {
            podspec::defaults(spec);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        let qos = obj
            .get("spec")
            .map(podspec::qos_class)
            .unwrap_or("BestEffort");
        obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        // A gated pod says so until its gates are gone (upstream's
        // `applySchedulingGatedCondition`).
        let gated = obj
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|g| !g.is_empty());
        if gated {
            obj["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates"}]);
        }
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        super::status_only(new, old, true);
    }

    /// The main resource keeps the ephemeral containers it has: only
    /// `pods/ephemeralcontainers` adds them.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        match old.pointer("/spec/ephemeralContainers") {
            Some(e) if new.get("spec").is_some_and(Value::is_object) => {
                new["spec"]["ephemeralContainers"] = e.clone();
            }
            _ => {
                if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("ephemeralContainers");
                }
            }
        }
    }

    /// `pods/ephemeralcontainers` changes the ephemeral containers and nothing else.
    fn prepare_for_subresource_update(&self, sub: &str, new: &mut Value, old: &Value) {
        let ephemeral = new.pointer("/spec/ephemeralContainers").cloned();
        *new = old.clone();
        if sub == "ephemeralcontainers" {
            if let Some(e) = ephemeral {
                new["spec"]["ephemeralContainers"] = e;
            }
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        podspec::validate(obj.get("spec"), "spec", causes);
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        // Only images, activeDeadlineSeconds and tolerations may change in a pod spec; compare
        // with those normalised away.
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
                m.remove("schedulingGates");
                m.remove("ephemeralContainers");
            }
            s
        };
        validate_ephemeral(new, old, causes);
        if strip(new) != strip(old) {
            causes.push(StatusCause::forbidden("spec", UPDATABLE));
        }
        // Scheduling gates may only be removed.
        let gates = |v: &Value| -> Vec<String> {
            v.pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|g| g.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        };
        let before = gates(old);
        if let Some(added) = gates(new).into_iter().find(|g| !before.contains(g)) {
            causes.push(StatusCause::forbidden(
                "spec.schedulingGates",
                &format!("only deletion is allowed, but found new scheduling gate '{added}'"),
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn grace_period(&self, obj: &Value, requested: Option<i64>) -> Option<i64> {
        Some(grace_period(obj, requested))
    }

    fn delete_returns_object(&self) -> bool {
        true
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    fn field_aliases(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.host", "spec.nodeName")]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "spec.hostNetwork" => obj
                .pointer("/spec/hostNetwork")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            "status.podIP" => obj
                .pointer("/status/podIPs/0/ip")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| s(obj, "/status/podIP")),
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn node_indexed(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Ready"),
            Column::text("Status"),
            Column::text("Restarts"),
            Column::AGE,
            Column::wide("IP"),
            Column::wide("Node"),
            Column::wide("Nominated Node"),
            Column::wide("Readiness Gates"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let Summary {
            ready,
            total,
            status,
            restarts,
        } = summary(obj);
        vec![
            json!(meta::name(obj)),
            json!(format!("{ready}/{total}")),
            json!(status),
            json!(restarts.to_string()),
            json!(print::age(obj, now)),
            json!(or_none(s(obj, "/status/podIP"))),
            json!(or_none(s(obj, "/spec/nodeName"))),
            json!(or_none(s(obj, "/status/nominatedNodeName"))),
            json!("<none>"),
        ]
    }

    fn compute_usage(&self, obj: &Value, resource: &str) -> Option<Result<i64, String>> {
        compute_usage(obj, resource)
    }

    fn counts_against_quota(&self, obj: &Value) -> bool {
        !matches!(
            obj.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        )
    }
}

/// The grace period of a pod's deletion (`CheckGracefulDelete`): the request's, else the
/// pod's own, else 30 s; negative means 1 s; unscheduled and finished pods go at once. Never
/// longer than `MAX_GRACE_SECONDS`, so the deletion timestamp stays a valid time.
pub fn grace_period(obj: &Value, requested: Option<i64>) -> i64 {
    let mut grace = requested
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(|g| g.as_i64())
        })
        .unwrap_or(30);
    if grace < 0 {
        grace = 1;
    }
    grace = grace.min(podspec::MAX_GRACE_SECONDS);
    let unscheduled = s(obj, "/spec/nodeName").is_empty();
    let phase = s(obj, "/status/phase");
    if unscheduled || phase == "Succeeded" || phase == "Failed" {
        grace = 0;
    }
    grace
}

/// A pod's compute usage of a quota resource (None: not a compute resource): the sum over
/// containers, or the largest init container if more. An unusable quantity is an error, never
/// zero.
pub fn compute_usage(pod: &Value, name: &str) -> Option<Result<i64, String>> {
    let (field, resource) = match name {
        "cpu" | "requests.cpu" => ("requests", "cpu"),
        "memory" | "requests.memory" => ("requests", "memory"),
        "limits.cpu" => ("limits", "cpu"),
        "limits.memory" => ("limits", "memory"),
        _ => return None,
    };
    let amount = |q: &str| {
        if resource == "cpu" {
            parse_milli(q)
        } else {
            parse_value(q)
        }
    };
    let of = |list: &str| -> Result<Vec<i64>, String> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(
                |c| match c.pointer(&format!("/resources/{field}/{resource}")) {
                    None => Ok(0),
                    Some(q) => q
                        .as_str()
                        .and_then(amount)
                        .ok_or_else(|| format!("{field}.{resource}: {q} is not a usable quantity")),
                },
            )
            .collect()
    };
    let total = (|| {
        let sum = of("containers")?
            .into_iter()
            .try_fold(0i64, |a, b| a.checked_add(b))
            .ok_or_else(|| format!("{field}.{resource}: the pod's total overflows"))?;
        let init = of("initContainers")?.into_iter().max().unwrap_or(0);
        Ok(sum.max(init))
    })();
    Some(total)
}

/// The READY, STATUS and RESTARTS columns of a pod, as upstream's `printPod`.
pub struct Summary {
    pub ready: usize,
    pub total: usize,
    pub status: String,
    pub restarts: i64,
}

fn list<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    v.pointer(path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Upstream's `printPod`: init containers first (`Init:1/3`, `Init:CrashLoopBackOff`), then
/// the app containers from the last; restartable init containers (sidecars) count as
/// containers.
pub fn summary(pod: &Value) -> Summary {
    let b = |c: &Value, k: &str| c.get(k).and_then(Value::as_bool).unwrap_or(false);
    let count = |c: &Value| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
    let mut reason = s(pod, "/status/reason");
    if reason.is_empty() {
        reason = s(pod, "/status/phase");
    }
    let gated = list(pod, "/status/conditions").iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("PodScheduled")
            && c.get("reason").and_then(Value::as_str) == Some("SchedulingGated")
    });
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_specs = list(pod, "/spec/initContainers");
    let sidecar = |name: &str| {
        init_specs.iter().any(|c| {
            c.get("name").and_then(Value::as_str) == Some(name)
                && c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
        })
    };
    let mut total = list(pod, "/spec/containers").len()
        + init_specs
            .iter()
            .filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always"))
            .count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut initializing = false;
    for (i, c) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        restarts = restarts.saturating_add(count(c));
        if sidecar(name) {
            sidecar_restarts = sidecar_restarts.saturating_add(count(c));
        }
        let term = c.pointer("/state/terminated");
        let waiting = c
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .unwrap_or("");
        if term.and_then(|t| t.get("exitCode")).and_then(Value::as_i64) == Some(0) {
            continue;
        }
        if sidecar(name) && b(c, "started") {
            if b(c, "ready") {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = term {
            let r = t.get("reason").and_then(Value::as_str).unwrap_or("");
            if !r.is_empty() {
                format!("Init:{r}")
            } else if let Some(sig) = t.get("signal").and_then(Value::as_i64).filter(|x| *x != 0) {
                format!("Init:Signal:{sig}")
            } else {
                format!(
                    "Init:ExitCode:{}",
                    t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                )
            }
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    let initialized = list(pod, "/status/conditions").iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Initialized")
            && c.get("status").and_then(Value::as_str) == Some("True")
    });
    if !initializing || initialized {
        restarts = sidecar_restarts;
        let mut has_running = false;
        for c in list(pod, "/status/containerStatuses").iter().rev() {
            restarts = restarts.saturating_add(count(c));
            if let Some(w) = c
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                reason = w.to_string();
            } else if let Some(t) = c.pointer("/state/terminated") {
                let r = t.get("reason").and_then(Value::as_str).unwrap_or("");
                reason = if !r.is_empty() {
                    r.to_string()
                } else if let Some(sig) =
                    t.get("signal").and_then(Value::as_i64).filter(|x| *x != 0)
                {
                    format!("Signal:{sig}")
                } else {
                    format!(
                        "ExitCode:{}",
                        t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                    )
                };
            } else if b(c, "ready") && c.pointer("/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = list(pod, "/status/conditions").iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            });
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    let terminal = matches!(s(pod, "/status/phase").as_str(), "Succeeded" | "Failed");
    if meta::deletion_timestamp(pod).is_some() {
        if s(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if !terminal {
            reason = "Terminating".into();
        }
    }
    total = total.max(ready);
    Summary {
        ready,
        total,
        status: reason,
        restarts,
    }
}

/// The STATUS column kubectl shows for a pod.
pub fn status_column(pod: &Value) -> String {
    summary(pod).status
}

/// `POST pods/{name}/binding`: checks a Binding against the pod and returns the pod bound to
/// its node (`spec.nodeName`, the binding's annotations, `PodScheduled=True`).
pub fn bind(cur: &Value, name: &str, binding: &Value) -> Result<Value, ApiError> {
    let gr = GroupResource::new("", "pods/binding");
    let want_uid = meta::uid(binding);
    if !want_uid.is_empty() && want_uid != meta::uid(cur) {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {want_uid}, UID in object meta: {}",
                meta::uid(cur)
            ),
        ));
    }
    if meta::deletion_timestamp(cur).is_some() {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    let assigned = s(cur, "/spec/nodeName");
    if !assigned.is_empty() {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!("pod {name} is already assigned to node {assigned:?}"),
        ));
    }
    let mut new = cur.clone();
    new["spec"]["nodeName"] = json!(s(binding, "/target/name"));
    if let Some(a) = binding
        .pointer("/metadata/annotations")
        .and_then(|a| a.as_object())
    {
        let md = meta::metadata_mut(&mut new);
        let entry = md.entry("annotations").or_insert_with(|| json!({}));
        if let Some(m) = entry.as_object_mut() {
            for (k, v) in a {
                // `validate_binding` let only strings and nulls through; a null decodes as "".
                let v = if v.is_null() { json!("") } else { v.clone() };
                m.insert(k.clone(), v);
            }
        }
    }
    set_condition(&mut new, "PodScheduled", "True", None, None);
    Ok(new)
}

/// Validates a Binding's target (a node by name).
pub fn validate_binding(name: &str, binding: &Value) -> Result<(), ApiError> {
    let bname = meta::name(binding);
    if !bname.is_empty() && bname != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    // The annotations are copied into the pod as they are, past the decoding every other pod
    // write goes through: anything but a map of strings (as upstream's decoder demands) would
    // store a pod no typed client could read, and every pod informer would stall on it.
    let annotations = binding.pointer("/metadata/annotations");
    let strings =
        |a: &serde_json::Map<String, Value>| a.values().all(|v| v.is_string() || v.is_null());
    if !annotations.is_none_or(|a| a.is_null() || a.as_object().is_some_and(strings)) {
        return Err(ApiError::bad_request(
            "Binding in version \"v1\" cannot be handled as a Binding: \
             metadata.annotations: expected a map of strings",
        ));
    }
    let kind = s(binding, "/target/kind");
    let node = s(binding, "/target/name");
    let mut causes = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        causes.push(StatusCause::not_supported(
            "target.kind",
            &kind,
            &["Node", "<empty>"],
        ));
    }
    if node.is_empty() {
        causes.push(StatusCause::required("target.name"));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("", "Binding", name, causes))
    }
}

/// Sets a pod condition, keeping `lastTransitionTime` when the status does not change.
pub fn set_condition(
    pod: &mut Value,
    kind: &str,
    status_: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !pod.get("status").is_some_and(|s| s.is_object()) {
        pod["status"] = json!({});
    }
    let Some(status) = pod["status"].as_object_mut() else {
        return;
    };
    let conds = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let now = meta::now_rfc3339();
    let mut c =
        json!({"type": kind, "status": status_, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match list
        .iter_mut()
        .find(|x| x.get("type").and_then(|t| t.as_str()) == Some(kind))
    {
        Some(existing) => {
            if existing.get("status").and_then(|s| s.as_str()) == Some(status_) {
                c["lastTransitionTime"] = existing
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or(json!(now));
            }
            *existing = c;
        }
        None => list.push(c),
    }
}

/// Ephemeral containers may be added, never changed or removed; each has a name no other
/// container of the pod has, an image, none of the fields only regular containers may set,
/// and a `targetContainerName` that names one of the pod's containers.
fn validate_ephemeral(new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
    fn list(v: &Value) -> &[Value] {
        v.pointer("/spec/ephemeralContainers")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
    let (now, before) = (list(new), list(old));
    if now == before {
        return;
    }
    let name_of = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    // By name: linear in the containers, however many a body carries.
    let by_name: std::collections::HashMap<String, &Value> =
        now.iter().map(|c| (name_of(c), c)).collect();
    for b in before {
        if by_name.get(&name_of(b)) != Some(&b) {
            causes.push(StatusCause::forbidden(
                "spec.ephemeralContainers",
                &format!(
                    "existing ephemeral containers \"{}\" may not be changed",
                    name_of(b)
                ),
            ));
        }
    }
    let regular: std::collections::HashSet<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| {
            new.pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| name_of(&c))
        .collect();
    let mut seen = regular.clone();
    for (i, c) in now.iter().enumerate() {
        let path = format!("spec.ephemeralContainers[{i}]");
        let name = name_of(c);
        if name.is_empty() {
            causes.push(StatusCause::required(&format!("{path}.name")));
        } else if seen.contains(&name) {
            causes.push(StatusCause::duplicate(&format!("{path}.name"), &name));
        }
        seen.insert(name);
        if c.get("image")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            causes.push(StatusCause::required(&format!("{path}.image")));
        }
        for f in [
            "ports",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
            "resources",
            "resizePolicy",
        ] {
            if c.get(f)
                .is_some_and(|v| !v.is_null() && v != &json!({}) && v != &json!([]))
            {
                causes.push(StatusCause::forbidden(
                    &format!("{path}.{f}"),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        if let Some(t) = c.get("targetContainerName").and_then(Value::as_str) {
            if !t.is_empty() && !regular.contains(t) {
                causes.push(StatusCause::not_found(
                    &format!("{path}.targetContainerName"),
                    t,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_carries_only_string_annotations_into_the_pod() {
        let binding = |annotations: Value| {
            json!({"metadata": {"name": "p", "annotations": annotations},
                "target": {"kind": "Node", "name": "n1"}})
        };
        for bad in [
            json!({"a": 1}),
            json!({"a": {"b": "c"}}),
            json!(["a"]),
            json!("a"),
        ] {
            let err = validate_binding("p", &binding(bad.clone())).unwrap_err();
            assert_eq!(err.code(), 400, "{bad}");
        }
        let good = binding(json!({"a": "x", "b": null}));
        validate_binding("p", &good).unwrap();
        validate_binding("p", &binding(Value::Null)).unwrap();
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let bound = bind(&pod, "p", &good).unwrap();
        assert_eq!(bound["metadata"]["annotations"], json!({"a": "x", "b": ""}));
        assert_eq!(bound["spec"]["nodeName"], "n1");
        let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(bound).unwrap();
        assert_eq!(typed.metadata.annotations.unwrap()["a"], "x");
    }

    #[test]
    fn create_and_columns() {
        let mut pod = json!({"metadata": {"name": "nginx-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}], "nodeName": "node-1"}});
        Pod.defaults(&mut pod);
        Pod.prepare_for_create(&mut pod);
        assert_eq!(pod.pointer("/status/phase"), Some(&json!("Pending")));
        assert_eq!(pod.pointer("/status/qosClass"), Some(&json!("BestEffort")));
        pod["status"] = json!({"phase": "Running", "podIP": "10.0.0.2", "containerStatuses": [{"name": "nginx", "ready": true, "restartCount": 0, "state": {"running": {}}}]});
        let cells = Pod.cells(&pod, meta::unix_now());
        assert_eq!(cells[0], "nginx-1");
        assert_eq!(cells[1], "1/1");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[6], "node-1");
        let mut waiting = pod.clone();
        waiting["status"]["phase"] = json!("Pending");
        waiting["status"]["containerStatuses"][0] = json!({"name": "nginx", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}});
        assert_eq!(status_column(&waiting), "ContainerCreating");
        waiting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(status_column(&waiting), "Terminating");
        let mut done = pod.clone();
        done["status"]["containerStatuses"][0] = json!({"name": "nginx", "ready": false, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}});
        assert_eq!(status_column(&done), "Completed");
        // Init containers: progress, then their failure; a started sidecar counts as a container.
        let staged = json!({"spec": {"initContainers": [{"name": "a"}, {"name": "side", "restartPolicy": "Always"}],
                "containers": [{"name": "app"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"name": "a", "restartCount": 0, "state": {"running": {}}},
                {"name": "side", "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}],
                "containerStatuses": [{"name": "app", "ready": false, "state": {"waiting": {"reason": "PodInitializing"}}}]}});
        let sum = summary(&staged);
        assert_eq!(
            (sum.ready, sum.total, sum.status.as_str()),
            (0, 2, "Init:0/2")
        );
        let mut looping = staged.clone();
        looping["status"]["initContainerStatuses"][0] = json!({"name": "a", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        let sum = summary(&looping);
        assert_eq!(
            (sum.status.as_str(), sum.restarts),
            ("Init:CrashLoopBackOff", 3)
        );
        let mut running = staged.clone();
        running["status"]["conditions"] = json!([{"type": "Initialized", "status": "True"}]);
        running["status"]["initContainerStatuses"] = json!([
            {"name": "a", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "side", "restartCount": 1, "started": true, "ready": true, "state": {"running": {}}}]);
        running["status"]["containerStatuses"] =
            json!([{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}}]);
        running["status"]["phase"] = json!("Running");
        let sum = summary(&running);
        assert_eq!(
            (sum.ready, sum.total, sum.status.as_str(), sum.restarts),
            (2, 2, "Running", 1)
        );
    }

    #[test]
    fn grace() {
        let scheduled = json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 10}, "status": {"phase": "Running"}});
        assert_eq!(grace_period(&scheduled, None), 10);
        assert_eq!(grace_period(&scheduled, Some(3)), 3);
        assert_eq!(grace_period(&scheduled, Some(-5)), 1);
        assert_eq!(
            grace_period(&scheduled, Some(300_000_000_000)),
            podspec::MAX_GRACE_SECONDS
        );
        assert_eq!(grace_period(&json!({"spec": {}}), None), 0);
    }

    #[test]
    fn quota_usage() {
        let pod = json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}});
        assert_eq!(compute_usage(&pod, "requests.cpu"), Some(Ok(2000)));
        assert_eq!(compute_usage(&pod, "memory"), Some(Ok(64 << 20)));
        assert_eq!(compute_usage(&pod, "pods"), None);
        let bad = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "9223372036854775807k"}}}]}});
        assert!(compute_usage(&bad, "limits.cpu").unwrap().is_err());
        let huge = json!({"spec": {"containers": [
            {"resources": {"requests": {"memory": "8Ei"}}},
            {"resources": {"requests": {"memory": "8Ei"}}}]}});
        assert!(compute_usage(&huge, "requests.memory").unwrap().is_err());
    }

    #[test]
    fn ephemeral_containers_are_only_added() {
        let pod = |eph: Value| {
            json!({"spec": {"containers": [{"name": "app", "image": "nginx"}],
                "ephemeralContainers": eph}})
        };
        let dbg = json!({"name": "dbg", "image": "busybox", "targetContainerName": "app"});
        let check = |new: Value, old: Value| {
            let mut causes = Vec::new();
            validate_ephemeral(&new, &old, &mut causes);
            causes.iter().map(|c| c.message.clone()).collect::<Vec<_>>()
        };
        assert!(check(pod(json!([dbg])), pod(json!([]))).is_empty());
        assert_eq!(
            check(pod(json!([])), pod(json!([dbg]))),
            ["Forbidden: existing ephemeral containers \"dbg\" may not be changed"]
        );
        let bad = json!([{"name": "app", "image": "", "ports": [{"containerPort": 80}],
            "targetContainerName": "nope"}]);
        assert_eq!(
            check(pod(bad), pod(json!([]))),
            [
                "Duplicate value: \"app\"",
                "Required value",
                "Forbidden: cannot be set for an Ephemeral Container",
                "Not found: \"nope\""
            ]
        );
    }
}
