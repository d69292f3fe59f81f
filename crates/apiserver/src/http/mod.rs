//! The HTTP front: the request's parsed info (from the chain) becomes one `Scope`, dispatched
//! on an explicit (verb, subresource) table to the per-verb handlers (`read`, `create`,
//! `update`, `patch`, `delete`, `subresources`, `logs`, `reviews`); discovery and OpenAPI for
//! non-resource paths; and the one place an `ApiError` becomes a `kind: Status` response.

pub mod body;
pub mod computed;
pub mod create;
pub mod delete;
pub mod discovery;
pub mod logs;
pub mod metrics_api;
pub mod negotiate;
pub mod openapi;
pub mod patch;
pub mod read;
pub mod reviews;
pub mod streaming;
pub mod subresources;
pub mod table;
pub mod update;
pub mod watch;
pub mod websocket;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rkube_api::authz::UserInfo;
use rkube_api::{resources, ApiError, Query, Status};
use serde_json::Value;

use crate::registry::{Registries, Registry, Write};
use crate::request::{self, RequestInfo};

pub use body::{read_body, MAX_BODY};

#[derive(Clone)]
pub struct ApiState {
    pub auth: Arc<crate::auth::Auth>,
    pub admission: Arc<crate::admission::Admission>,
    pub registries: Arc<Registries>,
    pub metrics: Arc<crate::metrics::ApiMetrics>,
    pub shutdown: rkube_daemon::ShutdownToken,
    pub ready: rkube_daemon::health::Ready,
    /// The client pods/log (and later exec, port-forward) reach kubelets with.
    pub kubelet: Arc<logs::KubeletClient>,
    /// Every open watch (`/debug/watches`).
    pub watches: Arc<crate::watches::WatchTable>,
}

/// The one conversion from `ApiError` to the wire.
pub fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    headers.insert(
        "content-type",
        axum::http::HeaderValue::from_static("application/json"),
    );
    if let Some(retry) = e
        .status()
        .details
        .as_ref()
        .map(|d| d.retry_after_seconds)
        .filter(|r| *r > 0)
    {
        if let Ok(v) = retry.to_string().parse() {
            headers.insert("retry-after", v);
        }
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

pub fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    (status, [("content-type", "application/json")], body).into_response()
}

pub fn json_value(status: StatusCode, v: &Value) -> Response {
    json_bytes(
        status,
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
    )
}

pub fn status_response(s: &Status) -> Response {
    let code = StatusCode::from_u16(s.code).unwrap_or(StatusCode::OK);
    json_bytes(code, Bytes::from(serde_json::to_vec(s).unwrap_or_default()))
}

/// Adds `Warning: 299 - "<text>"` headers, as upstream reports non-fatal problems, within
/// upstream's bounds: each warning cut to 256 characters, at most 4096 in all (the rest is
/// dropped), so a body full of problems cannot make a response no client can read.
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    const ITEM: usize = 256;
    const TOTAL: usize = 4096;
    let mut total = 0;
    for w in warnings {
        let text: String = w.chars().take(ITEM).collect();
        total += text.chars().count();
        if total > TOTAL {
            break;
        }
        if let Ok(v) = format!("299 - {:?}", text).parse() {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// A write's response with what admission had to say about it: its warnings (after the
/// request's own) and its audit annotations (an extension the chain records).
pub fn admitted(
    resp: Response,
    own_warnings: Vec<String>,
    admission: &crate::admission::ForUser<'_>,
) -> Response {
    let mut warnings = own_warnings;
    warnings.extend(admission.warnings());
    let mut resp = with_warnings(resp, &warnings);
    let annotations = admission.annotations();
    if !annotations.is_empty() {
        resp.extensions_mut()
            .insert(crate::audit::Annotations(annotations));
    }
    resp
}

/// A request for server-side printing (`as=Table`).
#[derive(Clone, Copy, Debug)]
pub struct Printing {
    /// `includeObject=Object`: rows carry the whole object, not just its metadata.
    pub include_object: bool,
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

/// Everything a handler needs about one resource request, parsed once.
pub struct Scope<'a> {
    pub state: &'a ApiState,
    pub reg: &'a Arc<Registry>,
    pub info: &'a RequestInfo,
    pub user: &'a UserInfo,
    /// The namespace ("" for cluster-scoped or all-namespaces requests).
    pub ns: &'a str,
    /// The namespace if the path named one.
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
    pub query: &'a Query,
    pub content_type: String,
    pub printing: Option<Printing>,
    /// `fieldManager` as given.
    pub field_manager: Option<String>,
    /// The manager a non-apply write is recorded under (`fieldManager`, else the client's
    /// User-Agent up to its first `/`, as upstream).
    pub update_manager: Option<String>,
}

impl Scope<'_> {
    /// The name; handlers of named verbs are only dispatched with one.
    pub fn name(&self) -> &str {
        self.name.unwrap_or("")
    }

    /// How this request writes: admitted as its user, dry or not, recorded under `manager`.
    pub fn write<'b>(
        &'b self,
        admit: &'b crate::admission::ForUser<'b>,
        dry_run: bool,
        manager: Option<&'b str>,
    ) -> Write<'b> {
        Write {
            admit,
            dry_run,
            manager,
            verb: self.info.verb,
        }
    }

    /// Admission for this request's user.
    pub fn admission(&self) -> crate::admission::ForUser<'_> {
        self.state.admission.for_user(self.user)
    }

    pub fn dry_run(&self) -> Result<bool, ApiError> {
        rkube_api::options::dry_run(self.query)
    }
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
    let user = req
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    // Watches stream JSON events (their own framing); everything else goes out as asked.
    let wire = match info.verb {
        "watch" => negotiate::Wire::Json,
        _ => negotiate::wanted(header(req.headers(), "accept")),
    };
    if resource.is_review() {
        let resp = match def.plural {
            "bindings" => computed::binding(&state, &info, &user, req).await,
            "componentstatuses" => {
                let table = table::wants_table(header(req.headers(), "accept"));
                computed::component_statuses(&state, &info, table).await
            }
            "nodes" | "pods" if def.group == "metrics.k8s.io" => metrics_api::serve(&state, &info)
                .await
                .map(|v| json_value(StatusCode::OK, &v)),
            _ => reviews::serve(&state, def, &info, &user, req).await,
        }
        .unwrap_or_else(|e| error_response(&e));
        let resp = negotiate::respond(resp, wire).await;
        state.metrics.observe(
            info.verb,
            def.plural,
            resp.status().as_u16(),
            started.elapsed(),
        );
        return Some(resp);
    }
    let Some(registry) = state.registries.served(def) else {
        return Some(error_response(&request::not_found_path()));
    };
    let resp = match scope(&state, &registry, &info, &user, &req) {
        Ok(scope) => dispatch(scope, req)
            .await
            .unwrap_or_else(|e| error_response(&e)),
        Err(e) => error_response(&e),
    };
    let resp = match registry.strategy.deprecation() {
        Some(w) => with_warnings(resp, &[w]),
        None => resp,
    };
    let resp = negotiate::respond(resp, wire).await;
    state.metrics.observe(
        info.verb,
        registry.def.plural,
        resp.status().as_u16(),
        started.elapsed(),
    );
    Some(resp)
}

