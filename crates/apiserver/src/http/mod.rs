//! The HTTP front: routing of resource paths to the registry, request bodies and content
//! types, and the one place an `ApiError` becomes a `kind: Status` response.

pub mod discovery;
pub mod logs;
pub mod openapi;
pub mod reviews;
pub mod subresources;
pub mod table;
pub mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use rkube_api::options::dry_run;
use rkube_api::{meta, ApiError, DeleteOptions, ListOptions, Query, Status};
use serde_json::Value;

use crate::registry::{Deleted, ListResult, PatchType, Registry};
use crate::request::{self, RequestInfo};

/// Request bodies above this are refused (upstream's 3 MiB limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

#[derive(Clone)]
pub struct ApiState {
    pub auth: Arc<crate::auth::Auth>,
    pub admission: Arc<crate::admission::Admission>,
    pub registries: Arc<HashMap<(&'static str, &'static str), Arc<Registry>>>,
    pub metrics: Arc<crate::metrics::ApiMetrics>,
    pub shutdown: rkube_daemon::ShutdownToken,
    pub ready: rkube_daemon::health::Ready,
}

/// The one conversion from `ApiError` to the wire.
pub fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    if let Some(retry) = e
        .status()
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|r| *r > 0)
    {
        headers.insert("retry-after", retry.to_string().parse().unwrap());
    }
    if e.code() >= 500 {
        tracing::warn!(code = e.code(), reason = e.reason(), message = %e.status().message, "request failed");
    }
    (
        status,
        headers,
        serde_json::to_vec(e.status()).unwrap_or_default(),
    )
        .into_response()
}

fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    (status, [("content-type", "application/json")], body).into_response()
}

fn json_value(status: StatusCode, v: &Value) -> Response {
    json_bytes(
        status,
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
    )
}

fn status_response(s: &Status) -> Response {
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::OK);
    json_bytes(code, Bytes::from(serde_json::to_vec(s).unwrap_or_default()))
}

pub async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::request_entity_too_large("Request entity too large: limit is 3145728")
    })
}

/// A create/update body as JSON bytes and the object they hold, whatever media type it came in:
/// JSON, or Kubernetes protobuf (what client-go's typed clients, and so several kubectl
/// commands, send).
fn read_object(content_type: &str, raw: Bytes) -> Result<(Bytes, Value), ApiError> {
    match media_type(content_type) {
        rkube_api::proto::CONTENT_TYPE => {
            let v = rkube_api::proto::decode(&raw).map_err(|e| match e {
                rkube_api::proto::ProtoError::UnknownType(_) => {
                    ApiError::unsupported_media_type(content_type)
                }
                e => ApiError::bad_request(format!(
                    "the body of the request could not be decoded: {e}"
                )),
            })?;
            let json = serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?;
            Ok((Bytes::from(json), v))
        }
        "" | "*/*" => parse_object(&raw).map(|v| (raw, v)),
        m if m.ends_with("json") => parse_object(&raw).map(|v| (raw, v)),
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

/// 422 for a bad query option: `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: …`.
fn options_invalid(kind: &str, field: &str, reason: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "meta.k8s.io",
        kind,
        "",
        vec![rkube_api::StatusCause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        }],
    )
}

/// A DELETE's optional DeleteOptions body, as JSON.
fn delete_body(content_type: &str, raw: Bytes) -> Result<Bytes, ApiError> {
    if raw.is_empty() {
        return Ok(raw);
    }
    Ok(read_object(content_type, raw)?.0)
}

