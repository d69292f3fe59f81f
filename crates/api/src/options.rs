//! Query options of list, watch, get and delete requests, parsed and validated as upstream
//! does (`metav1.ListOptions`, `DeleteOptions`), including its boolean parsing (`watch=1` and
//! `watch=` are true).

use crate::fields::FieldSelector;
use crate::selector::LabelSelector;
use crate::status::{ApiError, StatusCause};

/// Splits and percent-decodes a query string.
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
    /// Parses list/watch query parameters. `legacy_watch` is true for `/watch/` paths.
    pub fn from_query(pairs: &[(String, String)], legacy_watch: bool) -> Result<Self, ApiError> {
        let mut o = ListOptions {
            watch: legacy_watch,
            ..Default::default()
        };
        for (k, v) in pairs {
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
                "watch" => o.watch = query_bool(v),
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
    pub fn parse(body: &[u8], pairs: &[(String, String)]) -> Result<Self, ApiError> {
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
        for (k, v) in pairs {
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
pub fn dry_run(pairs: &[(String, String)]) -> Result<bool, ApiError> {
    let mut dry = false;
    for (k, v) in pairs {
        if k == "dryRun" {
            if v == "All" {
                dry = true;
            } else {
                return Err(ApiError::bad_request(format!(
                    "Invalid dry run value: {v:?}"
                )));
            }
        }
    }
    Ok(dry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Vec<(String, String)> {
        parse_query(s)
    }

    #[test]
    fn query_booleans_as_upstream() {
        assert!(ListOptions::from_query(&q("watch=1"), false).unwrap().watch);
        assert!(ListOptions::from_query(&q("watch="), false).unwrap().watch);
        assert!(
            ListOptions::from_query(&q("watch=true"), false)
                .unwrap()
                .watch
        );
        assert!(
            !ListOptions::from_query(&q("watch=false"), false)
                .unwrap()
                .watch
        );
        assert!(!ListOptions::from_query(&q("watch=0"), false).unwrap().watch);
        assert!(ListOptions::from_query(&q(""), true).unwrap().watch);
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
        let e = ListOptions::from_query(&q("watch=1&sendInitialEvents=true"), false).unwrap_err();
        assert!(e
            .status()
            .message
            .contains("requires setting resourceVersionMatch to NotOlderThan"));
        assert!(ListOptions::from_query(
            &q("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
            false
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
