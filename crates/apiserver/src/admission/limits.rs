//! LimitRanger over JSON: a namespace's LimitRanges default and bound each container's
//! requests and limits (`type: Container`: `default`, `defaultRequest`, `min`, `max`,
//! `maxLimitRequestRatio`), with upstream's messages.

use rkube_api::quantity::{parse_milli, parse_value};
use serde_json::{json, Map, Value};

/// A quantity in comparable units: millis for cpu, plain values for everything else.
fn amount(resource: &str, q: &Value) -> Option<i64> {
    let s = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    if resource == "cpu" {
        parse_milli(&s)
    } else {
        parse_value(&s)
    }
}

fn text(q: &Value) -> String {
    match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn container_items(range: &Value) -> impl Iterator<Item = &Value> {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some("Container"))
}

/// Fills missing requests and limits of every container from the ranges' defaults: a missing
/// limit takes `default`; a missing request takes `defaultRequest`, else `default`.
pub fn apply_defaults(pod: &mut Value, ranges: &[Value]) {
    for item in ranges.iter().flat_map(container_items) {
        for list in ["containers", "initContainers"] {
            let Some(cs) = pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for c in cs {
                let resources = c
                    .as_object_mut()
                    .map(|o| o.entry("resources").or_insert_with(|| json!({})));
                let Some(Value::Object(res)) = resources else {
                    continue;
                };
                fill(res, "limits", item.get("default"));
                let request_default = item.get("defaultRequest").or_else(|| item.get("default"));
                fill(res, "requests", request_default);
            }
        }
    }
}

fn fill(res: &mut Map<String, Value>, field: &str, defaults: Option<&Value>) {
    let Some(Value::Object(defaults)) = defaults else {
        return;
    };
    let target = res.entry(field).or_insert_with(|| json!({}));
    let Value::Object(target) = target else {
        return;
    };
    for (k, v) in defaults {
        target.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// Every violation of the ranges' bounds, as upstream words them.
pub fn violations(pod: &Value, ranges: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for item in ranges.iter().flat_map(container_items) {
        let bound = |field: &str| item.get(field).and_then(Value::as_object);
        for list in ["containers", "initContainers"] {
            for c in pod
                .pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let get = |field: &str, r: &str| c.pointer(&format!("/resources/{field}/{r}"));
                if let Some(min) = bound("min") {
                    for (r, q) in min {
                        let floor = amount(r, q).unwrap_or(0);
                        match get("requests", r).and_then(|v| amount(r, v)) {
                            Some(req) if req < floor => out.push(format!(
                                "minimum {r} usage per Container is {}, but request is {}",
                                text(q),
                                text(get("requests", r).unwrap())
                            )),
                            None => out.push(format!(
                                "minimum {r} usage per Container is {}.  No request is specified",
                                text(q)
                            )),
                            _ => {}
                        }
                    }
                }
                if let Some(max) = bound("max") {
                    for (r, q) in max {
                        let ceiling = amount(r, q).unwrap_or(i64::MAX);
                        match get("limits", r).and_then(|v| amount(r, v)) {
                            Some(lim) if lim > ceiling => out.push(format!(
                                "maximum {r} usage per Container is {}, but limit is {}",
                                text(q),
                                text(get("limits", r).unwrap())
                            )),
                            None => out.push(format!(
                                "maximum {r} usage per Container is {}.  No limit is specified",
                                text(q)
                            )),
                            _ => {}
                        }
                    }
                }
                if let Some(ratios) = bound("maxLimitRequestRatio") {
                    for (r, q) in ratios {
                        let (Some(lim), Some(req)) = (
                            get("limits", r).and_then(|v| amount(r, v)),
                            get("requests", r).and_then(|v| amount(r, v)),
                        ) else {
                            continue;
                        };
                        let max_ratio = parse_milli(&text(q)).unwrap_or(i64::MAX);
                        if req > 0 && lim.saturating_mul(1000) > max_ratio.saturating_mul(req) {
                            out.push(format!(
                                "{r} max limit to request ratio per Container is {}, but provided ratio is {:.6}",
                                text(q),
                                lim as f64 / req as f64
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Value {
        json!({"spec": {"limits": [{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"},
            "max": {"cpu": "1"}, "min": {"cpu": "50m"}, "maxLimitRequestRatio": {"cpu": "10"}}]}})
    }

    #[test]
    fn defaults_fill_only_what_is_missing() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "resources": {"limits": {"cpu": "800m"}}}]}});
        apply_defaults(&mut pod, &[range()]);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"]["cpu"],
            "800m"
        );
        assert!(
            violations(&pod, &[range()]).is_empty(),
            "{:?}",
            violations(&pod, &[range()])
        );
    }

    #[test]
    fn bounds_are_checked_with_upstreams_words() {
        let pod = json!({"spec": {"containers": [{"name": "a", "image": "x",
            "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "10m"}}}]}});
        assert_eq!(
            violations(&pod, &[range()]),
            [
                "minimum cpu usage per Container is 50m, but request is 10m",
                "maximum cpu usage per Container is 1, but limit is 2",
                "cpu max limit to request ratio per Container is 10, but provided ratio is 200.000000",
            ]
        );
    }
}
