//! Label selectors with apimachinery's grammar (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`,
//! and `>`/`<` for integer comparison), and their matching rules.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
    pub values: Vec<String>,
}

impl Requirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(|s| s.as_str()))
    }

    /// Matching over any label storage: `get` returns a label's value.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let v = get(&self.key);
        match self.op {
            Op::Equals | Op::DoubleEquals | Op::In => {
                v.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Op::NotEquals | Op::NotIn => v.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
            Op::GreaterThan | Op::LessThan => {
                let (Some(v), Some(bound)) = (
                    v.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Op::Exists => write!(f, "{}", self.key),
            Op::DoesNotExist => write!(f, "!{}", self.key),
            Op::Equals => write!(f, "{}={}", self.key, self.values.join("")),
            Op::DoubleEquals => write!(f, "{}=={}", self.key, self.values.join("")),
            Op::NotEquals => write!(f, "{}!={}", self.key, self.values.join("")),
            Op::GreaterThan => write!(f, "{}>{}", self.key, self.values.join("")),
            Op::LessThan => write!(f, "{}<{}", self.key, self.values.join("")),
            Op::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Op::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

/// A parsed label selector: requirements ANDed together. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

fn lex(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '(' => {
                out.push(Tok::Open);
                i += 1
            }
            ')' => {
                out.push(Tok::Close);
                i += 1
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1
            }
            '>' => {
                out.push(Tok::Gt);
                i += 1
            }
            '<' => {
                out.push(Tok::Lt);
                i += 1
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::NotEq);
                i += 2
            }
            '!' => {
                out.push(Tok::Not);
                i += 1
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::DoubleEq);
                i += 2
            }
            '=' => {
                out.push(Tok::Eq);
                i += 1
            }
            _ => {
                let start = i;
                while i < chars.len() && !" \t\n\r()!=,<>".contains(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
            }
        }
    }
    out
}

impl LabelSelector {
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matching over any label storage: `get` returns a label's value.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.requirements.iter().all(|r| r.matches_with(get))
    }

    /// Parses the string form (`app=nginx,tier in (web,api),!canary`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let toks = lex(s);
        let mut p = 0;
        let mut reqs = Vec::new();
        if toks.is_empty() {
            return Ok(LabelSelector::default());
        }
        loop {
            let (req, next) = parse_requirement(&toks, p)?;
            validate_requirement(&req)?;
            reqs.push(req);
            p = next;
            match toks.get(p) {
                None => break,
                Some(Tok::Comma) => {
                    p += 1;
                    if p >= toks.len() {
                        return Err("found '', expected: identifier after ','".into());
                    }
                }
                Some(t) => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        tok_text(t)
                    ))
                }
            }
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements: reqs })
    }

    /// Builds a selector from its JSON form (`matchLabels`, `matchExpressions`).
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let match_labels: BTreeMap<String, String> = v
            .get("matchLabels")
            .and_then(|m| m.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let exprs: Vec<(String, String, Vec<String>)> = v
            .get("matchExpressions")
            .and_then(|m| m.as_array())
            .map(|a| {
                a.iter()
                    .map(|e| {
                        let s =
                            |k: &str| e.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
                        let values = e
                            .get("values")
                            .and_then(|v| v.as_array())
                            .map(|v| {
                                v.iter()
                                    .filter_map(|x| x.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (s("key"), s("operator"), values)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self::from_parts(&match_labels, &exprs)
    }

    /// Builds a selector from a typed `metav1.LabelSelector` (an empty one selects
    /// everything).
    pub fn from_api(
        s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Result<Self, String> {
        let exprs: Vec<(String, String, Vec<String>)> = s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.key.clone(),
                    e.operator.clone(),
                    e.values.clone().unwrap_or_default(),
                )
            })
            .collect();
        Self::from_parts(&s.match_labels.clone().unwrap_or_default(), &exprs)
    }

    /// Builds a selector from the structured form used in Deployments and ReplicaSets.
    pub fn from_parts(
        match_labels: &BTreeMap<String, String>,
        expressions: &[(String, String, Vec<String>)],
    ) -> Result<Self, String> {
        let mut reqs: Vec<Requirement> = match_labels
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                op: Op::Equals,
                values: vec![v.clone()],
            })
            .collect();
        for (key, op, values) in expressions {
            let op = match op.as_str() {
                "In" => Op::In,
                "NotIn" => Op::NotIn,
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            let mut values = values.clone();
            values.sort();
            reqs.push(Requirement {
                key: key.clone(),
                op,
                values,
            });
        }
        for r in &reqs {
            validate_requirement(r)?;
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements: reqs })
    }

    /// The value every matching object must carry for `key`, if the selector pins one.
    pub fn exact_value(&self, key: &str) -> Option<&str> {
        self.requirements.iter().find_map(|r| match r.op {
            Op::Equals | Op::DoubleEquals if r.key == key => r.values.first().map(|s| s.as_str()),
            Op::In if r.key == key && r.values.len() == 1 => r.values.first().map(|s| s.as_str()),
            _ => None,
        })
    }
}

fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Not => "!".into(),
        Tok::Eq => "=".into(),
        Tok::DoubleEq => "==".into(),
        Tok::NotEq => "!=".into(),
        Tok::In => "in".into(),
        Tok::NotIn => "notin".into(),
        Tok::Open => "(".into(),
        Tok::Close => ")".into(),
        Tok::Comma => ",".into(),
        Tok::Gt => ">".into(),
        Tok::Lt => "<".into(),
    }
}

