//! autoscaling/v1 HorizontalPodAutoscalers: a view of the autoscaling/v2 objects, converted as
//! upstream's `pkg/apis/autoscaling/v1/conversion.go` does. v1 has one target (CPU
//! utilization); every other metric, the current metrics, the conditions and the behavior ride
//! in `autoscaling.alpha.kubernetes.io/*` annotations (metrics in v1's v2beta1-shaped types,
//! behavior as upstream's internal Go struct), so a round trip through v1 loses nothing.
//! Validation and printing are v2's, on the converted object.

use rkube_api::k8s::api::autoscaling::v2;
use rkube_api::StatusCause;
use serde_json::{json, Map, Value};

use super::autoscaling::HorizontalPodAutoscaler as V2;
use super::print::Column;
use super::{reset_status, set_default, status_only, Strategy};

pub struct HorizontalPodAutoscalerV1;

const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// Every annotation a round trip carries (1.33 adds the tolerance ones, v2beta2's).
const ROUND_TRIP: &[&str] = &[
    METRICS,
    CURRENT_METRICS,
    CONDITIONS,
    BEHAVIOR,
    "autoscaling.alpha.kubernetes.io/scale-down-tolerance",
    "autoscaling.alpha.kubernetes.io/scale-up-tolerance",
];
/// The annotations that carry status (written through the status endpoint only).
const STATUS_ANNOTATIONS: &[&str] = &[CURRENT_METRICS, CONDITIONS];
/// What v1 assumes when it names no target (`DefaultCPUUtilization`).
const DEFAULT_CPU: i64 = 80;

impl Strategy for HorizontalPodAutoscalerV1 {
    crate::typed_kind!(rkube_api::k8s::api::autoscaling::v1::HorizontalPodAutoscaler);

    fn served_as_stored(&self) -> bool {
        false
    }

    fn storage_to_served(&self, obj: &mut Value) -> Result<(), String> {
        *obj = to_v1(obj);
        Ok(())
    }

    fn served_to_storage(&self, obj: &Value) -> Result<Option<Value>, String> {
        Ok(Some(to_v2(obj)))
    }

    fn defaults(&self, obj: &mut Value) {
        if obj.get("spec").is_some_and(Value::is_object) {
            set_default(obj, "/spec/minReplicas", json!(1));
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"currentReplicas": 0, "desiredReplicas": 0}));
        carry(&json!({}), obj, STATUS_ANNOTATIONS);
    }

    /// The main endpoint keeps the status — and so the annotations v1 carries status in.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        carry(old, new, STATUS_ANNOTATIONS);
    }

    /// The status endpoint takes the status — and the annotations v1 carries status in.
    fn prepare_for_status_update(&self, new: &mut Value, old: &Value) {
        let asked = new.clone();
        status_only(new, old, false);
        carry(&asked, new, STATUS_ANNOTATIONS);
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        V2.validate(&to_v2(obj), causes);
    }

    /// The spec is v2's: a metric or behavior changed through v1's annotations counts.
    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        to_v2(new).get("spec") != to_v2(old).get("spec")
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        V2.columns()
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        V2.cells(&to_v2(obj), now)
    }
}

/// (v1 field, v2 pointer) pairs of one metric source, spec and status.
fn spec_fields(ty: &str) -> &'static [(&'static str, &'static str)] {
    match ty {
        "Resource" => &[
            ("name", "/name"),
            ("targetAverageUtilization", "/target/averageUtilization"),
            ("targetAverageValue", "/target/averageValue"),
        ],
        "ContainerResource" => &[
            ("name", "/name"),
            ("container", "/container"),
            ("targetAverageUtilization", "/target/averageUtilization"),
            ("targetAverageValue", "/target/averageValue"),
        ],
        "Pods" => &[
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
            ("targetAverageValue", "/target/averageValue"),
        ],
        "Object" => &[
            ("target", "/describedObject"),
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
            ("targetValue", "/target/value"),
            ("averageValue", "/target/averageValue"),
        ],
        "External" => &[
            ("metricName", "/metric/name"),
            ("metricSelector", "/metric/selector"),
            ("targetValue", "/target/value"),
            ("targetAverageValue", "/target/averageValue"),
        ],
        _ => &[],
    }
}

