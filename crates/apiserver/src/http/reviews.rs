//! Reviews answered on the spot and never stored: `SelfSubjectAccessReview` (what `kubectl auth
//! can-i` sends) and `SelfSubjectRulesReview` (`kubectl auth can-i --list`), answered by the
//! `--authorization-mode` chain for the user who asks, and `SelfSubjectReview` (`kubectl auth
//! whoami`): who the authenticators made of the request.

use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::authz::{Attributes, UserInfo};
use rkube_api::{ApiError, ResourceDef};

use crate::auth::Auth;
use serde_json::{json, Value};

/// Serves a review request: its body decoded, then answered.
pub async fn serve(
    state: &super::ApiState,
    def: &ResourceDef,
    info: &crate::request::RequestInfo,
    user: &UserInfo,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let raw = super::body::read_body(req.into_body()).await?;
    let (_, review) = super::body::read_object(&content_type, raw)?;
    answer(def, info.verb, review, &state.auth, user)
}

/// Answers a review (`create` only) with its `status` filled in.
pub fn answer(
    def: &ResourceDef,
    verb: &str,
    mut review: Value,
    auth: &Auth,
    user: &UserInfo,
) -> Result<Response, ApiError> {
    if verb != "create" {
        return Err(ApiError::method_not_supported(&def.group_resource(), verb));
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
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    review["status"] = match def.plural {
        "selfsubjectreviews" => {
            let mut info = json!({"username": user.name, "groups": user.groups});
            if !user.uid.is_empty() {
                info["uid"] = json!(user.uid);
            }
            json!({ "userInfo": info })
        }
        "selfsubjectaccessreviews" => {
            let attrs = review_attributes(&spec)?;
            match auth.authorize(user, &attrs) {
                Ok(()) => json!({"allowed": true}),
                Err(why) if why.is_empty() => json!({"allowed": false}),
                Err(why) => json!({"allowed": false, "denied": true, "reason": why}),
            }
        }
        _ => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let (resource_rules, non_resource_rules) = auth.rules_for(user, ns);
            json!({
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource_rules,
                "incomplete": false,
            })
        }
    };
    Ok(super::json_value(StatusCode::CREATED, &review))
}

/// The attributes a SelfSubjectAccessReview asks about.
fn review_attributes(spec: &Value) -> Result<Attributes, ApiError> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(r) = spec.get("resourceAttributes") {
        return Ok(Attributes {
            verb: s(r, "verb"),
            resource_request: true,
            api_group: s(r, "group"),
            resource: s(r, "resource"),
            subresource: s(r, "subresource"),
            namespace: s(r, "namespace"),
            name: s(r, "name"),
            path: String::new(),
        });
    }
    if let Some(n) = spec.get("nonResourceAttributes") {
        return Ok(Attributes {
            verb: s(n, "verb"),
            path: s(n, "path"),
            ..Default::default()
        });
    }
    Err(ApiError::invalid(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "",
        vec![rkube_api::StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
            field: "spec.resourceAttributes".into(),
        }],
    ))
}
