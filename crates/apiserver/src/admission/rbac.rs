//! RBAC escalation prevention (`pkg/registry/rbac/*/policybased`): a user may create or
//! update a Role or ClusterRole only with rules it already holds (in that namespace, or
//! cluster-wide for ClusterRoles), unless it may `escalate` that role; a binding only to a role
//! whose rules it holds, unless it may `bind` that role. `system:masters` is exempt, and an
//! update that only changes owner references or finalizers (the garbage collector's) is not
//! checked. Aggregating ClusterRoles need full authority. Messages are upstream's.

use rkube_api::authz::{self, UserInfo, MASTERS};
use rkube_api::{meta, ApiError, GroupResource};
use serde_json::Value;

use crate::auth::Auth;
use crate::kinds::rbac::{aggregates, role_ref, rules, RoleRef};
use crate::registry::{Attributes, Operation, Registries};

const GROUP: &str = "rbac.authorization.k8s.io";

/// Checks a write of a Role, ClusterRole, RoleBinding or ClusterRoleBinding.
pub fn admit(
    auth: &Auth,
    _registries: &Registries,
    user: &UserInfo,
    a: &Attributes<'_>,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if a.def.group != GROUP || a.operation == Operation::Delete || a.subresource.is_some() {
        return Ok(());
    }
    let Some(rbac) = auth.rbac() else {
        return Ok(());
    };
    if user.in_group(MASTERS) {
        return Ok(());
    }
    if let Some(old) = old {
        if only_gc_fields_changed(old, obj) {
            return Ok(());
        }
    }
    let name = meta::name(obj);
    let gr = GroupResource::new(GROUP, a.def.plural);
    let ns = if a.def.namespaced { a.namespace } else { "" };
    let allowed = |verb: &str, resource: &str, target: &str| {
        let attrs = authz::Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: GROUP.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: ns.into(),
            name: target.into(),
            path: String::new(),
        };
        auth.authorize(user, &attrs).is_ok()
    };
    let escalation = |wanted: &[Value]| -> Result<(), ApiError> {
        let held = rbac.rules_for(user, ns);
        let missing = authz::uncovered(&held, wanted);
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
        Err(ApiError::forbidden(
            &gr,
            name,
            &format!(
                "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
                user.name,
                groups.join(" "),
                missing.join("\n")
            ),
        ))
    };
    match a.def.plural {
        "roles" | "clusterroles" => {
            // The `escalate` verb on this role (its name from the URL; empty on create).
            if allowed("escalate", a.def.plural, a.name) {
                return Ok(());
            }
            escalation(&rules(obj))?;
            let aggregating = aggregates(obj) || old.is_some_and(aggregates);
            if a.def.plural == "clusterroles" && aggregating {
                let full = [
                    serde_json::json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                    serde_json::json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
                ];
                if !authz::uncovered(&rbac.rules_for(user, ""), &full).is_empty() {
                    return Err(ApiError::forbidden(
                        &gr,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let Some(r) = role_ref(obj) else {
                return Ok(());
            };
            if allowed("bind", r.resource(), r.name()) {
                return Ok(());
            }
            let rules = rbac.role_rules(r, ns).ok_or_else(|| {
                ApiError::not_found(&GroupResource::new(GROUP, r.resource()), r.name())
            })?;
            if let RoleRef::Role(_) = r {
                if ns.is_empty() {
                    return Err(ApiError::bad_request("namespace is required"));
                }
            }
            escalation(&rules)
        }
        _ => Ok(()),
    }
}

/// Whether `new` differs from `old` only in owner references and finalizers.
fn only_gc_fields_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}
