//! The generic registry: one implementation of get, list, watch, create, update, patch and
//! delete for every resource, parameterised by the resource table row and its strategy
//! (`strategy.rs`). Reads go through the watch cache where upstream's rules allow; writes are
//! compare-and-swap transactions in storage with server-side retry (`guaranteed_update`).

pub mod strategy;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rkube_api::status::OPTIMISTIC_LOCK_MSG;
use rkube_api::{
    managed, meta, ApiError, DeleteOptions, ListOptions, Propagation, ResourceDef, Status,
    StatusCause, StatusDetails,
};
use rkube_etcd_api::EtcdError;
use serde_json::{json, Value};

use crate::cache::object::{CachedObject, Filter};
use crate::cache::{Cacher, Start, WatchSpec, WatchStream};
use crate::storage::{Cas, Storage, Stored};

/// How long reads wait for the cache to reach a requested resourceVersion.
const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);

pub fn storage_error(def: &ResourceDef, op: &str, e: EtcdError) -> ApiError {
    if e.is_compacted() {
        return ApiError::gone("The resourceVersion for the provided list is too old.");
    }
    if e.is_future_revision() {
        return ApiError::timeout(format!("Timeout: Too large resource version: {e}"), 0);
    }
    match e {
        EtcdError::Transport(_) => ApiError::server_timeout(&def.group_resource(), op, 2),
        other => ApiError::internal(other.to_string()),
    }
}

/// Serializes an object for storage: no resourceVersion (it is the mod_revision), no selfLink.
pub fn encode(obj: &Value) -> Vec<u8> {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        m.remove("resourceVersion");
        m.remove("selfLink");
    }
    serde_json::to_vec(&o).unwrap_or_default()
}

/// A stored value with its resourceVersion stamped in.
pub fn decode(s: &Stored) -> Result<Value, ApiError> {
    let mut v: Value = serde_json::from_slice(&s.value)
        .map_err(|e| ApiError::internal(format!("decoding stored object: {e}")))?;
    meta::set_meta(&mut v, "resourceVersion", json!(s.mod_revision.to_string()));
    Ok(v)
}

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

/// The watch cache of `group`/`plural`, which a snapshot (RBAC, flow control) is built from.
pub fn cache_of(
    registries: &std::collections::HashMap<(&'static str, &'static str), Arc<Registry>>,
    group: &'static str,
    plural: &'static str,
) -> anyhow::Result<Arc<crate::cache::Cacher>> {
    registries
        .get(&(group, plural))
        .and_then(|r| r.cache.clone())
        .ok_or_else(|| anyhow::anyhow!("the {plural} watch cache is missing"))
}

pub struct Registry {
    pub def: &'static ResourceDef,
    pub storage: Arc<Storage>,
    pub cache: Option<Arc<Cacher>>,
    pub etcd_prefix: String,
    /// TTL of objects of this resource (Events: `--event-ttl`).
    pub ttl: Option<Duration>,
    /// The namespaces cache, for upstream's NamespaceLifecycle admission on creates.
    pub namespaces: Option<Arc<Cacher>>,
    /// AlwaysPullImages admission also holds on updates (pods only).
    pub always_pull_images: bool,
}

pub struct ListResult {
    pub items: Vec<Bytes>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

impl Registry {
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

    async fn lease(&self) -> Result<i64, ApiError> {
        match self.ttl {
            Some(ttl) => self
                .storage
                .lease_for(ttl.as_secs() as i64)
                .await
                .map_err(self.serr("create")),
            None => Ok(0),
        }
    }

    // ---- reads ---------------------------------------------------------------------

