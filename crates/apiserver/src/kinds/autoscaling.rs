//! HorizontalPodAutoscalers (`pkg/registry/autoscaling`), stored as autoscaling/v2: defaults
//! (one replica minimum, 80% CPU when no metric is given), bounds, and kubectl's
//! Reference/Targets columns. autoscaling/v1's view of the same objects is `autoscaling_v1`.

use rkube_api::k8s::api::autoscaling::v2 as autoscaling;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, i, s, Column};
use super::{reset_status, set_default, Strategy};

pub struct HorizontalPodAutoscaler;

impl Strategy for HorizontalPodAutoscaler {
    crate::typed_kind!(autoscaling::HorizontalPodAutoscaler);

    fn defaults(&self, obj: &mut Value) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            return;
        }
        set_default(obj, "/spec/minReplicas", json!(1));
        let no_metrics = obj
            .pointer("/spec/metrics")
            .and_then(Value::as_array)
            .is_none_or(|m| m.is_empty());
        if no_metrics {
            obj["spec"]["metrics"] = json!([{
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}
            }]);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"desiredReplicas": 0}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let min = obj
            .pointer("/spec/minReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let max = i(obj, "/spec/maxReplicas");
        if min < 1 {
            causes.push(StatusCause::invalid_raw(
                "spec.minReplicas",
                &min.to_string(),
                "must be greater than or equal to 1",
            ));
        }
        if max < 1 {
            causes.push(StatusCause::invalid_raw(
                "spec.maxReplicas",
                &max.to_string(),
                "must be greater than 0",
            ));
        } else if max < min {
            causes.push(StatusCause::invalid_raw(
                "spec.maxReplicas",
                &max.to_string(),
                "must be greater than or equal to `minReplicas`",
            ));
        }
        for f in ["kind", "name"] {
            if s(obj, &format!("/spec/scaleTargetRef/{f}")).is_empty() {
                causes.push(StatusCause::required(&format!("spec.scaleTargetRef.{f}")));
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Reference"),
            Column::text("Targets"),
            Column::text("MinPods"),
            Column::integer("MaxPods"),
            Column::integer("Replicas"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let reference = format!(
            "{}/{}",
            s(obj, "/spec/scaleTargetRef/kind"),
            s(obj, "/spec/scaleTargetRef/name")
        );
        let min = obj
            .pointer("/spec/minReplicas")
            .map_or("<unset>".to_string(), Value::to_string);
        vec![
            json!(meta::name(obj)),
            json!(reference),
            json!(targets(obj)),
            json!(min),
            json!(i(obj, "/spec/maxReplicas")),
            json!(i(obj, "/status/currentReplicas")),
            json!(print::age(obj, now)),
        ]
    }
}

/// kubectl's Targets cell: each metric as `current/target` (statuses matched by position,
/// `<unknown>` where none is reported), at most two, then `+ N more...`.
fn targets(obj: &Value) -> String {
    let specs: Vec<&Value> = obj
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses: Vec<&Value> = obj
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let text = |v: Option<&Value>| {
        v.map(|v| match v.as_str() {
            Some(s) => s.to_string(),
            None => v.to_string(),
        })
    };
    let unknown = || "<unknown>".to_string();
    let mut out = Vec::new();
    for (n, m) in specs.iter().enumerate() {
        let st = statuses.get(n);
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        let entry = match ty {
            "Resource" | "ContainerResource" => {
                let key = if ty == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = m
                    .pointer(&format!("/{key}/name"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let target = m.pointer(&format!("/{key}/target"));
                let cur = st.and_then(|s| s.pointer(&format!("/{key}/current")));
                match target.and_then(|t| t.get("averageValue")) {
                    Some(avg) => format!(
                        "{name}: {}/{}",
                        text(cur.and_then(|c| c.get("averageValue"))).unwrap_or_else(unknown),
                        text(Some(avg)).unwrap_or_default()
                    ),
                    None => format!(
                        "{name}: {}/{}",
                        cur.and_then(|c| c.get("averageUtilization"))
                            .map_or_else(unknown, |v| format!("{v}%")),
                        target
                            .and_then(|t| t.get("averageUtilization"))
                            .map_or("<auto>".to_string(), |v| format!("{v}%"))
                    ),
                }
            }
            "Pods" => format!(
                "{}/{}",
                text(st.and_then(|s| s.pointer("/pods/current/averageValue")))
                    .unwrap_or_else(unknown),
                text(m.pointer("/pods/target/averageValue")).unwrap_or_default()
            ),
            "Object" | "External" => {
                let key = if ty == "Object" { "object" } else { "external" };
                let cur = st.and_then(|s| s.pointer(&format!("/{key}/current")));
                match m.pointer(&format!("/{key}/target/averageValue")) {
                    Some(avg) => format!(
                        "{}/{} (avg)",
                        text(cur.and_then(|c| c.get("averageValue"))).unwrap_or_else(unknown),
                        text(Some(avg)).unwrap_or_default()
                    ),
                    None => format!(
                        "{}/{}",
                        text(cur.and_then(|c| c.get("value"))).unwrap_or_else(unknown),
                        text(m.pointer(&format!("/{key}/target/value"))).unwrap_or_default()
                    ),
                }
            }
            _ => "<unknown type>".to_string(),
        };
        out.push(entry);
    }
    if out.len() > 2 {
        let more = out.len() - 2;
        out.truncate(2);
        format!("{} + {more} more...", out.join(", "))
    } else {
        out.join(", ")
    }
}
