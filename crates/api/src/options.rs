//! Query options of list, watch, get and delete requests, parsed and validated as upstream
//! does (`metav1.ListOptions`, `DeleteOptions`), including its boolean parsing (`watch=1` and
//! `watch=` are true).

use crate::fields::FieldSelector;
use crate::selector::LabelSelector;
use crate::status::{ApiError, StatusCause};

/// A request's query, percent-decoded, with every key at most once: a repeated key could be
/// read one way by one stage (authorization, limits) and another way by the handler, so it is
/// refused. Every stage reads the same `Query`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

/// The longest query accepted (selectors of thousands of terms fit).
pub const MAX_QUERY_BYTES: usize = 32 * 1024;

/// The parameters that are lists, given once per item.
const REPEATABLE: [&str; 2] = ["command", "ports"];

impl Query {
    /// Parses a raw query string; a repeated key (other than the lists `command` and `ports`
    /// of exec and port-forward) or an oversized query is a 400.
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        if raw.len() > MAX_QUERY_BYTES {
            return Err(ApiError::bad_request(format!(
                "the query string is too long: {} bytes, the limit is {MAX_QUERY_BYTES}",
                raw.len()
            )));
        }
        let pairs = parse_query(raw);
        let mut seen = std::collections::HashSet::with_capacity(pairs.len());
        for (k, _) in &pairs {
            if !seen.insert(k.as_str()) && !REPEATABLE.contains(&k.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "the query parameter {k:?} is given more than once"
                )));
            }
        }
        Ok(Query { pairs })
    }

    /// Builds a query from pairs (tests and internal callers), refusing repeats like `parse`.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Self, ApiError> {
        let raw: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
            .collect();
        Self::parse(&raw.join("&"))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a list parameter, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// apimachinery's boolean parameter: absent is false, `0`/`false` are false, anything
    /// else (also `?watch` and `?watch=`) is true.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key).is_some_and(query_bool)
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// Percent-encodes everything but unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Splits and percent-decodes a query string (repeats kept; `Query::parse` refuses them).
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// apimachinery's query boolean: absent is false; `0` and `false` are false; anything else,
/// including the empty string, is true.
pub fn query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    /// `None` when unset; `Some("0")` means "any".
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: i64,
    pub continue_token: Option<String>,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout_seconds: Option<i64>,
}

fn invalid_list_options(causes: Vec<StatusCause>) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", causes)
}

