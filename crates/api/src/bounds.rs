//! The bounds every object keeps, whatever way it arrived (a body, a patch's result, an
//! apply): no deeper nesting than `MAX_DEPTH`, so that every JSON reader — ours, kubectl's,
//! kube-rs's (serde_json stops at 128 levels), a list or a watch event wrapped around it — can
//! still read it back. Walks are iterative: a value too deep to recurse over is measured, not
//! recursed into.

use serde_json::Value;

use crate::status::StatusCause;

/// Nesting of objects and arrays an object may have (upstream-like; serde_json reads 128).
pub const MAX_DEPTH: usize = 100;

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

/// Checks an object against the bounds: a 422 cause when it is too deep.
pub fn check(v: &Value) -> Result<(), StatusCause> {
    if deeper_than(v, MAX_DEPTH) {
        return Err(StatusCause::invalid_raw(
            "",
            "<object>",
            &format!("the object is nested more than {MAX_DEPTH} levels deep"),
        ));
    }
    Ok(())
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
    }
}
