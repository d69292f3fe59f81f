//! Parsing request paths into what they address (upstream's RequestInfo): group, version,
//! resource, namespace, name, subresource, and the legacy `/watch/` prefix.

use rkube_api::{resources, ApiError, ResourceDef};

#[derive(Debug)]
pub struct RequestInfo {
    pub def: &'static ResourceDef,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub legacy_watch: bool,
}

pub fn not_found_path() -> ApiError {
    let mut e = ApiError::not_found(&rkube_api::GroupResource::new("", ""), "");
    e.0.message = "the server could not find the requested resource".into();
    e.0.details = Some(Default::default());
    e
}

/// `None` for paths that are not resource paths (discovery, health, …).
pub fn parse(path: &str) -> Result<Option<RequestInfo>, ApiError> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Ok(None),
    };
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let find = |plural: &str| resources::find(group, version, plural).ok_or_else(not_found_path);
    let info = match rest {
        ["namespaces", ns, resource, tail @ ..]
            if !is_namespace_subresource(resource) || !tail.is_empty() =>
        {
            let def = find(resource)?;
            if !def.namespaced {
                return Err(not_found_path());
            }
            RequestInfo {
                def,
                namespace: Some(ns.to_string()),
                name: tail.first().map(|s| s.to_string()),
                subresource: tail.get(1).map(|s| s.to_string()),
                legacy_watch,
            }
        }
        [resource, tail @ ..] => {
            let def = find(resource)?;
            RequestInfo {
                def,
                namespace: None,
                name: tail.first().map(|s| s.to_string()),
                subresource: tail.get(1).map(|s| s.to_string()),
                legacy_watch,
            }
        }
        [] => return Err(not_found_path()),
    };
    if let Some(sub) = &info.subresource {
        if !info.def.has_subresource(sub) {
            return Err(not_found_path());
        }
    }
    if let Some(name) = &info.name {
        rkube_api::validation::path_segment_name(name)
            .map_err(|e| ApiError::bad_request(format!("Name parameter invalid: {name:?}: {e}")))?;
    }
    Ok(Some(info))
}

fn is_namespace_subresource(s: &str) -> bool {
    matches!(s, "status" | "finalize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let i = parse("/api/v1/namespaces/default/pods/nginx/status")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                i.def.plural,
                i.namespace.as_deref(),
                i.name.as_deref(),
                i.subresource.as_deref()
            ),
            ("pods", Some("default"), Some("nginx"), Some("status"))
        );
        let i = parse("/api/v1/namespaces/kube-system").unwrap().unwrap();
        assert_eq!(
            (i.def.plural, i.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
        let i = parse("/api/v1/namespaces/x/finalize").unwrap().unwrap();
        assert_eq!(
            (i.def.plural, i.name.as_deref(), i.subresource.as_deref()),
            ("namespaces", Some("x"), Some("finalize"))
        );
        let i = parse("/apis/apps/v1/watch/namespaces/default/deployments")
            .unwrap()
            .unwrap();
        assert!(i.legacy_watch);
        assert_eq!(i.def.kind, "Deployment");
        let i = parse("/api/v1/pods").unwrap().unwrap();
        assert!(i.namespace.is_none());
        assert!(parse("/api/v1/namespaces/default/widgets").is_err());
        assert!(parse("/api/v1/namespaces/default/pods/x/bogus").is_err());
        assert!(parse("/healthz").unwrap().is_none());
        assert!(parse("/api").unwrap().is_none());
    }
}
