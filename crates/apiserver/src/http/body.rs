//! Request bodies: read under the body limits (size, and the time the upload may take), then
//! decoded by one pipeline whatever their media type — JSON, Kubernetes protobuf, the YAML of
//! server-side apply, patches — into a value within `rkube_api::bounds`, with duplicate and
//! undeclared fields found for `fieldValidation`.

use axum::body::Body;
use bytes::Bytes;
use rkube_api::decode::{self, MAX_REPORTED};
use rkube_api::{ApiError, Query};
use serde_json::Value;

use crate::registry::Registry;

/// Request bodies above this are refused (upstream's 3 MiB limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Reads a whole body under the front's body limits: at most `MAX_BODY` bytes, in time (a
/// slow upload is a 408, not a held connection).
pub async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    use rkube_daemon::serve::BodyError;
    rkube_daemon::serve::read_body(body, MAX_BODY)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => {
                ApiError::request_entity_too_large("Request entity too large: limit is 3145728")
            }
            BodyError::Timeout => {
                ApiError::request_timeout("the request body did not arrive in time")
            }
            BodyError::Broken(e) => ApiError::bad_request(format!("reading the request body: {e}")),
        })
}

/// `application/json; charset=utf-8` → `application/json`.
pub fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

fn undecodable(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
}

/// A JSON body that must be an object.
pub fn json_object(raw: &[u8]) -> Result<Value, ApiError> {
    let v = decode::json(raw).map_err(undecodable)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

/// A create/update body as JSON bytes and the object they hold, whatever media type it came in:
/// JSON, or Kubernetes protobuf (what client-go's typed clients, and so several kubectl
/// commands, send).
pub fn read_object(content_type: &str, raw: Bytes) -> Result<(Bytes, Value), ApiError> {
    match media_type(content_type) {
        rkube_api::proto::CONTENT_TYPE => {
            let v = rkube_api::proto::decode(&raw).map_err(|e| match e {
                rkube_api::proto::ProtoError::UnknownType(_) => {
                    ApiError::unsupported_media_type(content_type)
                }
                e => undecodable(e),
            })?;
            rkube_api::bounds::check(&v).map_err(|c| undecodable(c.message))?;
            let json = serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?;
            Ok((Bytes::from(json), v))
        }
        "" | "*/*" => json_object(&raw).map(|v| (raw, v)),
        m if m.ends_with("json") => json_object(&raw).map(|v| (raw, v)),
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

/// A patch body: JSON for merge, JSON and strategic patches; YAML (or JSON) for apply.
pub fn read_patch(apply: bool, raw: &[u8]) -> Result<Value, ApiError> {
    if !apply {
        return decode::json(raw)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")));
    }
    // JSON (what kubectl sends) is decoded as JSON, and its limits reported as such; only
    // what is not JSON is read as YAML.
    let (v, format) = match serde_json::from_slice::<Value>(raw) {
        Ok(v) => (v, "patch"),
        // JSON's own limits, which YAML would misread (a too-large number as null).
        Err(e)
            if ["recursion limit", "number out of range"]
                .iter()
                .any(|m| e.to_string().contains(m)) =>
        {
            return Err(ApiError::bad_request(format!("error decoding patch: {e}")))
        }
        Err(_) => {
            let v = serde_yaml::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            (v, "YAML")
        }
    };
    rkube_api::bounds::check(&v)
        .map_err(|c| ApiError::bad_request(format!("error decoding {format}: {}", c.message)))?;
    Ok(v)
}

/// A DELETE's optional DeleteOptions body, as JSON.
pub fn delete_body(content_type: &str, raw: Bytes) -> Result<Bytes, ApiError> {
    if raw.is_empty() {
        return Ok(raw);
    }
    Ok(read_object(content_type, raw)?.0)
}

/// `fieldValidation`: what to do about fields the type does not declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

impl FieldValidation {
    pub fn from_query(q: &Query) -> Result<Self, ApiError> {
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
    /// body (`raw` as sent, `body` as decoded); at most `MAX_REPORTED` of each.
    pub fn check(self, reg: &Registry, raw: &[u8], body: &Value) -> Result<Vec<String>, ApiError> {
        if self == FieldValidation::Ignore {
            return Ok(Vec::new());
        }
        let mut msgs: Vec<String> = reg
            .unknown_fields(body, MAX_REPORTED)
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        msgs.extend(
            decode::duplicate_fields(raw, MAX_REPORTED)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_bodies_are_json_first_and_json_limits_are_not_misread_as_yaml() {
        let yaml = read_patch(true, b"spec:\n  replicas: 2\n").unwrap();
        assert_eq!(yaml["spec"]["replicas"], 2);
        let json = read_patch(true, br#"{"spec": {"replicas": 3}}"#).unwrap();
        assert_eq!(json["spec"]["replicas"], 3);
        // A number JSON cannot hold is an error, not YAML's null.
        let e = read_patch(true, br#"{"spec":{"replicas":1e400}}"#).unwrap_err();
        assert!(e.to_string().contains("error decoding patch"), "{e}");
        // Too deep for the JSON reader: a JSON error as well.
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let e = read_patch(true, deep.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("error decoding patch"), "{e}");
    }
}
