//! The generic registry (upstream's `registry/generic/registry/store.go`): one
//! implementation of get, list, watch, create, update, patch and delete for every resource,
//! parameterised by its resource table row and its strategy (`crate::kinds`). `read` serves
//! from the watch cache where upstream's rules allow; `write` runs the admission path and
//! compare-and-swap transactions with server-side retry. The registry never names a kind.

pub mod admit;
pub mod read;
pub mod write;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rkube_api::{meta, ApiError, ResourceDef, StatusCause};
use rkube_etcd_api::EtcdError;
use serde_json::Value;

use crate::cache::Cacher;
use crate::storage::{storage_error, Storage};

pub use admit::{Admit, Attributes, Operation, Unadmitted};

use futures_util::future::BoxFuture;

/// What a resource does around its storage writes besides its strategy (upstream's
/// BeginCreate/BeginUpdate/AfterDelete decorators on the generic store): Services take
/// cluster IPs and node ports before they are stored and give them back when they are not,
/// or when they are deleted. Called by the registry, implemented in `crate::services`.
pub trait Hooks: Send + Sync {
    /// Before the strategy defaults and validates a new object: take what it needs (a dry
    /// run takes nothing but shows what it would get).
    fn begin_create<'a>(
        &'a self,
        obj: &'a mut Value,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>>;

    /// After a create that began: `stored` says whether the object was written; when not,
    /// what `begin_create` took is given back.
    fn finish_create<'a>(&'a self, obj: &'a Value, stored: bool) -> BoxFuture<'a, ()>;

    /// Before an update is written (after validation): take what the new object needs that
    /// the old one did not hold.
    fn begin_update<'a>(
        &'a self,
        old: &'a Value,
        new: &'a mut Value,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>>;

    /// After an update that began: give back what the old object held and the new does not
    /// (`stored`), or what `begin_update` took (not stored).
    fn finish_update<'a>(
        &'a self,
        old: &'a Value,
        new: &'a Value,
        stored: bool,
    ) -> BoxFuture<'a, ()>;

    /// After the object was removed from storage.
    fn after_delete<'a>(&'a self, obj: &'a Value) -> BoxFuture<'a, ()>;
}
pub use write::{PatchType, Write};

/// What an update closure decided.
pub enum Decision {
    Write(Value),
    /// Remove the object (the last finalizer of a deleting object went away).
    Delete,
}

/// The result of a delete request.
pub enum Deleted {
    /// The object is gone; here is its last state (with the delete revision).
    Gone(Value),
    /// Deletion is pending (grace period or finalizers); here is the updated object.
    Pending(Value),
}

/// All registries: one per served group/version/resource. A resource served in several
/// versions of its group (autoscaling/v2 and v1 HorizontalPodAutoscalers, a custom resource's
/// versions) has one storage version — its first row — and views of it in the others.
/// Built-in resources are fixed at startup; custom resources come and go with their
/// CustomResourceDefinitions (`crate::crd`), swapped in as one set.
#[derive(Default)]
pub struct Registries {
    builtin: Set,
    custom: std::sync::RwLock<Arc<Set>>,
}

/// One set of registries, by storage version and by served version.
#[derive(Default, Clone)]
pub struct Set {
    /// The storage version's registry, by (group, plural).
    stored: std::collections::HashMap<(&'static str, &'static str), Arc<Registry>>,
    /// Every registry, by (group, version, plural).
    served: std::collections::HashMap<(&'static str, &'static str, &'static str), Arc<Registry>>,
}

impl Set {
    /// Adds a registry; the first one of a (group, plural) is its storage version.
    pub fn insert(&mut self, reg: Arc<Registry>) {
        let def = reg.def;
        self.stored
            .entry((def.group, def.plural))
            .or_insert_with(|| reg.clone());
        self.served
            .insert((def.group, def.version, def.plural), reg);
    }

    /// Adds a registry that holds objects but may not be served (a custom resource's
    /// storage version marked `served: false`).
    pub fn insert_with(&mut self, reg: Arc<Registry>, served: bool) {
        let def = reg.def;
        self.stored
            .entry((def.group, def.plural))
            .or_insert_with(|| reg.clone());
        if served {
            self.served
                .insert((def.group, def.version, def.plural), reg);
        }
    }

    /// The storage version's registry of `group`/`plural`.
    pub fn stored(&self, group: &str, plural: &str) -> Option<Arc<Registry>> {
        self.stored.get(&(group, plural)).cloned()
    }

    /// Every registry, views included.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Registry>> {
        self.served.values()
    }
}

impl Registries {
    /// A built-in resource's registry (at startup).
    pub fn insert(&mut self, reg: Registry) {
        self.builtin.insert(Arc::new(reg));
    }

    /// Replaces every custom resource's registries at once.
    pub fn set_custom(&self, set: Set) {
        *self.custom.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
    }

