//! Which encoding a response goes out in: JSON, or Kubernetes protobuf for a client whose
//! Accept header prefers it (client-go's typed clients send `application/vnd.kubernetes.protobuf,
//! application/json`). Handlers answer JSON; a response a client wants as protobuf is encoded
//! here, in one place, from that JSON, for every kind with a protobuf form (built-in kinds, their
//! lists, Status). Custom resources have none and stay JSON, as upstream serves them.

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use rkube_api::{proto, ApiError};

/// What the client asked for, from its Accept header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Json,
    /// Protobuf first; `json_too` when a JSON type is acceptable as well (the fallback for
    /// kinds with no protobuf form).
    Protobuf {
        json_too: bool,
    },
}

/// The media types in the client's order (q-values are not weighed, as most clients list
/// their preference first): the first one served decides.
pub fn wanted(accept: &str) -> Wire {
    let mut protobuf = false;
    for part in accept.split(',') {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim();
        // `as=Table`, `as=PartialObjectMetadata…` are other representations (JSON here).
        let plain = !params.any(|p| p.trim().starts_with("as="));
        if media == proto::CONTENT_TYPE && plain {
            protobuf = true;
        } else if is_json(media) {
            return match protobuf {
                true => Wire::Protobuf { json_too: true },
                false => Wire::Json,
            };
        }
    }
    match protobuf {
        true => Wire::Protobuf { json_too: false },
        false => Wire::Json,
    }
}

fn is_json(media: &str) -> bool {
    media.is_empty() || media == "*/*" || media == "application/*" || media.ends_with("json")
}

/// Whether an Accept header names a representation this server can answer in.
pub fn acceptable(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or("").trim();
        is_json(media) || media == proto::CONTENT_TYPE
    })
}

/// The handler's JSON response, as the client wants it.
pub async fn respond(resp: Response, wire: Wire) -> Response {
    let Wire::Protobuf { json_too } = wire else {
        return resp;
    };
    let is_json = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(json) = axum::body::to_bytes(body, usize::MAX).await else {
        return super::error_response(&ApiError::internal("the response body could not be read"));
    };
    match proto::encode_json(&json) {
        Ok(pb) => {
            parts.headers.insert(
                "content-type",
                HeaderValue::from_static(proto::CONTENT_TYPE),
            );
            parts.headers.remove("content-length");
            Response::from_parts(parts, axum::body::Body::from(pb))
        }
        Err(e) if json_too => {
            tracing::debug!(error = %e, "answered JSON: no protobuf form");
            Response::from_parts(parts, axum::body::Body::from(json))
        }
        Err(e) if parts.status.is_success() => super::error_response(&ApiError::not_acceptable(
            format!("only the following media types are accepted: application/json: {e}"),
        )),
        // An error the client cannot read as protobuf: its JSON Status, still an error.
        Err(_) => (parts.status, parts.headers, json).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn the_first_served_type_wins() {
        let pb = "application/vnd.kubernetes.protobuf";
        assert_eq!(
            wanted(&format!("{pb}, application/json")),
            Wire::Protobuf { json_too: true }
        );
        assert_eq!(wanted(pb), Wire::Protobuf { json_too: false });
        assert_eq!(wanted(&format!("application/json, {pb}")), Wire::Json);
        assert_eq!(wanted(""), Wire::Json);
        assert_eq!(wanted("*/*"), Wire::Json);
        // Another representation in protobuf is not the plain object.
        assert_eq!(
            wanted(&format!(
                "{pb};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
            )),
            Wire::Json
        );
        assert!(acceptable(pb));
        assert!(acceptable("application/json;as=Table;g=meta.k8s.io;v=v1"));
        assert!(!acceptable("application/yaml"));
    }

    #[tokio::test]
    async fn objects_are_encoded_and_kinds_without_a_form_stay_json() {
        let json = |v: serde_json::Value| super::super::json_value(StatusCode::OK, &v);
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        let r = respond(json(cm.clone()), Wire::Protobuf { json_too: true }).await;
        assert_eq!(r.headers()["content-type"], proto::CONTENT_TYPE);
        let body = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(proto::decode(&body).unwrap(), cm);

        let widget = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let r = respond(json(widget.clone()), Wire::Protobuf { json_too: true }).await;
        assert_eq!(r.headers()["content-type"], "application/json");
        let r = respond(json(widget), Wire::Protobuf { json_too: false }).await;
        assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);

        let r = respond(json(cm), Wire::Json).await;
        assert_eq!(r.headers()["content-type"], "application/json");
    }
}
