//! The write half of the registry. Every way an object is created or changed runs one path,
//! in upstream's order: identity checks (kind, namespace, name, preconditions) → mutating
//! admission → the kind's strategy (PrepareForCreate/PrepareForUpdate, defaults, the typed
//! round trip, validation, bounds) → validating admission (quota is charged here, after
//! validation) → storage (`Txn If mod_revision == …`, retried on conflicts).
//!
//! PUT and server-side apply that find no object create it through the same create path
//! (`Attributes::verb` tells admission it came from an update, which then also needs `create`
//! permission).

use rkube_api::managed;
use rkube_api::patch::PatchKind;
use rkube_api::status::OPTIMISTIC_LOCK_MSG;
use rkube_api::{meta, ApiError, DeleteOptions, Propagation, Status, StatusCause, StatusDetails};
use serde_json::{json, Value};

use super::admit::{Admit, Attributes, Operation};
use super::{Decision, Deleted, Registry};
use crate::storage::Cas;

/// How a write is made: by whom (the field manager), with which admission, and whether it is
/// a dry run.
#[derive(Clone, Copy)]
pub struct Write<'a> {
    pub admit: &'a dyn Admit,
    pub dry_run: bool,
    /// The field manager the change is recorded under (`None`: not recorded).
    pub manager: Option<&'a str>,
    /// The request's verb (`create`, `update`, `patch`, `delete`).
    pub verb: &'a str,
}

/// The object an update starts from: decoded (resourceVersion stamped), its revision, and
/// the stored bytes when it was read from storage (`None`: the watch cache's copy).
struct Current {
    obj: Value,
    rev: i64,
    stored: Option<Vec<u8>>,
}

impl Current {
    fn cached(&self) -> bool {
        self.stored.is_none()
    }
}

/// What a PATCH asks for.
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

