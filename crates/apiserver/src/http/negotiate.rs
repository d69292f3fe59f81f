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
    for (media, plain) in media_types(accept) {
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

/// The Accept header's media types in order, each with whether it asks for the plain object
/// (no `as=` representation); those refused with `q=0` left out.
fn media_types(accept: &str) -> impl Iterator<Item = (&str, bool)> {
    accept.split(',').filter_map(|part| {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim();
        let (mut plain, mut refused) = (true, false);
        for p in params {
            let p = p.trim();
            // `as=Table`, `as=PartialObjectMetadata…` are other representations (JSON here).
            plain &= !p.starts_with("as=");
            refused |= p
                .strip_prefix("q=")
                .is_some_and(|q| q.parse::<f32>() == Ok(0.0));
        }
        (!refused).then_some((media, plain))
    })
}

/// Whether an Accept header names a representation this server can answer in: JSON (any
/// representation), or plain protobuf — of a kind that has a protobuf form (`kind` is the
/// resource's; `None` where it is not known before the handler runs).
pub fn acceptable(accept: &str, kind: Option<(&str, &str)>) -> bool {
    media_types(accept).any(|(media, plain)| {
        is_json(media)
            || (media == proto::CONTENT_TYPE
                && plain
                && kind.is_none_or(|(api_version, kind)| proto::encodable(api_version, kind)))
    })
}

/// Bodies larger than this are transcoded on a blocking thread, off the async workers.
const BLOCKING_ABOVE: usize = 256 * 1024;

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
    let encoded = if json.len() > BLOCKING_ABOVE {
        let body = json.clone();
        tokio::task::spawn_blocking(move || proto::encode_json(&body))
            .await
            .unwrap_or_else(|e| Err(proto::ProtoError::Invalid(e.to_string())))
    } else {
        proto::encode_json(&json)
    };
    match encoded {
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
        assert!(acceptable(pb, None));
        assert!(acceptable(pb, Some(("apps/v1", "Deployment"))));
        assert!(
            !acceptable(pb, Some(("example.com/v1", "Widget"))),
            "no protobuf form: 406 before any write"
        );
        assert!(acceptable(
            &format!("{pb}, application/json"),
            Some(("example.com/v1", "Widget"))
        ));
        assert!(acceptable(
            "application/json;as=Table;g=meta.k8s.io;v=v1",
            None
        ));
        assert!(!acceptable(
            &format!("{pb};as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
            None
        ));
        assert!(!acceptable("application/yaml", None));
        // q=0 refuses a type.
        assert_eq!(wanted(&format!("{pb};q=0, application/json")), Wire::Json);
        assert!(!acceptable(&format!("{pb};q=0"), None));
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
