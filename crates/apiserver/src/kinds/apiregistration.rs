//! APIServices (`apiregistration.k8s.io`, kube-aggregator's registry): one per served
//! group/version, marked `Local` (served by this apiserver), with upstream's group and version
//! priorities; the Service and Available columns.

use rkube_api::k8s::kube_aggregator::pkg::apis::apiregistration::v1 as apireg;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, Column};
use super::{reset_status, Strategy};

pub struct ApiService;

/// Upstream's discovery priorities (`apiVersionPriorities`): (group, version, group priority
/// minimum, version priority).
const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v2", 17500, 30),
    ("autoscaling", "v1", 17500, 15),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
    ("apiregistration.k8s.io", "v1", 18000, 15),
];

/// The name of a group/version's APIService: `v1.apps`, `v1.` for the core group.
pub fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// The Local APIService objects of every group/version this apiserver serves.
pub fn local_services() -> Vec<Value> {
    let mut seen = std::collections::BTreeSet::new();
    for r in rkube_api::resources::discoverable() {
        seen.insert((r.group, r.version));
    }
    seen.into_iter()
        .map(|(group, version)| {
            let (gp, vp) = PRIORITIES
                .iter()
                .find(|(g, v, _, _)| *g == group && *v == version)
                .map_or((1000, 15), |(_, _, gp, vp)| (*gp, *vp));
            json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name_of(group, version), "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": gp, "versionPriority": vp},
            })
        })
        .collect()
}

impl Strategy for ApiService {
    crate::typed_kind!(apireg::APIService);

    fn name_rule(&self) -> super::NameRule {
        super::NameRule::PathSegment
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
        // A Local service (no backing Service) is available as soon as it exists.
        if obj.pointer("/spec/service").is_none_or(Value::is_null) {
            obj["status"] = json!({"conditions": [{
                "type": "Available",
                "status": "True",
                "reason": "Local",
                "message": "Local APIServices are always available",
                "lastTransitionTime": meta::meta_str(obj, "creationTimestamp"),
            }]});
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let group = obj
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let version = obj
            .pointer("/spec/version")
            .and_then(Value::as_str)
            .unwrap_or("");
        if version.is_empty() {
            causes.push(StatusCause::required("spec.version"));
        }
        let want = name_of(group, version);
        if meta::name(obj) != want {
            causes.push(StatusCause::invalid(
                "metadata.name",
                meta::name(obj),
                &format!("must be `spec.version+\".\"+spec.group`: {want:?}"),
            ));
        }
        for f in ["groupPriorityMinimum", "versionPriority"] {
            let n = obj
                .pointer(&format!("/spec/{f}"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if !(1..=20000).contains(&n) {
                causes.push(StatusCause::invalid_raw(
                    &format!("spec.{f}"),
                    &n.to_string(),
                    "must be positive and less than 20000",
                ));
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Service"),
            Column::text("Available"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let service = match obj.pointer("/spec/service") {
            Some(s) if !s.is_null() => format!(
                "{}/{}",
                s.get("namespace").and_then(Value::as_str).unwrap_or(""),
                s.get("name").and_then(Value::as_str).unwrap_or("")
            ),
            _ => "Local".into(),
        };
        let available = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
            })
            .map(|c| {
                let st = c.get("status").and_then(Value::as_str).unwrap_or("Unknown");
                match c.get("reason").and_then(Value::as_str) {
                    Some(r) if st != "True" => format!("{st} ({r})"),
                    _ => st.to_string(),
                }
            })
            .unwrap_or_else(|| "Unknown".into());
        vec![
            json!(meta::name(obj)),
            json!(service),
            json!(available),
            json!(print::age(obj, now)),
        ]
    }
}
