//! Which admission webhooks a request reaches (upstream's `webhook/predicates` and `rules`):
//! a webhook configuration's rules (operations, groups, versions, resources with
//! subresources and wildcards, scope), its namespace and object selectors, parsed once per
//! configuration change. `matchConditions` are CEL and run in `mod.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::LabelSelector;
use serde_json::Value;

use crate::callout::{ca_bundle, Target};
use crate::cel::Expr;

/// One rule of a webhook.
#[derive(Clone, Debug, Default)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*`.
    pub scope: String,
}

/// One webhook of a configuration, ready to match and call.
pub struct Hook {
    /// `<configuration>/<webhook>`: the order they run in.
    pub config: String,
    pub name: String,
    pub rules: Vec<Rule>,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
    pub conditions: Vec<(String, Arc<Expr>)>,
    pub fail_closed: bool,
    pub timeout: Duration,
    pub side_effects: String,
    pub reinvoke: bool,
    pub target: Target,
    pub ca_bundle: Option<Vec<u8>>,
    /// `admissionReviewVersions`, preferred first.
    pub review_versions: Vec<String>,
    /// `matchPolicy` is `Equivalent`.
    pub equivalent: bool,
}

use rkube_api::meta::string_list as strs;

/// A webhook's or policy's label selector: everything when absent, nothing when unparsable.
pub(crate) fn selector(v: Option<&Value>) -> LabelSelector {
    match v {
        Some(s) if !s.is_null() => LabelSelector::from_json(s).unwrap_or_else(|_| nothing()),
        _ => LabelSelector::everything(),
    }
}

/// A selector nothing matches (a stored selector that does not parse selects nothing).
fn nothing() -> LabelSelector {
    LabelSelector::parse("rkube.io/never-matches,!rkube.io/never-matches").unwrap_or_default()
}

/// The webhooks of one configuration object.
pub fn hooks(config: &Value, cel: &mut crate::cel::Cache) -> Vec<Hook> {
    let cname = rkube_api::meta::name(config).to_string();
    let mut out = Vec::new();
    for w in config
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |f: &str| w.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        let cc = w.get("clientConfig").cloned().unwrap_or(Value::Null);
        let Some(target) = Target::of(&cc) else {
            continue;
        };
        let ca_bundle = ca_bundle(&cc);
        let rules = w
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strs(r.get("operations")),
                groups: strs(r.get("apiGroups")),
                versions: strs(r.get("apiVersions")),
                resources: strs(r.get("resources")),
                scope: r.get("scope").and_then(Value::as_str).unwrap_or("*").into(),
            })
            .collect();
        let conditions = w
            .get("matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let name = c.get("name").and_then(Value::as_str)?.to_string();
                let expr = cel.get(c.get("expression").and_then(Value::as_str)?).ok()?;
                Some((name, expr))
            })
            .collect();
        out.push(Hook {
            config: cname.clone(),
            name: s("name"),
            rules,
            namespace_selector: selector(w.get("namespaceSelector")),
            object_selector: selector(w.get("objectSelector")),
            conditions,
            fail_closed: s("failurePolicy") != "Ignore",
            timeout: Duration::from_secs(
                w.get("timeoutSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(10)
                    .clamp(1, 30),
            ),
            side_effects: s("sideEffects"),
            reinvoke: s("reinvocationPolicy") == "IfNeeded",
            target,
            ca_bundle,
            review_versions: strs(w.get("admissionReviewVersions")),
            equivalent: s("matchPolicy") != "Exact",
        });
    }
    out
}

/// What a request is, as rules see it.
pub struct Request<'a> {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespaced: bool,
}

