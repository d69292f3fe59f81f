//! Keeps bootstrap objects current across upgrades, as upstream's reconcilers do at startup:
//! a bootstrap ClusterRole gains the rules a newer rkube adds and a ClusterRoleBinding its
//! subjects (what an administrator added stays), a FlowSchema or PriorityLevelConfiguration
//! gets the default spec back; an object annotated `…autoupdate…: "false"` is left alone.

use serde_json::Value;

const RBAC_AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
const APF_AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

/// The stored object brought up to `desired`, or None when nothing changes.
pub fn reconcile(current: &Value, desired: &Value) -> Option<Value> {
    let kind = desired.get("kind").and_then(Value::as_str).unwrap_or("");
    let annotation = match kind {
        "ClusterRole" | "ClusterRoleBinding" => RBAC_AUTOUPDATE,
        "FlowSchema" | "PriorityLevelConfiguration" => APF_AUTOUPDATE,
        _ => return None,
    };
    let opted_out = current
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation))
        .and_then(Value::as_str)
        == Some("false");
    if opted_out {
        return None;
    }
    let mut updated = current.clone();
    let union = |field: &str, updated: &mut Value| -> bool {
        let want = desired
            .get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let have = updated
            .as_object_mut()
            .expect("an object")
            .entry(field)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(have) = have.as_array_mut() else {
            return false;
        };
        let missing: Vec<Value> = want.into_iter().filter(|w| !have.contains(w)).collect();
        let changed = !missing.is_empty();
        have.extend(missing);
        changed
    };
    let changed = match kind {
        "ClusterRole" => union("rules", &mut updated),
        "ClusterRoleBinding" => union("subjects", &mut updated),
        _ => {
            let spec = desired.get("spec").cloned().unwrap_or(Value::Null);
            let differs = updated.get("spec") != Some(&spec);
            updated["spec"] = spec;
            differs
        }
    };
    changed.then_some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_gain_new_rules_and_keep_added_ones() {
        let desired =
            json!({"kind": "ClusterRole", "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        let current = json!({"kind": "ClusterRole", "metadata": {"name": "r"},
            "rules": [{"verbs": ["get"]}, {"verbs": ["mine"]}]});
        let got = reconcile(&current, &desired).unwrap();
        assert_eq!(
            got["rules"],
            json!([{"verbs": ["get"]}, {"verbs": ["mine"]}, {"verbs": ["list"]}])
        );
        assert_eq!(reconcile(&got, &desired), None, "nothing left to add");
        let mut off = current.clone();
        off["metadata"]["annotations"] = json!({RBAC_AUTOUPDATE: "false"});
        assert_eq!(reconcile(&off, &desired), None);
    }

    #[test]
    fn bindings_gain_subjects_and_flow_objects_get_the_default_spec() {
        let desired =
            json!({"kind": "ClusterRoleBinding", "subjects": [{"kind": "Group", "name": "g"}]});
        let current = json!({"kind": "ClusterRoleBinding", "subjects": []});
        assert_eq!(
            reconcile(&current, &desired).unwrap()["subjects"],
            desired["subjects"]
        );
        let desired = json!({"kind": "FlowSchema", "spec": {"matchingPrecedence": 100}});
        let current = json!({"kind": "FlowSchema", "metadata": {"name": "f"}, "spec": {"matchingPrecedence": 7}});
        assert_eq!(
            reconcile(&current, &desired).unwrap()["spec"]["matchingPrecedence"],
            100
        );
        let mut off = current.clone();
        off["metadata"]["annotations"] = json!({APF_AUTOUPDATE: "false"});
        assert_eq!(reconcile(&off, &desired), None);
        assert_eq!(reconcile(&desired, &desired), None);
    }
}