/// A request header as text ("" when absent or not text).
pub(crate) fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

pub(crate) fn scope<'a>(
    state: &'a ApiState,
    reg: &'a Arc<Registry>,
    info: &'a RequestInfo,
    user: &'a UserInfo,
    req: &Request,
) -> Result<Scope<'a>, ApiError> {
    let r = info.resource.as_ref().expect("a resource request");
    let api_version = reg.def.api_version();
    check_accept(req.headers(), Some((api_version.as_str(), reg.def.kind)))?;
    if let Some(name) = &r.name {
        rkube_api::validation::path_segment_name(name)
            .map_err(|e| ApiError::bad_request(format!("Name parameter invalid: {name:?}: {e}")))?;
    }
    if reg.def.namespaced && r.name.is_some() && r.namespace.is_none() {
        return Err(ApiError::bad_request("Namespace parameter required."));
    }
    let query = &info.query;
    let printing = table::wants_table(header(req.headers(), "accept")).then(|| Printing {
        include_object: query.get("includeObject") == Some("Object"),
    });
    let field_manager = query.get("fieldManager").map(String::from);
    if field_manager.as_ref().is_some_and(|m| m.len() > 128) {
        return Err(options_invalid(
            "CreateOptions",
            "fieldManager",
            "FieldValueTooLong",
            "Too long: may not be more than 128 bytes",
        ));
    }
    let update_manager = field_manager.clone().or_else(|| {
        let ua = header(req.headers(), "user-agent");
        let m: String = ua
            .split('/')
            .next()
            .unwrap_or("")
            .chars()
            .take(128)
            .collect();
        (!m.is_empty()).then_some(m)
    });
    Ok(Scope {
        state,
        reg,
        info,
        user,
        ns: r.namespace.as_deref().unwrap_or(""),
        namespace: r.namespace.as_deref(),
        name: r.name.as_deref(),
        subresource: r.subresource.as_deref(),
        query,
        content_type: header(req.headers(), "content-type").to_string(),
        printing,
        field_manager,
        update_manager,
    })
}

