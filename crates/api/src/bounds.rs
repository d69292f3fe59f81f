//! The bounds every object keeps, whatever way it arrived (a body, a patch's result, an
//! apply): no deeper nesting than `MAX_DEPTH`, so that every JSON reader — ours, kubectl's,
//! kube-rs's (serde_json stops at 128 levels), a list or a watch event wrapped around it — can
//! still read it back. Walks are iterative: a value too deep to recurse over is measured, not
//! recursed into.

use serde_json::Value;

use crate::status::StatusCause;

/// Nesting of objects and arrays an object may have (upstream-like; serde_json reads 128).
pub const MAX_DEPTH: usize = 100;
/// Elements of one array.
pub const MAX_LIST_LEN: usize = 100_000;
/// Bytes of one object key.
pub const MAX_KEY_BYTES: usize = 64 * 1024;

/// The shape of a value: nesting depth (a scalar is 0, `{}` is 1), an estimate of its
/// serialized size in bytes, and the number of values in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub depth: usize,
    pub bytes: usize,
    pub nodes: usize,
}

/// Measures `v`, giving up (`None`) once it is deeper than `max_depth`, larger than
/// `max_bytes` or has more than `max_nodes` values: the walk costs at most `max_nodes` steps.
pub fn measure(v: &Value, max_depth: usize, max_bytes: usize, max_nodes: usize) -> Option<Shape> {
    let mut shape = Shape::default();
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        shape.nodes += 1;
        shape.depth = shape.depth.max(d);
        if shape.nodes > max_nodes || shape.depth > max_depth || shape.bytes > max_bytes {
            return None;
        }
        shape.bytes += match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 20,
            Value::String(s) => s.len() + 2,
            Value::Array(a) => {
                stack.extend(a.iter().map(|c| (c, d + 1)));
                a.len() + 2
            }
            Value::Object(m) => {
                for (k, c) in m {
                    shape.bytes += k.len() + 4;
                    stack.push((c, d + 1));
                }
                2
            }
        };
        // Containers count as a level for what they hold.
        if matches!(v, Value::Array(_) | Value::Object(_)) {
            shape.depth = shape.depth.max(d + 1);
        }
    }
    (shape.depth <= max_depth && shape.bytes <= max_bytes).then_some(shape)
}

/// Whether `v` nests deeper than `limit`.
pub fn deeper_than(v: &Value, limit: usize) -> bool {
    measure(v, limit, usize::MAX, usize::MAX).is_none()
}

