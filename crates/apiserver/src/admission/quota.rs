//! ResourceQuota arithmetic over JSON: what objects in a namespace use of each resource a
//! quota's `hard` names (object counts — `pods`, `services`, `configmaps`, `secrets`,
//! `count/<resource>[.<group>]` — and the compute requests and limits of non-terminal pods),
//! what creating one object adds, and the check, with upstream's message.

use std::collections::BTreeMap;

use rkube_api::quantity::{parse_milli, parse_value};
use rkube_api::ResourceDef;
use serde_json::{Map, Value};

/// Amounts per quota resource name: millis for cpu resources, plain numbers otherwise.
pub type Usage = BTreeMap<String, i64>;

fn is_cpu(name: &str) -> bool {
    matches!(name, "cpu" | "requests.cpu" | "limits.cpu")
}

/// A quantity string in the resource's units.
pub fn amount(name: &str, q: &str) -> Option<i64> {
    if is_cpu(name) {
        parse_milli(q)
    } else {
        parse_value(q)
    }
}

/// An amount written back as a quantity: `1500m`, `2`, `256Mi`, `3`.
pub fn format(name: &str, n: i64) -> String {
    if is_cpu(name) {
        return if n % 1000 == 0 {
            (n / 1000).to_string()
        } else {
            format!("{n}m")
        };
    }
    if name.ends_with("memory") && n != 0 {
        for (suffix, unit) in [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if n % unit == 0 {
                return format!("{}{suffix}", n / unit);
            }
        }
    }
    n.to_string()
}

/// The object-count resource names that count `def`'s objects.
fn counts(def: &ResourceDef) -> Vec<String> {
    let mut names = vec![if def.group.is_empty() {
        format!("count/{}", def.plural)
    } else {
        format!("count/{}.{}", def.plural, def.group)
    }];
    if def.group.is_empty()
        && matches!(
            def.plural,
            "pods" | "services" | "configmaps" | "secrets" | "resourcequotas"
        )
    {
        names.push(def.plural.to_string());
    }
    names
}

/// What one object of `def` uses of each of `names`: object counts, and the compute usage
/// its kind reports (pods). A quantity that cannot be used is an error, never zero.
pub fn object_usage(
    def: &ResourceDef,
    strategy: &dyn crate::kinds::Strategy,
    obj: &Value,
    names: &[String],
) -> Result<Usage, String> {
    let mut out = Usage::new();
    if !strategy.counts_against_quota(obj) {
        return Ok(out);
    }
    let counted = counts(def);
    for n in names {
        if counted.contains(n) {
            out.insert(n.clone(), 1);
        } else if let Some(v) = strategy.compute_usage(obj, n) {
            out.insert(n.clone(), v?);
        }
    }
    Ok(out)
}

/// Whether objects of `def` can use any of `names` (so a namespace's usage need not look at
/// them otherwise).
pub fn tracks(def: &ResourceDef, strategy: &dyn crate::kinds::Strategy, names: &[String]) -> bool {
    let probe = serde_json::json!({"spec": {"containers": [{}]}});
    object_usage(def, strategy, &probe, names).is_ok_and(|u| !u.is_empty())
}

