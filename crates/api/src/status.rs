//! `ApiError`: every failure the apiserver reports, as upstream's `metav1.Status` (reasons,
//! codes, messages and details from apimachinery's `errors.go`). The apiserver converts it to
//! the wire in one place.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_after_seconds: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusListMeta {
    #[serde(rename = "continue", default, skip_serializing_if = "String::is_empty")]
    pub continue_: String,
}

/// `metav1.Status` in upstream's field order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub kind: String,
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub metadata: StatusListMeta,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    pub code: u16,
}

impl Status {
    pub fn success(code: u16, details: Option<StatusDetails>) -> Self {
        Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: StatusListMeta::default(),
            status: "Success".into(),
            message: String::new(),
            reason: String::new(),
            details,
            code,
        }
    }
}

/// A resource for error messages: `pods` or `deployments.apps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

pub const OPTIMISTIC_LOCK_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// One error the API can return; `status()` is its wire form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.status().message)]
pub struct ApiError(pub Box<Status>);

impl ApiError {
    pub fn status(&self) -> &Status {
        &self.0
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.0.message = message.into();
        self
    }

    pub fn code(&self) -> u16 {
        self.0.code
    }

    pub fn reason(&self) -> &str {
        &self.0.reason
    }

    /// A status error of any code and reason (what a webhook's denial carries).
    pub fn new(code: u16, reason: &str, message: String, details: Option<StatusDetails>) -> Self {
        ApiError(Box::new(Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: StatusListMeta::default(),
            status: "Failure".into(),
            message,
            reason: reason.into(),
            details,
            code,
        }))
    }

    fn named(gr: &GroupResource, name: &str) -> Option<StatusDetails> {
        Some(StatusDetails {
            name: name.into(),
            group: gr.group.clone(),
            kind: gr.resource.clone(),
            ..Default::default()
        })
    }

    pub fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{gr} \"{name}\" not found"),
            Self::named(gr, name),
        )
    }

    /// A server-side apply that conflicts with other field managers (upstream's
    /// `NewApplyConflict`): one `FieldManagerConflict` cause per field.
    pub fn apply_conflict(conflicts: &[crate::managed::Conflict]) -> Self {
        let causes = conflicts
            .iter()
            .map(|c| StatusCause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", c.manager),
                field: c.field.clone(),
            })
            .collect();
        Self::new(
            409,
            "Conflict",
            crate::managed::conflict_message(conflicts),
            Some(StatusDetails {
                causes,
                ..Default::default()
            }),
        )
    }

    pub fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{gr} \"{name}\" already exists"),
            Self::named(gr, name),
        )
    }

    /// `object is being deleted: pods "x" already exists`.
    pub fn already_exists_being_deleted(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("object is being deleted: {gr} \"{name}\" already exists"),
            Self::named(gr, name),
        )
    }

    pub fn conflict(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} \"{name}\": {why}"),
            Self::named(gr, name),
        )
    }

    /// 422 Invalid on `kind "name"`, with one cause per field error.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<StatusCause>) -> Self {
        let msgs: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = if msgs.len() == 1 {
            msgs[0].clone()
        } else {
            format!("[{}]", msgs.join(", "))
        };
        let details = StatusDetails {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            causes,
            ..Default::default()
        };
        Self::new(
            422,
            "Invalid",
            // Upstream's qualified kind: `Deployment.apps`, `Pod`.
            match group {
                "" => format!("{kind} \"{name}\" is invalid: {joined}"),
                g => format!("{kind}.{g} \"{name}\" is invalid: {joined}"),
            },
            Some(details),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    pub fn method_not_supported(gr: &GroupResource, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind {gr:?}",
                gr = gr.to_string()
            ),
            Some(StatusDetails {
                group: gr.group.clone(),
                kind: gr.resource.clone(),
                ..Default::default()
            }),
        )
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message.into(), None)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml; got {content_type}"), None)
    }

    /// 415 for a strategic merge patch of a custom resource (it has no patch strategies).
    pub fn strategic_merge_unsupported() -> Self {
        Self::new(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(), None)
    }

    pub fn request_entity_too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message.into(), None)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into(), None)
    }

    /// 410 Expired with a continue token to finish the list inconsistently.
    pub fn expired_continue(token: Option<String>) -> Self {
        let mut e = match &token {
            Some(_) => Self::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."),
            None => Self::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."),
        };
        if let Some(t) = token {
            e.0.metadata.continue_ = t;
        }
        e
    }

    /// 504 Timeout for a resourceVersion the cache has not reached.
    pub fn too_large_resource_version(requested: u64, current: u64, retry_after: i32) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    reason: "ResourceVersionTooLarge".into(),
                    message: "Too large resource version".into(),
                    field: String::new(),
                }],
                retry_after_seconds: retry_after,
                ..Default::default()
            }),
        )
    }

    pub fn timeout(message: impl Into<String>, retry_after: i32) -> Self {
        Self::new(
            504,
            "Timeout",
            message.into(),
            Some(StatusDetails {
                retry_after_seconds: retry_after,
                ..Default::default()
            }),
        )
    }

    /// 408: the request (its body) did not arrive in time.
    pub fn request_timeout(message: impl Into<String>) -> Self {
        Self::new(408, "Timeout", message.into(), None)
    }

    pub fn too_many_requests(message: impl Into<String>, retry_after: i32) -> Self {
        Self::new(
            429,
            "TooManyRequests",
            message.into(),
            Some(StatusDetails {
                retry_after_seconds: retry_after,
                ..Default::default()
            }),
        )
    }

    /// 500 with reason `ServerTimeout`: storage could not be reached.
    pub fn server_timeout(gr: &GroupResource, operation: &str, retry_after: i32) -> Self {
        Self::new(
            500,
            "ServerTimeout",
            format!("The {operation} operation against {gr} could not be completed at this time, please try again."),
            Some(StatusDetails { name: operation.into(), group: gr.group.clone(), kind: gr.resource.clone(), retry_after_seconds: retry_after, ..Default::default() }),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        let m = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {m}"),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    message: m,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        )
    }

    /// A plain 500 Failure with no reason (upstream's rendering of a non-Status error).
    pub fn unknown(message: impl Into<String>) -> Self {
        Self::new(500, "", message.into(), None)
    }

    pub fn forbidden(gr: &GroupResource, name: &str, why: &str) -> Self {
        let what = if name.is_empty() {
            gr.to_string()
        } else {
            format!("{gr} \"{name}\"")
        };
        Self::new(
            403,
            "Forbidden",
            format!("{what} is forbidden: {why}"),
            Self::named(gr, name),
        )
    }

    /// A 403 for a non-resource path (no resource in the details).
    pub fn forbidden_path(message: String) -> Self {
        Self::new(403, "Forbidden", message, Some(StatusDetails::default()))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into(), None)
    }
}

