//! Priority admission (upstream's `Priority` plugin): a pod's `spec.priority` (and preemption
//! policy) comes from its PriorityClass, or from the global default class, or is 0; an unknown
//! class, or a priority the pod sets itself that disagrees with its class, is refused; only one
//! PriorityClass may be the global default.

use rkube_api::meta;
use serde_json::{json, Value};

/// Fills in a new pod's priority from `classes`; the refusal's reason as upstream words it.
pub fn admit_pod(pod: &mut Value, classes: &[Value]) -> Result<(), String> {
    let name = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let class = if name.is_empty() {
        global_default(classes)
    } else {
        Some(
            classes
                .iter()
                .find(|c| meta::name(c) == name)
                .ok_or_else(|| format!("no PriorityClass with name {name} was found"))?,
        )
    };
    let (value, policy, class_name) = match class {
        Some(c) => (
            c.get("value").and_then(Value::as_i64).unwrap_or(0),
            c.get("preemptionPolicy")
                .and_then(Value::as_str)
                .unwrap_or("PreemptLowerPriority")
                .to_string(),
            meta::name(c).to_string(),
        ),
        None => (0, "PreemptLowerPriority".to_string(), String::new()),
    };
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64) {
        if given != value {
            return Err(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            ));
        }
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    spec.insert("priority".into(), json!(value));
    if !class_name.is_empty() {
        spec.insert("priorityClassName".into(), json!(class_name));
        spec.entry("preemptionPolicy")
            .or_insert_with(|| json!(policy));
    }
    Ok(())
}

/// The global default class (the highest value, if several claim it).
fn global_default(classes: &[Value]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .max_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
}

/// A PriorityClass marked global default while another one is: refused.
pub fn admit_class(class: &Value, classes: &[Value]) -> Result<(), String> {
    if class.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    match classes.iter().find(|c| {
        c.get("globalDefault").and_then(Value::as_bool) == Some(true)
            && meta::name(c) != meta::name(class)
    }) {
        Some(other) => Err(format!(
            "PriorityClass {} is already marked as default. Only one default can exist",
            meta::name(other)
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_take_their_class_value() {
        let classes = vec![
            json!({"metadata": {"name": "high"}, "value": 1000}),
            json!({"metadata": {"name": "base"}, "value": 10, "globalDefault": true}),
        ];
        let mut p = json!({"spec": {"priorityClassName": "high"}});
        admit_pod(&mut p, &classes).unwrap();
        assert_eq!(p["spec"]["priority"], 1000);
        assert_eq!(p["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        let mut d = json!({"spec": {}});
        admit_pod(&mut d, &classes).unwrap();
        assert_eq!(
            (
                d["spec"]["priority"].clone(),
                d["spec"]["priorityClassName"].clone()
            ),
            (json!(10), json!("base"))
        );
        let mut bad = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(
            admit_pod(&mut bad, &classes),
            Err("no PriorityClass with name nope was found".into())
        );
        let mut lying = json!({"spec": {"priorityClassName": "high", "priority": 5}});
        assert!(admit_pod(&mut lying, &classes).is_err());
        let second = json!({"metadata": {"name": "other"}, "value": 1, "globalDefault": true});
        assert!(admit_class(&second, &classes).is_err());
    }
}
