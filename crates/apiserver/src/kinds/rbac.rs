//! RBAC's Roles, ClusterRoles and their bindings (`pkg/registry/rbac`): names are path
//! segments (`system:node`), and a binding's `roleRef` names a Role or a ClusterRole. The
//! escalation check on writes is admission's (`admission::rbac`); rule matching is
//! `rkube_api::authz`.

use rkube_api::k8s::api::rbac::v1 as rbac;
use serde_json::Value;

use super::{NameRule, Strategy};
use crate::reconcile;

pub struct Role;
pub struct RoleBinding;
pub struct ClusterRole;
pub struct ClusterRoleBinding;

macro_rules! rbac_kind {
    ($name:ident, $t:ty, $reconciled:expr) => {
        impl Strategy for $name {
            crate::typed_kind!($t);

            fn name_rule(&self) -> NameRule {
                NameRule::PathSegment
            }

            /// Bootstrap roles gain the rules, bindings the subjects, a newer rkube adds;
            /// what an administrator added stays.
            fn reconcile_bootstrap(&self, current: &Value, desired: &Value) -> Option<Value> {
                let field: Option<&str> = $reconciled;
                let field = field?;
                if reconcile::opted_out(current, reconcile::RBAC_AUTOUPDATE) {
                    return None;
                }
                reconcile::union(current, desired, field)
            }
        }
    };
}

rbac_kind!(Role, rbac::Role, None);
rbac_kind!(RoleBinding, rbac::RoleBinding, None);
rbac_kind!(ClusterRole, rbac::ClusterRole, Some("rules"));
rbac_kind!(
    ClusterRoleBinding,
    rbac::ClusterRoleBinding,
    Some("subjects")
);

/// What a binding's `roleRef` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleRef<'a> {
    ClusterRole(&'a str),
    /// A Role in the binding's namespace.
    Role(&'a str),
}

impl RoleRef<'_> {
    /// The resource the reference points into (`clusterroles` or `roles`).
    pub fn resource(&self) -> &'static str {
        match self {
            RoleRef::ClusterRole(_) => "clusterroles",
            RoleRef::Role(_) => "roles",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            RoleRef::ClusterRole(n) | RoleRef::Role(n) => n,
        }
    }
}

/// A binding's `roleRef`, if it names a Role or ClusterRole.
pub fn role_ref(binding: &Value) -> Option<RoleRef<'_>> {
    let kind = binding.pointer("/roleRef/kind").and_then(Value::as_str)?;
    let name = binding.pointer("/roleRef/name").and_then(Value::as_str)?;
    match kind {
        "ClusterRole" => Some(RoleRef::ClusterRole(name)),
        "Role" => Some(RoleRef::Role(name)),
        _ => None,
    }
}

/// A role's rules.
pub fn rules(role: &Value) -> Vec<Value> {
    role.get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A ClusterRole that aggregates others (`aggregationRule.clusterRoleSelectors` not empty).
pub fn aggregates(role: &Value) -> bool {
    role.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
}