impl StatusCause {
    pub fn required(field: &str) -> Self {
        StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: field.into(),
        }
    }
    pub fn invalid(field: &str, value: &str, why: &str) -> Self {
        StatusCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value:?}: {why}"),
            field: field.into(),
        }
    }
    pub fn invalid_raw(field: &str, value_repr: &str, why: &str) -> Self {
        StatusCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value_repr}: {why}"),
            field: field.into(),
        }
    }
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        StatusCause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
            field: field.into(),
        }
    }
    pub fn forbidden(field: &str, why: &str) -> Self {
        StatusCause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {why}"),
            field: field.into(),
        }
    }
    pub fn duplicate(field: &str, value: &str) -> Self {
        StatusCause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {value:?}"),
            field: field.into(),
        }
    }
    pub fn not_found(field: &str, value: &str) -> Self {
        StatusCause {
            reason: "FieldValueNotFound".into(),
            message: format!("Not found: {value:?}"),
            field: field.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_matches_upstream_json() {
        let e = ApiError::conflict(
            &GroupResource::new("", "pods"),
            "nginx",
            OPTIMISTIC_LOCK_MSG,
        );
        assert_eq!(
            serde_json::to_string(e.status()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods \"nginx\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"nginx","kind":"pods"},"code":409}"#
        );
        let e = ApiError::conflict(
            &GroupResource::new("apps", "deployments"),
            "web",
            OPTIMISTIC_LOCK_MSG,
        );
        assert!(e
            .status()
            .message
            .starts_with("Operation cannot be fulfilled on deployments.apps \"web\""));
    }

    #[test]
    fn too_large_rv_shape() {
        let e = ApiError::too_large_resource_version(5000, 4000, 1);
        assert_eq!(
            serde_json::to_string(e.status()).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 5000, current: 4000","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#
        );
    }

    #[test]
    fn invalid_joins_causes() {
        let e = ApiError::invalid(
            "",
            "Pod",
            "nginx",
            vec![StatusCause::required("spec.containers")],
        );
        assert_eq!(
            e.status().message,
            "Pod \"nginx\" is invalid: spec.containers: Required value"
        );
        let e = ApiError::invalid(
            "",
            "Pod",
            "x",
            vec![StatusCause::required("a"), StatusCause::required("b")],
        );
        assert_eq!(
            e.status().message,
            "Pod \"x\" is invalid: [a: Required value, b: Required value]"
        );
    }
}
