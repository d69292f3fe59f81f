//! Subresources with their own semantics: `pods/binding` (the scheduler's bind),
//! `pods/eviction`, and the `scale` view of Deployments and ReplicaSets.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rkube_api::{meta, ApiError, DeleteOptions, GroupResource, Status, StatusCause};
use serde_json::{json, Value};

use crate::registry::{Decision, PatchType, Registry};

fn status(code: u16) -> Response {
    let s = Status::success(code, None);
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        [("content-type", "application/json")],
        serde_json::to_vec(&s).unwrap_or_default(),
    )
        .into_response()
}

/// `POST pods/{name}/binding`: sets `spec.nodeName` and `PodScheduled=True` in one CAS update.
pub async fn bind(
    reg: &Registry,
    ns: &str,
    name: &str,
    binding: Value,
    dry: bool,
) -> Result<Response, ApiError> {
    let gr = GroupResource::new("", "pods/binding");
    let bname = meta::name(&binding);
    if !bname.is_empty() && bname != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let kind = binding
        .pointer("/target/kind")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    let node = binding
        .pointer("/target/name")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let mut causes = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        causes.push(StatusCause::not_supported(
            "target.kind",
            kind,
            &["Node", "<empty>"],
        ));
    }
    if node.is_empty() {
        causes.push(StatusCause::required("target.name"));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "Binding", name, causes));
    }
    let annotations = binding
        .pointer("/metadata/annotations")
        .and_then(|a| a.as_object())
        .cloned();
    let want_uid = meta::uid(&binding).to_string();
    reg.guaranteed_update(ns, name, dry, |cur| {
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
        let assigned = cur
            .pointer("/spec/nodeName")
            .and_then(|n| n.as_str())
            .unwrap_or("");
        if !assigned.is_empty() {
            return Err(ApiError::conflict(
                &gr,
                name,
                &format!("pod {name} is already assigned to node {assigned:?}"),
            ));
        }
        let mut new = cur.clone();
        new["spec"]["nodeName"] = json!(node);
        if let Some(a) = &annotations {
            let md = meta::metadata_mut(&mut new);
            let entry = md.entry("annotations").or_insert_with(|| json!({}));
            if let Some(m) = entry.as_object_mut() {
                for (k, v) in a {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        set_condition(&mut new, "PodScheduled", "True", None, None);
        Ok(Decision::Write(new))
    })
    .await?;
    Ok(status(201))
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
    let conds = pod["status"]
        .as_object_mut()
        .expect("status object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
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

/// `POST pods/{name}/eviction`: a delete honouring the eviction's DeleteOptions (no
/// PodDisruptionBudgets exist here, so every eviction is allowed).
pub async fn evict(
    reg: &Registry,
    ns: &str,
    name: &str,
    eviction: Value,
    dry: bool,
) -> Result<Response, ApiError> {
    let opts_body = eviction
        .get("deleteOptions")
        .map(|d| serde_json::to_vec(d).unwrap_or_default())
        .unwrap_or_default();
    let mut opts = DeleteOptions::parse(&opts_body, &Default::default())?;
    opts.dry_run |= dry;
    reg.delete(ns, name, &opts).await?;
    Ok(status(201))
}

fn scale_of(reg: &Registry, obj: &Value) -> Value {
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let _ = reg;
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta::name(obj),
            "namespace": meta::namespace(obj),
            "uid": meta::uid(obj),
            "resourceVersion": meta::resource_version(obj),
            "creationTimestamp": meta::meta_str(obj, "creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

pub async fn get_scale(reg: &Registry, ns: &str, name: &str) -> Result<Response, ApiError> {
    let bytes = reg.get(ns, name, None).await?;
    let obj: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((
        StatusCode::OK,
        [("content-type", "application/json")],
        serde_json::to_vec(&scale_of(reg, &obj)).unwrap_or_default(),
    )
        .into_response())
}

async fn apply_scale(
    reg: &Registry,
    ns: &str,
    name: &str,
    dry: bool,
    manager: Option<&str>,
    mut make: impl FnMut(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let gr = GroupResource::new(reg.def.group, &format!("{}/scale", reg.def.plural));
    let (obj, _) = reg
        .guaranteed_update(ns, name, dry, |cur| {
            let scale = make(&scale_of(reg, cur))?;
            let replicas = scale
                .pointer("/spec/replicas")
                .and_then(|r| r.as_i64())
                .unwrap_or(0);
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![StatusCause::invalid_raw(
                        "spec.replicas",
                        &replicas.to_string(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            let uid = meta::uid(&scale);
            if !uid.is_empty() && uid != meta::uid(cur) {
                return Err(ApiError::conflict(
                    &gr,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(cur)
                    ),
                ));
            }
            let rv = meta::resource_version(&scale);
            if !rv.is_empty() && rv != meta::resource_version(cur) {
                return Err(ApiError::conflict(
                    &reg.def.group_resource(),
                    name,
                    rkube_api::status::OPTIMISTIC_LOCK_MSG,
                ));
            }
            let mut new = cur.clone();
            new["spec"]["replicas"] = json!(replicas);
            reg.prepare_update(ns, name, cur, new, None, manager)
        })
        .await?;
    Ok((
        StatusCode::OK,
        [("content-type", "application/json")],
        serde_json::to_vec(&scale_of(reg, &obj)).unwrap_or_default(),
    )
        .into_response())
}

pub async fn update_scale(
    reg: &Registry,
    ns: &str,
    name: &str,
    body: Value,
    dry: bool,
    manager: Option<&str>,
) -> Result<Response, ApiError> {
    apply_scale(reg, ns, name, dry, manager, |_| Ok(body.clone())).await
}

pub async fn patch_scale(
    reg: &Registry,
    ns: &str,
    name: &str,
    pt: PatchType,
    patch: &[u8],
    dry: bool,
    manager: Option<&str>,
) -> Result<Response, ApiError> {
    let patch: Value = serde_json::from_slice(patch)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    apply_scale(reg, ns, name, dry, manager, |scale| {
        let mut s = scale.clone();
        match pt {
            PatchType::Merge => rkube_api::patch::merge_patch(&mut s, &patch),
            PatchType::Strategic => rkube_api::strategic::apply("Scale", &mut s, &patch)
                .map_err(ApiError::bad_request)?,
            PatchType::Json => {
                rkube_api::patch::json_patch(&mut s, &patch).map_err(ApiError::bad_request)?
            }
            PatchType::Apply { .. } => {
                return Err(ApiError::unsupported_media_type(
                    "application/apply-patch+yaml (server-side apply of the scale subresource)",
                ))
            }
        }
        Ok(s)
    })
    .await
}
