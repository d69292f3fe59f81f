//! Reviews answered on the spot and never stored: `SelfSubjectAccessReview` (what `kubectl auth
//! can-i` sends) and `SelfSubjectRulesReview` (`kubectl auth can-i --list`), answered by the
//! `--authorization-mode` chain for the user who asks; `SubjectAccessReview` and
//! `LocalSubjectAccessReview`, the same question for the user the spec names (webhook
//! authorizers and `kubectl auth can-i --as` ask it); `TokenReview`, whom a bearer token stands
//! for; and `SelfSubjectReview` (`kubectl auth whoami`): who the authenticators made of the
//! request.

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
    let namespace = info
        .resource
        .as_ref()
        .and_then(|r| r.namespace.clone())
        .unwrap_or_default();
    answer(def, info.verb, &namespace, review, &state.auth, user).await
}

/// Answers a review (`create` only) with its `status` filled in.
pub async fn answer(
    def: &ResourceDef,
    verb: &str,
    namespace: &str,
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
        "selfsubjectaccessreviews" => access(auth, user, &review_attributes(def, &spec)?),
        "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let attrs = review_attributes(def, &spec)?;
            if def.namespaced && attrs.namespace != namespace {
                return Err(ApiError::invalid(
                    def.group,
                    def.kind,
                    "",
                    vec![rkube_api::StatusCause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: {:?}: must match metadata.namespace",
                            attrs.namespace
                        ),
                        field: "spec.resourceAttributes.namespace".into(),
                    }],
                ));
            }
            access(auth, &subject(def, &spec)?, &attrs)
        }
        "tokenreviews" => {
            let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
            let audiences: Vec<String> = spec
                .get("audiences")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            match auth.authenticate_token_for(token, &audiences).await {
                Some(u) => {
                    let mut info = json!({"username": u.name, "groups": u.groups});
                    if !u.uid.is_empty() {
                        info["uid"] = json!(u.uid);
                    }
                    json!({"authenticated": true, "user": info, "audiences": spec.get("audiences").cloned().unwrap_or(json!([]))})
                }
                None => json!({"user": {}, "error": "invalid bearer token"}),
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

/// An access review's answer for `user`.
fn access(auth: &Auth, user: &UserInfo, attrs: &Attributes) -> Value {
    match auth.authorize(user, attrs) {
        Ok(()) => json!({"allowed": true}),
        Err(why) if why.is_empty() => json!({"allowed": false}),
        Err(why) => json!({"allowed": false, "denied": true, "reason": why}),
    }
}

/// The user a (Local)SubjectAccessReview asks about: `spec.user` or `spec.groups`, one needed.
fn subject(def: &ResourceDef, spec: &Value) -> Result<UserInfo, ApiError> {
    let s = |k: &str| {
        spec.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if s("user").is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            def.group,
            def.kind,
            "",
            vec![rkube_api::StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: at least one of user or group must be specified".into(),
                field: "spec.user".into(),
            }],
        ));
    }
    Ok(UserInfo {
        name: s("user"),
        uid: s("uid"),
        groups,
    })
}

/// The attributes an access review asks about.
fn review_attributes(def: &ResourceDef, spec: &Value) -> Result<Attributes, ApiError> {
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
        def.group,
        def.kind,
        "",
        vec![rkube_api::StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
            field: "spec.resourceAttributes".into(),
        }],
    ))
}
