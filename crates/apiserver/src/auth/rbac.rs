//! The RBAC authorizer over the watch cache: a snapshot of every Role, ClusterRole and binding,
//! rebuilt when any of the four caches moves, evaluated with `rkube_api::authz`'s rule matching.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rkube_api::authz::{self, Attributes, Decision, UserInfo};
use serde_json::Value;

use crate::cache::Cacher;
use crate::kinds::rbac::{role_ref, rules, RoleRef};
use crate::registry::Registries;

const GROUP: &str = "rbac.authorization.k8s.io";

#[derive(Default)]
struct Snapshot {
    versions: [u64; 4],
    cluster_roles: HashMap<String, Vec<Value>>,
    roles: HashMap<(String, String), Vec<Value>>,
    cluster_bindings: Vec<Value>,
    bindings: HashMap<String, Vec<Value>>,
}

pub struct Rbac {
    caches: [Arc<Cacher>; 4],
    snapshot: Mutex<Arc<Snapshot>>,
}

impl Snapshot {
    /// The rules of the role a binding in `ns` refers to.
    fn rules_of(&self, r: RoleRef<'_>, ns: &str) -> Option<&Vec<Value>> {
        match r {
            RoleRef::ClusterRole(name) => self.cluster_roles.get(name),
            RoleRef::Role(name) => self.roles.get(&(ns.to_string(), name.to_string())),
        }
    }
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl Rbac {
    pub fn new(registries: &Registries) -> anyhow::Result<Self> {
        let cache = |plural| crate::registry::cache_of(registries, GROUP, plural);
        Ok(Rbac {
            caches: [
                cache("clusterroles")?,
                cache("roles")?,
                cache("clusterrolebindings")?,
                cache("rolebindings")?,
            ],
            snapshot: Mutex::new(Arc::new(Snapshot::default())),
        })
    }

    fn current(&self) -> Arc<Snapshot> {
        let versions = self.caches.each_ref().map(|c| c.resource_version());
        let mut snap = self.snapshot.lock().unwrap();
        if snap.versions != versions || versions == [0; 4] {
            *snap = Arc::new(self.build(versions));
        }
        snap.clone()
    }

    fn build(&self, versions: [u64; 4]) -> Snapshot {
        let mut s = Snapshot {
            versions,
            ..Default::default()
        };
        for cr in self.caches[0].values() {
            s.cluster_roles.insert(meta(&cr, "name").into(), rules(&cr));
        }
        for r in self.caches[1].values() {
            s.roles.insert(
                (meta(&r, "namespace").into(), meta(&r, "name").into()),
                rules(&r),
            );
        }
        s.cluster_bindings = self.caches[2].values();
        for b in self.caches[3].values() {
            s.bindings
                .entry(meta(&b, "namespace").to_string())
                .or_default()
                .push(b);
        }
        s
    }

    /// Every rule granted to `user` cluster-wide or in `namespace`.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Value> {
        let s = self.current();
        let mut out = Vec::new();
        let mut add = |binding: &Value, ns: &str| {
            if !authz::binding_applies(binding, user) {
                return;
            }
            let rules = role_ref(binding).and_then(|r| s.rules_of(r, ns));
            out.extend(rules.into_iter().flatten().cloned());
        };
        s.cluster_bindings.iter().for_each(|b| add(b, ""));
        if let Some(bs) = s.bindings.get(namespace) {
            bs.iter().for_each(|b| add(b, namespace));
        }
        out
    }

    /// The rules of a role a binding in `ns` refers to (None: no such role).
    pub fn role_rules(&self, r: RoleRef<'_>, ns: &str) -> Option<Vec<Value>> {
        self.current().rules_of(r, ns).cloned()
    }

    /// Allow when a binding of this user grants a rule covering the request; else no opinion.
    pub fn decide(&self, user: &UserInfo, a: &Attributes) -> Decision {
        let s = self.current();
        let role_rules =
            |binding: &Value, ns: &str| role_ref(binding).and_then(|r| s.rules_of(r, ns));
        let grants = |binding: &Value, ns: &str| {
            authz::binding_applies(binding, user)
                && role_rules(binding, ns)
                    .is_some_and(|rules| rules.iter().any(|r| authz::rule_allows(r, a)))
        };
        if s.cluster_bindings.iter().any(|b| grants(b, "")) {
            return Decision::Allow;
        }
        if !a.namespace.is_empty() {
            if let Some(bs) = s.bindings.get(&a.namespace) {
                if bs.iter().any(|b| grants(b, &a.namespace)) {
                    return Decision::Allow;
                }
            }
        }
        Decision::NoOpinion(String::new())
    }
}