fn parse_requirement(toks: &[Tok], mut p: usize) -> Result<(Requirement, usize), String> {
    let negated = toks.get(p) == Some(&Tok::Not);
    if negated {
        p += 1;
    }
    let key = match toks.get(p) {
        Some(Tok::Ident(k)) => k.clone(),
        Some(t) => return Err(format!("found '{}', expected: identifier", tok_text(t))),
        None => return Err("found '', expected: identifier".into()),
    };
    p += 1;
    if negated {
        return Ok((
            Requirement {
                key,
                op: Op::DoesNotExist,
                values: vec![],
            },
            p,
        ));
    }
    let op = match toks.get(p) {
        None | Some(Tok::Comma) => {
            return Ok((
                Requirement {
                    key,
                    op: Op::Exists,
                    values: vec![],
                },
                p,
            ))
        }
        Some(Tok::Eq) => Op::Equals,
        Some(Tok::DoubleEq) => Op::DoubleEquals,
        Some(Tok::NotEq) => Op::NotEquals,
        Some(Tok::In) => Op::In,
        Some(Tok::NotIn) => Op::NotIn,
        Some(Tok::Gt) => Op::GreaterThan,
        Some(Tok::Lt) => Op::LessThan,
        Some(t) => {
            return Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                tok_text(t)
            ))
        }
    };
    p += 1;
    let mut values = Vec::new();
    if matches!(op, Op::In | Op::NotIn) {
        if toks.get(p) != Some(&Tok::Open) {
            return Err(format!(
                "found '{}', expected: '('",
                toks.get(p).map(tok_text).unwrap_or_default()
            ));
        }
        p += 1;
        // Values separated by commas; empty entries are empty strings.
        let mut expect_value = true;
        loop {
            match toks.get(p) {
                Some(Tok::Ident(v)) if expect_value => {
                    values.push(v.clone());
                    expect_value = false;
                    p += 1;
                }
                Some(Tok::Comma) => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                    p += 1;
                }
                Some(Tok::Close) => {
                    if expect_value && !values.is_empty() {
                        values.push(String::new());
                    }
                    p += 1;
                    break;
                }
                Some(t) => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        tok_text(t)
                    ))
                }
                None => return Err("found '', expected: ')'".into()),
            }
        }
        values.sort();
        values.dedup();
    } else {
        match toks.get(p) {
            Some(Tok::Ident(v)) => {
                values.push(v.clone());
                p += 1;
            }
            None | Some(Tok::Comma) => values.push(String::new()),
            Some(t) => return Err(format!("found '{}', expected: identifier", tok_text(t))),
        }
    }
    Ok((Requirement { key, op, values }, p))
}

fn validate_requirement(r: &Requirement) -> Result<(), String> {
    crate::validation::qualified_name(&r.key)
        .map_err(|e| format!("key: Invalid value: {:?}: {e}", r.key))?;
    match r.op {
        Op::GreaterThan | Op::LessThan => {
            let v = r.values.first().cloned().unwrap_or_default();
            if v.parse::<i64>().is_err() {
                return Err(format!(
                    "for 'Gt', 'Lt' operators, the value must be an integer: {v:?}"
                ));
            }
        }
        Op::Equals | Op::DoubleEquals | Op::NotEquals if r.values.len() != 1 => {
            return Err("exact-match compatibility requires one single value".into());
        }
        _ => {}
    }
    for v in &r.values {
        crate::validation::label_value(v)
            .map_err(|e| format!("values[0][{}]: Invalid value: {v:?}: {e}", r.key))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn grammar_and_matching() {
        let l = labels(&[("app", "nginx"), ("tier", "web"), ("n", "5")]);
        for (sel, want) in [
            ("", true),
            ("app=nginx", true),
            ("app==nginx", true),
            ("app!=nginx", false),
            ("app!=other", true),
            ("missing!=x", true),
            ("tier in (web,api)", true),
            ("tier notin (web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=nginx,tier=api", false),
            ("n>4", true),
            ("n<5", false),
            ("x in (foo,,baz),app", false),
        ] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn errors() {
        for bad in [
            "app=",
            "=x",
            "app in web",
            "app in (web",
            "a,",
            "n>x",
            "app=nginx extra",
            "-bad=x",
        ] {
            let r = LabelSelector::parse(bad);
            if bad == "app=" {
                // An empty value is allowed: `app=` selects app with the empty value.
                assert!(r.is_ok());
                continue;
            }
            assert!(r.is_err(), "{bad} should not parse: {r:?}");
        }
    }

    #[test]
    fn display_roundtrip() {
        let s = LabelSelector::parse("tier in (web,api),app=nginx,!canary").unwrap();
        assert_eq!(s.to_string(), "app=nginx,!canary,tier in (api,web)");
        assert_eq!(LabelSelector::parse(&s.to_string()).unwrap(), s);
    }
}
