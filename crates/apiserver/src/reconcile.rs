//! Keeps bootstrap objects current across upgrades, as upstream's reconcilers do at startup:
//! the pieces kinds use in `Strategy::reconcile_bootstrap` — an opt-out annotation
//! (`…autoupdate…: "false"` leaves an object alone), a list that gains what a newer rkube
//! adds while keeping what an administrator added, a spec put back to its default.

use serde_json::Value;

/// RBAC's opt-out (`rbac.authorization.kubernetes.io/autoupdate: "false"`).
pub const RBAC_AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// Flow control's opt-out (`apf.kubernetes.io/autoupdate-spec: "false"`).
pub const APF_AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

/// Whether the stored object opted out of reconciliation with `annotation`.
pub fn opted_out(current: &Value, annotation: &str) -> bool {
    current
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation))
        .and_then(Value::as_str)
        == Some("false")
}

/// `current` with the entries of `desired`'s list `field` it lacks appended; None when none
/// are missing.
pub fn union(current: &Value, desired: &Value, field: &str) -> Option<Value> {
    let want = desired
        .get(field)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut updated = current.clone();
    let have = updated
        .as_object_mut()?
        .entry(field)
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()?;
    let missing: Vec<Value> = want.into_iter().filter(|w| !have.contains(w)).collect();
    if missing.is_empty() {
        return None;
    }
    have.extend(missing);
    Some(updated)
}

/// `current` with `desired`'s spec; None when it already has it.
pub fn default_spec(current: &Value, desired: &Value) -> Option<Value> {
    let spec = desired.get("spec").cloned().unwrap_or(Value::Null);
    if current.get("spec") == Some(&spec) {
        return None;
    }
    let mut updated = current.clone();
    updated["spec"] = spec;
    Some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_gain_new_entries_and_keep_added_ones() {
        let desired = json!({"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        let current = json!({"metadata": {"name": "r"},
            "rules": [{"verbs": ["get"]}, {"verbs": ["mine"]}]});
        let got = union(&current, &desired, "rules").unwrap();
        assert_eq!(
            got["rules"],
            json!([{"verbs": ["get"]}, {"verbs": ["mine"]}, {"verbs": ["list"]}])
        );
        assert_eq!(union(&got, &desired, "rules"), None, "nothing left to add");
        let mut off = current.clone();
        off["metadata"]["annotations"] = json!({RBAC_AUTOUPDATE: "false"});
        assert!(opted_out(&off, RBAC_AUTOUPDATE));
        assert!(!opted_out(&current, RBAC_AUTOUPDATE));
    }

    #[test]
    fn specs_go_back_to_the_default() {
        let desired = json!({"spec": {"matchingPrecedence": 100}});
        let current = json!({"metadata": {"name": "f"}, "spec": {"matchingPrecedence": 7}});
        assert_eq!(
            default_spec(&current, &desired).unwrap()["spec"]["matchingPrecedence"],
            100
        );
        assert_eq!(default_spec(&desired, &desired), None);
    }
}
