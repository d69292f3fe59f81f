//! LimitRanges and ResourceQuotas (their admission plugins live in `admission`): every
//! quantity they hold must be one — parseable, not negative, within 64 bits — or the quota it
//! describes would silently be no quota at all.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::StatusCause;
use serde_json::Value;

use super::Strategy;

pub struct LimitRange;
pub struct ResourceQuota;

impl Strategy for LimitRange {
    crate::typed_kind!(core::LimitRange);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let limits = obj.pointer("/spec/limits").and_then(Value::as_array);
        for (i, l) in limits.into_iter().flatten().enumerate() {
            for field in [
                "default",
                "defaultRequest",
                "min",
                "max",
                "maxLimitRequestRatio",
            ] {
                quantities(l.get(field), &format!("spec.limits[{i}].{field}"), causes);
            }
        }
    }
}

impl Strategy for ResourceQuota {
    crate::typed_kind!(core::ResourceQuota);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        quantities(obj.pointer("/spec/hard"), "spec.hard", causes);
        quantities(obj.pointer("/status/hard"), "status.hard", causes);
        quantities(obj.pointer("/status/used"), "status.used", causes);
    }
}

/// Every value of a resource map is a quantity that fits, and not negative.
fn quantities(map: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    for (res, q) in map.and_then(Value::as_object).into_iter().flatten() {
        super::quantity(&format!("{path}[{res}]"), q, causes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_must_be_quantities() {
        let check = |s: &dyn Strategy, obj: Value| {
            let mut causes = Vec::new();
            s.validate(&obj, &mut causes);
            causes
        };
        assert!(check(
            &ResourceQuota,
            json!({"spec": {"hard": {"pods": "10", "requests.cpu": "2"}}})
        )
        .is_empty());
        let c = check(&ResourceQuota, json!({"spec": {"hard": {"pods": "1e19"}}}));
        assert_eq!(c[0].field, "spec.hard[pods]");
        assert_eq!(
            check(&ResourceQuota, json!({"spec": {"hard": {"pods": "-1"}}})).len(),
            1
        );
        let c = check(
            &LimitRange,
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "lots"}}]}}),
        );
        assert_eq!(c[0].field, "spec.limits[0].max[cpu]");
    }
}