fn status_fields(ty: &str) -> &'static [(&'static str, &'static str)] {
    match ty {
        "Resource" => &[
            ("name", "/name"),
            ("currentAverageUtilization", "/current/averageUtilization"),
            ("currentAverageValue", "/current/averageValue"),
        ],
        "ContainerResource" => &[
            ("name", "/name"),
            ("container", "/container"),
            ("currentAverageUtilization", "/current/averageUtilization"),
            ("currentAverageValue", "/current/averageValue"),
        ],
        "Pods" => &[
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
            ("currentAverageValue", "/current/averageValue"),
        ],
        "Object" => &[
            ("target", "/describedObject"),
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
            ("currentValue", "/current/value"),
            ("averageValue", "/current/averageValue"),
        ],
        "External" => &[
            ("metricName", "/metric/name"),
            ("metricSelector", "/metric/selector"),
            ("currentValue", "/current/value"),
            ("currentAverageValue", "/current/averageValue"),
        ],
        _ => &[],
    }
}

/// `Resource` → `resource`, `ContainerResource` → `containerResource`, …
fn source_key(ty: &str) -> String {
    let mut c = ty.chars();
    c.next()
        .map(|f| f.to_ascii_lowercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn put(obj: &mut Value, ptr: &str, v: Value) {
    super::set_at(obj, ptr, v);
}

/// A v2 metric (spec or status) in v1's shape.
fn metric_to_v1(m: &Value, fields: fn(&str) -> &'static [(&'static str, &'static str)]) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
    let key = source_key(ty);
    let src = m.get(&key).cloned().unwrap_or(json!({}));
    let mut out = Map::new();
    for (v1, v2) in fields(ty) {
        if let Some(v) = src.pointer(v2) {
            out.insert((*v1).into(), v.clone());
        }
    }
    json!({"type": ty, key: out})
}

/// A v1 metric (spec or status) in v2's shape.
fn metric_to_v2(m: &Value, fields: fn(&str) -> &'static [(&'static str, &'static str)]) -> Value {
    let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
    let key = source_key(ty);
    let src = m.get(&key).cloned().unwrap_or(json!({}));
    let mut out = json!({});
    for (v1, v2) in fields(ty) {
        if let Some(v) = src.get(*v1) {
            put(&mut out, v2, v.clone());
        }
    }
    json!({"type": ty, key: out})
}

/// A v1 metric spec in v2's shape, the target's type chosen as upstream's conversion does.
fn spec_to_v2(m: &Value) -> Value {
    let mut out = metric_to_v2(m, spec_fields);
    let ty = m.get("type").and_then(Value::as_str).unwrap_or_default();
    let key = source_key(ty);
    let has = |f: &str| {
        m.get(&key)
            .and_then(|s| s.get(f))
            .is_some_and(|v| !v.is_null())
    };
    let target_type = match ty {
        "Resource" | "ContainerResource" if has("targetAverageUtilization") => "Utilization",
        "Object" if !has("averageValue") => "Value",
        "External" if has("targetValue") => "Value",
        _ => "AverageValue",
    };
    if let Some(source) = out.get_mut(&key) {
        put(source, "/target/type", json!(target_type));
    }
    out
}

/// Is this v2 metric v1's own target (CPU utilization)?
fn is_cpu_utilization(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource")
        && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && m.pointer("/resource/target/averageUtilization")
            .is_some_and(|v| !v.is_null())
}

/// Upstream marshals the behavior as its internal Go struct: field names capitalised.
fn recase(v: &Value, first: fn(char) -> char) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let mut c = k.chars();
                    let k = c
                        .next()
                        .map(|f| first(f).to_string() + c.as_str())
                        .unwrap_or_default();
                    (k, recase(v, first))
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|v| recase(v, first)).collect()),
        other => other.clone(),
    }
}

fn annotations_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj
        .pointer("/metadata/annotations")
        .is_some_and(Value::is_object)
    {
        put(obj, "/metadata/annotations", json!({}));
    }
    obj.pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .expect("annotations object")
}

/// Makes `to`'s annotations `keys` what `from` has (set, or absent).
fn carry(from: &Value, to: &mut Value, keys: &[&str]) {
    for k in keys {
        match from
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(*k))
        {
            Some(v) => {
                annotations_mut(to).insert((*k).into(), v.clone());
            }
            None => {
                if let Some(a) = to
                    .pointer_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
                {
                    a.remove(*k);
                }
            }
        }
    }
}

/// Does `v` decode as `T`? (An annotation that does not is ignored, as upstream's conversion
/// ignores one that does not unmarshal.)
fn decodes_as<T: serde::de::DeserializeOwned>(v: &Value) -> bool {
    serde_json::from_value::<T>(v.clone()).is_ok()
}

/// Drops the round-trip annotations (and an annotation map left empty by that).
fn drop_round_trip(obj: &mut Value) {
    let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for k in ROUND_TRIP {
        a.remove(*k);
    }
    if a.is_empty() {
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("annotations");
        }
    }
}