    /// The custom resources served now.
    pub fn custom(&self) -> Arc<Set> {
        self.custom
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The registry of a resource's storage version.
    pub fn get(&self, key: &(&str, &str)) -> Option<Arc<Registry>> {
        match self.builtin.stored.get(key) {
            Some(r) => Some(r.clone()),
            None => self.custom().stored.get(key).cloned(),
        }
    }

    /// The registry serving `def`'s group/version.
    pub fn served(&self, def: &ResourceDef) -> Option<Arc<Registry>> {
        let key = (def.group, def.version, def.plural);
        match self.builtin.served.get(&key) {
            Some(r) => Some(r.clone()),
            None => self.custom().served.get(&key).cloned(),
        }
    }

    /// The custom resource served at `group`/`version`/`plural`, if any.
    pub fn custom_def(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceDef> {
        self.custom()
            .served
            .get(&(group, version, plural))
            .map(|r| r.def)
    }

    /// Every custom resource version served, in a stable order.
    pub fn custom_defs(&self) -> Vec<&'static ResourceDef> {
        let mut defs: Vec<&'static ResourceDef> =
            self.custom().served.values().map(|r| r.def).collect();
        defs.sort_by_key(|d| (d.group, d.version, d.plural));
        defs
    }

    /// The custom resources served at `group`/`version`, by plural.
    pub fn custom_served(&self, group: &str, version: &str) -> Vec<Arc<Registry>> {
        let mut regs: Vec<Arc<Registry>> = self
            .custom()
            .served
            .values()
            .filter(|r| r.def.group == group && r.def.version == version)
            .cloned()
            .collect();
        regs.sort_by_key(|r| r.def.plural);
        regs
    }

    /// Every resource's storage-version registry (each object once), custom ones included.
    pub fn values(&self) -> Vec<Arc<Registry>> {
        let custom = self.custom();
        self.builtin
            .stored
            .values()
            .chain(custom.stored.values())
            .cloned()
            .collect()
    }

    /// Every watch cache, custom resources' and views' included.
    pub fn caches(&self) -> Vec<Arc<Cacher>> {
        let custom = self.custom();
        self.builtin
            .served
            .values()
            .chain(custom.served.values())
            .filter_map(|r| r.cache.clone())
            .collect()
    }

    /// Every built-in registry, views included.
    pub fn builtin(&self) -> impl Iterator<Item = &Arc<Registry>> {
        self.builtin.served.values()
    }
}

/// The watch cache of `group`/`plural`, which a snapshot (RBAC, flow control) is built from.
pub fn cache_of(
    registries: &Registries,
    group: &'static str,
    plural: &'static str,
) -> anyhow::Result<Arc<Cacher>> {
    registries
        .get(&(group, plural))
        .and_then(|r| r.cache.clone())
        .ok_or_else(|| anyhow::anyhow!("the {plural} watch cache is missing"))
}

pub struct Registry {
    pub def: &'static ResourceDef,
    pub strategy: crate::kinds::StrategyRef,
    pub storage: Arc<Storage>,
    pub cache: Option<Arc<Cacher>>,
    pub etcd_prefix: String,
    /// TTL of objects of this resource (Events: `--event-ttl`).
    pub ttl: Option<Duration>,
    /// Work around storage writes (Services' IP and port allocation), set once at startup.
    pub hooks: std::sync::OnceLock<Arc<dyn Hooks>>,
}

pub struct ListResult {
    pub items: Vec<Bytes>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

impl Registry {
    pub fn new(
        def: &'static ResourceDef,
        strategy: crate::kinds::StrategyRef,
        storage: Arc<Storage>,
        cache: Option<Arc<Cacher>>,
        etcd_prefix: &str,
        event_ttl: Duration,
    ) -> Self {
        Registry {
            def,
            ttl: strategy.expires().then_some(event_ttl),
            strategy,
            storage,
            cache,
            etcd_prefix: etcd_prefix.to_string(),
            hooks: std::sync::OnceLock::new(),
        }
    }

    pub fn key(&self, ns: &str, name: &str) -> String {
        self.def.key(&self.etcd_prefix, ns, name)
    }

    fn gr(&self) -> rkube_api::GroupResource {
        self.def.group_resource()
    }

    fn serr(&self, op: &str) -> impl Fn(EtcdError) -> ApiError + '_ {
        let op = op.to_string();
        move |e| storage_error(self.def, &op, e)
    }

    fn invalid(&self, obj: &Value, causes: Vec<StatusCause>) -> ApiError {
        ApiError::invalid(self.def.group, self.def.kind, meta::name(obj), causes)
    }

    /// A stored value as this resource serves it: resourceVersion stamped, converted from the
    /// storage version when this resource is another version's view (events.k8s.io Events).
    pub fn decode(&self, s: &crate::storage::Stored) -> Result<Value, ApiError> {
        let mut v = crate::storage::decode(s)?;
        self.strategy
            .storage_to_served(&mut v)
            .map_err(|e| self.conversion_failed(&e))?;
        Ok(v)
    }

    /// An object's stored bytes, converted to the storage version first where needed.
    pub fn encode(&self, obj: &Value) -> Result<Vec<u8>, ApiError> {
        Ok(
            match self
                .strategy
                .served_to_storage(obj)
                .map_err(|e| self.conversion_failed(&e))?
            {
                Some(stored) => crate::storage::encode(&stored),
                None => crate::storage::encode(obj),
            },
        )
    }

    /// A conversion between versions that failed (a conversion webhook down): 500, as
    /// upstream's `conversion webhook for <gvk> failed: …`.
    fn conversion_failed(&self, why: &str) -> ApiError {
        ApiError::internal(format!(
            "conversion webhook for {}, Kind={} failed: {why}",
            self.def.api_version(),
            self.def.kind
        ))
    }

    /// Undeclared fields of an object of this kind, as strict decoding reports them (at most
    /// `limit`).
    pub fn unknown_fields(&self, obj: &Value, limit: usize) -> Vec<String> {
        crate::kinds::unknown_fields(&*self.strategy, obj, limit)
    }
}