impl Registry {
    fn attributes<'a>(
        &self,
        w: &Write<'a>,
        operation: Operation,
        subresource: Option<&'a str>,
        namespace: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            operation,
            def: self.def,
            subresource,
            namespace,
            name,
            dry_run: w.dry_run,
            verb: w.verb,
        }
    }

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
            let mut e = ApiError::bad_request(format!(
                "the API version in the data ({shown_av}) does not match the expected API version ({want_av})"
            ));
            if shown_kind != self.def.kind {
                e.0.message = format!(
                    "the kind in the data ({shown_kind}) does not match the expected kind ({})",
                    self.def.kind
                );
            }
            return Err(e);
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

    /// The strategy's part shared by create and update: defaults, the typed round trip,
    /// validation, and the bounds every stored object keeps.
    fn finish_object(&self, mut obj: Value, old: Option<&Value>) -> Result<Value, ApiError> {
        let s = &*self.strategy;
        s.defaults(&mut obj);
        let obj = s.round_trip(obj).map_err(|e| {
            ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {e}",
                self.def.kind, self.def.version, self.def.kind
            ))
        })?;
        let mut causes = Vec::new();
        crate::kinds::validate_meta(s.name_rule(), &obj, &mut causes);
        s.validate(&obj, &mut causes);
        match old {
            Some(old) => s.validate_update(&obj, old, &mut causes),
            None => s.validate_create(&obj, &mut causes),
        }
        if !causes.is_empty() {
            return Err(self.invalid(&obj, causes));
        }
        rkube_api::bounds::check(&obj)
            .and_then(|()| rkube_api::bounds::check_times(&obj))
            .map_err(|e| self.invalid(&obj, vec![e]))?;
        Ok(obj)
    }

    fn record_manager(
        &self,
        old: Option<&Value>,
        obj: &mut Value,
        manager: Option<&str>,
        sub: Option<&str>,
    ) {
        if let Some(manager) = manager {
            let api_version = self.def.api_version();
            let time = meta::now_rfc3339();
            managed::record_update(
                self.strategy.lists(),
                old,
                obj,
                self.writer(manager, &api_version, &time, sub),
            );
        }
    }

    pub(crate) fn writer<'a>(
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

    /// CREATE: mutating admission, PrepareForCreate and the strategy, validating admission,
    /// then `Txn(If mod_revision==0 Then Put)` (a `generateName` collision picks another name).
    pub async fn create(&self, ns: &str, mut obj: Value, w: Write<'_>) -> Result<Value, ApiError> {
        if let Some(why) = self.strategy.create_refused() {
            let mut e = ApiError::method_not_supported(&self.gr(), "create");
            e.0.message = why;
            return Err(e);
        }
        self.check_kind(&mut obj)?;
        self.check_namespace(&mut obj, ns)?;
        if !meta::resource_version(&obj).is_empty() {
            return Err(ApiError::unknown(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let generate =
            meta::name(&obj).is_empty() && !meta::meta_str(&obj, "generateName").is_empty();
        let mut rng = || rand::random::<u64>();
        let base: String = meta::meta_str(&obj, "generateName")
            .chars()
            .take(58)
            .collect();
        if generate {
            meta::set_meta(
                &mut obj,
                "name",
                json!(format!("{base}{}", meta::random_suffix(&mut rng))),
            );
        }
        let name = meta::name(&obj).to_string();
        let attrs = self.attributes(&w, Operation::Create, None, ns, &name);
        // Admission sees the object defaulted, as upstream's decoder defaults it first.
        self.strategy.defaults(&mut obj);
        w.admit.mutate(&attrs, &mut obj, None).await?;
        if meta::name(&obj) != name || meta::namespace(&obj) != ns {
            // A mutating webhook may not move the object (upstream's BeforeCreate).
            return Err(ApiError::bad_request(
                "the name or namespace of the object was changed by admission",
            ));
        }
        meta::set_meta(&mut obj, "uid", json!(meta::new_uid(&mut rng)));
        meta::set_meta(&mut obj, "creationTimestamp", json!(meta::now_rfc3339()));
        meta::remove_meta(&mut obj, "deletionTimestamp");
        meta::remove_meta(&mut obj, "deletionGracePeriodSeconds");
        if self.strategy.tracks_generation() {
            meta::set_meta(&mut obj, "generation", json!(1));
        } else {
            meta::remove_meta(&mut obj, "generation");
        }
        self.strategy.prepare_for_create(&mut obj);
        let Some(hooks) = self.hooks.get().cloned() else {
            return self.store_new(ns, obj, &attrs, w, generate, &base).await;
        };
        hooks.begin_create(&mut obj, w.dry_run).await?;
        let taken = obj.clone();
        let result = self.store_new(ns, obj, &attrs, w, generate, &base).await;
        if !w.dry_run {
            hooks.finish_create(&taken, result.is_ok()).await;
        }
        result
    }

    /// The rest of a create once the object is prepared: the strategy's defaults and
    /// validation, validating admission, then storage.
    async fn store_new(
        &self,
        ns: &str,
        obj: Value,
        attrs: &Attributes<'_>,
        w: Write<'_>,
        generate: bool,
        base: &str,
    ) -> Result<Value, ApiError> {
        let mut rng = || rand::random::<u64>();
        let mut obj = self.finish_object(obj, None)?;
        self.record_manager(None, &mut obj, w.manager, None);
        w.admit.validate(attrs, &obj, None).await?;
        if w.dry_run {
            return Ok(obj);
        }
        let lease = self.lease().await?;
        for attempt in 0..8 {
            let key = self.key(ns, meta::name(&obj));
            match self
                .storage
                .create(&key, self.encode(&obj)?, lease)
                .await
                .map_err(self.serr("create"))?
            {
                Some(rev) => {
                    meta::set_meta(&mut obj, "resourceVersion", json!(rev.to_string()));
                    return Ok(obj);
                }
                None if generate && attempt < 7 => {
                    meta::set_meta(
                        &mut obj,
                        "name",
                        json!(format!("{base}{}", meta::random_suffix(&mut rng))),
                    );
                }
                None => {
                    let name = meta::name(&obj);
                    let (existing, _) =
                        self.storage.get(&key).await.map_err(self.serr("create"))?;
                    let deleting = existing
                        .and_then(|s| self.decode(&s).ok())
                        .is_some_and(|v| meta::deletion_timestamp(&v).is_some());
                    return Err(if deleting {
                        ApiError::already_exists_being_deleted(&self.gr(), name)
                    } else {
                        ApiError::already_exists(&self.gr(), name)
                    });
                }
            }
        }
        Err(ApiError::already_exists(&self.gr(), meta::name(&obj)))
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

    /// Read-modify-write with compare-and-swap, for the apiserver's own changes (status it
    /// owns, finalizers, bindings): retries on conflicting writes; the closure sees the
    /// current object (resourceVersion stamped). A result equal to the stored bytes writes
    /// nothing. No admission: callers that change what clients asked for use `update_with`.
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
        let mut start = self.update_start(&key, dry_run).await?;
        loop {
            let Some(cur) = start.take() else {
                return Err(ApiError::not_found(&self.gr(), name));
            };
            let decision = match try_update(&cur.obj) {
                Ok(d) => d,
                Err(e) => {
                    start = self.refused(&key, &cur, e).await?;
                    continue;
                }
            };
            match self.commit(&key, cur, decision, dry_run).await? {
                Ok(done) => return Ok(done),
                Err(latest) => start = latest,
            }
        }
    }

    /// Where an update starts: the watch cache's copy when it holds the object (upstream's
    /// cacher hands it to `GuaranteedUpdate` as the cached existing object), else storage. The
    /// copy may be behind: its compare-and-swap then fails and the update goes on from what
    /// storage holds; a refusal or a no-op decided on it stands only if storage is still at
    /// its revision. Dry runs, which never reach the compare-and-swap, read storage.
    async fn update_start(&self, key: &str, dry_run: bool) -> Result<Option<Current>, ApiError> {
        if dry_run {
            return self.read_current(key).await;
        }
        let cache = self
            .cache
            .as_ref()
            .filter(|c| self.strategy.served_as_stored() && c.is_ready());
        if let Some(Ok((Some(o), _))) = cache.map(|c| c.get(key)) {
            if let Ok(obj) = serde_json::from_slice(&o.json()) {
                return Ok(Some(Current {
                    obj,
                    rev: o.rv as i64,
                    stored: None,
                }));
            }
        }
        self.read_current(key).await
    }

    /// A refusal decided on `cur` stands when `cur` came from storage or storage is still at
    /// its revision; else the update is decided again on what storage holds now.
    async fn refused(
        &self,
        key: &str,
        cur: &Current,
        e: ApiError,
    ) -> Result<Option<Current>, ApiError> {
        if !cur.cached() {
            return Err(e);
        }
        self.moved_past(key, cur.rev).await?.ok_or(e)
    }

    /// What storage holds, unless it is still at `rev` (`None`: what was decided on the
    /// cache's copy at `rev` stands).
    async fn moved_past(&self, key: &str, rev: i64) -> Result<Option<Option<Current>>, ApiError> {
        let latest = self.read_current(key).await?;
        Ok(match &latest {
            Some(c) if c.rev == rev => None,
            _ => Some(latest),
        })
    }

    async fn read_current(&self, key: &str) -> Result<Option<Current>, ApiError> {
        let (stored, _) = self.storage.get(key).await.map_err(self.serr("update"))?;
        self.current_of(stored)
    }

    fn current_of(
        &self,
        stored: Option<crate::storage::Stored>,
    ) -> Result<Option<Current>, ApiError> {
        stored
            .map(|s| {
                Ok(Current {
                    obj: self.decode(&s)?,
                    rev: s.mod_revision,
                    stored: Some(s.value),
                })
            })
            .transpose()
    }

    /// Writes (or deletes) what was decided about `cur`: Ok with the result, or Err with
    /// what storage holds now when another write came first.
    async fn commit(
        &self,
        key: &str,
        cur: Current,
        decision: Decision,
        dry_run: bool,
    ) -> Result<Result<(Value, bool), Option<Current>>, ApiError> {
        let Current {
            obj: cur,
            rev,
            stored,
        } = cur;
        match decision {
            Decision::Write(new) => {
                // Unchanged: the same bytes as stored, or (from the cache's copy, whose
                // resourceVersion `new` carries too) the same object — which stands only if
                // storage is still at the copy's revision (else the update runs again on
                // what storage holds: the copy may have missed a change this one undoes).
                if stored.is_none() && new == cur && !dry_run {
                    return Ok(match self.moved_past(key, rev).await? {
                        None => Ok((cur, false)),
                        Some(latest) => Err(latest),
                    });
                }
                let bytes = match &stored {
                    None if new == cur => None,
                    _ => Some(self.encode(&new)?),
                };
                let bytes = match bytes {
                    Some(b) if stored.as_ref() != Some(&b) && !dry_run => b,
                    _ => return Ok(Ok((if dry_run { new } else { cur }, false))),
                };
                let lease = self.lease().await?;
                match self
                    .storage
                    .update(key, bytes, rev, lease)
                    .await
                    .map_err(self.serr("update"))?
                {
                    Cas::Done(rev) => {
                        let mut new = new;
                        meta::set_meta(&mut new, "resourceVersion", json!(rev.to_string()));
                        Ok(Ok((new, true)))
                    }
                    Cas::Stale(latest) => Ok(Err(self.current_of(latest)?)),
                }
            }
            Decision::Delete => {
                if dry_run {
                    return Ok(Ok((cur, true)));
                }
                match self
                    .storage
                    .delete(key, rev)
                    .await
                    .map_err(self.serr("delete"))?
                {
                    Cas::Done(rev) => {
                        if let Some(h) = self.hooks.get() {
                            h.after_delete(&cur).await;
                        }
                        let mut gone = cur;
                        meta::set_meta(&mut gone, "resourceVersion", json!(rev.to_string()));
                        Ok(Ok((gone, true)))
                    }
                    Cas::Stale(latest) => Ok(Err(self.current_of(latest)?)),
                }
            }
        }
    }

    /// An update a client asked for: `build` makes the intended object from the current one
    /// (a PUT's body, a patched copy), then the admission path runs on it, retried on
    /// conflicting writes. Returns the object and whether storage changed.
    pub async fn update_with<F>(
        &self,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        w: Write<'_>,
        mut build: F,
    ) -> Result<(Value, bool), ApiError>
    where
        F: FnMut(&Value) -> Result<Value, ApiError>,
    {
        let key = self.key(ns, name);
        let mut start = self.update_start(&key, w.dry_run).await?;
        let attrs = self.attributes(&w, Operation::Update, subresource, ns, name);
        loop {
            let Some(cur) = start.take() else {
                return Err(ApiError::not_found(&self.gr(), name));
            };
            let decided = async {
                let mut new = build(&cur.obj)?;
                self.check_identity(ns, name, &cur.obj, &mut new)?;
                self.strategy.defaults(&mut new);
                w.admit.mutate(&attrs, &mut new, Some(&cur.obj)).await?;
                self.check_identity(ns, name, &cur.obj, &mut new)?;
                let mut decision = self.prepare_update(&cur.obj, new, subresource, w.manager)?;
                if let Decision::Write(obj) = &mut decision {
                    w.admit.validate(&attrs, obj, Some(&cur.obj)).await?;
                    if let Some(h) = self.hooks.get() {
                        h.begin_update(&cur.obj, obj, w.dry_run).await?;
                    }
                }
                Ok::<_, ApiError>(decision)
            }
            .await;
            let decision = match decided {
                Ok(d) => d,
                Err(e) => {
                    start = self.refused(&key, &cur, e).await?;
                    continue;
                }
            };
            let began = match (&decision, self.hooks.get()) {
                (Decision::Write(obj), Some(h)) if !w.dry_run => {
                    Some((h.clone(), cur.obj.clone(), obj.clone()))
                }
                _ => None,
            };
            let result = self.commit(&key, cur, decision, w.dry_run).await;
            if let Some((h, old, new)) = began {
                h.finish_update(&old, &new, matches!(result, Ok(Ok(_))))
                    .await;
            }
            match result? {
                Ok(done) => return Ok(done),
                Err(latest) => start = latest,
            }
        }
    }

    /// What an update may not get wrong about which object it is: kind, namespace, name, and
    /// its resourceVersion and uid preconditions.
    fn check_identity(
        &self,
        ns: &str,
        name: &str,
        cur: &Value,
        new: &mut Value,
    ) -> Result<(), ApiError> {
        self.check_kind(new)?;
        self.check_namespace(new, ns)?;
        let body_name = meta::name(new).to_string();
        if body_name.is_empty() {
            meta::set_meta(new, "name", json!(name));
        } else if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        // Every kind served allows unconditional updates (upstream's AllowUnconditionalUpdate).
        let rv = meta::resource_version(new);
        if !rv.is_empty() && rv != meta::resource_version(cur) {
            return Err(ApiError::conflict(&self.gr(), name, OPTIMISTIC_LOCK_MSG));
        }
        let uid = meta::uid(new).to_string();
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
        Ok(())
    }

    /// PrepareForUpdate and the strategy: the spec/status split, generation, immutable
    /// metadata, validation, managedFields, and removal once the last finalizer of a deleting
    /// object is gone.
    pub fn prepare_update(
        &self,
        cur: &Value,
        mut new: Value,
        subresource: Option<&str>,
        manager: Option<&str>,
    ) -> Result<Decision, ApiError> {
        let s = &*self.strategy;
        match subresource {
            Some("status") => s.prepare_for_status_update(&mut new, cur),
            None | Some("scale") => {
                if self.def.has_subresource("status") {
                    match cur.get("status") {
                        Some(st) => new["status"] = st.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
                // As upstream, where scale writes through the main resource's update.
                s.prepare_for_update(&mut new, cur);
            }
            Some(other) => s.prepare_for_subresource_update(other, &mut new, cur),
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
        if matches!(subresource, None | Some("scale"))
            && s.tracks_generation()
            && s.spec_changed(&new, cur)
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
        self.record_manager(Some(cur), &mut new, manager, subresource);
        // An update that clears what the deletion of an object waited for removes it.
        if meta::deletion_timestamp(cur).is_some()
            && meta::finalizers(&new).is_empty()
            && !s.deletion_blocked(&new)
            && meta::deletion_grace_period(cur).unwrap_or(0) == 0
        {
            return Ok(Decision::Delete);
        }
        Ok(Decision::Write(new))
    }

    /// PUT (of the object or a subresource). Returns the object and whether it was created:
    /// kinds that allow it (leases, events) are created by a PUT that finds nothing.
    pub async fn update(
        &self,
        ns: &str,
        name: &str,
        body: Value,
        subresource: Option<&str>,
        w: Write<'_>,
    ) -> Result<(Value, bool), ApiError> {
        let r = self
            .update_with(ns, name, subresource, w, |_| Ok(body.clone()))
            .await;
        match r {
            Err(e)
                if e.code() == 404
                    && e.reason() == "NotFound"
                    && subresource.is_none()
                    && self.strategy.allow_create_on_update() =>
            {
                let mut b = body;
                meta::remove_meta(&mut b, "resourceVersion");
                if meta::name(&b).is_empty() {
                    meta::set_meta(&mut b, "name", json!(name));
                } else if meta::name(&b) != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::name(&b)
                    )));
                }
                self.create(ns, b, w).await.map(|o| (o, true))
            }
            Err(e) => Err(e),
            Ok((obj, _)) => Ok((obj, false)),
        }
    }

    /// PATCH: applies the patch to the current object inside the CAS loop. Returns the object
    /// and whether it was created (server-side apply creates).
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        ns: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
        strict_fields: bool,
        w: Write<'_>,
    ) -> Result<(Value, bool), ApiError> {
        if let PatchType::Apply { force } = patch_type {
            return self
                .apply(ns, name, patch, subresource, strict_fields, force, w)
                .await;
        }
        let kind = match patch_type {
            PatchType::Merge => PatchKind::Merge,
            PatchType::Json => PatchKind::Json,
            PatchType::Strategic => PatchKind::Strategic,
            PatchType::Apply { .. } => unreachable!("handled above"),
        };
        let lists = self.strategy.lists();
        let (obj, _) = self
            .update_with(ns, name, subresource, w, |cur| {
                let target = rkube_api::patch::apply(kind, lists, cur, patch)
                    .map_err(|e| patch_error(self, name, e))?;
                if strict_fields {
                    self.check_unknown_fields(&target)?;
                }
                Ok(target)
            })
            .await?;
        Ok((obj, false))
    }

    fn check_unknown_fields(&self, obj: &Value) -> Result<(), ApiError> {
        let unknown = self.unknown_fields(obj, rkube_api::decode::MAX_REPORTED);
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

    /// Server-side apply (`application/apply-patch+yaml`): merges the applied configuration
    /// under the manager's ownership, or creates the object from it.
    #[allow(clippy::too_many_arguments)]
    async fn apply(
        &self,
        ns: &str,
        name: &str,
        config: &Value,
        subresource: Option<&str>,
        strict_fields: bool,
        force: bool,
        w: Write<'_>,
    ) -> Result<(Value, bool), ApiError> {
        let manager = w.manager.filter(|m| !m.is_empty()).ok_or_else(|| {
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
        if !config.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: the applied configuration must be an object",
            ));
        }
        if strict_fields {
            self.check_unknown_fields(config)?;
        }
        let api_version = self.def.api_version();
        let time = meta::now_rfc3339();
        let who = self.writer(manager, &api_version, &time, subresource);
        let lists = self.strategy.lists();
        // Apply records its own managedFields: the strategy runs without a manager.
        let unrecorded = Write { manager: None, ..w };
        let updated = self
            .update_with(ns, name, subresource, unrecorded, |cur| {
                managed::apply(lists, Some(cur), config, who, force)
                    .map_err(|c| ApiError::apply_conflict(&c))
            })
            .await;
        match updated {
            Err(e) if e.code() == 404 && e.reason() == "NotFound" && subresource.is_none() => {
                let mut obj = managed::apply(lists, None, config, who, force)
                    .map_err(|c| ApiError::apply_conflict(&c))?;
                if meta::name(&obj).is_empty() {
                    meta::set_meta(&mut obj, "name", json!(name));
                } else if meta::name(&obj) != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::name(&obj)
                    )));
                }
                self.create(ns, obj, unrecorded).await.map(|o| (o, true))
            }
            r => r.map(|(obj, _)| (obj, false)),
        }
    }

    /// DELETE with preconditions, graceful deletion, finalizers and the garbage collector's
    /// `orphan` / `foregroundDeletion` finalizers. Validating admission sees the object being
    /// deleted.
    pub async fn delete(
        &self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        w: Write<'_>,
    ) -> Result<Deleted, ApiError> {
        let key = self.key(ns, name);
        let mut start = self.read_current(&key).await?;
        let attrs = self.attributes(&w, Operation::Delete, None, ns, name);
        let mut admitted = false;
        loop {
            let Some(cur) = start.take() else {
                return Err(ApiError::not_found(&self.gr(), name));
            };
            if !admitted {
                w.admit.validate(&attrs, &cur.obj, None).await?;
                admitted = true;
            }
            let (decision, immediate) = self.delete_decision(name, &cur.obj, opts)?;
            match self.commit(&key, cur, decision, opts.dry_run).await? {
                Ok((obj, _)) if immediate => return Ok(Deleted::Gone(obj)),
                Ok((obj, _)) => return Ok(Deleted::Pending(obj)),
                Err(latest) => start = latest,
            }
        }
    }

    /// What deleting `cur` does: (decision, whether the object is gone now).
    fn delete_decision(
        &self,
        name: &str,
        cur: &Value,
        opts: &DeleteOptions,
    ) -> Result<(Decision, bool), ApiError> {
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
                Some(Propagation::Background) => {
                    finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion")
                }
                None => {}
            }
        }
        let now = meta::unix_now();
        // A negative grace period means 1 s, as upstream; none is ever long enough to push the
        // deletion timestamp past what RFC 3339 can say.
        let requested = opts.grace_period_seconds.map(|g| {
            if g < 0 {
                1
            } else {
                g.min(crate::kinds::podspec::MAX_GRACE_SECONDS)
            }
        });
        // Graceful deletion.
        if let Some(grace) = self.strategy.grace_period(cur, requested) {
            if pending {
                let cur_grace = meta::deletion_grace_period(cur).unwrap_or(0);
                if grace >= cur_grace || cur_grace == 0 {
                    if cur_grace == 0 && finalizers.is_empty() {
                        return Ok((Decision::Delete, true));
                    }
                    // Graceful deletion is already pending with a shorter or equal grace.
                    return Ok((Decision::Write(new), false));
                }
                let ts = meta::deletion_timestamp(cur)
                    .and_then(meta::parse_rfc3339)
                    .unwrap_or(now);
                let new_ts = ts.saturating_sub(cur_grace - grace).max(now);
                let grace = if grace > 0 && new_ts <= now { 1 } else { grace };
                meta::set_meta(&mut new, "deletionTimestamp", json!(meta::rfc3339(new_ts)));
                meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
                if grace == 0 && finalizers.is_empty() {
                    return Ok((Decision::Delete, true));
                }
                return Ok((Decision::Write(new), false));
            }
            if grace > 0 {
                meta::set_meta(
                    &mut new,
                    "deletionTimestamp",
                    json!(meta::rfc3339(now.saturating_add(grace))),
                );
                meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(grace));
                meta::set_meta(
                    &mut new,
                    "generation",
                    json!(meta::generation(cur).max(0) + 1),
                );
                meta::set_finalizers(&mut new, &finalizers);
                return Ok((Decision::Write(new), false));
            }
        }
        // Deletion that waits for the kind's own finalization (a namespace being emptied).
        if self.strategy.deletion_blocked(cur) {
            if !pending {
                meta::set_meta(&mut new, "deletionTimestamp", json!(meta::now_rfc3339()));
                meta::set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
            }
            meta::set_finalizers(&mut new, &finalizers);
            self.strategy.begin_deletion(&mut new);
            return Ok((Decision::Write(new), false));
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
            return Ok((Decision::Write(new), false));
        }
        Ok((Decision::Delete, true))
    }

    /// The Status a delete of a kind that does not answer with the object returns.
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

/// A patch that cannot be applied: 422, or 413 when it has too many operations (upstream).
fn patch_error(reg: &Registry, name: &str, e: rkube_api::patch::PatchError) -> ApiError {
    use rkube_api::patch::PatchError;
    match e {
        PatchError::TooManyOperations(msg) => ApiError::request_entity_too_large(msg),
        PatchError::Malformed(msg) => ApiError::bad_request(msg),
        PatchError::Invalid(msg) => ApiError::invalid(
            reg.def.group,
            reg.def.kind,
            name,
            vec![StatusCause {
                reason: "FieldValueInvalid".into(),
                message: msg,
                field: String::new(),
            }],
        ),
    }
}

fn add_unique(list: &mut Vec<String>, f: &str) {
    if !list.iter().any(|x| x == f) {
        list.push(f.to_string());
    }
}