/// A request header as text ("" when absent or not text).
fn header(req: &Request, name: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// `application/json; charset=utf-8` → `application/json`.
fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

/// Serves every resource path; `None` when the path is not one.
pub async fn handle(state: ApiState, req: Request) -> Option<Response> {
    let started = Instant::now();
    let Some(info) = req.extensions().get::<Arc<RequestInfo>>().cloned() else {
        return Some(error_response(&ApiError::internal(
            "the request was not parsed by the request chain",
        )));
    };
    let resource = info.resource.as_ref()?;
    let def = match resource.def() {
        Ok(d) => d,
        Err(e) => return Some(error_response(&e)),
    };
    if resource.is_review() {
        let content_type = header(&req, "content-type");
        let user = req
            .extensions()
            .get::<rkube_api::authz::UserInfo>()
            .cloned()
            .unwrap_or_else(rkube_api::authz::UserInfo::anonymous);
        let auth = state.auth.clone();
        let answered = async {
            let (_, review) = read_object(&content_type, read_body(req.into_body()).await?)?;
            reviews::answer(def, info.verb, review, &auth, &user)
        };
        let resp = answered.await.unwrap_or_else(|e| error_response(&e));
        state.metrics.observe(
            "create",
            def.plural,
            resp.status().as_u16(),
            started.elapsed(),
        );
        return Some(resp);
    }
    let Some(registry) = state.registries.get(&(def.group, def.plural)).cloned() else {
        return Some(error_response(&request::not_found_path()));
    };
    let resp = match serve(&state, &registry, &info, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    state.metrics.observe(
        info.verb,
        registry.def.plural,
        resp.status().as_u16(),
        started.elapsed(),
    );
    Some(resp)
}

/// JSON is the only representation served; an Accept header that rules it out is 406.
fn check_accept(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(accept) = headers.get("accept").and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let ok = accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or("").trim();
        media.is_empty() || media == "*/*" || media == "application/*" || media.ends_with("json")
    });
    if ok {
        Ok(())
    } else {
        Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json; got {accept}"
        )))
    }
}

