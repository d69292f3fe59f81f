//! Reviews answered on the spot and never stored: `SelfSubjectAccessReview` (what `kubectl auth
//! can-i` sends) and `SelfSubjectRulesReview` (`kubectl auth can-i --list`). rkube authorizes
//! every request (upstream's AlwaysAllow), so every review is allowed.

use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::{resources, ApiError, ResourceDef};
use serde_json::{json, Value};

/// The review resource a path names, if any.
pub fn find(path: &str) -> Option<&'static ResourceDef> {
    let rest = path.strip_prefix("/apis/")?;
    resources::REVIEWS
        .iter()
        .find(|r| rest == format!("{}/{}/{}", r.group, r.version, r.plural))
}

/// Answers a review (`POST` only) with its `status` filled in.
pub fn answer(def: &ResourceDef, method: &str, mut review: Value) -> Result<Response, ApiError> {
    if method != "POST" {
        return Err(ApiError::method_not_supported(
            &def.group_resource(),
            &method.to_lowercase(),
        ));
    }
    if review
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != def.kind)
    {
        return Err(ApiError::bad_request(format!(
            "the body of the request is not a {}",
            def.kind
        )));
    }
    review["apiVersion"] = json!(def.api_version());
    review["kind"] = json!(def.kind);
    review["status"] = match def.kind {
        "SelfSubjectAccessReview" => json!({"allowed": true}),
        _ => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
    };
    Ok(super::json_value(StatusCode::CREATED, &review))
}