impl ListOptions {
    /// Parses list/watch query parameters. Whether the request is a watch was decided once,
    /// by the request info (the `watch` parameter or a `/watch/` path); it is not read again.
    pub fn from_query(q: &Query, watch: bool) -> Result<Self, ApiError> {
        let mut o = ListOptions {
            watch,
            ..Default::default()
        };
        for (k, v) in q.pairs() {
            match k.as_str() {
                "labelSelector" => {
                    o.label_selector = LabelSelector::parse(v).map_err(|e| {
                        ApiError::bad_request(format!("unable to parse requirement: {e}"))
                    })?
                }
                "fieldSelector" => {
                    o.field_selector = FieldSelector::parse(v).map_err(ApiError::bad_request)?
                }
                "resourceVersion" => o.resource_version = Some(v.clone()),
                "resourceVersionMatch" if !v.is_empty() => {
                    o.resource_version_match = Some(v.clone())
                }
                "limit" => {
                    o.limit = v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid value for limit: {v:?}"))
                    })?
                }
                "continue" if !v.is_empty() => o.continue_token = Some(v.clone()),
                "allowWatchBookmarks" => o.allow_watch_bookmarks = query_bool(v),
                "sendInitialEvents" => o.send_initial_events = Some(query_bool(v)),
                "timeoutSeconds" => {
                    o.timeout_seconds = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid value for timeoutSeconds: {v:?}"))
                    })?)
                }
                _ => {}
            }
        }
        if let Some(rv) = &o.resource_version {
            // Revisions are etcd int64s: anything beyond is not a version this server issues.
            if !rv.is_empty() && rv.parse::<i64>().map_or(true, |n| n < 0) {
                return Err(ApiError::bad_request(format!(
                    "invalid resource version: {rv}"
                )));
            }
        }
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let rv = self.resource_version.as_deref().unwrap_or("");
        let mut causes = Vec::new();
        if let Some(m) = &self.resource_version_match {
            if self.watch {
                if self.send_initial_events.is_none() {
                    causes.push(StatusCause::forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                } else if m != "NotOlderThan" {
                    causes.push(StatusCause::not_supported(
                        "resourceVersionMatch",
                        m,
                        &["NotOlderThan"],
                    ));
                }
            } else {
                if rv.is_empty() {
                    causes.push(StatusCause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if self.continue_token.is_some() {
                    causes.push(StatusCause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                match m.as_str() {
                    "Exact" if rv == "0" => causes.push(StatusCause::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    )),
                    "Exact" | "NotOlderThan" => {}
                    other => causes.push(StatusCause::not_supported(
                        "resourceVersionMatch",
                        other,
                        &["Exact", "NotOlderThan"],
                    )),
                }
            }
        }
        if let Some(sie) = self.send_initial_events {
            if !self.watch {
                causes.push(StatusCause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            } else if sie && self.resource_version_match.as_deref() != Some("NotOlderThan") {
                causes.push(StatusCause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
        }
        if !causes.is_empty() {
            return Err(invalid_list_options(causes));
        }
        if !self.watch && self.continue_token.is_some() && !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Ok(())
    }
}

/// How a delete request asked dependents to be handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub propagation: Option<Propagation>,
    pub orphan_dependents: Option<bool>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Merges the JSON body (a `DeleteOptions` object, possibly empty) and the query.
    pub fn parse(body: &[u8], q: &Query) -> Result<Self, ApiError> {
        let mut o = DeleteOptions::default();
        if body.iter().any(|b| !b.is_ascii_whitespace()) {
            let v: serde_json::Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
            if let Some(kind) = v.get("kind").and_then(|k| k.as_str()) {
                if kind != "DeleteOptions" {
                    return Err(ApiError::bad_request(format!(
                        "expected DeleteOptions, got {kind}"
                    )));
                }
            }
            o.grace_period_seconds = v.get("gracePeriodSeconds").and_then(|g| g.as_i64());
            if let Some(p) = v.get("preconditions") {
                o.precondition_uid = p.get("uid").and_then(|u| u.as_str()).map(String::from);
                o.precondition_resource_version = p
                    .get("resourceVersion")
                    .and_then(|u| u.as_str())
                    .map(String::from);
            }
            if let Some(p) = v.get("propagationPolicy").and_then(|p| p.as_str()) {
                o.propagation = Some(parse_propagation(p)?);
            }
            o.orphan_dependents = v.get("orphanDependents").and_then(|b| b.as_bool());
            o.dry_run = v
                .get("dryRun")
                .and_then(|d| d.as_array())
                .is_some_and(|a| a.iter().any(|x| x == "All"));
        }
        for (k, v) in q.pairs() {
            match k.as_str() {
                "gracePeriodSeconds" => {
                    o.grace_period_seconds = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "invalid value for gracePeriodSeconds: {v:?}"
                        ))
                    })?)
                }
                "propagationPolicy" => o.propagation = Some(parse_propagation(v)?),
                "orphanDependents" => o.orphan_dependents = Some(query_bool(v)),
                "dryRun" => o.dry_run = o.dry_run || v == "All",
                _ => {}
            }
        }
        if o.orphan_dependents.is_some() && o.propagation.is_some() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![StatusCause::invalid(
                    "propagationPolicy",
                    "",
                    "orphanDependents and deletionPropagation cannot be both set",
                )],
            ));
        }
        Ok(o)
    }
}

