//! Serving CustomResourceDefinitions (upstream's apiextensions-apiserver controllers, in the
//! apiserver process): follows the CRDs in the watch cache and, on every change, decides names
//! (`status`), builds each established CRD's registries — one per served version, storage
//! version first, each with its own watch cache — and swaps them in as one set
//! (`Registries::set_custom`), writes the conditions (`Established` once the caches are
//! ready), and empties a deleted CRD of its objects before lifting its
//! `customresourcecleanup.apiextensions.k8s.io` finalizer. Every apiserver runs this; they
//! decide alike and write with compare-and-swap.

pub mod status;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::{meta, DeleteOptions, ListOptions};
use rkube_daemon::ShutdownToken;
use serde_json::Value;

use crate::cache::{CacheConfig, Cacher};
use crate::kinds::apiextensions::CLEANUP_FINALIZER;
use crate::kinds::custom::{self, CustomKind};
use crate::kinds::StrategyRef;
use crate::registry::{Registries, Registry, Set, Unadmitted, Write};
use crate::storage::Storage;

/// How often the loop runs without a change (retries, caches becoming ready, cleanups).
const TICK: Duration = Duration::from_millis(500);

/// The apiserver's own writes to CRDs and their objects.
fn own(verb: &'static str) -> Write<'static> {
    Write {
        admit: &Unadmitted,
        dry_run: false,
        manager: None,
        verb,
    }
}

pub struct Controller {
    pub registries: Arc<Registries>,
    pub storage: Arc<Storage>,
    pub etcd_prefix: String,
    pub cache: CacheConfig,
    pub duplex: bool,
    pub event_ttl: Duration,
    /// Calls conversion webhooks.
    pub caller: Option<Arc<crate::callout::Caller>>,
}

/// Each version's registry and whether it is served, the storage version first.
type Versions = Vec<(Arc<Registry>, bool)>;

/// One CRD's served registries and what stops their caches.
struct Served {
    /// What they were built from: uid, generation, terminating.
    key: (String, i64, bool),
    /// Each version's registry and whether it is served (the storage version may not be).
    regs: Versions,
    stop: ShutdownToken,
}

impl Served {
    fn ready(&self) -> bool {
        self.regs
            .iter()
            .all(|(r, _)| r.cache.as_ref().is_none_or(|c| c.is_ready()))
    }

    fn close(&self) {
        self.stop.cancel();
        for (r, _) in &self.regs {
            if let Some(c) = &r.cache {
                c.close();
            }
        }
    }
}

impl Controller {
    /// Runs until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: ShutdownToken) {
        let Some(crds) = self
            .registries
            .get(&("apiextensions.k8s.io", "customresourcedefinitions"))
        else {
            tracing::error!(
                "no CustomResourceDefinition registry: custom resources are not served"
            );
            return;
        };
        let Some(cache) = crds.cache.clone() else {
            return;
        };
        let mut changes = cache.changes();
        let mut served: HashMap<String, Served> = HashMap::new();
        let mut cleanups: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
        let mut seen = None;
        loop {
            // Work only when the CRDs changed or something is still to be done (caches
            // becoming ready, statuses to write, objects to clean up).
            let version = cache.content_version();
            if cache.is_ready() && (seen != Some(version) || !self.settled(&served, &cleanups)) {
                let objects = cache.values();
                let done = self
                    .sync(&crds, &objects, &mut served, &mut cleanups, &shutdown)
                    .await;
                seen = done.then_some(version);
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = changes.changed() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
        }
        for s in served.values() {
            s.close();
        }
    }

    /// Nothing is in flight: every served cache is ready and no cleanup runs.
    fn settled(
        &self,
        served: &HashMap<String, Served>,
        cleanups: &HashMap<String, tokio::task::JoinHandle<()>>,
    ) -> bool {
        served.values().all(Served::ready) && cleanups.values().all(|h| h.is_finished())
    }

    /// One pass; whether everything it meant to write was written.
    async fn sync(
        self: &Arc<Self>,
        crds: &Arc<Registry>,
        objects: &[Value],
        served: &mut HashMap<String, Served>,
        cleanups: &mut HashMap<String, tokio::task::JoinHandle<()>>,
        shutdown: &ShutdownToken,
    ) -> bool {
        let mut done = true;
        let mut retired = Vec::new();
        let naming = status::decide(objects);
        let mut changed = false;
        let mut wanted = Vec::new();
        for (crd, n) in objects.iter().zip(&naming) {
            if !n.accepted {
                continue;
            }
            let name = meta::name(crd).to_string();
            let terminating = meta::deletion_timestamp(crd).is_some();
            let key = (
                meta::uid(crd).to_string(),
                meta::generation(crd),
                terminating,
            );
            wanted.push(name.clone());
            if served.get(&name).is_some_and(|s| s.key == key) {
                continue;
            }
            match self.build(crd, terminating, shutdown) {
                Ok((regs, stop)) => {
                    if let Some(old) = served.insert(name.clone(), Served { key, regs, stop }) {
                        retired.push(old);
                    }
                    changed = true;
                }
                Err(e) => tracing::warn!(crd = %name, error = %e, "custom resource not served"),
            }
        }
        let wanted: std::collections::HashSet<String> = wanted.into_iter().collect();
        let gone: Vec<String> = served
            .keys()
            .filter(|n| !wanted.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(s) = served.remove(&name) {
                retired.push(s);
                changed = true;
            }
        }
        if changed {
            let mut set = Set::default();
            for s in served.values() {
                for (r, is_served) in &s.regs {
                    set.insert_with(r.clone(), *is_served);
                }
            }
            // Swapped first, then the old caches closed: no request finds a closed one
            // through the set.
            self.registries.set_custom(set);
            tracing::info!(crds = served.len(), "custom resources served");
        }
        for s in retired {
            s.close();
        }
        let now = meta::now_rfc3339();
        for (crd, n) in objects.iter().zip(&naming) {
            let name = meta::name(crd).to_string();
            let ready = served.get(&name).is_some_and(Served::ready);
            if n.accepted && !ready {
                // Established is still to be written once the caches are ready: this pass is
                // not the last (were it counted done, caches turning ready between two passes
                // would leave the loop settled with Established never written).
                done = false;
            }
            let deleting = meta::deletion_timestamp(crd).is_some();
            let terminating = deleting.then_some((
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            ));
            let want = status::desired(crd, n, ready, terminating, &now);
            if crd.get("status") != Some(&want) {
                let r = crds
                    .update_with("", &name, Some("status"), own("update"), |cur| {
                        // Decided again from what is stored: a retry keeps a concurrent
                        // writer's storedVersions.
                        let mut new = cur.clone();
                        new["status"] = status::desired(cur, n, ready, terminating, &now);
                        Ok(new)
                    })
                    .await;
                if let Err(e) = r {
                    done = false;
                    tracing::debug!(crd = %name, error = %e.status().message, "CRD status not written");
                }
            }
            let cleaning = meta::finalizers(crd).iter().any(|f| f == CLEANUP_FINALIZER);
            if deleting && cleaning && cleanups.get(&name).is_none_or(|h| h.is_finished()) {
                let me = self.clone();
                let (crd, crds, shutdown) = (crd.clone(), crds.clone(), shutdown.clone());
                cleanups.insert(
                    name,
                    tokio::spawn(async move { me.clean_up(crd, crds, shutdown).await }),
                );
            }
        }
        cleanups.retain(|_, h| !h.is_finished());
        done
    }

    /// The registries of every served version of `crd`, storage version first, their caches
    /// started.
    fn build(
        &self,
        crd: &Value,
        terminating: bool,
        shutdown: &ShutdownToken,
    ) -> Result<(Versions, ShutdownToken), String> {
        let storage = custom::storage_version(crd).ok_or("no storage version")?;
        let storage_served = custom::version_of(crd, storage).is_some_and(|v| v["served"] == true);
        // The storage version first, served or not: cleanup and collection go through it.
        let mut versions = vec![(storage.to_string(), storage_served)];
        for v in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("");
            if v["served"] == true && name != storage {
                versions.push((name.to_string(), true));
            }
        }
        let stop = shutdown.child_token();
        let mut regs = Vec::new();
        for (v, is_served) in versions {
            let def = custom::resource_def(crd, &v).ok_or("incomplete names")?;
            let mut kind = CustomKind::new(crd, &v, self.caller.clone())?;
            kind.terminating = terminating;
            let strategy = StrategyRef::Custom(Arc::new(kind));
            let cache = Cacher::new(
                def,
                strategy.clone(),
                &self.etcd_prefix,
                self.storage.clone(),
                self.cache.clone(),
                self.duplex,
            );
            tokio::spawn(crate::cache::feed::run(cache.clone(), stop.clone()));
            regs.push((
                Arc::new(Registry::new(
                    def,
                    strategy,
                    self.storage.clone(),
                    Some(cache),
                    &self.etcd_prefix,
                    self.event_ttl,
                )),
                is_served,
            ));
        }
        Ok((regs, stop))
    }

    /// Deletes every object of a deleted CRD (each through its registry, so their own
    /// finalizers hold them), then lifts the cleanup finalizer once none is left.
    async fn clean_up(self: Arc<Self>, crd: Value, crds: Arc<Registry>, shutdown: ShutdownToken) {
        let name = meta::name(&crd).to_string();
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let established = status::is_true(&crd, "Established");
        loop {
            // Only this CRD's own objects, through its own registry (never a built-in one of
            // the same names); a CRD never established has none.
            let left = match self.registries.custom().stored(&group, &plural) {
                None if !established => 0,
                None => {
                    tracing::debug!(crd = %name, "waiting for the CRD's registry to clean up");
                    usize::MAX
                }
                Some(reg) => match self.delete_all(&reg).await {
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(crd = %name, error = %e.status().message, "custom resource cleanup failed, retrying");
                        usize::MAX
                    }
                },
            };
            if left == 0 {
                let r = crds
                    .update_with("", &name, None, own("update"), |cur| {
                        let mut new = cur.clone();
                        let keep: Vec<String> = meta::finalizers(cur)
                            .into_iter()
                            .filter(|f| f != CLEANUP_FINALIZER)
                            .collect();
                        meta::set_finalizers(&mut new, &keep);
                        Ok(new)
                    })
                    .await;
                match r {
                    Ok(_) => tracing::info!(crd = %name, "custom resources deleted, CRD finalized"),
                    Err(e) if e.code() == 404 => {}
                    Err(e) => {
                        tracing::warn!(crd = %name, error = %e.status().message, "CRD finalizer not removed")
                    }
                }
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Asks for the deletion of every object not being deleted yet; the number still stored.
    async fn delete_all(&self, reg: &Registry) -> Result<usize, rkube_api::ApiError> {
        let opts = ListOptions {
            resource_version: Some(String::new()),
            ..Default::default()
        };
        let list = reg.list(None, &opts).await?;
        let mut left = 0;
        for item in &list.items {
            let Ok(obj) = serde_json::from_slice::<Value>(item) else {
                continue;
            };
            left += 1;
            if meta::deletion_timestamp(&obj).is_some() {
                continue;
            }
            let (ns, name) = (meta::namespace(&obj), meta::name(&obj));
            match reg
                .delete(ns, name, &DeleteOptions::default(), own("delete"))
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(left)
    }
}
