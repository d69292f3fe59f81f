//! PodDisruptionBudgets (`pkg/registry/policy/poddisruptionbudget`): one of `minAvailable` and
//! `maxUnavailable`, the unhealthy-pod eviction policy, status reset on create, columns.

use rkube_api::k8s::api::policy::v1 as policy;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, Column};
use super::{reset_status, Strategy};

pub struct PodDisruptionBudget;

fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "N/A".into(),
    }
}

impl Strategy for PodDisruptionBudget {
    crate::typed_kind!(policy::PodDisruptionBudget);

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(
            obj,
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
        );
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let min = obj.pointer("/spec/minAvailable");
        let max = obj.pointer("/spec/maxUnavailable");
        if min.is_some() && max.is_some() {
            causes.push(StatusCause::invalid_raw(
                "spec",
                "policy.PodDisruptionBudgetSpec{...}",
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        for (f, v) in [("minAvailable", min), ("maxUnavailable", max)] {
            match v {
                Some(Value::Number(n)) if n.as_i64().unwrap_or(-1) < 0 => {
                    causes.push(StatusCause::invalid_raw(
                        &format!("spec.{f}"),
                        &n.to_string(),
                        "must be greater than or equal to 0",
                    ))
                }
                Some(Value::String(s)) => {
                    let pct = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok());
                    match pct {
                        Some(p) if (0..=100).contains(&p) => {}
                        Some(_) => causes.push(StatusCause::invalid(
                            &format!("spec.{f}"),
                            s,
                            "must not be greater than 100%",
                        )),
                        None => causes.push(StatusCause::invalid(
                            &format!("spec.{f}"),
                            s,
                            "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                        )),
                    }
                }
                _ => {}
            }
        }
        let policy = obj
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        if let Some(p) = policy.filter(|p| !["IfHealthyBudget", "AlwaysAllow"].contains(p)) {
            causes.push(StatusCause::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Min Available"),
            Column::text("Max Unavailable"),
            Column::integer("Allowed Disruptions"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(int_or_string(obj.pointer("/spec/minAvailable"))),
            json!(int_or_string(obj.pointer("/spec/maxUnavailable"))),
            json!(i(obj, "/status/disruptionsAllowed")),
            json!(print::age(obj, now)),
        ]
    }
}

/// Whether a PodDisruptionBudget covers `pod` (same namespace; an empty selector covers every
/// pod, a missing one none, as policy/v1).
pub fn covers(pdb: &Value, pod: &Value) -> bool {
    if meta::namespace(pdb) != meta::namespace(pod) {
        return false;
    }
    let Some(sel) = pdb.pointer("/spec/selector").filter(|s| !s.is_null()) else {
        return false;
    };
    rkube_api::LabelSelector::from_json(sel).is_ok_and(|s| s.matches(&meta::labels(pod)))
}

/// Whether a pod counts as healthy to its budget: Ready and not being deleted.
pub fn healthy(pod: &Value) -> bool {
    meta::deletion_timestamp(pod).is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            })
}

/// What an eviction of `pod` may do given the budgets in its namespace: Ok(None) when no
/// budget is in the way, Ok(Some(name)) when the budget `name` allows it (and must be charged),
/// or the reason it is refused (`status`, message) as upstream answers.
pub fn eviction(pod: &Value, pdbs: &[Value]) -> Result<Option<String>, (u16, String)> {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if matches!(phase, "Succeeded" | "Failed" | "Pending") {
        return Ok(None);
    }
    let covering: Vec<&Value> = pdbs.iter().filter(|p| covers(p, pod)).collect();
    match covering.as_slice() {
        [] => Ok(None),
        [pdb] => {
            let unhealthy_ok = pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            if !healthy(pod) && unhealthy_ok {
                return Ok(None);
            }
            let allowed = i(pdb, "/status/disruptionsAllowed");
            let observed = i(pdb, "/status/observedGeneration");
            let generation = i(pdb, "/metadata/generation");
            if observed < generation {
                return Err((
                    429,
                    "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget is still being processed by the server.".into(),
                ));
            }
            if allowed <= 0 {
                return Err((
                    429,
                    format!(
                        "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {} needs {} healthy pods and has {} currently",
                        meta::name(pdb),
                        i(pdb, "/status/desiredHealthy"),
                        i(pdb, "/status/currentHealthy")
                    ),
                ));
            }
            Ok(Some(meta::name(pdb).to_string()))
        }
        _ => Err((
            500,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
        )),
    }
}
