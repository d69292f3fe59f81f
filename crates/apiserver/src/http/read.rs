//! GET, LIST and WATCH of a resource: objects as stored JSON (lists are cached item bytes
//! concatenated, not re-serialized), or as kubectl's Tables.

use axum::http::StatusCode;
use axum::response::Response;
use bytes::BytesMut;
use rkube_api::{meta, ApiError, ListOptions};
use serde_json::Value;

use super::{json_bytes, json_value, table, Scope};
use crate::registry::{ListResult, Registry};

pub async fn get(s: &Scope<'_>) -> Result<Response, ApiError> {
    let obj = s
        .reg
        .get(s.ns, s.name(), s.query.get("resourceVersion"))
        .await?;
    match s.printing {
        Some(p) => {
            let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
            let t = table::table(
                &*s.reg.strategy,
                std::slice::from_ref(&v),
                meta::resource_version(&v),
                None,
                p.include_object,
            );
            Ok(json_value(StatusCode::OK, &t))
        }
        None => Ok(json_bytes(StatusCode::OK, obj)),
    }
}

pub async fn list(s: &Scope<'_>) -> Result<Response, ApiError> {
    let opts = ListOptions::from_query(s.query, false)?;
    if s.query.get("continue").is_none() {
        // A paged list counts once (`/debug/watches`' per-client re-lists).
        s.state
            .watches
            .listed(s.update_manager.as_deref().unwrap_or_default());
    }
    let res = s.reg.list(s.namespace, &opts).await?;
    match s.printing {
        Some(p) => {
            let objs: Vec<Value> = res
                .items
                .iter()
                .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
                .collect();
            let t = table::table(
                &*s.reg.strategy,
                &objs,
                &res.rv.to_string(),
                res.continue_token.as_deref(),
                p.include_object,
            );
            Ok(json_value(StatusCode::OK, &t))
        }
        None => Ok(list_response(s.reg, res)),
    }
}

/// A watch, streamed as HTTP chunks or, when `ws` is the request's upgrade, as WebSocket
/// messages.
pub async fn watch(
    s: &Scope<'_>,
    ws: Option<axum::extract::ws::WebSocketUpgrade>,
) -> Result<Response, ApiError> {
    let opts = ListOptions::from_query(s.query, true)?;
    let opened = crate::watches::Opened {
        user: s.user.name.clone(),
        client: s.update_manager.clone().unwrap_or_default(),
        resource: match s.reg.def.group {
            "" => s.reg.def.plural.to_string(),
            g => format!("{}.{g}", s.reg.def.plural),
        },
        namespace: s.ns.to_string(),
        label_selector: s.query.get("labelSelector").unwrap_or_default().to_string(),
        field_selector: s.query.get("fieldSelector").unwrap_or_default().to_string(),
        start_rv: s
            .query
            .get("resourceVersion")
            .unwrap_or_default()
            .to_string(),
    };
    super::watch::serve(
        s.state,
        s.reg,
        s.namespace,
        s.name,
        &opts,
        s.printing,
        opened,
        ws,
    )
    .await
}

/// `{"kind":"<Kind>List","apiVersion":…,"metadata":{…},"items":[…]}` from cached item bytes.
pub fn list_response(reg: &Registry, res: ListResult) -> Response {
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), Value::String(res.rv.to_string()));
    if let Some(c) = &res.continue_token {
        meta.insert("continue".into(), Value::String(c.clone()));
    }
    if let Some(r) = res.remaining {
        meta.insert("remainingItemCount".into(), Value::from(r));
    }
    let total: usize = res.items.iter().map(|i| i.len() + 1).sum();
    let mut out = BytesMut::with_capacity(total + 256);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            reg.def.list_kind,
            reg.def.api_version(),
            Value::Object(meta)
        )
        .as_bytes(),
    );
    for (i, item) in res.items.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    json_bytes(StatusCode::OK, out.freeze())
}