fn any(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

/// Whether a rule's resource entry matches `resource` with `sub`resource.
fn resource_matches(entry: &str, resource: &str, sub: &str) -> bool {
    let (r, s) = entry.split_once('/').unwrap_or((entry, ""));
    let res_ok = r == "*" || r == resource;
    let sub_ok = if entry.contains('/') {
        s == "*" || s == sub
    } else {
        sub.is_empty()
    };
    res_ok && sub_ok
}

impl Rule {
    pub fn matches(&self, r: &Request) -> bool {
        self.matches_policy(r, false)
    }

    /// With `equivalent` (`matchPolicy: Equivalent`, the default), a rule naming another
    /// version of the same group and resource matches too: writing through a second version
    /// of a resource does not bypass a webhook or policy.
    pub fn matches_policy(&self, r: &Request, equivalent: bool) -> bool {
        any(&self.operations, r.operation)
            && any(&self.groups, r.group)
            && (equivalent || any(&self.versions, r.version))
            && self
                .resources
                .iter()
                .any(|e| resource_matches(e, r.resource, r.subresource))
            && match self.scope.as_str() {
                "Cluster" => !r.namespaced,
                "Namespaced" => r.namespaced,
                _ => true,
            }
    }
}

/// Labels of an object ("" when it has none).
pub fn labels(obj: Option<&Value>) -> BTreeMap<String, String> {
    obj.map(rkube_api::meta::labels)
        .unwrap_or_default()
        .into_iter()
        .collect()
}

impl Hook {
    /// The rules and selectors (not the CEL conditions): `namespace_labels` are the request
    /// namespace's (`None` for cluster-scoped objects, which namespace selectors always
    /// match — except Namespaces, which are matched by their own labels).
    pub fn matches(
        &self,
        r: &Request,
        namespace_labels: Option<&BTreeMap<String, String>>,
        new: Option<&Value>,
        old: Option<&Value>,
    ) -> bool {
        if !self
            .rules
            .iter()
            .any(|rule| rule.matches_policy(r, self.equivalent))
        {
            return false;
        }
        if let Some(ns) = namespace_labels {
            if !self.namespace_selector.matches(ns) {
                return false;
            }
        }
        // The object selector matches the new or the old object.
        let (n, o) = (labels(new), labels(old));
        (new.is_some() && self.object_selector.matches(&n))
            || (old.is_some() && self.object_selector.matches(&o))
            || (new.is_none() && old.is_none())
    }

    /// Whether a dry run may reach it.
    pub fn dry_run_safe(&self) -> bool {
        matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req<'a>(op: &'a str, resource: &'a str, sub: &'a str) -> Request<'a> {
        Request {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            namespaced: true,
        }
    }

    #[test]
    fn rules_selectors_and_wildcards() {
        let cfg = json!({"metadata": {"name": "c"}, "webhooks": [{"name": "w.example.com", "sideEffects": "None",
            "clientConfig": {"url": "https://127.0.0.1:9443/m"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "*/status"]}],
            "namespaceSelector": {"matchLabels": {"hooked": "yes"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}]});
        let mut cel = crate::cel::Cache::default();
        let h = &hooks(&cfg, &mut cel)[0];
        let yes: BTreeMap<String, String> = [("hooked".to_string(), "yes".to_string())].into();
        let pod = json!({"metadata": {"labels": {"app": "a"}}});
        assert!(h.matches(&req("CREATE", "pods", ""), Some(&yes), Some(&pod), None));
        assert!(!h.matches(&req("UPDATE", "pods", ""), Some(&yes), Some(&pod), None));
        assert!(!h.matches(&req("CREATE", "pods", "log"), Some(&yes), Some(&pod), None));
        assert!(h.matches(
            &req("CREATE", "deployments", "status"),
            Some(&yes),
            Some(&pod),
            None
        ));
        assert!(!h.matches(
            &req("CREATE", "pods", ""),
            Some(&BTreeMap::new()),
            Some(&pod),
            None
        ));
        let skipped = json!({"metadata": {"labels": {"skip": "1"}}});
        assert!(!h.matches(&req("CREATE", "pods", ""), Some(&yes), Some(&skipped), None));
        assert!(h.dry_run_safe());
        assert!(h.fail_closed);
        assert_eq!(h.timeout, Duration::from_secs(10));
    }
}
