//! Admission, mutating then validating, for creates (and AlwaysPullImages on updates too):
//! the plugins of `--enable-admission-plugins` / `--disable-admission-plugins` on top of
//! upstream's defaults (NamespaceLifecycle, DefaultTolerationSeconds, LimitRanger,
//! ResourceQuota; AlwaysPullImages is opt-in). Quota usage is charged to the quota's status
//! with compare-and-swap before the object is written, and recomputed from the watch cache by
//! a background loop (so deletions give it back).

pub mod limits;
pub mod quota;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::{meta, ApiError, ResourceDef};
use serde_json::{json, Value};

use crate::cache::object::Filter;
use crate::registry::{Decision, Registry};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    NamespaceLifecycle,
    DefaultTolerationSeconds,
    AlwaysPullImages,
    LimitRanger,
    ResourceQuota,
}

const ALL: &[(&str, Plugin, bool)] = &[
    ("NamespaceLifecycle", Plugin::NamespaceLifecycle, true),
    ("LimitRanger", Plugin::LimitRanger, true),
    (
        "DefaultTolerationSeconds",
        Plugin::DefaultTolerationSeconds,
        true,
    ),
    ("AlwaysPullImages", Plugin::AlwaysPullImages, false),
    ("ResourceQuota", Plugin::ResourceQuota, true),
];

/// The enabled plugins, in upstream's order: the defaults plus `enable`, minus `disable`.
/// Unknown names are an error listing the known ones.
pub fn plugins(enable: &[String], disable: &[String]) -> Result<Vec<Plugin>, String> {
    for name in enable.iter().chain(disable) {
        if !ALL.iter().any(|(n, _, _)| n == name) {
            let known: Vec<&str> = ALL.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "unknown admission plugin {name:?} (known: {})",
                known.join(", ")
            ));
        }
    }
    Ok(ALL
        .iter()
        .filter(|(n, _, default)| {
            (*default || enable.iter().any(|e| e == n)) && !disable.iter().any(|d| d == n)
        })
        .map(|(_, p, _)| *p)
        .collect())
}

type Registries = HashMap<(&'static str, &'static str), Arc<Registry>>;

pub struct Admission {
    pub plugins: Vec<Plugin>,
    registries: Arc<Registries>,
    /// `--default-not-ready-toleration-seconds` / `--default-unreachable-toleration-seconds`.
    pub toleration_seconds: (i64, i64),
}

impl Admission {
    pub fn new(
        plugins: Vec<Plugin>,
        registries: Arc<Registries>,
        toleration_seconds: (i64, i64),
    ) -> Self {
        Admission {
            plugins,
            registries,
            toleration_seconds,
        }
    }

    pub fn has(&self, p: Plugin) -> bool {
        self.plugins.contains(&p)
    }

    fn cached(&self, plural: &'static str, ns: &str) -> Vec<Value> {
        let Some(reg) = self.registries.get(&("", plural)) else {
            return Vec::new();
        };
        let Some(cache) = &reg.cache else {
            return Vec::new();
        };
        let filter = Filter {
            namespace: Some(ns.to_string()),
            ..Default::default()
        };
        cache
            .list(&filter, None, 0)
            .map(|l| l.items.iter().map(|o| o.value()).collect())
            .unwrap_or_default()
    }

    /// Mutating then validating admission of a create of `obj` in `ns`.
    pub async fn create(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: &mut Value,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        if def.kind == "Pod" {
            if self.has(Plugin::LimitRanger) {
                let ranges = self.cached("limitranges", ns);
                if !ranges.is_empty() {
                    limits::apply_defaults(obj, &ranges);
                    let problems = limits::violations(obj, &ranges);
                    if !problems.is_empty() {
                        let why = if problems.len() == 1 {
                            problems[0].clone()
                        } else {
                            format!("[{}]", problems.join(", "))
                        };
                        return Err(ApiError::forbidden(
                            &def.group_resource(),
                            meta::name(obj),
                            &why,
                        ));
                    }
                }
            }
            if self.has(Plugin::DefaultTolerationSeconds) {
                default_tolerations(obj, self.toleration_seconds);
            }
            if self.has(Plugin::AlwaysPullImages) {
                always_pull(obj);
            }
        }
        if self.has(Plugin::ResourceQuota) && def.namespaced {
            self.charge(def, ns, obj, dry_run).await?;
        }
        Ok(())
    }

    /// Charges the object to every quota of its namespace that tracks it (CAS on the quota's
    /// status; a dry run only checks), or refuses it with upstream's `exceeded quota` message.
    async fn charge(
        &self,
        def: &ResourceDef,
        ns: &str,
        obj: &Value,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let Some(quotas) = self.registries.get(&("", "resourcequotas")) else {
            return Ok(());
        };
        for q in self.cached("resourcequotas", ns) {
            let hard = quota::hard(&q);
            let names: Vec<String> = hard.keys().cloned().collect();
            let delta = quota::object_usage(def, obj, &names);
            if delta.is_empty() {
                continue;
            }
            let qname = meta::name(&q).to_string();
            let counted = if q.pointer("/status/used").is_none() {
                Some(self.usage(ns, &names))
            } else {
                None
            };
            quotas
                .guaranteed_update(ns, &qname, dry_run, |cur| {
                    let hard = quota::hard(cur);
                    let used = counted.clone().unwrap_or_else(|| quota::used(cur));
                    let next = quota::check(&qname, &hard, &used, &delta).map_err(|why| {
                        ApiError::forbidden(&def.group_resource(), meta::name(obj), &why)
                    })?;
                    let mut new = cur.clone();
                    new["status"] = quota::status(&hard, &next);
                    Ok(Decision::Write(new))
                })
                .await?;
        }
        Ok(())
    }