async fn serve(
    state: &ApiState,
    reg: &Arc<Registry>,
    info: &RequestInfo,
    req: Request,
) -> Result<Response, ApiError> {
    check_accept(req.headers())?;
    let query = &info.query;
    let resource = info.resource.as_ref().expect("a resource request");
    let as_table = req
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(table::wants_table);
    let printing = as_table.then(|| Printing {
        include_object: query.get("includeObject") == Some("Object"),
    });
    let method = req.method().clone();
    let content_type = header(&req, "content-type");
    let field_manager = query.get("fieldManager").map(String::from);
    if field_manager.as_ref().is_some_and(|m| m.len() > 128) {
        return Err(options_invalid(
            "CreateOptions",
            "fieldManager",
            "FieldValueTooLong",
            "Too long: may not be more than 128 bytes",
        ));
    }
    // Writes without a fieldManager are recorded under the client's name, as upstream does:
    // the User-Agent up to its first `/`.
    let update_manager = field_manager.clone().or_else(|| {
        req.headers()
            .get("user-agent")
            .and_then(|v| v.to_str().ok())
            .map(|ua| {
                ua.split('/')
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(128)
                    .collect()
            })
            .filter(|m: &String| !m.is_empty())
    });
    let manager = update_manager.as_deref();
    let ns_owned = resource.namespace.clone().unwrap_or_default();
    let ns = ns_owned.as_str();
    if reg.def.namespaced && resource.name.is_some() && resource.namespace.is_none() {
        return Err(ApiError::bad_request("Namespace parameter required."));
    }
    if let Some(name) = &resource.name {
        rkube_api::validation::path_segment_name(name)
            .map_err(|e| ApiError::bad_request(format!("Name parameter invalid: {name:?}: {e}")))?;
    }
    let gr = reg.def.group_resource();
    let sub = resource.subresource.as_deref();
    let watch = info.verb == "watch";
    match (method.as_str(), resource.name.as_deref()) {
        ("GET", None) => {
            let opts = ListOptions::from_query(query, watch)?;
            let scope = resource.namespace.as_deref();
            if opts.watch {
                return watch::serve(state, reg, scope, None, &opts, printing).await;
            }
            let res = reg.list(scope, &opts).await?;
            match printing {
                Some(p) => {
                    let objs: Vec<Value> = res
                        .items
                        .iter()
                        .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
                        .collect();
                    let t = table::table(
                        reg.def.kind,
                        &objs,
                        &res.rv.to_string(),
                        res.continue_token.as_deref(),
                        p.include_object,
                    );
                    Ok(json_value(StatusCode::OK, &t))
                }
                None => Ok(list_response(reg, res)),
            }
        }
        ("GET", Some(name)) => {
            if watch {
                let opts = ListOptions::from_query(query, true)?;
                return watch::serve(
                    state,
                    reg,
                    resource.namespace.as_deref(),
                    Some(name),
                    &opts,
                    printing,
                )
                .await;
            }
            match sub {
                Some("scale") => subresources::get_scale(reg, ns, name).await,
                Some("log") => logs::pod_log(state, reg, ns, name, query).await,
                _ => {
                    let rv = query.get("resourceVersion");
                    let obj = reg.get(ns, name, rv).await?;
                    match printing {
                        Some(p) => {
                            let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
                            let t = table::table(
                                reg.def.kind,
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
            }
        }
        ("POST", None) => {
            let dry = dry_run(query)?;
            let fv = FieldValidation::from_query(query)?;
            let (raw, mut body) = read_object(&content_type, read_body(req.into_body()).await?)?;
            let warnings = fv.check(reg.def.kind, &raw, &body)?;
            // Dry runs are admitted too (defaults applied, limits and quota checked); quota
            // is then checked without being charged.
            state.admission.create(reg.def, ns, &mut body, dry).await?;
            let obj = reg.create(ns, body, dry, manager).await?;
            Ok(with_warnings(
                json_value(StatusCode::CREATED, &obj),
                &warnings,
            ))
        }
        ("POST", Some(name)) => {
            let dry = dry_run(query)?;
            let (_, body) = read_object(&content_type, read_body(req.into_body()).await?)?;
            match sub {
                Some("binding") => subresources::bind(reg, ns, name, body, dry).await,
                Some("eviction") => subresources::evict(reg, ns, name, body, dry).await,
                _ => Err(ApiError::method_not_supported(&gr, "create")),
            }
        }
        ("PUT", Some(name)) => {
            let dry = dry_run(query)?;
            let (raw, body) = read_object(&content_type, read_body(req.into_body()).await?)?;
            match sub {
                Some("scale") => {
                    subresources::update_scale(reg, ns, name, body, dry, manager).await
                }
                Some("finalize") | Some("status") | None => {
                    let warnings =
                        FieldValidation::from_query(query)?.check(reg.def.kind, &raw, &body)?;
                    let (obj, created) = reg.update(ns, name, body, sub, dry, manager).await?;
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    Ok(with_warnings(json_value(code, &obj), &warnings))
                }
                Some(_) => Err(ApiError::method_not_supported(&gr, "update")),
            }
        }
        ("PATCH", Some(name)) => {
            let dry = dry_run(query)?;
            let body = read_body(req.into_body()).await?;
            let pt = match media_type(&content_type) {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                "application/apply-patch+yaml" => PatchType::Apply {
                    force: query.flag("force"),
                },
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let force_given = query.has("force");
            if force_given && !matches!(pt, PatchType::Apply { .. }) {
                return Err(options_invalid(
                    "PatchOptions",
                    "force",
                    "FieldValueForbidden",
                    "Forbidden: may not be specified for non-apply patch",
                ));
            }
            // Apply names its manager explicitly; other patches fall back to the client's.
            let patch_manager = match pt {
                PatchType::Apply { .. } => field_manager.as_deref(),
                _ => manager,
            };
            match sub {
                Some("scale") => {
                    subresources::patch_scale(reg, ns, name, pt, &body, dry, manager).await
                }
                Some("status") | None => {
                    let (obj, created) = reg
                        .patch(
                            ns,
                            name,
                            crate::registry::PatchRequest {
                                patch_type: pt,
                                body: &body,
                                subresource: sub,
                                dry_run: dry,
                                strict_fields: FieldValidation::from_query(query)?
                                    == FieldValidation::Strict,
                                manager: patch_manager,
                            },
                        )
                        .await?;
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    Ok(json_value(code, &obj))
                }
                Some(_) => Err(ApiError::method_not_supported(&gr, "patch")),
            }
        }
        ("DELETE", Some(name)) => {
            let body = delete_body(&content_type, read_body(req.into_body()).await?)?;
            let opts = DeleteOptions::parse(&body, query)?;
            match reg.delete(ns, name, &opts).await? {
                Deleted::Gone(obj) if reg.def.kind != "Pod" => {
                    Ok(status_response(&reg.delete_status(&obj)))
                }
                Deleted::Gone(obj) | Deleted::Pending(obj) => Ok(json_value(StatusCode::OK, &obj)),
            }
        }
        ("DELETE", None) if reg.def.namespaced && resource.namespace.is_none() => {
            Err(ApiError::method_not_supported(&gr, "deletecollection"))
        }
        ("DELETE", None) => {
            let body = delete_body(&content_type, read_body(req.into_body()).await?)?;
            let del = DeleteOptions::parse(&body, query)?;
            let opts = ListOptions::from_query(query, false)?;
            delete_collection(reg, resource.namespace.as_deref(), &opts, &del).await
        }
        (m, _) => Err(ApiError::method_not_supported(&gr, &m.to_lowercase())),
    }
}

/// `fieldValidation`: what to do about fields the type does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

impl FieldValidation {
    fn from_query(q: &Query) -> Result<Self, ApiError> {
        match q.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn, Strict; got {other:?}"
            ))),
        }
    }

    /// Refuses (Strict) or returns warnings (Warn) for undeclared and duplicate fields of a
    /// body (`raw` as sent, `body` as decoded).
    fn check(self, kind: &str, raw: &[u8], body: &Value) -> Result<Vec<String>, ApiError> {
        if self == FieldValidation::Ignore {
            return Ok(Vec::new());
        }
        let mut msgs: Vec<String> = crate::registry::strategy::unknown_fields(kind, body)
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        msgs.extend(
            rkube_api::duplicates::duplicate_fields(raw)
                .iter()
                .map(|f| format!("duplicate field \"{f}\"")),
        );
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        if self == FieldValidation::Strict {
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                msgs.join(", ")
            )));
        }
        Ok(msgs)
    }
}

