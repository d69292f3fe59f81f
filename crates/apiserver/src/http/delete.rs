//! DELETE of an object (a Status, or the object for kinds whose deletion is graceful) and of
//! a collection (every object a list selects).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::{meta, ApiError, DeleteOptions, ListOptions};
use serde_json::Value;

use super::body::{delete_body, read_body};
use super::{json_value, status_response, Scope};
use crate::registry::Deleted;

pub async fn delete(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let raw = delete_body(&s.content_type, read_body(body).await?)?;
    let opts = DeleteOptions::parse(&raw, s.query)?;
    let admission = s.admission();
    let w = s.write(&admission, opts.dry_run, None);
    let resp = match s.reg.delete(s.ns, s.name(), &opts, w).await? {
        Deleted::Gone(obj) if !s.reg.strategy.delete_returns_object() => {
            status_response(&s.reg.delete_status(&obj))
        }
        Deleted::Gone(obj) | Deleted::Pending(obj) => json_value(StatusCode::OK, &obj),
    };
    Ok(super::admitted(resp, Vec::new(), &admission))
}

pub async fn collection(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let raw = delete_body(&s.content_type, read_body(body).await?)?;
    let del = DeleteOptions::parse(&raw, s.query)?;
    let opts = ListOptions::from_query(s.query, false)?;
    let res = s.reg.list(s.namespace, &opts).await?;
    let admission = s.admission();
    let w = s.write(&admission, del.dry_run, None);
    let mut deleted = Vec::new();
    for item in &res.items {
        let obj: Value = serde_json::from_slice(item).unwrap_or(Value::Null);
        let (ins, name) = (
            meta::namespace(&obj).to_string(),
            meta::name(&obj).to_string(),
        );
        match s.reg.delete(&ins, &name, &del, w).await {
            Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => deleted.push(o),
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = serde_json::json!({
        "kind": s.reg.def.list_kind,
        "apiVersion": s.reg.def.api_version(),
        "metadata": {"resourceVersion": res.rv.to_string()},
        "items": deleted,
    });
    Ok(json_value(StatusCode::OK, &list))
}
