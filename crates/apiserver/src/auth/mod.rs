//! The request chain's identity steps (run by `crate::chain`): authenticate (a bearer token
//! from `--token-auth-file`; otherwise `system:anonymous` when `--anonymous-auth`, else 401),
//! then authorize with the `--authorization-mode` chain (`Node`, `RBAC`, `AlwaysAllow`,
//! `AlwaysDeny`: the first Allow or Deny wins; nobody allowing is a 403 with upstream's
//! message). The user rides along as a request extension.

pub mod bootstrap;
pub mod rbac;
pub mod serviceaccount;
pub mod tokens;

use std::collections::HashMap;
use std::sync::Arc;

use rkube_api::authz::{self, Attributes, Decision, UserInfo};
use rkube_api::ApiError;

use crate::registry::{Registries, Registry};

/// One step of `--authorization-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Rbac,
    Node,
}

impl Mode {
    /// `--authorization-mode=Node,RBAC`.
    pub fn parse_list(s: &str) -> Result<Vec<Mode>, String> {
        s.split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| match m {
                "AlwaysAllow" => Ok(Mode::AlwaysAllow),
                "AlwaysDeny" => Ok(Mode::AlwaysDeny),
                "RBAC" => Ok(Mode::Rbac),
                "Node" => Ok(Mode::Node),
                other => Err(format!(
                    "unknown authorization mode {other:?} (known: AlwaysAllow, AlwaysDeny, RBAC, Node)"
                )),
            })
            .collect()
    }
}

/// How requests are authenticated and authorized.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// `token,user,uid,"group1,group2"` lines (`--token-auth-file`).
    pub token_file: Option<std::path::PathBuf>,
    /// `--anonymous-auth`: requests without credentials run as `system:anonymous`.
    pub anonymous: bool,
    pub modes: Vec<Mode>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            token_file: None,
            anonymous: true,
            modes: vec![Mode::AlwaysAllow],
        }
    }
}

/// The loaded chain.
pub struct Auth {
    tokens: HashMap<String, UserInfo>,
    /// ServiceAccount tokens: issued and verified (None: not configured).
    issuer: Option<Arc<serviceaccount::Issuer>>,
    service_accounts: Option<Arc<Registry>>,
    anonymous: bool,
    modes: Vec<Mode>,
    rbac: Option<rbac::Rbac>,
    pods: Option<Arc<Registry>>,
}