/// A stored (v2) object as autoscaling/v1 shows it.
pub fn to_v1(v2: &Value) -> Value {
    let mut out = v2.clone();
    out["apiVersion"] = json!("autoscaling/v1");
    drop_round_trip(&mut out);
    let metrics: Vec<Value> = v2
        .pointer("/spec/metrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("metrics");
        spec.remove("behavior");
        if let Some(cpu) = metrics.iter().find(|m| is_cpu_utilization(m)) {
            spec.insert(
                "targetCPUUtilizationPercentage".into(),
                cpu.pointer("/resource/target/averageUtilization")
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
    }
    let other: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(|m| metric_to_v1(m, spec_fields))
        .collect();
    if !other.is_empty() {
        annotations_mut(&mut out).insert(METRICS.into(), json!(json!(other).to_string()));
    }
    if let Some(b) = v2.pointer("/spec/behavior").filter(|b| !b.is_null()) {
        let internal = recase(b, |c| c.to_ascii_uppercase()).to_string();
        annotations_mut(&mut out).insert(BEHAVIOR.into(), json!(internal));
    }
    let current: Vec<Value> = v2
        .pointer("/status/currentMetrics")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let conditions = v2
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(status) = out.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("currentMetrics");
        status.remove("conditions");
        // v1 always serializes both counts (v2 omits a zero currentReplicas).
        for count in ["currentReplicas", "desiredReplicas"] {
            status.entry(count).or_insert(json!(0));
        }
        let cpu = current.iter().rev().find_map(|m| {
            (m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu"))
            .then(|| m.pointer("/resource/current/averageUtilization"))
            .flatten()
            .filter(|v| !v.is_null())
            .cloned()
        });
        if let Some(cpu) = cpu {
            status.insert("currentCPUUtilizationPercentage".into(), cpu);
        }
    }
    if !current.is_empty() {
        let v1: Vec<Value> = current
            .iter()
            .map(|m| metric_to_v1(m, status_fields))
            .collect();
        annotations_mut(&mut out).insert(CURRENT_METRICS.into(), json!(json!(v1).to_string()));
    }
    if !conditions.is_empty() {
        annotations_mut(&mut out).insert(CONDITIONS.into(), json!(json!(conditions).to_string()));
    }
    out
}

/// An autoscaling/v1 object in its stored (v2) form.
pub fn to_v2(v1: &Value) -> Value {
    let mut out = v1.clone();
    out["apiVersion"] = json!("autoscaling/v2");
    let annotation = |k: &str| -> Option<Value> {
        let text = v1.pointer("/metadata/annotations")?.get(k)?.as_str()?;
        serde_json::from_str(text).ok()
    };
    let mut metrics: Vec<Value> = annotation(METRICS)
        .and_then(|v| v.as_array().cloned())
        .map(|ms| ms.iter().map(spec_to_v2).collect::<Vec<_>>())
        .filter(|ms| decodes_as::<Vec<v2::MetricSpec>>(&json!(ms)))
        .unwrap_or_default();
    let cpu = v1
        .pointer("/spec/targetCPUUtilizationPercentage")
        .filter(|v| !v.is_null())
        .cloned();
    if let Some(cpu) = cpu {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": cpu}}}));
    }
    if metrics.is_empty() {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU}}}));
    }
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("targetCPUUtilizationPercentage");
        spec.insert("metrics".into(), json!(metrics));
        let behavior = annotation(BEHAVIOR)
            .filter(|b| {
                b.as_object()
                    .is_some_and(|m| m.values().any(|v| !v.is_null()))
            })
            .map(|b| strip_nulls(recase(&b, |c| c.to_ascii_lowercase())))
            .filter(decodes_as::<v2::HorizontalPodAutoscalerBehavior>);
        if let Some(b) = behavior {
            spec.insert("behavior".into(), b);
        }
    }
    let current_cpu = v1
        .pointer("/status/currentCPUUtilizationPercentage")
        .filter(|v| !v.is_null())
        .cloned();
    let current = match annotation(CURRENT_METRICS).and_then(|v| v.as_array().cloned()) {
        Some(ms) => Some(
            ms.iter()
                .map(|m| metric_to_v2(m, status_fields))
                .collect::<Vec<_>>(),
        )
        .filter(|ms| decodes_as::<Vec<v2::MetricStatus>>(&json!(ms))),
        None => current_cpu.map(|c| {
            vec![json!({"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": c}}})]
        }),
    };
    let conditions =
        annotation(CONDITIONS).filter(decodes_as::<Vec<v2::HorizontalPodAutoscalerCondition>>);
    if let Some(status) = out.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("currentCPUUtilizationPercentage");
        if let Some(c) = current {
            status.insert("currentMetrics".into(), json!(c));
        }
        if let Some(c) = conditions {
            status.insert("conditions".into(), c);
        }
    }
    drop_round_trip(&mut out);
    out
}

