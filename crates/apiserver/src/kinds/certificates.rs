//! CertificateSigningRequests (`pkg/registry/certificates`): the request must be a PEM
//! CERTIFICATE REQUEST and name a signer; conditions change only through `approval`, the
//! certificate only through `status`; kubectl's Condition column.

use rkube_api::k8s::api::certificates::v1 as certificates;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, s, Column};
use super::{reset_status, Strategy};

pub struct CertificateSigningRequest;

impl Strategy for CertificateSigningRequest {
    crate::typed_kind!(certificates::CertificateSigningRequest);

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
    }

    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        // `status` may set the certificate and conditions other than approval's own.
        let certificate = new.pointer("/status/certificate").cloned();
        let conditions = new.pointer("/status/conditions").cloned();
        let mut merged = old.clone();
        if let Some(c) = certificate {
            super::set_at(&mut merged, "/status/certificate", c);
        }
        if let Some(c) = conditions {
            super::set_at(&mut merged, "/status/conditions", c);
        }
        super::keep_preconditions(&mut merged, new);
        *new = merged;
    }

    fn prepare_for_subresource_update(&self, sub: &str, new: &mut Value, old: &Value) {
        let mut merged = old.clone();
        if sub == "approval" {
            let conditions = new.pointer("/status/conditions").cloned();
            match conditions {
                Some(c) => super::set_at(&mut merged, "/status/conditions", c),
                None => super::remove_at(&mut merged, "/status/conditions"),
            }
        }
        super::keep_preconditions(&mut merged, new);
        *new = merged;
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let request = s(obj, "/spec/request");
        let pem = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            request.as_bytes(),
        )
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default();
        if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
            causes.push(StatusCause::invalid_raw(
                "spec.request",
                "[]byte{...}",
                "PEM block type must be CERTIFICATE REQUEST",
            ));
        }
        let signer = s(obj, "/spec/signerName");
        if signer.is_empty() {
            causes.push(StatusCause::required("spec.signerName"));
        } else if signer.split('/').count() != 2 {
            causes.push(StatusCause::invalid(
                "spec.signerName",
                &signer,
                "must be a fully qualified domain and path of the form 'example.com/signer-name'",
            ));
        }
        if let Some(e) = obj
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
        {
            if e < 600 {
                causes.push(StatusCause::invalid_raw(
                    "spec.expirationSeconds",
                    &e.to_string(),
                    "may not specify a duration less than 600 seconds (10 minutes)",
                ));
            }
        }
        let mut approved = false;
        let mut denied = false;
        for c in obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match c.get("type").and_then(Value::as_str) {
                Some("Approved") => approved = true,
                Some("Denied") => denied = true,
                _ => {}
            }
        }
        if approved && denied {
            causes.push(StatusCause::invalid_raw(
                "status.conditions",
                "[]certificates.CertificateSigningRequestCondition{...}",
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("spec") != old.get("spec") {
            causes.push(StatusCause::invalid_raw(
                "spec",
                "certificates.CertificateSigningRequestSpec{...}",
                "field is immutable",
            ));
        }
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.signerName"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::AGE,
            Column::text("SignerName"),
            Column::text("Requestor"),
            Column::text("RequestedDuration"),
            Column::text("Condition"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let duration = obj
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
            .map_or("<none>".to_string(), print::human_duration);
        let types: Vec<&str> = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("type").and_then(Value::as_str))
            .collect();
        let mut conditions = vec![if types.contains(&"Denied") {
            "Denied"
        } else if types.contains(&"Approved") {
            "Approved"
        } else {
            "Pending"
        }];
        if types.contains(&"Failed") {
            conditions.push("Failed");
        }
        if !s(obj, "/status/certificate").is_empty() {
            conditions.push("Issued");
        }
        vec![
            json!(meta::name(obj)),
            json!(print::age(obj, now)),
            json!(print::or_none(s(obj, "/spec/signerName"))),
            json!(s(obj, "/spec/username")),
            json!(duration),
            json!(conditions.join(",")),
        ]
    }
}