impl Auth {
    /// Loads the token file; a malformed one is an error naming the line.
    pub fn new(
        cfg: &AuthConfig,
        registries: &Registries,
        issuer: Option<Arc<serviceaccount::Issuer>>,
    ) -> anyhow::Result<Self> {
        let tokens = match &cfg.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?;
                tokens::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?
            }
            None => HashMap::new(),
        };
        if cfg.modes.is_empty() {
            anyhow::bail!("--authorization-mode needs at least one mode");
        }
        let rbac = cfg
            .modes
            .contains(&Mode::Rbac)
            .then(|| rbac::Rbac::new(registries))
            .transpose()?;
        Ok(Auth {
            tokens,
            issuer,
            service_accounts: registries.get(&("", "serviceaccounts")),
            anonymous: cfg.anonymous,
            modes: cfg.modes.clone(),
            rbac,
            pods: registries.get(&("", "pods")),
        })
    }

    /// Who sent the request: a known bearer token's user, or anonymous when allowed.
    pub async fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Result<UserInfo, ApiError> {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match bearer {
            Some(token) => self
                .authenticate_token(token)
                .await
                .ok_or_else(ApiError::unauthorized),
            None if self.anonymous => Ok(UserInfo::anonymous()),
            None => Err(ApiError::unauthorized()),
        }
    }

    /// The user a bearer token stands for, if any (requests and TokenReviews alike): a
    /// `--token-auth-file` token, or a ServiceAccount token for the API's audiences.
    pub async fn authenticate_token(&self, token: &str) -> Option<UserInfo> {
        self.authenticate_token_for(token, &[]).await
    }

    /// As `authenticate_token`, for `audiences` (the API's own when empty).
    pub async fn authenticate_token_for(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<UserInfo> {
        if let Some(u) = self.tokens.get(token) {
            return Some(u.clone());
        }
        let claims = self.issuer.as_ref()?.verify(token, audiences)?;
        // The account (and the object the token is bound to) must still be the same one.
        let sa = self
            .current(
                self.service_accounts.as_ref(),
                &claims.namespace,
                &claims.name,
            )
            .await?;
        if !claims.uid.is_empty() && rkube_api::meta::uid(&sa) != claims.uid {
            return None;
        }
        if let Some((resource, name, uid)) = &claims.bound {
            if resource == "pods" {
                let pod = self
                    .current(self.pods.as_ref(), &claims.namespace, name)
                    .await?;
                if !uid.is_empty() && rkube_api::meta::uid(&pod) != *uid {
                    return None;
                }
                if rkube_api::meta::deletion_timestamp(&pod).is_some() {
                    return None;
                }
            }
        }
        Some(UserInfo {
            name: format!("system:serviceaccount:{}:{}", claims.namespace, claims.name),
            uid: rkube_api::meta::uid(&sa).to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", claims.namespace),
                authz::AUTHENTICATED.into(),
            ],
        })
    }

    /// The ServiceAccount token issuer, when tokens are configured.
    pub fn issuer(&self) -> Option<&Arc<serviceaccount::Issuer>> {
        self.issuer.as_ref()
    }

    /// The object from the watch cache, or from storage when the cache has not seen it (a
    /// token issued a moment after its account was made).
    async fn current(
        &self,
        reg: Option<&Arc<Registry>>,
        ns: &str,
        name: &str,
    ) -> Option<serde_json::Value> {
        let reg = reg?;
        if let Some(cache) = &reg.cache {
            if let Ok((Some(o), _)) = cache.get(&reg.key(ns, name)) {
                return Some(o.value());
            }
        }
        let bytes = reg.get(ns, name, None).await.ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The `--authorization-mode` chain's verdict: Ok, or the reason of a Deny ("" when
    /// nobody had an opinion).
    pub fn authorize(&self, user: &UserInfo, a: &Attributes) -> Result<(), String> {
        for mode in &self.modes {
            let decision = match mode {
                Mode::AlwaysAllow => Decision::Allow,
                Mode::AlwaysDeny => Decision::Deny(String::new()),
                Mode::Rbac => match &self.rbac {
                    Some(r) => r.decide(user, a),
                    None => Decision::NoOpinion(String::new()),
                },
                Mode::Node => authz::node_decision(
                    user,
                    a,
                    |ns, name| self.pod_node(ns, name),
                    |ns, node| self.pods_on(ns, node),
                ),
            };
            match decision {
                Decision::Allow => return Ok(()),
                Decision::Deny(why) => return Err(why),
                Decision::NoOpinion(_) => {}
            }
        }
        Err(String::new())
    }

    /// What `user` may do in `namespace` (SelfSubjectRulesReview): resource rules and
    /// non-resource rules, as RBAC PolicyRules.
    pub fn rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
    ) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
        if self.modes.contains(&Mode::AlwaysAllow) {
            return (
                vec![serde_json::json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
                vec![serde_json::json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
            );
        }
        let rules = match &self.rbac {
            Some(r) => r.rules_for(user, namespace),
            None => Vec::new(),
        };
        rules
            .into_iter()
            .partition(|r| r.get("nonResourceURLs").is_none())
    }

    /// RBAC's view (for escalation checks), when RBAC is an authorizer.
    pub fn rbac(&self) -> Option<&rbac::Rbac> {
        self.rbac.as_ref()
    }

    fn pod_node(&self, ns: &str, name: &str) -> Option<String> {
        let pods = self.pods.as_ref()?;
        let cache = pods.cache.as_ref()?;
        let (obj, _) = cache.get(&pods.key(ns, name)).ok()?;
        obj.map(|o| o.node().to_string())
    }

    /// The pods bound to `node` in namespace `ns`, from the watch cache's node index.
    fn pods_on(&self, ns: &str, node: &str) -> Vec<serde_json::Value> {
        let Some(cache) = self.pods.as_ref().and_then(|p| p.cache.as_ref()) else {
            return Vec::new();
        };
        let Ok(fields) = rkube_api::fields::FieldSelector::parse(&format!("spec.nodeName={node}"))
        else {
            return Vec::new();
        };
        let filter = crate::cache::object::Filter {
            namespace: Some(ns.to_string()),
            fields,
            ..Default::default()
        };
        cache
            .list(&filter, None, 0)
            .map(|l| l.items.iter().map(|o| o.value()).collect())
            .unwrap_or_default()
    }
}
