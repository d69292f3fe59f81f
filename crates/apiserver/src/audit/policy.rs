//! `--audit-policy-file`: an `audit.k8s.io/v1` Policy. The first rule matching a request gives
//! its level (None when none does); rules match by user, group, verb, resources (by group,
//! resource or `resource/subresource`, names), namespaces and non-resource URLs, as upstream's
//! `ruleMatches`.

use rkube_api::authz::{Attributes, UserInfo};
use serde::Deserialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: Option<serde_yaml::Value>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Parses and checks a policy document; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let p: Policy = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if p.kind != "Policy" || !matches!(p.api_version.as_str(), "audit.k8s.io/v1") {
            return Err(format!(
                "want apiVersion audit.k8s.io/v1, kind Policy; got {}, {}",
                p.api_version, p.kind
            ));
        }
        Ok(p)
    }

    /// The level for a request and the stages to leave out.
    pub fn level(&self, user: &UserInfo, a: &Attributes) -> (Level, Vec<Stage>) {
        for r in &self.rules {
            if matches(r, user, a) {
                let mut omit = self.omit_stages.clone();
                omit.extend(r.omit_stages.iter().copied());
                return (r.level, omit);
            }
        }
        (Level::None, Vec::new())
    }
}

fn matches(r: &Rule, user: &UserInfo, a: &Attributes) -> bool {
    if !r.users.is_empty() && !r.users.contains(&user.name) {
        return false;
    }
    if !r.user_groups.is_empty() && !user.groups.iter().any(|g| r.user_groups.contains(g)) {
        return false;
    }
    if !r.verbs.is_empty() && !r.verbs.contains(&a.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return a.resource_request && matches_resource(r, a);
    }
    if !r.non_resource_urls.is_empty() {
        return !a.resource_request
            && r.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
            });
    }
    true
}

fn matches_resource(r: &Rule, a: &Attributes) -> bool {
    if !r.namespaces.is_empty() && !r.namespaces.contains(&a.namespace) {
        return false;
    }
    if r.resources.is_empty() {
        return true;
    }
    let combined = a.resource_and_sub();
    r.resources.iter().any(|gr| {
        if gr.group != a.api_group {
            return false;
        }
        if gr.resources.is_empty() {
            return true;
        }
        gr.resources.iter().any(|res| {
            let hit = *res == combined
                || (a.subresource.is_empty() && *res == a.resource)
                || *res == format!("*/{}", a.subresource)
                || *res == format!("{}/*", a.resource)
                || res == "*";
            hit && (gr.resource_names.is_empty() || gr.resource_names.contains(&a.name))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps"]
- level: RequestResponse
  verbs: ["create", "patch"]
  resources:
  - group: apps
    resources: ["deployments", "deployments/scale"]
- level: Request
  namespaces: ["kube-system"]
- level: Metadata
  omitStages: [ResponseStarted]
"#;

    fn a(verb: &str, group: &str, res: &str, sub: &str, ns: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: res.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = Policy::parse(POLICY).unwrap();
        let alice = UserInfo::authenticated("alice", "", vec![]);
        let level = |a: &Attributes| p.level(&alice, a).0;
        let cases = [
            (a("get", "", "secrets", "", "default"), Level::Metadata),
            (
                a("create", "apps", "deployments", "", "default"),
                Level::RequestResponse,
            ),
            (
                a("patch", "apps", "deployments", "scale", "default"),
                Level::RequestResponse,
            ),
            (
                a("get", "apps", "deployments", "", "default"),
                Level::Metadata,
            ),
            (a("list", "", "pods", "", "kube-system"), Level::Request),
        ];
        for (attrs, want) in cases {
            assert_eq!(level(&attrs), want, "{attrs:?}");
        }
        let health = Attributes {
            verb: "get".into(),
            path: "/healthz/etcd".into(),
            ..Default::default()
        };
        assert_eq!(level(&health), Level::None);
        let proxy = UserInfo::authenticated("system:kube-proxy", "", vec![]);
        assert_eq!(
            p.level(&proxy, &a("get", "", "pods", "", "x")).0,
            Level::None
        );
        let (_, omit) = p.level(&alice, &a("watch", "", "pods", "", "x"));
        assert_eq!(omit, [Stage::RequestReceived, Stage::ResponseStarted]);
    }

    #[test]
    fn malformed_policies_are_refused_with_the_reason() {
        assert!(Policy::parse("apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .contains("audit.k8s.io/v1"));
        let bad_level = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n";
        assert!(Policy::parse(bad_level).unwrap_err().contains("Loud"));
        let typo =
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  user: [x]\n";
        assert!(Policy::parse(typo).unwrap_err().contains("user"));
    }
}
