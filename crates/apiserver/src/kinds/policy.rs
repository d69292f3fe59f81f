//! PodDisruptionBudgets (`pkg/registry/policy/poddisruptionbudget`): one of `minAvailable` and
//! `maxUnavailable`, the unhealthy-pod eviction policy, status reset on create, columns.

use rkube_api::k8s::api::policy::v1 as policy;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, Column};
use super::{clear_status, Strategy};

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
        clear_status(obj);
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