/// Adds `Warning: 299 - "<text>"` headers, as upstream reports non-fatal problems.
fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        if let Ok(v) = format!("299 - {:?}", w).parse() {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// A request for server-side printing (`as=Table`).
#[derive(Clone, Copy, Debug)]
pub struct Printing {
    /// `includeObject=Object`: rows carry the whole object, not just its metadata.
    pub include_object: bool,
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

async fn delete_collection(
    reg: &Registry,
    ns: Option<&str>,
    opts: &ListOptions,
    del: &DeleteOptions,
) -> Result<Response, ApiError> {
    let res = reg.list(ns, opts).await?;
    let mut deleted = Vec::new();
    for item in &res.items {
        let obj: Value = serde_json::from_slice(item).unwrap_or(Value::Null);
        let (ins, name) = (
            meta::namespace(&obj).to_string(),
            meta::name(&obj).to_string(),
        );
        match reg.delete(&ins, &name, del).await {
            Ok(Deleted::Gone(o)) | Ok(Deleted::Pending(o)) => deleted.push(o),
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = serde_json::json!({
        "kind": reg.def.list_kind,
        "apiVersion": reg.def.api_version(),
        "metadata": {"resourceVersion": res.rv.to_string()},
        "items": deleted,
    });
    Ok(json_value(StatusCode::OK, &list))
}

pub async fn fallback(State(state): State<ApiState>, req: Request) -> Response {
    if req.method() == Method::GET {
        let path = req.uri().path().trim_end_matches('/');
        let accept = req
            .headers()
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if path == "/openapi/v2" {
            return openapi::v2(accept);
        }
        if path == "/api" || path == "/apis" {
            if let Some(v) = discovery::wants_aggregated(accept) {
                let body = serde_json::to_vec(&discovery::aggregated(path == "/api", v))
                    .unwrap_or_default();
                return (
                    StatusCode::OK,
                    [("content-type", discovery::aggregated_content_type(v))],
                    body,
                )
                    .into_response();
            }
        }
        if let Some(v) = discovery_doc(req.uri().path()) {
            return json_value(StatusCode::OK, &v);
        }
    }
    match handle(state, req).await {
        Some(r) => r,
        None => error_response(&request::not_found_path()),
    }
}

/// The discovery document at `path`, if it is a discovery path.
fn discovery_doc(path: &str) -> Option<Value> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["api"] => Some(discovery::core_versions()),
        ["api", v] => discovery::resource_list("", v),
        ["apis"] => Some(discovery::group_list()),
        ["apis", g] => discovery::group(g),
        ["apis", g, v] => discovery::resource_list(g, v),
        ["openapi", "v3"] => Some(openapi::index()),
        ["openapi", "v3", "api", v] => openapi::group_version("", v),
        ["openapi", "v3", "apis", g, v] => openapi::group_version(g, v),
        _ => None,
    }
}