/// Checks an object against the bounds: a 422 cause when it is too deep, has a list longer
/// than `MAX_LIST_LEN` or a key longer than `MAX_KEY_BYTES`.
pub fn check(v: &Value) -> Result<(), StatusCause> {
    let refuse = |why: String| Err(StatusCause::invalid_raw("", "<object>", &why));
    if deeper_than(v, MAX_DEPTH) {
        return refuse(format!(
            "the object is nested more than {MAX_DEPTH} levels deep"
        ));
    }
    // Depth is bounded now: a recursive walk is safe.
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(a) => {
                if a.len() > MAX_LIST_LEN {
                    return refuse(format!(
                        "a list has {} items, more than {MAX_LIST_LEN}",
                        a.len()
                    ));
                }
                stack.extend(a.iter());
            }
            Value::Object(m) => {
                for (k, child) in m {
                    if k.len() > MAX_KEY_BYTES {
                        return refuse(format!(
                            "a key is {} bytes long, more than {MAX_KEY_BYTES}",
                            k.len()
                        ));
                    }
                    stack.push(child);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The fields built-in kinds keep a `metav1.Time`/`MicroTime` in.
const TIME_FIELDS: &[&str] = &[
    "creationTimestamp",
    "deletionTimestamp",
    "time",
    "lastTransitionTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "lastUpdateTime",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "startTime",
    "startedAt",
    "finishedAt",
    "renewTime",
    "acquireTime",
    "completionTime",
    "lastScheduleTime",
    "lastSuccessfulTime",
    "expirationTimestamp",
    "lastObservedTime",
];

/// Maps of user strings no time lives in.
const FREE_MAPS: &[&str] = &["annotations", "labels", "data", "binaryData", "stringData"];

/// Checks that every time in an object (as its typed round trip wrote it, under a field that
/// holds one) has a year from 0000 to 9999, which every client can decode.
pub fn check_times(v: &Value) -> Result<(), StatusCause> {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(m) => {
                for (k, child) in m {
                    match child {
                        Value::String(s) if TIME_FIELDS.contains(&k.as_str()) => {
                            if out_of_range_time(s) {
                                return Err(StatusCause::invalid(
                                    k,
                                    s,
                                    "a time must have a year from 0000 to 9999",
                                ));
                            }
                        }
                        _ if FREE_MAPS.contains(&k.as_str()) => {}
                        _ => stack.push(child),
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `s` is an RFC 3339 time whose year is not 0000–9999 (`+10000-01-01T00:00:00Z`,
/// `-0001-01-01T00:00:00Z`: what a typed round trip writes for a time out of that range).
fn out_of_range_time(s: &str) -> bool {
    let b = s.as_bytes();
    let (signed, digits) = match b.first() {
        Some(b'+' | b'-') => (true, &b[1..]),
        _ => (false, b),
    };
    let year = digits.iter().take_while(|c| c.is_ascii_digit()).count();
    if year < 4 || (!signed && year == 4) {
        return false;
    }
    // `-MM-DDTHH:MM:SS`
    let rest = &digits[year..];
    let shape = b"-00-00T00:00:00";
    rest.len() >= shape.len()
        && shape.iter().zip(rest).all(|(want, got)| match want {
            b'0' => got.is_ascii_digit(),
            w => w == got,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn depth_and_size() {
        assert_eq!(measure(&json!(1), 10, 100, 100).unwrap().depth, 0);
        assert_eq!(measure(&json!({}), 10, 100, 100).unwrap().depth, 1);
        assert_eq!(measure(&json!({"a": [1]}), 10, 100, 100).unwrap().depth, 2);
        assert!(check(&nested(MAX_DEPTH)).is_ok());
        assert!(check(&nested(MAX_DEPTH + 1)).is_err());
        assert!(measure(&json!({"s": "x".repeat(1000)}), 10, 100, 100).is_none());
        assert!(measure(&json!([1, 2, 3, 4]), 10, 1000, 3).is_none());
        assert!(check(&json!({"l": vec![0; MAX_LIST_LEN + 1]})).is_err());
        assert!(check(&json!({"l": vec![0; MAX_LIST_LEN]})).is_ok());
        let mut m = serde_json::Map::new();
        m.insert("k".repeat(MAX_KEY_BYTES + 1), json!(1));
        assert!(check(&Value::Object(m)).is_err());
    }

    #[test]
    fn times_stay_within_four_digit_years() {
        for bad in [
            "+10000-01-01T00:00:00Z",
            "-0001-01-01T00:00:00Z",
            "+2026-01-01T00:00:00Z",
            "123456-01-01T00:00:00Z",
        ] {
            assert!(check_times(&json!({"time": bad})).is_err(), "{bad}");
            assert!(
                check_times(&json!({"status": {"conditions": [{"lastTransitionTime": bad}]}}))
                    .is_err(),
                "{bad}"
            );
            // Only fields that hold a time are times: user strings are anything.
            assert!(check_times(&json!({"t": bad})).is_ok(), "{bad}");
            assert!(check_times(&json!({"metadata": {"annotations": {"time": bad}}})).is_ok());
            assert!(check_times(&json!({"data": {"time": bad}})).is_ok());
        }
        for fine in [
            "2026-01-01T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59Z",
            "+1 555 0100",
            "-5",
            "hello",
            "+10000-01-01Tnoon",
        ] {
            assert!(check_times(&json!({"time": fine})).is_ok(), "{fine}");
        }
    }
}