/// The (verb, subresource) table: what each combination is served by. Anything else is the
/// 405 upstream answers for a method its route does not have.
async fn dispatch(s: Scope<'_>, req: Request) -> Result<Response, ApiError> {
    let named = s.name.is_some();
    let verbs = match s.subresource {
        Some(sub) => resources::subresource_verbs(sub),
        None => resources::verbs(s.reg.def),
    };
    let not_allowed = || ApiError::method_not_supported(&s.reg.def.group_resource(), s.info.verb);
    if !verbs.contains(&s.info.verb) {
        return Err(not_allowed());
    }
    if let (Some("exec" | "attach" | "portforward"), true) = (s.subresource, named) {
        return streaming::proxy(&s, req).await;
    }
    if let ("watch", None) = (s.info.verb, s.subresource) {
        let ws = match websocket::is_request(req.headers()) {
            true => Some(websocket::upgrade(&mut req.into_parts().0).await?),
            false => None,
        };
        return read::watch(&s, ws).await;
    }
    let body = req.into_body();
    match (s.info.verb, s.subresource, named) {
        ("get", None | Some("status") | Some("approval") | Some("ephemeralcontainers"), true) => {
            read::get(&s).await
        }
        ("get", Some("scale"), true) => subresources::get_scale(&s).await,
        ("get", Some("log"), true) => logs::pod_log(&s).await,
        ("list", None, false) => read::list(&s).await,
        ("create", None, false) => create::create(&s, body).await,
        ("create", Some("binding"), true) => subresources::bind(&s, body).await,
        ("create", Some("eviction"), true) => subresources::evict(&s, body).await,
        ("create", Some("token"), true) => subresources::token(&s, body).await,
        (
            "update",
            None
            | Some("status")
            | Some("finalize")
            | Some("approval")
            | Some("ephemeralcontainers"),
            true,
        ) => update::update(&s, body).await,
        ("update", Some("scale"), true) => subresources::update_scale(&s, body).await,
        ("patch", None | Some("status") | Some("approval") | Some("ephemeralcontainers"), true) => {
            patch::patch(&s, body).await
        }
        ("patch", Some("scale"), true) => subresources::patch_scale(&s, body).await,
        ("delete", None, true) => delete::delete(&s, body).await,
        ("deletecollection", None, false) if !(s.reg.def.namespaced && s.namespace.is_none()) => {
            delete::collection(&s, body).await
        }
        _ => Err(not_allowed()),
    }
}

/// JSON and Kubernetes protobuf are served; an Accept header that rules both out is 406.
fn check_accept(headers: &HeaderMap, kind: Option<(&str, &str)>) -> Result<(), ApiError> {
    let Some(accept) = headers.get("accept").and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    if negotiate::acceptable(accept, kind) {
        Ok(())
    } else {
        Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: application/json, application/vnd.kubernetes.protobuf; got {accept}"
        )))
    }
}

pub async fn fallback(State(state): State<ApiState>, req: Request) -> Response {
    if req.method() == Method::GET {
        if let Some(r) = crate::ui::route(req.uri().path()) {
            return r.unwrap_or_else(|e| error_response(&e));
        }
        let path = req.uri().path().trim_end_matches('/');
        let accept = header(req.headers(), "accept");
        if path == "/openapi/v2" {
            return openapi::v2(accept);
        }
        if path == "/debug/watches" {
            return json_value(StatusCode::OK, &state.watches.to_json());
        }
        if let Some(issuer) = state.auth.issuer() {
            match path {
                "/.well-known/openid-configuration" => {
                    return json_value(StatusCode::OK, &issuer.openid_configuration())
                }
                "/openid/v1/jwks" => return json_value(StatusCode::OK, &issuer.jwks()),
                _ => {}
            }
        }
        let custom = state.registries.custom_defs();
        if path == "/api" || path == "/apis" {
            if let Some(v) = discovery::wants_aggregated(accept) {
                let body = serde_json::to_vec(&discovery::aggregated(path == "/api", v, &custom))
                    .unwrap_or_default();
                // The ETag changes with the content, so caching clients see new resources.
                let etag = format!("\"{:016x}\"", fnv(&body));
                if header(req.headers(), "if-none-match") == etag {
                    return (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response();
                }
                return (
                    StatusCode::OK,
                    [
                        ("content-type", discovery::aggregated_content_type(v)),
                        ("etag", etag),
                    ],
                    body,
                )
                    .into_response();
            }
        }
        if let Some(v) = discovery_doc(&state, req.uri().path(), &custom) {
            return json_value(StatusCode::OK, &v);
        }
    }
    match handle(state, req).await {
        Some(r) => r,
        None => error_response(&request::not_found_path()),
    }
}

/// FNV-1a over `bytes`: the discovery document's ETag.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The discovery document at `path`, if it is a discovery path.
fn discovery_doc(
    state: &ApiState,
    path: &str,
    custom: &[&'static rkube_api::ResourceDef],
) -> Option<Value> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["api"] => Some(discovery::core_versions()),
        ["api", v] => discovery::resource_list("", v, custom),
        ["apis"] => Some(discovery::group_list(custom)),
        ["apis", g] => discovery::group(g, custom),
        ["apis", g, v] => discovery::resource_list(g, v, custom),
        ["openapi", "v3"] => Some(openapi::index(custom)),
        ["openapi", "v3", "api", v] => openapi::group_version("", v),
        ["openapi", "v3", "apis", g, v] => openapi::group_version(g, v)
            .or_else(|| openapi::custom_group_version(&state.registries.custom_served(g, v))),
        _ => None,
    }
}
