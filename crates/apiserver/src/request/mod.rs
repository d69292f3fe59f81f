//! The one parse of a request (upstream's `RequestInfo`): method, path and query become the
//! verb, the resource coordinates and the strictly parsed query that authentication,
//! authorization, flow control, audit and the handler all read. Nothing later re-parses the
//! path or the query, so no two stages can disagree about what a request is (a `watch` that
//! RBAC saw as a `list`, a LIST that flow control saw as a watch).
//!
//! Parsing is syntactic, as upstream's: an unknown resource still has a verb and attributes
//! (so authorization answers 403 before the handler answers 404).

use axum::http::{Method, Uri};
use rkube_api::authz::Attributes;
use rkube_api::{resources, ApiError, Query, ResourceDef};

/// Finds a custom resource by group, version and plural.
pub type Custom<'a> = dyn Fn(&str, &str, &str) -> Option<&'static ResourceDef> + 'a;

/// What a request is, parsed once.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    /// Upstream's verb: get, list, watch, create, update, patch, delete, deletecollection for
    /// resource requests; the lower-cased method for the rest.
    pub verb: &'static str,
    pub path: String,
    pub query: Query,
    /// `None` for non-resource requests (discovery, health, OpenAPI, `/version`).
    pub resource: Option<ResourceInfo>,
}

/// The resource a request addresses.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    /// The plural as written in the path.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The served resource, if any (a review resource too).
    pub def: Option<&'static ResourceDef>,
    /// The path had upstream's legacy `/watch/` prefix.
    pub legacy_watch: bool,
    /// A list or watch selecting one object by `metadata.name` (what upstream authorizes as
    /// that object's name; the handler still lists).
    pub selected_name: Option<String>,
}

impl ResourceInfo {
    /// The served resource, or the 404 upstream answers for a path it does not serve.
    pub fn def(&self) -> Result<&'static ResourceDef, ApiError> {
        self.def.ok_or_else(not_found_path)
    }

    /// A review (`SelfSubjectAccessReview`, …): answered on the spot, never stored.
    pub fn is_review(&self) -> bool {
        self.def.is_some_and(|d| d.storage_prefix.is_empty())
    }
}

/// The 404 for a path that is not served.
pub fn not_found_path() -> ApiError {
    let mut e = ApiError::not_found(&rkube_api::GroupResource::new("", ""), "");
    e.0.message = "the server could not find the requested resource".into();
    e.0.details = Some(Default::default());
    e
}

/// Subresources of a namespace itself (`/api/v1/namespaces/x/status`), not namespaced
/// resources called `status`.
fn is_namespace_subresource(s: &str) -> bool {
    matches!(s, "status" | "finalize")
}

impl RequestInfo {
    /// Parses a request line. Only the query can be refused here (a repeated key or an
    /// oversized query: 400); a path that is not served parses as what it says.
    pub fn parse(method: &Method, uri: &Uri) -> Result<RequestInfo, ApiError> {
        Self::parse_with(method, uri, &|_, _, _| None)
    }

    /// Parses a request line, resolving resources the built-in tables lack with `custom`
    /// (group, version, plural → the custom resource served there).
    pub fn parse_with(
        method: &Method,
        uri: &Uri,
        custom: &Custom,
    ) -> Result<RequestInfo, ApiError> {
        let query = Query::parse(uri.query().unwrap_or(""))?;
        let path = uri.path().to_string();
        let resource = parse_resource_path(&path, custom);
        let verb = match &resource {
            Some(r) => resource_verb(method, r, &query),
            None => non_resource_verb(method),
        };
        let mut info = RequestInfo {
            verb,
            path,
            query,
            resource,
        };
        if let Some(r) = &mut info.resource {
            if matches!(verb, "list" | "watch") {
                // `kubectl get pod x -w` lists and watches with metadata.name=x: authorized as
                // that object (RBAC resourceNames), as upstream.
                r.selected_name = info
                    .query
                    .get("fieldSelector")
                    .and_then(|s| rkube_api::FieldSelector::parse(s).ok())
                    .and_then(|s| s.exact("metadata.name").map(String::from))
                    .filter(|n| rkube_api::validation::path_segment_name(n).is_ok());
            }
        }
        Ok(info)
    }