/// The resource names a quota limits (`spec.hard`).
pub fn hard(quota: &Value) -> Usage {
    quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .filter_map(|(k, v)| Some((k.clone(), amount(k, v.as_str()?)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// `status.used` as amounts.
pub fn used(quota: &Value) -> Usage {
    quota
        .pointer("/status/used")
        .and_then(Value::as_object)
        .map(|u| {
            u.iter()
                .filter_map(|(k, v)| Some((k.clone(), amount(k, v.as_str()?)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A quota's status for `hard` and `used`.
pub fn status(hard: &Usage, used: &Usage) -> Value {
    let write = |u: &Usage, keys: &Usage| -> Map<String, Value> {
        keys.keys()
            .map(|k| {
                (
                    k.clone(),
                    Value::String(format(k, u.get(k).copied().unwrap_or(0))),
                )
            })
            .collect()
    };
    serde_json::json!({"hard": write(hard, hard), "used": write(used, hard)})
}

/// Whether `used + delta` stays within `hard`; else upstream's message, listing the exceeded
/// resources: `exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2`.
pub fn check(quota_name: &str, hard: &Usage, used: &Usage, delta: &Usage) -> Result<Usage, String> {
    let mut next = used.clone();
    let mut over = Vec::new();
    for (k, d) in delta {
        let Some(limit) = hard.get(k) else { continue };
        let now = used.get(k).copied().unwrap_or(0);
        // An overflowing total is over any limit.
        let total = now.checked_add(*d);
        if *d > 0 && total.is_none_or(|t| t > *limit) {
            over.push(k.clone());
        }
        next.insert(k.clone(), total.unwrap_or(i64::MAX));
    }
    if over.is_empty() {
        return Ok(next);
    }
    let list = |u: &Usage| {
        over.iter()
            .map(|k| format!("{k}={}", format(k, u.get(k).copied().unwrap_or(0))))
            .collect::<Vec<_>>()
            .join(",")
    };
    Err(format!(
        "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
        list(delta),
        list(used),
        list(hard)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> &'static ResourceDef {
        rkube_api::resources::find("", "v1", "pods").unwrap()
    }

    #[test]
    fn usage_counts_objects_and_sums_pod_requests() {
        let names: Vec<String> = [
            "pods",
            "count/pods",
            "requests.cpu",
            "limits.memory",
            "configmaps",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let pod = serde_json::json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "128Mi"}}},
            {"resources": {"requests": {"cpu": "1"}}}]}});
        let u = object_usage(pods(), crate::kinds::of(pods()), &pod, &names).unwrap();
        assert_eq!(u["pods"], 1);
        assert_eq!(u["count/pods"], 1);
        assert_eq!(u["requests.cpu"], 1250);
        assert_eq!(format("requests.cpu", u["requests.cpu"]), "1250m");
        assert_eq!(format("limits.memory", u["limits.memory"]), "128Mi");
        assert!(!u.contains_key("configmaps"));
        let done = serde_json::json!({"status": {"phase": "Succeeded"}});
        assert!(
            object_usage(pods(), crate::kinds::of(pods()), &done, &names)
                .unwrap()
                .is_empty(),
            "terminal pods use nothing"
        );
        let deploy = rkube_api::resources::find("apps", "v1", "deployments").unwrap();
        let names = vec!["count/deployments.apps".to_string()];
        assert_eq!(
            object_usage(
                deploy,
                crate::kinds::of(deploy),
                &serde_json::json!({}),
                &names
            )
            .unwrap()["count/deployments.apps"],
            1
        );
    }

    #[test]
    fn exceeding_names_only_the_exceeded_resources() {
        let hard: Usage = [("pods".to_string(), 2), ("requests.cpu".to_string(), 2000)].into();
        let used: Usage = [("pods".to_string(), 2), ("requests.cpu".to_string(), 500)].into();
        let delta: Usage = [("pods".to_string(), 1), ("requests.cpu".to_string(), 500)].into();
        assert_eq!(
            check("compute", &hard, &used, &delta).unwrap_err(),
            "exceeded quota: compute, requested: pods=1, used: pods=2, limited: pods=2"
        );
        let fits: Usage = [("pods".to_string(), 1)].into();
        let next = check("compute", &hard, &[("pods".to_string(), 1)].into(), &fits).unwrap();
        let huge: Usage = [("requests.cpu".to_string(), i64::MAX)].into();
        assert!(
            check("compute", &hard, &used, &huge).is_err(),
            "overflow is over the limit"
        );
        assert_eq!(next["pods"], 2);
        let st = status(&hard, &next);
        assert_eq!(st["hard"]["requests.cpu"], "2");
        assert_eq!(st["used"]["pods"], "2");
        assert_eq!(st["used"]["requests.cpu"], "0");
    }
}
