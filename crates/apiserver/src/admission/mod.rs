//! Admission: the plugins of `--enable-admission-plugins` / `--disable-admission-plugins` on
//! top of upstream's defaults (NamespaceLifecycle, LimitRanger, DefaultTolerationSeconds,
//! ResourceQuota; AlwaysPullImages and NodeRestriction are opt-in), plus the checks upstream
//! makes on the same path: RBAC escalation prevention and `create` permission for an update
//! that creates. The registry calls them through `registry::Admit` for every write, mutating
//! before the kind's strategy and validating after it; quota is charged last, after
//! validation passed. A background loop recomputes quota usage from the watch cache.

pub mod lifecycle;
pub mod limits;
pub mod node;
pub mod policy;
pub mod priority;
pub mod quota;
pub mod rbac;
pub mod serviceaccount;
pub mod storage;
pub mod typecheck;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rkube_api::authz::{self, UserInfo};
use rkube_api::{meta, ApiError, GroupResource, ResourceDef};
use serde_json::{json, Value};

use crate::auth::Auth;
use crate::cache::object::Filter;
use crate::registry::{Admit, Attributes, Decision, Operation, Registries};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    NamespaceLifecycle,
    NodeRestriction,
    DefaultTolerationSeconds,
    AlwaysPullImages,
    LimitRanger,
    ResourceQuota,
    Priority,
    DefaultStorageClass,
    StorageObjectInUseProtection,
    ServiceAccount,
}

/// Every plugin in upstream's order, with whether it is on by default.
const ALL: &[(&str, Plugin, bool)] = &[
    ("NamespaceLifecycle", Plugin::NamespaceLifecycle, true),
    ("LimitRanger", Plugin::LimitRanger, true),
    ("NodeRestriction", Plugin::NodeRestriction, false),
    (
        "DefaultTolerationSeconds",
        Plugin::DefaultTolerationSeconds,
        true,
    ),
    ("AlwaysPullImages", Plugin::AlwaysPullImages, false),
    ("DefaultStorageClass", Plugin::DefaultStorageClass, true),
    (
        "StorageObjectInUseProtection",
        Plugin::StorageObjectInUseProtection,
        true,
    ),
    ("Priority", Plugin::Priority, true),
    ("ServiceAccount", Plugin::ServiceAccount, true),
    ("ResourceQuota", Plugin::ResourceQuota, true),
];

/// Upstream's plugins that rkube always runs (webhooks and policies are configured by their
/// objects): naming them in `--enable-admission-plugins` is accepted, disabling them is not.
const ALWAYS_ON: &[&str] = &[
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
];

/// Whether `name` is a plugin rkube knows (one it can switch, or one always on).
pub fn is_known(name: &str) -> bool {
    ALWAYS_ON.contains(&name) || ALL.iter().any(|(n, _, _)| *n == name)
}