    /// The attributes authorizers, flow control and audit see.
    pub fn attributes(&self) -> Attributes {
        match &self.resource {
            Some(r) => Attributes {
                verb: self.verb.into(),
                resource_request: true,
                api_group: r.group.clone(),
                resource: r.resource.clone(),
                subresource: r.subresource.clone().unwrap_or_default(),
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r
                    .name
                    .clone()
                    .or_else(|| r.selected_name.clone())
                    .unwrap_or_default(),
                path: self.path.clone(),
            },
            None => Attributes {
                verb: self.verb.into(),
                resource_request: false,
                path: self.path.clone(),
                ..Default::default()
            },
        }
    }

    /// Streams for a long time, so it holds no seat (upstream's `BasicLongRunningRequestCheck`:
    /// watches, and a pod's `log`, `exec`, `attach` and `portforward`).
    pub fn long_running(&self) -> bool {
        self.verb == "watch"
            || self.resource.as_ref().is_some_and(|r| {
                r.group.is_empty()
                    && r.resource == "pods"
                    && matches!(
                        r.subresource.as_deref(),
                        Some("log" | "exec" | "attach" | "portforward")
                    )
            })
    }

    /// A health endpoint: served outside the request limits.
    pub fn is_health(&self) -> bool {
        self.resource.is_none()
            && matches!(
                self.path.trim_end_matches('/'),
                "/healthz" | "/readyz" | "/livez"
            )
            || self.path.starts_with("/healthz/")
            || self.path.starts_with("/readyz/")
            || self.path.starts_with("/livez/")
    }
}

/// `/api/v1/...` and `/apis/<group>/<version>/...` with at least a resource segment.
fn parse_resource_path(path: &str, custom: &Custom) -> Option<ResourceInfo> {
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    let (group, version) = match segs.next()? {
        "api" => ("", segs.next()?),
        "apis" => (segs.next()?, segs.next()?),
        _ => return None,
    };
    let mut rest: Vec<&str> = segs.collect();
    if rest.is_empty() {
        return None;
    }
    let legacy_watch = rest[0] == "watch";
    if legacy_watch {
        rest.remove(0);
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() >= 2 {
        // `namespaces/<ns>/<resource>/...` unless the third segment is a subresource of the
        // namespace itself.
        if rest.len() >= 3 && !is_namespace_subresource(rest[2]) {
            namespace = Some(rest[1].to_string());
            rest.drain(..2);
        }
    }
    let resource = (*rest.first()?).to_string();
    let name = rest.get(1).map(|s| s.to_string());
    let subresource = rest.get(2).map(|s| s.to_string());
    // More segments than resource/name/subresource: nothing served lives there.
    let def = if rest.len() > 3 {
        None
    } else {
        resolve(
            group,
            version,
            &resource,
            namespace.is_some(),
            subresource.as_deref(),
            custom,
        )
    };
    Some(ResourceInfo {
        group: group.to_string(),
        version: version.to_string(),
        resource,
        subresource,
        namespace,
        name,
        def,
        legacy_watch,
        selected_name: None,
    })
}

/// The served resource a path names, if it is served with that scope and subresource.
fn resolve(
    group: &str,
    version: &str,
    plural: &str,
    namespaced_path: bool,
    subresource: Option<&str>,
    custom: &Custom,
) -> Option<&'static ResourceDef> {
    let def = resources::find(group, version, plural)
        .or_else(|| {
            resources::REVIEWS
                .iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
        })
        .or_else(|| custom(group, version, plural))?;
    if namespaced_path && !def.namespaced {
        return None;
    }
    if let Some(sub) = subresource {
        if !def.has_subresource(sub) {
            return None;
        }
    }
    Some(def)
}

fn resource_verb(method: &Method, r: &ResourceInfo, q: &Query) -> &'static str {
    // A streaming upgrade is a `create` whatever its method: a WebSocket's GET may not exec
    // for someone who may only read (upstream's AuthorizePodWebsocketUpgradeCreatePermission).
    let streaming = r.group.is_empty()
        && r.resource == "pods"
        && matches!(
            r.subresource.as_deref(),
            Some("exec" | "attach" | "portforward")
        );
    if streaming && matches!(method.as_str(), "GET" | "POST") {
        return "create";
    }
    match method.as_str() {
        "GET" | "HEAD" if r.legacy_watch => "watch",
        "GET" | "HEAD" if r.name.is_some() => "get",
        "GET" | "HEAD" if q.flag("watch") => "watch",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if r.name.is_some() => "delete",
        "DELETE" => "deletecollection",
        _ => "",
    }
}

fn non_resource_verb(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "get",
        "HEAD" => "head",
        "POST" => "post",
        "PUT" => "put",
        "PATCH" => "patch",
        "DELETE" => "delete",
        "OPTIONS" => "options",
        _ => "",
    }
}

#[cfg(test)]
mod tests;
