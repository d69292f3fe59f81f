//! AdmissionReview (admission.k8s.io/v1, or v1beta1 for webhooks that only speak it): the
//! request a webhook gets, and what its response means — allowed or denied with its status,
//! a base64 JSONPatch for mutating webhooks, warnings. Pure.

use serde_json::{json, Value};

/// What the request is about.
pub struct Input<'a> {
    pub uid: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub name: &'a str,
    pub namespace: &'a str,
    pub operation: &'a str,
    pub user: &'a rkube_api::authz::UserInfo,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
}

/// The review version a webhook understands (`admissionReviewVersions`, v1 preferred).
pub fn version_for(hook_versions: &[String]) -> Option<&'static str> {
    if hook_versions.is_empty() {
        return Some("v1");
    }
    hook_versions.iter().find_map(|h| match h.as_str() {
        "v1" => Some("v1"),
        "v1beta1" => Some("v1beta1"),
        _ => None,
    })
}

/// The AdmissionReview sent.
pub fn request(i: &Input, review_version: &str) -> Value {
    let options_kind = match i.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        "DELETE" => "DeleteOptions",
        _ => "",
    };
    let gvk = json!({"group": i.group, "version": i.version, "kind": i.kind});
    let gvr = json!({"group": i.group, "version": i.version, "resource": i.resource});
    let mut req = json!({
        "uid": i.uid,
        "kind": gvk, "resource": gvr,
        "requestKind": gvk, "requestResource": gvr,
        "name": i.name,
        "namespace": i.namespace,
        "operation": i.operation,
        "userInfo": {"username": i.user.name, "uid": i.user.uid, "groups": i.user.groups},
        "object": i.object.cloned().unwrap_or(Value::Null),
        "oldObject": i.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": i.dry_run,
    });
    if !options_kind.is_empty() {
        req["options"] = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    }
    if let Some(sub) = i.subresource {
        req["subResource"] = json!(sub);
        req["requestSubResource"] = json!(sub);
    }
    if i.namespace.is_empty() {
        req.as_object_mut().map(|m| m.remove("namespace"));
    }
    json!({"apiVersion": format!("admission.k8s.io/{review_version}"), "kind": "AdmissionReview", "request": req})
}

/// What a webhook answered.
#[derive(Debug, Default)]
pub struct Outcome {
    pub allowed: bool,
    /// The denial's status (code, message, reason), as the webhook gave it.
    pub status: Value,
    /// A JSONPatch to apply (mutating webhooks).
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
    /// `auditAnnotations`, key → value.
    pub annotations: Vec<(String, String)>,
}

/// Reads a response body; the error is upstream's "received invalid webhook response".
pub fn response(body: &[u8], uid: &str, review_version: &str) -> Result<Outcome, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    let resp = v
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("received invalid webhook response: the response is missing")?;
    if review_version == "v1" {
        let want = format!("admission.k8s.io/{review_version}");
        if v.get("apiVersion").and_then(Value::as_str) != Some(want.as_str())
            || v.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
        {
            return Err(format!(
                "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
                v.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                v.get("kind").and_then(Value::as_str).unwrap_or("")
            ));
        }
        let got = resp.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!(
                "received invalid webhook response: expected response.uid=\"{uid}\", got \"{got}\""
            ));
        }
    }
    let allowed = resp
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let patch = match resp.get("patch").and_then(Value::as_str) {
        Some(p) if !p.is_empty() => {
            let pt = resp.get("patchType").and_then(Value::as_str).unwrap_or("");
            if review_version == "v1" && pt != "JSONPatch" {
                return Err(format!(
                    "received invalid webhook response: webhook returned response.patch but not response.patchType (\"JSONPatch\" expected, got {pt:?})"
                ));
            }
            use base64::Engine;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| {
                    format!("received invalid webhook response: the patch is not base64: {e}")
                })?;
            Some(serde_json::from_slice(&raw).map_err(|e| {
                format!("received invalid webhook response: the patch is not JSON: {e}")
            })?)
        }
        _ => None,
    };
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .take(64)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let annotations = resp
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .take(64)
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Outcome {
        annotations,
        allowed,
        status: resp.get("status").cloned().unwrap_or(Value::Null),
        patch,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn reviews_round_trip() {
        let user = rkube_api::authz::UserInfo {
            name: "alice".into(),
            uid: "".into(),
            groups: vec!["g".into()],
        };
        let obj = json!({"metadata": {"name": "p"}});
        let i = Input {
            uid: "u1",
            group: "",
            version: "v1",
            kind: "Pod",
            resource: "pods",
            subresource: None,
            name: "p",
            namespace: "default",
            operation: "CREATE",
            user: &user,
            object: Some(&obj),
            old_object: None,
            dry_run: false,
        };
        let r = request(&i, "v1");
        assert_eq!(r["request"]["kind"]["kind"], "Pod");
        assert_eq!(r["request"]["options"]["kind"], "CreateOptions");
        assert_eq!(r["request"]["userInfo"]["username"], "alice");
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["careful"]}});
        let o = response(body.to_string().as_bytes(), "u1", "v1").unwrap();
        assert!(o.allowed);
        assert_eq!(o.patch.unwrap()[0]["op"], "add");
        assert_eq!(o.warnings, ["careful"]);
        let wrong = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": true}});
        assert!(response(wrong.to_string().as_bytes(), "u1", "v1")
            .unwrap_err()
            .contains("expected response.uid"));
        assert_eq!(version_for(&["v1beta1".into()]), Some("v1beta1"));
    }
}
