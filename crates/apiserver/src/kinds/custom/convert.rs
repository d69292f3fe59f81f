//! Conversion between a custom resource's versions (upstream's
//! `apiextensions-apiserver/pkg/apiserver/conversion`): `None` changes `apiVersion` only;
//! `Webhook` sends a ConversionReview (apiextensions.k8s.io/v1) to the CRD's conversion
//! webhook and checks what comes back — as many objects, in the desired version, with their
//! uid, name and namespace unchanged, and only labels and annotations changed in metadata.
//! The webhook is called through `crate::callout`, as admission webhooks are; the strategy's
//! conversion hooks are synchronous, so the call blocks its (multi-threaded runtime's)
//! worker in place, within the webhook's timeout.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::callout::{Caller, Target};

pub enum Conversion {
    None,
    Webhook {
        target: Target,
        ca_bundle: Option<Vec<u8>>,
        caller: Option<Arc<Caller>>,
    },
}

/// Upstream's conversion webhook timeout.
const TIMEOUT: Duration = Duration::from_secs(30);

impl Conversion {
    /// The conversion a CRD asks for.
    pub fn of(crd: &Value, caller: Option<Arc<Caller>>) -> Conversion {
        if crd
            .pointer("/spec/conversion/strategy")
            .and_then(Value::as_str)
            != Some("Webhook")
        {
            return Conversion::None;
        }
        let cc = crd
            .pointer("/spec/conversion/webhook/clientConfig")
            .cloned()
            .unwrap_or(Value::Null);
        let target = Target::of(&cc).unwrap_or(Target::Url(String::new()));
        let ca_bundle = crate::callout::ca_bundle(&cc);
        Conversion::Webhook {
            target,
            ca_bundle,
            caller,
        }
    }

    /// `obj` in `api_version` (`group/version`).
    pub fn convert(&self, obj: &mut Value, api_version: &str) -> Result<(), String> {
        if obj.get("apiVersion").and_then(Value::as_str) == Some(api_version) {
            return Ok(());
        }
        match self {
            Conversion::None => {
                obj["apiVersion"] = json!(api_version);
                Ok(())
            }
            Conversion::Webhook {
                target,
                ca_bundle,
                caller,
            } => {
                let caller = caller.as_ref().ok_or("no webhook client")?;
                let handle = tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?;
                if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
                    return Err("conversion webhooks need the multi-threaded runtime".into());
                }
                let uid = format!("{:032x}", rand::random::<u128>());
                let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "request": {"uid": uid, "desiredAPIVersion": api_version, "objects": [obj.clone()]}});
                let body = tokio::task::block_in_place(|| {
                    handle.block_on(caller.post(target, ca_bundle.as_deref(), TIMEOUT, &review))
                })?;
                let converted = check(&body, &uid, api_version, obj)?;
                *obj = converted;
                Ok(())
            }
        }
    }
}

/// The one converted object of a ConversionReview response, checked as upstream checks it.
fn check(body: &[u8], uid: &str, api_version: &str, original: &Value) -> Result<Value, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid conversion response: {e}"))?;
    let resp = v
        .get("response")
        .ok_or("invalid conversion response: no response")?;
    if resp.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(format!(
            "expected response.uid={uid:?}, got {:?}",
            resp.get("uid")
        ));
    }
    if resp.pointer("/result/status").and_then(Value::as_str) != Some("Success") {
        return Err(format!(
            "conversion webhook failed: {}",
            resp.pointer("/result/message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
        ));
    }
    let objects = resp
        .get("convertedObjects")
        .and_then(Value::as_array)
        .ok_or("invalid conversion response: no convertedObjects")?;
    let [converted] = objects.as_slice() else {
        return Err(format!(
            "expected 1 converted objects, got {}",
            objects.len()
        ));
    };
    if converted.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return Err(format!(
            "invalid converted object: apiVersion {:?}, expected {api_version:?}",
            converted.get("apiVersion")
        ));
    }
    for f in ["uid", "name", "namespace"] {
        if converted.pointer(&format!("/metadata/{f}"))
            != original.pointer(&format!("/metadata/{f}"))
        {
            return Err(format!("invalid converted object: metadata.{f} changed"));
        }
    }
    // Only labels and annotations of the metadata may change; the rest is the original's.
    let mut out = converted.clone();
    let mut meta = original.get("metadata").cloned().unwrap_or(json!({}));
    for f in ["labels", "annotations"] {
        match converted.pointer(&format!("/metadata/{f}")) {
            Some(v) => meta[f] = v.clone(),
            None => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
    out["metadata"] = meta;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converted_objects_are_checked() {
        let orig = json!({"apiVersion": "x/v1", "metadata": {"name": "a", "uid": "u", "resourceVersion": "5"}, "spec": {"size": 1}});
        let ok = json!({"response": {"uid": "r", "result": {"status": "Success"},
            "convertedObjects": [{"apiVersion": "x/v2", "metadata": {"name": "a", "uid": "u", "labels": {"l": "1"}, "resourceVersion": "9"}, "spec": {"count": 1}}]}});
        let out = check(ok.to_string().as_bytes(), "r", "x/v2", &orig).unwrap();
        assert_eq!(out["spec"]["count"], 1);
        assert_eq!(
            out["metadata"]["resourceVersion"], "5",
            "only labels and annotations change"
        );
        assert_eq!(out["metadata"]["labels"]["l"], "1");
        let renamed = json!({"response": {"uid": "r", "result": {"status": "Success"},
            "convertedObjects": [{"apiVersion": "x/v2", "metadata": {"name": "b", "uid": "u"}}]}});
        assert!(check(renamed.to_string().as_bytes(), "r", "x/v2", &orig)
            .unwrap_err()
            .contains("metadata.name"));
        let failed =
            json!({"response": {"uid": "r", "result": {"status": "Failure", "message": "nope"}}});
        assert!(check(failed.to_string().as_bytes(), "r", "x/v2", &orig)
            .unwrap_err()
            .contains("nope"));
        let mut none = orig.clone();
        Conversion::None.convert(&mut none, "x/v2").unwrap();
        assert_eq!(none["apiVersion"], "x/v2");
    }
}