/// The internal struct's `null`s (unset pointers) are absent fields in v2's JSON.
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_target_becomes_a_cpu_metric_and_no_target_is_eighty_percent() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 5,
                     "targetCPUUtilizationPercentage": 50}});
        let v2 = to_v2(&v1);
        assert_eq!(v2["apiVersion"], "autoscaling/v2");
        assert_eq!(
            v2["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}])
        );
        assert!(v2["spec"].get("targetCPUUtilizationPercentage").is_none());
        let mut bare = v1.clone();
        bare["spec"]
            .as_object_mut()
            .unwrap()
            .remove("targetCPUUtilizationPercentage");
        assert_eq!(
            to_v2(&bare)["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert_eq!(
            to_v1(&to_v2(&bare))["spec"]["targetCPUUtilizationPercentage"],
            80
        );
    }

    #[test]
    fn annotations_that_do_not_decode_are_ignored_and_status_rides_only_the_status_endpoint() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {
                METRICS: "[{\"type\":\"Resource\",\"resource\":{\"name\":5}}]",
                BEHAVIOR: "{\"ScaleUp\":7}",
                CONDITIONS: "[{\"type\":1}]"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 5,
                     "targetCPUUtilizationPercentage": 50},
            "status": {}});
        let v2 = to_v2(&v1);
        assert_eq!(v2["spec"]["metrics"].as_array().unwrap().len(), 1, "{v2}");
        assert!(v2["spec"].get("behavior").is_none());
        assert!(v2["status"].get("conditions").is_none());
        assert!(v2["metadata"].get("annotations").is_none());
        // A main-endpoint write keeps the stored status annotations; a status write takes its own.
        let old = json!({"metadata": {"annotations": {CONDITIONS: "[]"}}, "status": {"currentReplicas": 1}});
        let mut new = json!({"metadata": {"annotations": {CURRENT_METRICS: "[]"}}, "status": {}});
        HorizontalPodAutoscalerV1.prepare_for_update(&mut new, &old);
        assert_eq!(new["metadata"]["annotations"], json!({CONDITIONS: "[]"}));
        let mut status = json!({"metadata": {"annotations": {CURRENT_METRICS: "[]"}}, "status": {"currentReplicas": 2}});
        HorizontalPodAutoscalerV1.prepare_for_status_update(&mut status, &old);
        assert_eq!(
            status["metadata"]["annotations"],
            json!({CURRENT_METRICS: "[]"})
        );
        assert_eq!(status["status"]["currentReplicas"], 2);
    }

    #[test]
    fn every_other_metric_status_condition_and_behavior_round_trips_through_annotations() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {"keep": "me"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Object", "object": {"describedObject": {"kind": "Ingress", "name": "main", "apiVersion": "networking.k8s.io/v1"},
                        "metric": {"name": "rps"}, "target": {"type": "Value", "value": "2k"}}},
                    {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "AverageValue", "averageValue": "30"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40, "averageValue": "100m"}}}],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"}]}});
        let v1 = to_v1(&v2);
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert!(v1["spec"].get("metrics").is_none() && v1["spec"].get("behavior").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        let ann = &v1["metadata"]["annotations"];
        let metrics: Value = serde_json::from_str(ann[METRICS].as_str().unwrap()).unwrap();
        assert_eq!(
            metrics[0],
            json!({"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "1Gi"}})
        );
        assert_eq!(
            metrics[1],
            json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}})
        );
        let behavior: Value = serde_json::from_str(ann[BEHAVIOR].as_str().unwrap()).unwrap();
        assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 60);
        assert_eq!(ann["keep"], "me");
        // And back: the same v2 object, annotations gone (the CPU metric moves last, as upstream).
        let back = to_v2(&v1);
        assert_eq!(back["metadata"]["annotations"], json!({"keep": "me"}));
        let mut want = v2["spec"]["metrics"].as_array().unwrap().clone();
        want.rotate_left(1);
        assert_eq!(back["spec"]["metrics"], json!(want));
        assert_eq!(back["spec"]["behavior"], v2["spec"]["behavior"]);
        assert_eq!(back["status"], v2["status"]);
    }
}
