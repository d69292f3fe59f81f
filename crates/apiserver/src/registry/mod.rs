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
use crate::kinds::Strategy;
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
/// versions of its group (autoscaling/v2 and v1 HorizontalPodAutoscalers) has one storage
/// version — its first row in the resource table — and views of it in the others.
#[derive(Default)]
pub struct Registries {
    /// The storage version's registry, by (group, plural).
    stored: std::collections::HashMap<(&'static str, &'static str), Arc<Registry>>,
    /// Every registry, by (group, version, plural).
    served: std::collections::HashMap<(&'static str, &'static str, &'static str), Arc<Registry>>,
}

impl Registries {
    pub fn insert(&mut self, reg: Registry) {
        let def = reg.def;
        let reg = Arc::new(reg);
        self.stored
            .entry((def.group, def.plural))
            .or_insert_with(|| reg.clone());
        self.served
            .insert((def.group, def.version, def.plural), reg);
    }

    /// The registry of a resource's storage version.
    pub fn get(&self, key: &(&'static str, &'static str)) -> Option<&Arc<Registry>> {
        self.stored.get(key)
    }

    /// The registry serving `def`'s group/version.
    pub fn served(&self, def: &ResourceDef) -> Option<&Arc<Registry>> {
        self.served.get(&(def.group, def.version, def.plural))
    }

    /// Every resource's storage-version registry (each object once).
    pub fn values(&self) -> impl Iterator<Item = &Arc<Registry>> {
        self.stored.values()
    }

    /// Every registry, views included.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Registry>> {
        self.served.values()
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
    pub strategy: &'static dyn Strategy,
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
        storage: Arc<Storage>,
        cache: Option<Arc<Cacher>>,
        etcd_prefix: &str,
        event_ttl: Duration,
    ) -> Self {
        let strategy = crate::kinds::of(def);
        Registry {
            def,
            strategy,
            storage,
            cache,
            etcd_prefix: etcd_prefix.to_string(),
            ttl: strategy.expires().then_some(event_ttl),
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
        self.strategy.storage_to_served(&mut v);
        Ok(v)
    }

    /// An object's stored bytes, converted to the storage version first where needed.
    pub fn encode(&self, obj: &Value) -> Vec<u8> {
        match self.strategy.served_to_storage(obj) {
            Some(stored) => crate::storage::encode(&stored),
            None => crate::storage::encode(obj),
        }
    }

    /// Undeclared fields of an object of this kind, as strict decoding reports them (at most
    /// `limit`).
    pub fn unknown_fields(&self, obj: &Value, limit: usize) -> Vec<String> {
        crate::kinds::unknown_fields(self.strategy, obj, limit)
    }
}
