//! The JSONPath subset custom resources' `additionalPrinterColumns` use (upstream's
//! `k8s.io/client-go/util/jsonpath` as the table convertor calls it): `.a.b`, `.a[0]`, `.a[*]`,
//! `.a[-1]`, `.a['b.c']` and filters `[?(@.type=="Ready")]`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Field(String),
    Index(i64),
    All,
    /// `[?(@.<path>=="<value>")]` (or `!=`).
    Filter(Vec<String>, String, bool),
}

/// Parses a path; an error names what is wrong, for the CRD's validation.
pub fn parse(path: &str) -> Result<Vec<Step>, String> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    if p.len() > 512 {
        return Err("too long".into());
    }
    let b = p.as_bytes();
    let mut i = 0;
    let mut steps = Vec::new();
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                    j += 1;
                }
                if j == start {
                    return Err(format!("empty field name at {i}"));
                }
                steps.push(Step::Field(p[start..j].to_string()));
                i = j;
            }
            b'[' => {
                let close = p[i..].find(']').map(|c| c + i).ok_or("unclosed [")?;
                // A filter's value may contain ']': find the `)]` that ends it.
                let (inner, end) = if p[i + 1..].starts_with("?(") {
                    let e = p[i..].find(")]").map(|c| c + i).ok_or("unclosed filter")?;
                    (&p[i + 1..e + 1], e + 2)
                } else {
                    (&p[i + 1..close], close + 1)
                };
                steps.push(bracket(inner)?);
                i = end;
            }
            _ => return Err(format!("unexpected {:?} at {i}", b[i] as char)),
        }
    }
    if steps.is_empty() {
        return Err("empty path".into());
    }
    Ok(steps)
}

fn bracket(inner: &str) -> Result<Step, String> {
    let inner = inner.trim();
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Ok(Step::Index(n));
    }
    if let Some(q) = inner
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
    {
        return Ok(Step::Field(q.to_string()));
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|s| s.strip_suffix(')')) {
        let (lhs, rhs, eq) = match (f.split_once("=="), f.split_once("!=")) {
            (Some((l, r)), _) => (l, r, true),
            (None, Some((l, r))) => (l, r, false),
            _ => return Err(format!("unsupported filter {f:?}")),
        };
        let lhs = lhs
            .trim()
            .strip_prefix("@.")
            .ok_or("a filter starts with @.")?;
        let rhs = rhs.trim();
        let value = rhs
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| rhs.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(rhs);
        return Ok(Step::Filter(
            lhs.split('.').map(String::from).collect(),
            value.to_string(),
            eq,
        ));
    }
    Err(format!("unsupported subscript [{inner}]"))
}

/// Every value the path reaches in `obj`.
pub fn eval<'a>(steps: &[Step], obj: &'a Value) -> Vec<&'a Value> {
    let mut cur = vec![obj];
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => next.extend(v.get(f)),
                Step::Index(n) => {
                    if let Some(a) = v.as_array() {
                        let i = if *n < 0 { a.len() as i64 + n } else { *n };
                        next.extend(usize::try_from(i).ok().and_then(|i| a.get(i)));
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(path, want, eq) => {
                    for item in v.as_array().into_iter().flatten() {
                        let mut at = Some(item);
                        for f in path {
                            at = at.and_then(|x| x.get(f));
                        }
                        let text = at.map(|x| match x {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        });
                        if (text.as_deref() == Some(want.as_str())) == *eq {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_the_paths_printer_columns_use() {
        let obj = json!({"spec": {"replicas": 3, "a.b": "dotted"}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        let at = |p: &str| -> Vec<Value> {
            eval(&parse(p).unwrap(), &obj)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(at(".spec.replicas"), [json!(3)]);
        assert_eq!(at(".spec['a.b']"), [json!("dotted")]);
        assert_eq!(
            at(".status.conditions[?(@.type==\"Ready\")].status"),
            [json!("True")]
        );
        assert_eq!(
            at(".status.conditions[*].type"),
            [json!("Ready"), json!("Synced")]
        );
        assert_eq!(at(".status.conditions[-1].type"), [json!("Synced")]);
        assert!(at(".spec.missing").is_empty());
        assert!(parse("spec").is_err());
        assert!(parse(".spec[").is_err());
    }
}