    /// GET: RV unset reads storage; RV set reads the cache once it is at least that fresh.
    pub async fn get(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Bytes, ApiError> {
        let key = self.key(ns, name);
        let rv_n = rv
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .map(|n| n as u64)
                    .ok_or(())
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))
            })
            .transpose()?;
        if let (Some(n), Some(cache)) = (rv_n, &self.cache) {
            if cache.is_ready() {
                if n > 0 {
                    cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                }
                let (obj, _) = cache.get(&key)?;
                return obj
                    .map(|o| o.json.clone())
                    .ok_or_else(|| ApiError::not_found(&self.gr(), name));
            }
        }
        let (stored, _) = self.storage.get(&key).await.map_err(self.serr("get"))?;
        let s = stored.ok_or_else(|| ApiError::not_found(&self.gr(), name))?;
        let v = decode(&s)?;
        Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
    }

    fn filter(&self, ns: Option<&str>, opts: &ListOptions) -> Result<Filter, ApiError> {
        let mut fields = opts.field_selector.clone();
        fields
            .check_for_kind(self.def.kind)
            .map_err(ApiError::bad_request)?;
        Ok(Filter {
            namespace: ns
                .filter(|n| !n.is_empty() && self.def.namespaced)
                .map(String::from),
            name: None,
            labels: opts.label_selector.clone(),
            fields,
        })
    }

    /// LIST with upstream's resourceVersion / resourceVersionMatch / limit / continue rules.
    pub async fn list(&self, ns: Option<&str>, opts: &ListOptions) -> Result<ListResult, ApiError> {
        let filter = self.filter(ns, opts)?;
        let limit = opts.limit.max(0) as usize;
        let rv = opts.resource_version.as_deref().unwrap_or("");
        let exact = opts.resource_version_match.as_deref() == Some("Exact")
            || (opts.resource_version_match.is_none() && limit > 0 && !rv.is_empty() && rv != "0");
        if let Some(token) = &opts.continue_token {
            let c = rkube_api::continue_token::decode(token)
                .map_err(|e| ApiError::bad_request(format!("invalid continue token: {e}")))?;
            let start = format!("{}{}", self.scope_prefix(&filter), c.start_key);
            let at = if c.resource_version < 0 {
                0
            } else {
                c.resource_version
            };
            return self.list_storage(&filter, &start, at, limit, true).await;
        }
        let cache = self.cache.as_ref().filter(|c| c.is_ready());
        if exact {
            let n: i64 = rv.parse().unwrap_or(0);
            return self
                .list_storage(&filter, &self.scope_prefix(&filter), n, limit, false)
                .await;
        }
        let Some(cache) = cache else {
            return self
                .list_storage(&filter, &self.scope_prefix(&filter), 0, limit, false)
                .await;
        };
        match rv {
            "" => {
                // Consistent read: from the cache once it has reached storage's revision.
                match cache.consistent_rv().await? {
                    Some(_) => self.list_cache(cache, &filter, limit),
                    None => {
                        self.list_storage(&filter, &self.scope_prefix(&filter), 0, limit, false)
                            .await
                    }
                }
            }
            // "Any": the cache as it is, limit ignored like upstream.
            "0" => self.list_cache(cache, &filter, 0),
            n => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                self.list_cache(cache, &filter, limit)
            }
        }
    }

    fn scope_prefix(&self, filter: &Filter) -> String {
        match &filter.namespace {
            Some(ns) => format!("{}{ns}/", self.def.key_prefix(&self.etcd_prefix)),
            None => self.def.key_prefix(&self.etcd_prefix),
        }
    }

    fn list_cache(
        &self,
        cache: &Cacher,
        filter: &Filter,
        limit: usize,
    ) -> Result<ListResult, ApiError> {
        let crate::cache::CacheList {
            items: objs,
            rv,
            more,
            remaining,
        } = cache.list(filter, None, limit)?;
        let continue_token = more.then(|| {
            let last = objs.last().map(|o| o.key.as_str()).unwrap_or("");
            let rel = last
                .strip_prefix(&self.def.key_prefix(&self.etcd_prefix))
                .unwrap_or(last);
            let rel = rel
                .strip_prefix(
                    &filter
                        .namespace
                        .as_ref()
                        .map(|n| format!("{n}/"))
                        .unwrap_or_default(),
                )
                .unwrap_or(rel);
            rkube_api::continue_token::encode(rel, rv as i64)
        });
        let remaining = (more && filter.labels.is_empty() && filter.fields.is_empty())
            .then_some(remaining as i64);
        Ok(ListResult {
            items: objs.iter().map(|o| o.json.clone()).collect(),
            rv,
            continue_token,
            remaining,
        })
    }

    /// A (paged) list straight from storage at revision `at` (0 = current).
    async fn list_storage(
        &self,
        filter: &Filter,
        start: &str,
        at: i64,
        limit: usize,
        continuing: bool,
    ) -> Result<ListResult, ApiError> {
        let prefix = self.scope_prefix(filter);
        let unfiltered = filter.labels.is_empty() && filter.fields.is_empty();
        let mut items = Vec::new();
        let mut start = start.to_string();
        let mut read_rev = at;
        // Unfiltered pages are exactly `limit`; filtered ones read ahead, as upstream does.
        let page_size = if limit == 0 {
            0
        } else if unfiltered {
            limit as i64
        } else {
            (limit as i64).max(100)
        };
        let mut last_key: Option<String> = None;
        let mut remaining: Option<i64> = None;
        let mut more_left = false;
        loop {
            let page = match self
                .storage
                .list(&prefix, &start, read_rev, page_size)
                .await
            {
                Ok(p) => p,
                Err(e) if e.is_compacted() && continuing => {
                    let rel = start
                        .strip_prefix(&prefix)
                        .unwrap_or(&start)
                        .trim_end_matches('\0')
                        .to_string();
                    let fresh =
                        (!rel.is_empty()).then(|| rkube_api::continue_token::encode(&rel, -1));
                    return Err(ApiError::expired_continue(fresh));
                }
                Err(e) if e.is_compacted() => {
                    return Err(ApiError::gone(format!("too old resource version: {at}")))
                }
                Err(e) => return Err(storage_error(self.def, "list", e)),
            };
            read_rev = page.rev;
            let fetched = page.items.len() as i64;
            if unfiltered && page.more {
                remaining = Some(page.count - fetched);
            }
            let n = page.items.len();
            for (i, s) in page.items.into_iter().enumerate() {
                let key = String::from_utf8_lossy(&s.key).into_owned();
                if limit > 0 && items.len() >= limit {
                    more_left = true;
                    break;
                }
                if let Ok(o) =
                    CachedObject::decode(self.def, key.clone(), &s.value, s.mod_revision as u64)
                {
                    if filter.matches(&o) {
                        items.push(o.json.clone());
                    }
                }
                last_key = Some(key);
                if i + 1 == n && page.more {
                    more_left = true;
                }
            }
            if limit > 0 && items.len() >= limit || !page.more {
                break;
            }
            if let Some(k) = &last_key {
                start = format!("{k}\0");
            }
            more_left = false;
        }
        let continue_token = (more_left && limit > 0).then(|| {
            let k = last_key.clone().unwrap_or_default();
            let rel = k.strip_prefix(&prefix).unwrap_or(&k).to_string();
            rkube_api::continue_token::encode(&rel, read_rev)
        });
        Ok(ListResult {
            items,
            rv: read_rev as u64,
            remaining: remaining.filter(|_| continue_token.is_some()),
            continue_token,
        })
    }

    /// WATCH: always from the cache (upstream's rule); RV unset is a consistent start.
    pub async fn watch(
        &self,
        ns: Option<&str>,
        name: Option<&str>,
        opts: &ListOptions,
        deadline: Instant,
    ) -> Result<WatchStream, ApiError> {
        let cache = self
            .cache
            .as_ref()
            .ok_or_else(|| ApiError::internal("no watch cache"))?;
        let mut filter = self.filter(ns, opts)?;
        if let Some(n) = name {
            if let Some(sel) = filter.fields.exact("metadata.name") {
                if sel != n {
                    return Err(ApiError::bad_request(
                        "fieldSelector metadata.name doesn't match requested name",
                    ));
                }
            }
            filter.name = Some(n.to_string());
        }
        let rv = opts.resource_version.as_deref().unwrap_or("");
        let streaming = opts.send_initial_events == Some(true);
        let bookmarks = opts.allow_watch_bookmarks;
        // `sendInitialEvents=false` with RV unset or 0: no synthetic ADDED events, just the
        // changes after the (consistent, or cache's) current revision (KEP-2340's table).
        let no_initial = opts.send_initial_events == Some(false);
        let start = match (rv, streaming) {
            ("", _) => match cache.consistent_rv().await? {
                Some(cur) if no_initial => Start::After(cur),
                Some(_) => Start::Snapshot,
                None if no_initial => Start::After(
                    self.storage
                        .current_revision(&cache.prefix)
                        .await
                        .map_err(self.serr("watch"))? as u64,
                ),
                None => {
                    return self
                        .watch_from_storage_snapshot(cache, filter, streaming, bookmarks, deadline)
                        .await
                }
            },
            ("0", _) if no_initial => Start::After(cache.resource_version()),
            ("0", _) => Start::Snapshot,
            (n, true) => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_fresh(n, FRESHNESS_TIMEOUT).await?;
                Start::Snapshot
            }
            (n, false) => {
                let n: u64 = n
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {n}")))?;
                cache.wait_history(n, FRESHNESS_TIMEOUT).await;
                Start::After(n)
            }
        };
        cache.watch(WatchSpec {
            filter,
            start,
            bookmarks,
            initial_events_end: streaming && bookmarks,
            deadline,
        })
    }

    /// A consistent watch start the cache cannot confirm (storage without progress requests):
    /// the initial state comes from storage at its current revision, the changes after it
    /// from the cache.
    async fn watch_from_storage_snapshot(
        &self,
        cache: &Cacher,
        filter: Filter,
        streaming: bool,
        bookmarks: bool,
        deadline: Instant,
    ) -> Result<WatchStream, ApiError> {
        let snap = self
            .list_storage(&filter, &self.scope_prefix(&filter), 0, 0, false)
            .await?;
        let mut initial: Vec<Bytes> = snap
            .items
            .iter()
            .map(|j| crate::cache::object::event_line("ADDED", j))
            .collect();
        if streaming && bookmarks {
            initial.push(crate::cache::object::bookmark_line(self.def, snap.rv, true));
        }
        let mut ws = cache.watch(WatchSpec {
            filter,
            start: Start::After(snap.rv),
            bookmarks,
            initial_events_end: false,
            deadline,
        })?;
        initial.append(&mut ws.initial);
        ws.initial = initial;
        Ok(ws)
    }

    // ---- writes --------------------------------------------------------------------

    /// Checks `apiVersion`/`kind` against the URL and fills them in when absent.
    pub fn check_kind(&self, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let want_av = self.def.api_version();
        let av = obj
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        if (!kind.is_empty() && kind != self.def.kind) || (!av.is_empty() && av != want_av) {
            let shown_kind = if kind.is_empty() {
                self.def.kind.to_string()
            } else {
                kind
            };
            let shown_av = if av.is_empty() { want_av.clone() } else { av };
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({shown_av}) does not match the expected API version ({want_av})"
            ))
            .with_kind_mismatch(&shown_kind, self.def.kind));
        }
        obj["apiVersion"] = json!(want_av);
        obj["kind"] = json!(self.def.kind);
        Ok(())
    }

    fn check_namespace(&self, obj: &mut Value, ns: &str) -> Result<(), ApiError> {
        if !self.def.namespaced {
            meta::remove_meta(obj, "namespace");
            return Ok(());
        }
        let body_ns = meta::namespace(obj).to_string();
        if body_ns.is_empty() {
            meta::set_meta(obj, "namespace", json!(ns));
        } else if body_ns != ns {
            return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
        }
        Ok(())
    }

    fn invalid(&self, obj: &Value, causes: Vec<StatusCause>) -> ApiError {
        ApiError::invalid(self.def.group, self.def.kind, meta::name(obj), causes)
    }

    /// Defaults, canonical decoding and validation shared by create and update.
    fn finish_object(&self, obj: Value, old: Option<&Value>) -> Result<Value, ApiError> {
        let mut obj = obj;
        if self.always_pull_images {
            crate::admission::always_pull(&mut obj);
        }
        strategy::apply_defaults(self.def.kind, &mut obj);
        let obj = strategy::canonicalize(self.def.kind, obj).map_err(|e| {
            ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                self.def.kind, self.def.version, self.def.kind
            ))
        })?;
        let causes = match old {
            None => strategy::validate(self.def, &obj),
            Some(old) => strategy::validate_update(self.def, &obj, old),
        };
        if !causes.is_empty() {
            return Err(self.invalid(&obj, causes));
        }
        Ok(obj)
    }

    /// CREATE: PrepareForCreate, validation, then `Txn(If mod_revision==0 Then Put)`.
    pub async fn create(
        &self,
        ns: &str,
        mut obj: Value,
        dry_run: bool,
        manager: Option<&str>,
    ) -> Result<Value, ApiError> {
        self.check_kind(&mut obj)?;
        self.check_namespace(&mut obj, ns)?;
        if !meta::resource_version(&obj).is_empty() {
            return Err(ApiError::unknown(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        self.admit_namespace(ns, &obj).await?;
        let generate =
            meta::name(&obj).is_empty() && !meta::meta_str(&obj, "generateName").is_empty();
        let mut rng = || rand::random::<u64>();
        for attempt in 0..8 {
            let mut o = obj.clone();
            if generate {
                let base = meta::meta_str(&o, "generateName").to_string();
                let base: String = base.chars().take(58).collect();
                meta::set_meta(
                    &mut o,
                    "name",
                    json!(format!("{base}{}", meta::random_suffix(&mut rng))),
                );
            }
            meta::set_meta(&mut o, "uid", json!(meta::new_uid(&mut rng)));
            meta::set_meta(&mut o, "creationTimestamp", json!(meta::now_rfc3339()));
            meta::remove_meta(&mut o, "deletionTimestamp");
            meta::remove_meta(&mut o, "deletionGracePeriodSeconds");
            if strategy::tracks_generation(self.def.kind) {
                meta::set_meta(&mut o, "generation", json!(1));
            } else {
                meta::remove_meta(&mut o, "generation");
            }
            strategy::prepare_for_create(self.def.kind, &mut o);
            let mut o = self.finish_object(o, None)?;
            if let Some(manager) = manager {
                let api_version = self.def.api_version();
                let time = meta::now_rfc3339();
                let who = self.writer(manager, &api_version, &time, None);
                managed::record_update(self.def.kind, None, &mut o, who);
            }
            let name = meta::name(&o).to_string();
            if dry_run {
                return Ok(o);
            }
            let key = self.key(ns, &name);
            let lease = self.lease().await?;
            match self
                .storage
                .create(&key, encode(&o), lease)
                .await
                .map_err(self.serr("create"))?
            {
                Some(rev) => {
                    let mut o = o;
                    meta::set_meta(&mut o, "resourceVersion", json!(rev.to_string()));
                    return Ok(o);
                }
                None if generate && attempt < 7 => continue,
                None => {
                    let (existing, _) =
                        self.storage.get(&key).await.map_err(self.serr("create"))?;
                    let deleting = existing
                        .and_then(|s| decode(&s).ok())
                        .is_some_and(|v| meta::deletion_timestamp(&v).is_some());
                    return Err(if deleting {
                        ApiError::already_exists_being_deleted(&self.gr(), &name)
                    } else {
                        ApiError::already_exists(&self.gr(), &name)
                    });
                }
            }
        }
        Err(ApiError::already_exists(&self.gr(), meta::name(&obj)))
    }

    /// NamespaceLifecycle: no new objects in a namespace that does not exist or is being
    /// deleted.
    async fn admit_namespace(&self, ns: &str, obj: &Value) -> Result<(), ApiError> {
        if !self.def.namespaced {
            return Ok(());
        }
        let Some(cache) = &self.namespaces else {
            return Ok(());
        };
        let key = format!("{}{ns}", cache.prefix);
        let cached = cache.get(&key).ok().and_then(|(o, _)| o).map(|o| o.value());
        let found = match cached {
            Some(v) => Some(v),
            // The cache may lag a namespace created a moment ago: ask storage.
            None => self
                .storage
                .get(&key)
                .await
                .map_err(self.serr("create"))?
                .0
                .map(|s| decode(&s))
                .transpose()?,
        };
        match found {
            None => Err(ApiError::not_found(
                &rkube_api::GroupResource::new("", "namespaces"),
                ns,
            )),
            Some(n) if meta::deletion_timestamp(&n).is_some() => Err(ApiError::forbidden(
                &self.gr(),
                meta::name(obj),
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Read-modify-write with compare-and-swap: retries on conflicting writes; the closure
    /// sees the current object (resourceVersion stamped). A result equal to the stored bytes
    /// writes nothing.
    pub async fn guaranteed_update<F>(
        &self,
        ns: &str,
        name: &str,
        dry_run: bool,
        mut try_update: F,
    ) -> Result<(Value, bool), ApiError>
    where
        F: FnMut(&Value) -> Result<Decision, ApiError>,
    {
        let key = self.key(ns, name);
        let (mut stored, _) = self.storage.get(&key).await.map_err(self.serr("update"))?;
        loop {
            let Some(cur_s) = stored.take() else {
                return Err(ApiError::not_found(&self.gr(), name));
            };
            let cur = decode(&cur_s)?;
            match try_update(&cur)? {
                Decision::Write(new) => {
                    let bytes = encode(&new);
                    if bytes == cur_s.value || dry_run {
                        return Ok((if dry_run { new } else { cur }, false));
                    }
                    let lease = self.lease().await?;
                    match self
                        .storage
                        .update(&key, bytes, cur_s.mod_revision, lease)
                        .await
                        .map_err(self.serr("update"))?
                    {
                        Cas::Done(rev) => {
                            let mut new = new;
                            meta::set_meta(&mut new, "resourceVersion", json!(rev.to_string()));
                            return Ok((new, true));
                        }
                        Cas::Stale(latest) => stored = latest,
                    }
                }
                Decision::Delete => {
                    if dry_run {
                        return Ok((cur, true));
                    }
                    match self
                        .storage
                        .delete(&key, cur_s.mod_revision)
                        .await
                        .map_err(self.serr("delete"))?
                    {
                        Cas::Done(rev) => {
                            let mut gone = cur;
                            meta::set_meta(&mut gone, "resourceVersion", json!(rev.to_string()));
                            return Ok((gone, true));
                        }
                        Cas::Stale(latest) => stored = latest,
                    }
                }
            }
        }
    }

    /// The update closure shared by PUT and PATCH: optimistic concurrency, the spec/status
    /// split, generation, immutable metadata, validation, and removal once the last finalizer
    /// of a deleting object is gone.
    pub fn prepare_update(
        &self,
        ns: &str,
        name: &str,
        cur: &Value,
        mut new: Value,
        subresource: Option<&str>,
        manager: Option<&str>,
    ) -> Result<Decision, ApiError> {
        self.check_kind(&mut new)?;
        self.check_namespace(&mut new, ns)?;
        let body_name = meta::name(&new).to_string();
        if body_name.is_empty() {
            meta::set_meta(&mut new, "name", json!(name));
        } else if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let rv = meta::resource_version(&new).to_string();
        if rv.is_empty() {
            if !strategy::allow_unconditional_update(self.def.kind) {
                return Err(self.invalid(
                    &new,
                    vec![StatusCause::invalid_raw(
                        "metadata.resourceVersion",
                        "0x0",
                        "must be specified for an update",
                    )],
                ));
            }
        } else if rv != meta::resource_version(cur) {
            return Err(ApiError::conflict(&self.gr(), name, OPTIMISTIC_LOCK_MSG));
        }
        let uid = meta::uid(&new).to_string();
        if !uid.is_empty() && uid != meta::uid(cur) {
            return Err(ApiError::conflict(
                &self.gr(),
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::uid(cur)
                ),
            ));
        }
        match subresource {
            Some("status") => strategy::prepare_for_status_update(self.def.kind, &mut new, cur),
            Some("finalize") => {
                // Only spec.finalizers change; the namespace goes once none are left.
                let finalizers = new.pointer("/spec/finalizers").cloned();
                new = cur.clone();
                match finalizers {
                    Some(f) => new["spec"]["finalizers"] = f,
                    None => {
                        if let Some(spec) = new.get_mut("spec").and_then(|s| s.as_object_mut()) {
                            spec.remove("finalizers");
                        }
                    }
                }
                let none_left = new
                    .pointer("/spec/finalizers")
                    .and_then(|f| f.as_array())
                    .is_none_or(|a| a.is_empty());
                if meta::deletion_timestamp(cur).is_some()
                    && none_left
                    && meta::finalizers(cur).is_empty()
                {
                    return Ok(Decision::Delete);
                }
                return Ok(Decision::Write(new));
            }
            _ => {
                if strategy::has_status(self.def) {
                    match cur.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
            }
        }
        // BeforeUpdate: what clients may never change.
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match cur.pointer(&format!("/metadata/{f}")) {
                Some(v) => meta::set_meta(&mut new, f, v.clone()),
                None => meta::remove_meta(&mut new, f),
            }
        }
        meta::set_meta(
            &mut new,
            "resourceVersion",
            json!(meta::resource_version(cur)),
        );
        let mut new = self.finish_object(new, Some(cur))?;
        if subresource.is_none()
            && strategy::tracks_generation(self.def.kind)
            && strategy::spec_changed(self.def.kind, &new, cur)
        {
            meta::set_meta(&mut new, "generation", json!(meta::generation(cur) + 1));
        }
        // managedFields: the client's when it sent them, else the stored ones; then the
        // fields this update changed go to its manager.
        if new.pointer("/metadata/managedFields").is_none() {
            if let Some(mf) = cur.pointer("/metadata/managedFields") {
                meta::set_meta(&mut new, "managedFields", mf.clone());
            }
        }
        if let Some(manager) = manager {
            let api_version = self.def.api_version();
            let time = meta::now_rfc3339();
            let who = self.writer(manager, &api_version, &time, subresource);
            managed::record_update(self.def.kind, Some(cur), &mut new, who);
        }
        // An update that clears the last finalizer of a deleting object removes it.
        if meta::deletion_timestamp(cur).is_some()
            && meta::finalizers(&new).is_empty()
            && meta::deletion_grace_period(cur).unwrap_or(0) == 0
        {
            return Ok(Decision::Delete);
        }
        Ok(Decision::Write(new))
    }

    /// PUT. Returns the object and whether it was created (leases and events may be created
    /// by PUT, like upstream's `AllowCreateOnUpdate`).
    pub async fn update(
        &self,
        ns: &str,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        dry_run: bool,
        manager: Option<&str>,
    ) -> Result<(Value, bool), ApiError> {
        let allow_create = subresource.is_none() && matches!(self.def.kind, "Lease" | "Event");
        let body_for_create = body.clone();
        let r = self
            .guaranteed_update(ns, name, dry_run, |cur| {
                self.prepare_update(ns, name, cur, body.clone(), subresource, manager)
            })
            .await;
        match r {
            Err(e) if e.code() == 404 && allow_create && e.reason() == "NotFound" => {
                let mut b = body_for_create;
                meta::remove_meta(&mut b, "resourceVersion");
                if meta::name(&b).is_empty() {
                    meta::set_meta(&mut b, "name", json!(name));
                }
                self.create(ns, b, dry_run, manager)
                    .await
                    .map(|o| (o, true))
            }
            Err(e) => Err(e),
            Ok((obj, _)) => Ok((obj, false)),
        }
    }

    /// PATCH: applies the patch to the current object inside the CAS loop. Returns the object
    /// and whether it was created (server-side apply creates).
    pub async fn patch(
        &self,
        ns: &str,
        name: &str,
        req: PatchRequest<'_>,
    ) -> Result<(Value, bool), ApiError> {
        let PatchRequest {
            patch_type,
            body: patch,
            subresource,
            dry_run,
            strict_fields,
            manager,
        } = req;
        if let PatchType::Apply { force } = patch_type {
            return self
                .apply(
                    ns,
                    name,
                    patch,
                    subresource,
                    dry_run,
                    strict_fields,
                    manager,
                    force,
                )
                .await;
        }
        let patch: Value = serde_json::from_slice(patch)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        let (obj, _) = self
            .guaranteed_update(ns, name, dry_run, |cur| {
                let mut target = cur.clone();
                match patch_type {
                    PatchType::Merge => rkube_api::patch::merge_patch(&mut target, &patch),
                    PatchType::Strategic => {
                        rkube_api::strategic::apply(self.def.kind, &mut target, &patch).map_err(
                            |e| {
                                ApiError::invalid(
                                    self.def.group,
                                    self.def.kind,
                                    name,
                                    vec![StatusCause {
                                        reason: "FieldValueInvalid".into(),
                                        message: e,
                                        field: String::new(),
                                    }],
                                )
                            },
                        )?
                    }
                    PatchType::Apply { .. } => unreachable!("handled above"),
                    PatchType::Json => {
                        rkube_api::patch::json_patch(&mut target, &patch).map_err(|e| {
                            ApiError::invalid(
                                self.def.group,
                                self.def.kind,
                                name,
                                vec![StatusCause {
                                    reason: "FieldValueInvalid".into(),
                                    message: e,
                                    field: String::new(),
                                }],
                            )
                        })?
                    }
                }
                if strict_fields {
                    self.check_unknown_fields(&target)?;
                }
                self.prepare_update(ns, name, cur, target, subresource, manager)
            })
            .await?;
        Ok((obj, false))
    }

    fn check_unknown_fields(&self, obj: &Value) -> Result<(), ApiError> {
        let unknown = strategy::unknown_fields(self.def.kind, obj);
        if unknown.is_empty() {
            return Ok(());
        }
        let msgs: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        )))
    }

    fn writer<'a>(
        &self,
        manager: &'a str,
        api_version: &'a str,
        time: &'a str,
        subresource: Option<&str>,
    ) -> managed::Writer<'a> {
        managed::Writer {
            manager,
            api_version,
            time,
            scope: managed::Scope::of(subresource),
        }
    }

    /// Server-side apply (`application/apply-patch+yaml`): merges the applied configuration
    /// under `manager`'s ownership, or creates the object from it.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        ns: &str,
        name: &str,
        body: &[u8],
        subresource: Option<&str>,
        dry_run: bool,
        strict_fields: bool,
        manager: Option<&str>,
        force: bool,
    ) -> Result<(Value, bool), ApiError> {
        let manager = manager.filter(|m| !m.is_empty()).ok_or_else(|| {
            ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![StatusCause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: is required for apply patch".into(),
                    field: "fieldManager".into(),
                }],
            )
        })?;
        let config: Value = serde_json::from_slice(body)
            .or_else(|_| serde_yaml::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !config.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: the applied configuration must be an object",
            ));
        }
        if strict_fields {
            self.check_unknown_fields(&config)?;
        }
        let api_version = self.def.api_version();
        let time = meta::now_rfc3339();
        let who = self.writer(manager, &api_version, &time, subresource);
        let updated = self
            .guaranteed_update(ns, name, dry_run, |cur| {
                let merged = managed::apply(self.def.kind, Some(cur), &config, who, force)
                    .map_err(|c| ApiError::apply_conflict(&c))?;
                self.prepare_update(ns, name, cur, merged, subresource, None)
            })
            .await;
        match updated {
            Err(e) if e.code() == 404 && e.reason() == "NotFound" && subresource.is_none() => {
                let mut obj = managed::apply(self.def.kind, None, &config, who, force)
                    .map_err(|c| ApiError::apply_conflict(&c))?;
                if meta::name(&obj).is_empty() {
                    meta::set_meta(&mut obj, "name", json!(name));
                } else if meta::name(&obj) != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::name(&obj)
                    )));
                }
                self.create(ns, obj, dry_run, None).await.map(|o| (o, true))
            }
            r => r.map(|(obj, _)| (obj, false)),
        }
    }

    /// DELETE with preconditions, graceful deletion (pods), finalizers and the garbage
    /// collector's `orphan` / `foregroundDeletion` finalizers.
    pub async fn delete(
        &self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let mut immediate = false;
        let (obj, _) = self
            .guaranteed_update(ns, name, opts.dry_run, |cur| {
                immediate = false;
                if let Some(uid) = &opts.precondition_uid {
                    if uid != meta::uid(cur) {
                        return Err(ApiError::conflict(&self.gr(), name, &format!("the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated", meta::uid(cur))));
                    }
                }
                if let Some(rv) = &opts.precondition_resource_version {
                    if rv != meta::resource_version(cur) {
                        return Err(ApiError::conflict(&self.gr(), name, &format!("the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified", meta::resource_version(cur))));
                    }
                }
                let mut new = cur.clone();
                let pending = meta::deletion_timestamp(cur).is_some();
                // Garbage-collection finalizers follow the propagation policy.
                let mut finalizers = meta::finalizers(cur);
                if !pending {
                    let policy = match opts.orphan_dependents {
                        Some(true) => Some(Propagation::Orphan),
                        Some(false) => Some(Propagation::Background),
                        None => opts.propagation,
                    };
                    match policy {
                        Some(Propagation::Orphan) => add_unique(&mut finalizers, "orphan"),
                        Some(Propagation::Foreground) => add_unique(&mut finalizers, "foregroundDeletion"),
                        Some(Propagation::Background) => finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion"),
                        None => {}
                    }
                }
                // Graceful deletion.
                if let Some(grace) = strategy::grace_period(self.def.kind, cur, opts.grace_period_seconds) {
                    let now = meta::unix_now();
                    if pending {
                        let cur_grace = meta::deletion_grace_period(cur).unwrap_or(0);
                        if grace >= cur_grace || cur_grace == 0 {
                            if cur_grace == 0 && finalizers.is_empty() {
                                immediate = true;
                                return Ok(Decision::Delete);
                            }
                            // Graceful deletion is already pending with a shorter or equal grace.
                            return Ok(Decision::Write(new));
                        }
                        let ts = meta::deletion_timestamp(cur).and_then(meta::parse_rfc3339).unwrap_or(now);
                        let new_ts = (ts - (cur_grace - grace)).max(now);
                        let grace = if grace > 0 && new_ts <= now { 1 } else { grace };
                        meta::set_meta(&mut new, "deletionTimestamp", json!(meta::rfc3339(new_ts)));
                        meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
                        if grace == 0 && finalizers.is_empty() {
                            immediate = true;
                            return Ok(Decision::Delete);
                        }
                        return Ok(Decision::Write(new));
                    }
                    if grace > 0 {
                        meta::set_meta(&mut new, "deletionTimestamp", json!(meta::rfc3339(now + grace)));
                        meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
                        meta::set_meta(&mut new, "generation", json!(meta::generation(cur).max(0) + 1));
                        meta::set_finalizers(&mut new, &finalizers);
                        return Ok(Decision::Write(new));
                    }
                }
                // A namespace with spec finalizers turns Terminating; the namespace controller
                // empties it and then clears them through `finalize`.
                let spec_finalizers = self.def.kind == "Namespace"
                    && cur.pointer("/spec/finalizers").and_then(|f| f.as_array()).is_some_and(|a| !a.is_empty());
                if spec_finalizers {
                    if !pending {
                        meta::set_meta(&mut new, "deletionTimestamp", json!(meta::now_rfc3339()));
                        meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
                    }
                    new["status"] = json!({"phase": "Terminating"});
                    meta::set_finalizers(&mut new, &finalizers);
                    return Ok(Decision::Write(new));
                }
                if !finalizers.is_empty() {
                    if !pending {
                        meta::set_meta(&mut new, "deletionTimestamp", json!(meta::now_rfc3339()));
                        meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
                        if meta::generation(cur) > 0 {
                            meta::set_meta(&mut new, "generation", json!(meta::generation(cur) + 1));
                        }
                    }
                    meta::set_finalizers(&mut new, &finalizers);
                    return Ok(Decision::Write(new));
                }
                immediate = true;
                Ok(Decision::Delete)
            })
            .await?;
        Ok(if immediate {
            Deleted::Gone(obj)
        } else {
            Deleted::Pending(obj)
        })
    }

    /// The Status a non-pod delete returns.
    pub fn delete_status(&self, obj: &Value) -> Status {
        Status::success(
            200,
            Some(StatusDetails {
                name: meta::name(obj).to_string(),
                group: self.def.group.to_string(),
                kind: self.def.plural.to_string(),
                uid: meta::uid(obj).to_string(),
                ..Default::default()
            }),
        )
    }
}

fn add_unique(list: &mut Vec<String>, f: &str) {
    if !list.iter().any(|x| x == f) {
        list.push(f.to_string());
    }
}

/// What a PATCH asks for.
pub struct PatchRequest<'a> {
    pub patch_type: PatchType,
    pub body: &'a [u8],
    pub subresource: Option<&'a str>,
    pub dry_run: bool,
    /// `fieldValidation=Strict`: undeclared fields in the patched object are an error.
    pub strict_fields: bool,
    /// The field manager the change is recorded under (None: not recorded).
    pub manager: Option<&'a str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    /// Server-side apply; `force` takes conflicting fields from their managers.
    Apply {
        force: bool,
    },
}

trait KindMismatch {
    fn with_kind_mismatch(self, got: &str, want: &str) -> Self;
}

impl KindMismatch for ApiError {
    fn with_kind_mismatch(mut self, got: &str, want: &str) -> Self {
        if got != want {
            self.0.message =
                format!("the kind in the data ({got}) does not match the expected kind ({want})");
        }
        self
    }
}