/// The enabled plugins, in upstream's order: the defaults plus `enable`, minus `disable`.
/// Unknown names are an error listing the known ones.
pub fn plugins(enable: &[String], disable: &[String]) -> Result<Vec<Plugin>, String> {
    if let Some(name) = disable.iter().find(|d| ALWAYS_ON.contains(&d.as_str())) {
        return Err(format!(
            "admission plugin {name:?} cannot be disabled in rkube (its objects configure it)"
        ));
    }
    for name in enable.iter().chain(disable) {
        if !is_known(name) {
            let known: Vec<&str> = ALL
                .iter()
                .map(|(n, _, _)| *n)
                .chain(ALWAYS_ON.iter().copied())
                .collect();
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

/// The pods resource, which most plugins are about.
fn is_pods(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.plural == "pods"
}

pub struct Admission {
    pub plugins: Vec<Plugin>,
    /// Mutating and validating admission webhooks.
    pub webhooks: webhook::Webhooks,
    /// ValidatingAdmissionPolicies and their bindings.
    pub policies: policy::Policies,
    registries: Arc<Registries>,
    auth: Arc<Auth>,
    /// `--default-not-ready-toleration-seconds` / `--default-unreachable-toleration-seconds`.
    pub toleration_seconds: (i64, i64),
}

/// Admission of one request: the plugins, with the user who sent it, and the warnings
/// admission had for it (webhooks'), which the response carries.
pub struct ForUser<'a> {
    pub admission: &'a Admission,
    pub user: &'a UserInfo,
    said: std::sync::Mutex<webhook::Said>,
}

impl ForUser<'_> {
    /// The warnings admission had for this request.
    /// Each once, in order (a retried write is admitted again, as upstream).
    pub fn warnings(&self) -> Vec<String> {
        let all = std::mem::take(&mut self.said.lock().unwrap_or_else(|e| e.into_inner()).warnings);
        let mut seen = std::collections::HashSet::new();
        all.into_iter().filter(|w| seen.insert(w.clone())).collect()
    }

    /// The audit annotations admission had for this request, each key once (the last).
    pub fn annotations(&self) -> Vec<(String, String)> {
        let all = std::mem::take(
            &mut self
                .said
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .annotations,
        );
        let mut out: Vec<(String, String)> = Vec::new();
        for (k, v) in all {
            match out.iter_mut().find(|(ok, _)| *ok == k) {
                Some(slot) => slot.1 = v,
                None => out.push((k, v)),
            }
        }
        out
    }

    fn record(&self, said: webhook::Said) {
        let mut mine = self.said.lock().unwrap_or_else(|e| e.into_inner());
        mine.warnings.extend(said.warnings);
        mine.annotations.extend(said.annotations);
    }
}

impl Admission {
    pub fn new(
        plugins: Vec<Plugin>,
        registries: Arc<Registries>,
        auth: Arc<Auth>,
        toleration_seconds: (i64, i64),
    ) -> Self {
        Admission {
            plugins,
            webhooks: webhook::Webhooks::new(registries.clone()),
            policies: policy::Policies::new(registries.clone()),
            registries,
            auth,
            toleration_seconds,
        }
    }

    pub fn has(&self, p: Plugin) -> bool {
        self.plugins.contains(&p)
    }

    /// Admission of a request by `user`.
    pub fn for_user<'a>(&'a self, user: &'a UserInfo) -> ForUser<'a> {
        ForUser {
            admission: self,
            user,
            said: Default::default(),
        }
    }

    /// Every object of a cluster-scoped resource, as the watch cache has them.
    fn cluster_objects(&self, group: &'static str, plural: &'static str) -> Vec<Value> {
        self.registries
            .get(&(group, plural))
            .and_then(|r| r.cache.as_ref().map(|c| c.values()))
            .unwrap_or_default()
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

    async fn mutate(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if a.operation == Operation::Create && self.has(Plugin::NamespaceLifecycle) {
            lifecycle::admit_create(&self.registries, a, obj).await?;
        }
        if is_pods(a.def) && a.subresource.is_none() {
            if a.operation == Operation::Create && self.has(Plugin::LimitRanger) {
                let ranges = self.cached("limitranges", a.namespace);
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
                            &a.def.group_resource(),
                            meta::name(obj),
                            &why,
                        ));
                    }
                }
            }
            if a.operation == Operation::Create && self.has(Plugin::DefaultTolerationSeconds) {
                default_tolerations(obj, self.toleration_seconds);
            }
            if self.has(Plugin::AlwaysPullImages) {
                always_pull(obj);
            }
            if a.operation == Operation::Create && self.has(Plugin::ServiceAccount) {
                self.service_account(a, obj).await?;
            }
            if a.operation == Operation::Create && self.has(Plugin::Priority) {
                let classes = self.cluster_objects("scheduling.k8s.io", "priorityclasses");
                priority::admit_pod(obj, &classes)
                    .map_err(|why| forbidden(a, meta::name(obj), &why))?;
            }
        }
        if a.operation == Operation::Create && a.subresource.is_none() && a.def.group.is_empty() {
            match a.def.plural {
                "persistentvolumeclaims" => {
                    if self.has(Plugin::DefaultStorageClass) {
                        let classes = self.cluster_objects("storage.k8s.io", "storageclasses");
                        storage::default_class(obj, &classes);
                    }
                    if self.has(Plugin::StorageObjectInUseProtection) {
                        storage::protect(obj, storage::PVC_PROTECTION);
                    }
                }
                "persistentvolumes" if self.has(Plugin::StorageObjectInUseProtection) => {
                    storage::protect(obj, storage::PV_PROTECTION);
                }
                _ => {}
            }
        }
        if a.def.group == "certificates.k8s.io"
            && a.def.plural == "certificatesigningrequests"
            && a.operation == Operation::Create
        {
            // Upstream's PrepareForCreate: the requester, not the body, says who asked.
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("username".into(), json!(user.name));
                spec.insert("groups".into(), json!(user.groups));
                if user.uid.is_empty() {
                    spec.remove("uid");
                } else {
                    spec.insert("uid".into(), json!(user.uid));
                }
                spec.remove("extra");
            }
        }
        if a.def.group == "scheduling.k8s.io"
            && a.def.plural == "priorityclasses"
            && a.operation != Operation::Delete
            && self.has(Plugin::Priority)
        {
            let classes = self.cluster_objects("scheduling.k8s.io", "priorityclasses");
            priority::admit_class(obj, &classes)
                .map_err(|why| forbidden(a, meta::name(obj), &why))?;
        }
        Ok(())
    }

    async fn validate(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &Value,
        old: Option<&Value>,
        said: &mut webhook::Said,
    ) -> Result<(), ApiError> {
        // An update or apply that creates needs `create` permission too (upstream's
        // `withAuthorization` around the create-on-update).
        if a.operation == Operation::Create && a.verb != "create" {
            let attrs = authz::Attributes {
                verb: "create".into(),
                resource_request: true,
                api_group: a.def.group.into(),
                resource: a.def.plural.into(),
                subresource: String::new(),
                namespace: a.namespace.into(),
                name: a.name.into(),
                path: String::new(),
            };
            if let Err(why) = self.auth.authorize(user, &attrs) {
                return Err(authz::forbidden(user, &attrs, &why));
            }
        }
        if a.operation == Operation::Delete && self.has(Plugin::NamespaceLifecycle) {
            lifecycle::admit_delete(a)?;
        }
        if self.has(Plugin::NodeRestriction) {
            node::admit(user, a, obj, old, |ns, name| self.pod(ns, name))?;
        }
        rbac::admit(&self.auth, &self.registries, user, a, obj, old)?;
        // Admission policies, admission webhooks, then quota last (upstream's order).
        self.admit_policies(user, a, obj, old, said)?;
        self.webhooks.validate(user, a, obj, old, said).await?;
        if a.operation == Operation::Create
            && self.has(Plugin::ResourceQuota)
            && a.def.namespaced
            && a.subresource.is_none()
        {
            self.charge(a.def, a.namespace, obj, a.dry_run).await?;
        }
        Ok(())
    }

    /// ValidatingAdmissionPolicies on a write.
    fn admit_policies(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &Value,
        old: Option<&Value>,
        said: &mut webhook::Said,
    ) -> Result<(), ApiError> {
        let (new, old_obj) = match a.operation {
            Operation::Delete => (None, Some(obj)),
            _ => (Some(obj), old),
        };
        let request = || {
            let operation = a.operation.as_str();
            let name = match (a.name, new) {
                ("", Some(o)) => meta::name(o),
                (n, _) => n,
            };
            webhook::review::request(
                &webhook::review::Input {
                    uid: "",
                    group: a.def.group,
                    version: a.def.version,
                    kind: a.def.kind,
                    resource: a.def.plural,
                    subresource: a.subresource,
                    name,
                    namespace: a.namespace,
                    operation,
                    user,
                    object: None,
                    old_object: None,
                    dry_run: a.dry_run,
                },
                "v1",
            )["request"]
                .clone()
        };
        let ns_object = || {
            if a.namespace.is_empty() {
                return None;
            }
            let reg = self.registries.get(&("", "namespaces"))?;
            let (found, _) = reg.cache.as_ref()?.get(&reg.key("", a.namespace)).ok()?;
            found.map(|o| o.value())
        };
        self.policies.validate(
            user,
            a,
            obj,
            old_obj.filter(|_| new.is_some()),
            request,
            ns_object,
            said,
        )
    }

    /// The ServiceAccount plugin on a new pod (`serviceaccount`).
    async fn service_account(&self, a: &Attributes<'_>, pod: &mut Value) -> Result<(), ApiError> {
        if serviceaccount::is_mirror(pod) {
            return match serviceaccount::mirror_refusal(pod) {
                Some(why) => Err(forbidden(a, meta::name(pod), why)),
                None => Ok(()),
            };
        }
        let name = serviceaccount::name_account(pod);
        let Some(account) = self.service_account_named(a.namespace, &name).await? else {
            let why = format!(
                "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
                a.namespace
            );
            return Err(forbidden(a, meta::name(pod), &why));
        };
        if serviceaccount::should_automount(pod, &account) {
            let mut rng = || rand::random::<u64>();
            serviceaccount::mount_token(pod, &meta::random_suffix(&mut rng));
        }
        serviceaccount::copy_pull_secrets(pod, &account);
        Ok(())
    }

    /// An account from the watch cache, else from storage — retried for `default` (10 times,
    /// 100–199 ms apart), which the ServiceAccount controller may be about to create.
    async fn service_account_named(&self, ns: &str, name: &str) -> Result<Option<Value>, ApiError> {
        let Some(reg) = self.registries.get(&("", "serviceaccounts")) else {
            return Ok(None);
        };
        if let Some(cache) = &reg.cache {
            if let Ok((Some(o), _)) = cache.get(&reg.key(ns, name)) {
                return Ok(Some(o.value()));
            }
        }
        let attempts = if name == serviceaccount::DEFAULT {
            10
        } else {
            1
        };
        let pause = std::time::Duration::from_millis(100 + rand::random::<u64>() % 100);
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(pause).await; // upstream's retry interval
            }
            match reg.get(ns, name, None).await {
                Ok(bytes) => return Ok(serde_json::from_slice(&bytes).ok()),
                Err(e) if e.code() == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// A pod as the watch cache has it.
    fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        let pods = self.registries.get(&("", "pods"))?;
        let cache = pods.cache.as_ref()?;
        cache.get(&pods.key(ns, name)).ok()?.0.map(|o| o.value())
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
        let refuse = |why: &str| ApiError::forbidden(&def.group_resource(), meta::name(obj), why);
        let Some(reg) = self.registries.served(def) else {
            return Ok(());
        };
        for q in self.cached("resourcequotas", ns) {
            let hard = quota::hard(&q);
            let names: Vec<String> = hard.keys().cloned().collect();
            let delta =
                quota::object_usage(def, &*reg.strategy, obj, &names).map_err(|e| refuse(&e))?;
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
                    let next =
                        quota::check(&qname, &hard, &used, &delta).map_err(|why| refuse(&why))?;
                    let mut new = cur.clone();
                    new["status"] = quota::status(&hard, &next);
                    Ok(Decision::Write(new))
                })
                .await?;
        }
        Ok(())
    }

    /// What the objects of `ns` use of `names`, from the watch cache (objects whose usage
    /// cannot be computed count as nothing here: they were refused when written).
    fn usage(&self, ns: &str, names: &[String]) -> quota::Usage {
        let mut total = quota::Usage::new();
        for n in names {
            total.insert(n.clone(), 0);
        }
        for reg in self
            .registries
            .values()
            .into_iter()
            .filter(|r| r.def.namespaced)
        {
            let Some(cache) = &reg.cache else { continue };
            if !quota::tracks(reg.def, &*reg.strategy, names) {
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
                let Ok(usage) = quota::object_usage(reg.def, &*reg.strategy, &o.value(), names)
                else {
                    continue;
                };
                for (k, v) in usage {
                    let t = total.entry(k).or_insert(0);
                    *t = t.saturating_add(v);
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
    /// Writes each ValidatingAdmissionPolicy's status for its generation: the type checking
    /// of its expressions (`typeChecking.expressionWarnings`) and `observedGeneration`.
    pub async fn run_policy_status(self: Arc<Self>, shutdown: rkube_daemon::ShutdownToken) {
        const GROUP: &str = "admissionregistration.k8s.io";
        let mut seen = None;
        loop {
            if let Some(reg) = self.registries.get(&(GROUP, "validatingadmissionpolicies")) {
                let version = reg.cache.as_ref().map(|c| c.content_version());
                if version != seen && reg.cache.as_ref().is_some_and(|c| c.is_ready()) {
                    let mut done = true;
                    for p in reg.cache.as_ref().map(|c| c.values()).unwrap_or_default() {
                        let generation = meta::generation(&p);
                        if p.pointer("/status/observedGeneration")
                            .and_then(Value::as_i64)
                            == Some(generation)
                        {
                            continue;
                        }
                        let status = json!({"observedGeneration": generation,
                            "typeChecking": {"expressionWarnings": typecheck::expression_warnings(&p)}});
                        let w = crate::registry::Write {
                            admit: &crate::registry::Unadmitted,
                            dry_run: false,
                            manager: None,
                            verb: "update",
                        };
                        let r = reg
                            .update_with("", meta::name(&p), Some("status"), w, |cur| {
                                if meta::generation(cur) != generation {
                                    return Err(ApiError::conflict(
                                        &reg.def.group_resource(),
                                        meta::name(cur),
                                        "the policy changed",
                                    ));
                                }
                                let mut new = cur.clone();
                                let conditions = cur.pointer("/status/conditions").cloned();
                                new["status"] = status.clone();
                                if let Some(c) = conditions {
                                    new["status"]["conditions"] = c;
                                }
                                Ok(new)
                            })
                            .await;
                        if r.is_err() {
                            done = false;
                        }
                    }
                    if done {
                        seen = version;
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

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

impl Admit for ForUser<'_> {
    fn mutate<'a>(
        &'a self,
        a: &'a Attributes<'a>,
        obj: &'a mut Value,
        old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            self.admission.mutate(self.user, a, obj).await?;
            let mut said = webhook::Said::default();
            let r = self
                .admission
                .webhooks
                .mutate(self.user, a, obj, old, &mut said)
                .await;
            self.record(said);
            r
        })
    }

    fn validate<'a>(
        &'a self,
        a: &'a Attributes<'a>,
        obj: &'a Value,
        old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let mut said = webhook::Said::default();
            let r = self
                .admission
                .validate(self.user, a, obj, old, &mut said)
                .await;
            self.record(said);
            r
        })
    }
}

/// A 403 of admission's, as upstream's `admission.NewForbidden`: `<resource> "<name>" is
/// forbidden: <why>`.
pub fn forbidden(a: &Attributes<'_>, name: &str, why: &str) -> ApiError {
    let resource = match a.subresource {
        Some(_) => GroupResource::new(a.def.group, a.def.plural),
        None => a.def.group_resource(),
    };
    ApiError::forbidden(&resource, name, why)
}

/// AlwaysPullImages: every container pulls its image.
pub fn always_pull(pod: &mut Value) {
    for list in ["initContainers", "containers"] {
        if let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        {
            for c in cs {
                if c.is_object() {
                    c["imagePullPolicy"] = json!("Always");
                }
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
        assert!(!d.contains(&Plugin::NodeRestriction));
        let e = plugins(&["AlwaysPullImages".into()], &["ResourceQuota".into()]).unwrap();
        assert!(e.contains(&Plugin::AlwaysPullImages) && !e.contains(&Plugin::ResourceQuota));
        assert!(plugins(&["Bogus".into()], &none)
            .unwrap_err()
            .contains("Bogus"));
        // Upstream's webhook plugins are named in many command lines: on already.
        let w = plugins(&["ValidatingAdmissionWebhook".into()], &none).unwrap();
        assert_eq!(w, d);
        assert!(plugins(&none, &["MutatingAdmissionWebhook".into()])
            .unwrap_err()
            .contains("cannot be disabled"));
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