    /// What the objects of `ns` use of `names`, from the watch cache.
    fn usage(&self, ns: &str, names: &[String]) -> quota::Usage {
        let mut total = quota::Usage::new();
        for n in names {
            total.insert(n.clone(), 0);
        }
        for reg in self.registries.values().filter(|r| r.def.namespaced) {
            let Some(cache) = &reg.cache else { continue };
            let probe = quota::object_usage(reg.def, &json!({}), names);
            if probe.is_empty() && reg.def.kind != "Pod" {
                continue;
            }
            let filter = Filter {
                namespace: Some(ns.to_string()),
                ..Default::default()
            };
            for o in cache
                .list(&filter, None, 0)
                .map(|l| l.items)
                .unwrap_or_default()
            {
                for (k, v) in quota::object_usage(reg.def, &o.value(), names) {
                    *total.entry(k).or_insert(0) += v;
                }
            }
        }
        total
    }

    /// Recomputes every quota's `status` from the watch cache, writing those that changed.
    pub async fn reconcile_quotas(&self) {
        let Some(quotas) = self.registries.get(&("", "resourcequotas")) else {
            return;
        };
        let Some(cache) = &quotas.cache else { return };
        for q in cache.values() {
            let (ns, name) = (meta::namespace(&q).to_string(), meta::name(&q).to_string());
            let hard = quota::hard(&q);
            let names: Vec<String> = hard.keys().cloned().collect();
            let want = quota::status(&hard, &self.usage(&ns, &names));
            if q.get("status") == Some(&want) {
                continue;
            }
            let r = quotas
                .guaranteed_update(&ns, &name, false, |cur| {
                    let mut new = cur.clone();
                    new["status"] = want.clone();
                    Ok(Decision::Write(new))
                })
                .await;
            if let Err(e) = r {
                tracing::debug!(namespace = %ns, quota = %name, error = %e.status().message, "quota status not written");
            }
        }
    }

    /// Runs `reconcile_quotas` every `every` until shutdown.
    pub async fn run_quota_loop(
        self: Arc<Self>,
        every: Duration,
        shutdown: rkube_daemon::ShutdownToken,
    ) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.reconcile_quotas().await;
        }
    }
}

/// AlwaysPullImages: every container pulls its image.
pub fn always_pull(pod: &mut Value) {
    for list in ["initContainers", "containers"] {
        if let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                c["imagePullPolicy"] = json!("Always");
            }
        }
    }
}

/// DefaultTolerationSeconds: pods that do not tolerate the not-ready and unreachable NoExecute
/// taints get upstream's default tolerations for them.
fn default_tolerations(pod: &mut Value, (not_ready, unreachable): (i64, i64)) {
    let existing: Vec<Value> = pod
        .pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tolerates = |key: &str| {
        existing.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let exists_any =
                k.is_empty() && t.get("operator").and_then(Value::as_str) == Some("Exists");
            (k == key || exists_any) && (effect.is_empty() || effect == "NoExecute")
        })
    };
    let mut add = Vec::new();
    for (key, secs) in [
        ("node.kubernetes.io/not-ready", not_ready),
        ("node.kubernetes.io/unreachable", unreachable),
    ] {
        if !tolerates(key) {
            add.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs}));
        }
    }
    if add.is_empty() {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(l) = list.as_array_mut() {
        l.extend(add);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_sets_follow_upstreams_defaults() {
        let none: Vec<String> = vec![];
        let d = plugins(&none, &none).unwrap();
        assert!(d.contains(&Plugin::ResourceQuota) && !d.contains(&Plugin::AlwaysPullImages));
        let e = plugins(&["AlwaysPullImages".into()], &["ResourceQuota".into()]).unwrap();
        assert!(e.contains(&Plugin::AlwaysPullImages) && !e.contains(&Plugin::ResourceQuota));
        assert!(plugins(&["Bogus".into()], &none)
            .unwrap_err()
            .contains("Bogus"));
    }

    #[test]
    fn default_tolerations_fill_in_what_is_missing() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]}});
        default_tolerations(&mut pod, (300, 300));
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["key"], "node.kubernetes.io/not-ready");
        assert_eq!(t[1]["tolerationSeconds"], 300);
        let mut tolerant = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        default_tolerations(&mut tolerant, (300, 300));
        assert_eq!(tolerant["spec"]["tolerations"].as_array().unwrap().len(), 1);
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "x", "imagePullPolicy": "IfNotPresent"}]}});
        always_pull(&mut pod);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
    }
}
