//! Resources served without storage of their own: `bindings` (the older spelling of
//! `pods/{name}/binding`: the Binding names its pod) and `componentstatuses` (the control
//! plane's health as upstream's deprecated API shows it: the store answering, and whether the
//! scheduler's and controller-manager's leader leases are held and fresh).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::authz::UserInfo;
use rkube_api::{meta, ApiError};
use serde_json::{json, Value};

use super::body::{read_body, read_object};
use super::{json_value, ApiState};
use crate::kinds::componentstatus::{status_of, ComponentStatus};
use crate::request::RequestInfo;

/// `POST /api/v1/namespaces/{ns}/bindings`: binds the pod the Binding names, exactly as its
/// `binding` subresource does.
pub async fn binding(
    state: &ApiState,
    info: &RequestInfo,
    user: &UserInfo,
    req: Request,
) -> Result<Response, ApiError> {
    let r = info.resource.as_ref().expect("a resource request");
    if info.verb != "create" || r.name.is_some() {
        return Err(ApiError::method_not_supported(
            &rkube_api::GroupResource::new("", "bindings"),
            info.verb,
        ));
    }
    let (parts, body) = req.into_parts();
    let content_type = super::header(&parts.headers, "content-type").to_string();
    let raw = read_body(body).await?;
    let (_, obj) = read_object(&content_type, raw.clone())?;
    let name = meta::name(&obj).to_string();
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "name is required in the Binding's metadata",
        ));
    }
    let pods = state
        .registries
        .get(&("", "pods"))
        .ok_or_else(crate::request::not_found_path)?;
    let mut pod_info = info.clone();
    if let Some(res) = pod_info.resource.as_mut() {
        res.resource = "pods".into();
        res.name = Some(name);
        res.subresource = Some("binding".into());
        res.def = Some(pods.def);
    }
    let req = Request::from_parts(parts, Body::from(raw));
    let s = super::scope(state, &pods, &pod_info, user, &req)?;
    super::subresources::bind(&s, req.into_body()).await
}

/// `GET componentstatuses[/{name}]`, as a Table when asked (kubectl's columns).
pub async fn component_statuses(
    state: &ApiState,
    info: &RequestInfo,
    table: bool,
) -> Result<Response, ApiError> {
    let r = info.resource.as_ref().expect("a resource request");
    let gr = rkube_api::GroupResource::new("", "componentstatuses");
    let mut items = statuses(state).await;
    if let Some(name) = &r.name {
        items.retain(|i| meta::name(i) == name);
    }
    if table && !items.is_empty() {
        return Ok(json_value(
            StatusCode::OK,
            &super::table::table(&ComponentStatus, &items, "", None, false),
        ));
    }
    match (info.verb, &r.name) {
        ("get", Some(name)) => items
            .into_iter()
            .find(|i| meta::name(i) == name)
            .map(|i| json_value(StatusCode::OK, &i))
            .ok_or_else(|| ApiError::not_found(&gr, name)),
        ("list", None) => Ok(json_value(
            StatusCode::OK,
            &json!({"kind": "ComponentStatusList", "apiVersion": "v1", "metadata": {}, "items": items}),
        )),
        (verb, _) => Err(ApiError::method_not_supported(&gr, verb)),
    }
}

async fn statuses(state: &ApiState) -> Vec<Value> {
    let mut out = Vec::new();
    let leases = state.registries.get(&("coordination.k8s.io", "leases"));
    for (name, lease) in [
        ("controller-manager", "kube-controller-manager"),
        ("scheduler", "kube-scheduler"),
    ] {
        out.push(status_of(name, lease_health(leases.as_ref(), lease).await));
    }
    let etcd = match &leases {
        Some(reg) => match reg.storage.current_revision(&reg.key("", "")).await {
            Ok(_) => Ok(r#"{"health":"true","reason":""}"#.to_string()),
            Err(e) => Err(e.to_string()),
        },
        None => Err("no storage".into()),
    };
    out.push(status_of("etcd-0", etcd));
    out
}

/// Healthy when the component's leader lease is held and was renewed within its duration.
async fn lease_health(
    leases: Option<&Arc<crate::registry::Registry>>,
    name: &str,
) -> Result<String, String> {
    let reg = leases.ok_or("no lease storage")?;
    let bytes = reg
        .get("kube-system", name, None)
        .await
        .map_err(|_| format!("no leader holds the kube-system/{name} lease"))?;
    let lease: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let holder = lease
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or("");
    let renewed = lease
        .pointer("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(meta::parse_rfc3339);
    let duration = lease
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(15);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    match renewed {
        Some(t) if !holder.is_empty() && now - t <= duration => Ok("ok".into()),
        _ => Err(format!(
            "the kube-system/{name} lease is not held or has expired"
        )),
    }
}
