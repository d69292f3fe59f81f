//! Field selectors: `key=value`, `key==value`, `key!=value` terms joined by commas, with
//! `\`, `,` and `=` escaped by a backslash in values.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| {
                format!(
                    "{}{}{}",
                    r.field,
                    if r.negated { "!=" } else { "=" },
                    escape(&r.value)
                )
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace(',', "\\,")
        .replace('=', "\\=")
}

impl FieldSelector {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_terms(s)? {
            if term.is_empty() {
                continue;
            }
            let (field, negated, raw) = if let Some(i) = term.find("!=") {
                (&term[..i], true, &term[i + 2..])
            } else if let Some(i) = term.find("==") {
                (&term[..i], false, &term[i + 2..])
            } else if let Some(i) = term.find('=') {
                (&term[..i], false, &term[i + 1..])
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            reqs.push(FieldRequirement {
                field: field.trim().to_string(),
                value: unescape(raw)?,
                negated,
            });
        }
        Ok(FieldSelector { requirements: reqs })
    }

    /// Evaluates the selector; `get` returns the object's value for a field name.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.field).unwrap_or_default();
            (v == r.value) != r.negated
        })
    }

    /// The value a field is pinned to by an `=` requirement.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && !r.negated)
            .map(|r| r.value.as_str())
    }
}

/// Splits on commas that are not escaped.
fn split_terms(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ',' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    Ok(out)
}

fn unescape(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=')) => out.push(n),
                Some(n) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{n}"
                    ))
                }
                None => return Err("invalid field selector: unterminated escape sequence".into()),
            }
        } else if c == '=' || c == ',' {
            return Err(format!(
                "invalid field selector: unescaped '{c}' in value {v:?}"
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_match() {
        let s = FieldSelector::parse("spec.nodeName=node-1,status.phase!=Failed").unwrap();
        assert_eq!(s.exact("spec.nodeName"), Some("node-1"));
        let get = |f: &str| match f {
            "spec.nodeName" => Some("node-1".to_string()),
            "status.phase" => Some("Running".to_string()),
            _ => None,
        };
        assert!(s.matches(get));
        let s = FieldSelector::parse("spec.nodeName==").unwrap();
        assert!(!s.matches(get));
        assert!(s.matches(|_| None));
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c").unwrap();
        assert_eq!(s.requirements[0].value, "a,b=c");
        assert!(FieldSelector::parse("nonsense").is_err());
        assert!(FieldSelector::parse(r"a=b\x").is_err());
        assert_eq!(FieldSelector::parse("").unwrap(), FieldSelector::default());
    }
}

/// A field's value in an object by its dotted path ("" when absent; strings as they are,
/// other values as JSON), as upstream's field sets render them.
pub fn field_at(obj: &serde_json::Value, field: &str) -> String {
    let mut v = obj;
    for p in field.split('.') {
        match v.get(p) {
            Some(x) => v = x,
            None => return String::new(),
        }
    }
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The fields every kind can be selected by.
pub const COMMON_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

impl FieldSelector {
    /// Checks every field against what a kind can be selected by (`COMMON_FIELDS` and
    /// `selectable`), renaming legacy names first (`aliases`: `spec.host` → `spec.nodeName`).
    /// The error is upstream's message.
    pub fn check_fields(
        &mut self,
        selectable: &[&str],
        aliases: &[(&str, &str)],
    ) -> Result<(), String> {
        for r in &mut self.requirements {
            if let Some((_, to)) = aliases.iter().find(|(from, _)| *from == r.field) {
                r.field = (*to).to_string();
            }
            let ok =
                COMMON_FIELDS.contains(&r.field.as_str()) || selectable.contains(&r.field.as_str());
            if !ok {
                return Err(format!("field label not supported: {}", r.field));
            }
        }
        Ok(())
    }

    /// Matches with `get` returning a field's value (empty when absent).
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> &'a str) -> bool {
        self.requirements
            .iter()
            .all(|r| (get(&r.field) == r.value) != r.negated)
    }

    /// Matches against precomputed fields (see `object_fields`).
    pub fn matches_fields(&self, fields: &[(&'static str, String)]) -> bool {
        self.requirements.iter().all(|r| {
            let v = fields
                .iter()
                .find(|(k, _)| *k == r.field)
                .map(|(_, v)| v.as_str())
                .unwrap_or("");
            (v == r.value) != r.negated
        })
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_checked_and_renamed() {
        let mut s = FieldSelector::parse("spec.host=n1,status.phase!=Failed").unwrap();
        s.check_fields(
            &["spec.nodeName", "status.phase"],
            &[("spec.host", "spec.nodeName")],
        )
        .unwrap();
        assert_eq!(s.exact("spec.nodeName"), Some("n1"));
        let mut bad = FieldSelector::parse("spec.nope=x").unwrap();
        assert_eq!(
            bad.check_fields(&[], &[]).unwrap_err(),
            "field label not supported: spec.nope"
        );
        let mut ok = FieldSelector::parse("metadata.name=p").unwrap();
        assert!(ok.check_fields(&[], &[]).is_ok());
        let pod = json!({"spec": {"nodeName": "n1", "replicas": 3}});
        assert_eq!(field_at(&pod, "spec.nodeName"), "n1");
        assert_eq!(field_at(&pod, "spec.replicas"), "3");
        assert_eq!(field_at(&pod, "status.phase"), "");
    }
}