fn parse_propagation(p: &str) -> Result<Propagation, ApiError> {
    match p {
        "Orphan" => Ok(Propagation::Orphan),
        "Background" => Ok(Propagation::Background),
        "Foreground" => Ok(Propagation::Foreground),
        other => Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![StatusCause::not_supported(
                "propagationPolicy",
                other,
                &["Foreground", "Background", "Orphan", "nil"],
            )],
        )),
    }
}

/// `dryRun=All` on a mutating request; any other value is refused as upstream does.
pub fn dry_run(q: &Query) -> Result<bool, ApiError> {
    match q.get("dryRun") {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(v) => Err(ApiError::bad_request(format!(
            "Invalid dry run value: {v:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(s).unwrap()
    }

    /// What the request info decides from `watch`.
    fn w(s: &str) -> bool {
        q(s).flag("watch")
    }

    #[test]
    fn query_booleans_as_upstream() {
        assert!(w("watch=1") && w("watch=") && w("watch") && w("watch=true"));
        assert!(!w("watch=false") && !w("watch=0") && !w(""));
        assert!(ListOptions::from_query(&q(""), true).unwrap().watch);
        // The watch decision is the caller's; the key itself is not read twice.
        assert!(!ListOptions::from_query(&q("watch=1"), false).unwrap().watch);
    }

    #[test]
    fn repeated_keys_are_refused() {
        let e = Query::parse("watch=1&watch=0").unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(
            e.status().message.contains("\"watch\""),
            "{}",
            e.status().message
        );
        assert!(Query::parse("a=1&b=2").is_ok());
        assert!(Query::parse(&"x".repeat(MAX_QUERY_BYTES + 1)).is_err());
        let built = Query::from_pairs(&[("labelSelector", "a in (x,y)"), ("k", "&=")]).unwrap();
        assert_eq!(built.get("labelSelector"), Some("a in (x,y)"));
        assert_eq!(built.get("k"), Some("&="));
    }

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("app%3Dnginx%2Ctier+in"), "app=nginx,tier in");
        let o = ListOptions::from_query(
            &q("labelSelector=app%3Dnginx&limit=5&resourceVersion=0"),
            false,
        )
        .unwrap();
        assert_eq!(o.label_selector.to_string(), "app=nginx");
        assert_eq!(o.limit, 5);
        assert_eq!(o.resource_version.as_deref(), Some("0"));
    }

    #[test]
    fn validation_messages() {
        let e = ListOptions::from_query(&q("resourceVersionMatch=Exact"), false).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(e
            .status()
            .message
            .contains("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        let e = ListOptions::from_query(&q("resourceVersionMatch=Exact&resourceVersion=0"), false)
            .unwrap_err();
        assert!(e.status().message.contains("\"exact\" is forbidden"));
        let e = ListOptions::from_query(&q("sendInitialEvents=true"), false).unwrap_err();
        assert!(e
            .status()
            .message
            .contains("sendInitialEvents is forbidden for list"));
        let e = ListOptions::from_query(&q("sendInitialEvents=true"), true).unwrap_err();
        assert!(e
            .status()
            .message
            .contains("requires setting resourceVersionMatch to NotOlderThan"));
        assert!(ListOptions::from_query(
            &q("sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
            true
        )
        .is_ok());
        let e = ListOptions::from_query(&q("resourceVersion=abc"), false).unwrap_err();
        assert_eq!(e.code(), 400);
        let e = ListOptions::from_query(&q("continue=x&resourceVersion=5"), false).unwrap_err();
        assert_eq!(
            e.status().message,
            "specifying resource version is not allowed when using continue"
        );
    }

    #[test]
    fn delete_options() {
        let o = DeleteOptions::parse(br#"{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,"preconditions":{"uid":"u1"}}"#, &q("propagationPolicy=Foreground")).unwrap();
        assert_eq!(o.grace_period_seconds, Some(0));
        assert_eq!(o.precondition_uid.as_deref(), Some("u1"));
        assert_eq!(o.propagation, Some(Propagation::Foreground));
        assert!(DeleteOptions::parse(b"", &q("propagationPolicy=Sideways")).is_err());
    }
}
