//! The StatefulSet controller: pods with stable names, hostnames and claims, created and
//! deleted in ordinal order (or in parallel), rolled by revision (ControllerRevisions, so
//! `kubectl rollout history|undo` work), their claims owned as the retention policy says.
//! Decisions live in `logic` (pods) and `history` (revisions, written by `revisions`); this file wires pod, claim and
//! StatefulSet events to the queue and performs the API calls.

pub mod logic;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{self, PersistentVolumeClaim};
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error, Patch, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::{selecting, Ctx};
use crate::expectations::Expectations;
use crate::history;
use crate::objects::{controller_ref, labels_of, selector};
use crate::podcontrol;
use crate::revisions;
use crate::worker::Reconciled;
use logic::Why;

pub struct StatefulSetController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    expectations: Expectations,
    recorder: rkube_client::events::Recorder,
}

impl StatefulSetController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(StatefulSetController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("statefulset"),
            expectations: Expectations::default(),
            recorder: ctx.recorder.for_component("statefulset-controller"),
        });
        let me = c.clone();
        ctx.statefulsets.on_change(move |ch| match ch {
            Change::Added(s) | Change::Updated { new: s, .. } => me.queue.add(key_of(&**s)),
            Change::Deleted(s) => {
                let k = key_of(&**s);
                me.expectations.forget(&k);
                me.queue.add(k);
            }
        });
        let me = c.clone();
        ctx.pods.on_change(move |ch| {
            if let Some((k, _, _)) =
                podcontrol::observe(&me.expectations, ("apps", "StatefulSet"), ch)
            {
                me.queue.add(k);
            } else if let Change::Added(p) | Change::Updated { new: p, .. } = ch {
                // An orphan a set may adopt.
                if controller_ref(&p.metadata).is_none() {
                    for k in selecting(&me.ctx.statefulsets, &p.metadata, |s| {
                        s.spec.as_ref().map(|s| &s.selector)
                    }) {
                        me.queue.add(k);
                    }
                }
            }
        });
        // A claim that finished terminating lets its pod be created.
        let me = c.clone();
        ctx.claims.on_change(move |ch| {
            if let Change::Deleted(c) = ch {
                for k in selecting(&me.ctx.statefulsets, &c.metadata, |s| {
                    s.spec.as_ref().map(|s| &s.selector)
                }) {
                    me.queue.add(k);
                }
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "statefulset", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(set) = self.ctx.statefulsets.get(key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let (ns, name) = split_key(key);
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let mut pods: Vec<Arc<Pod>> = self
            .ctx
            .pods
            .by_index(index::OWNER_UID, &uid)
            .into_iter()
            .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        if set.metadata.deletion_timestamp.is_none() {
            pods.extend(self.adopt(&set, &pods).await?);
        }
        let revs = revisions::owned(&self.ctx, &set.metadata);
        let Some((current, update, collisions)) = self.revisions(&set, &revs).await? else {
            return Ok(Some(Duration::from_millis(100)));
        };
        let (current_name, update_name) = (
            current.metadata.name.clone().unwrap_or_default(),
            update.metadata.name.clone().unwrap_or_default(),
        );
        let claim_terminating = |ord: i32| {
            let pod_name = format!("{name}-{ord}");
            logic::claim_names(&set, ord).any(|c| {
                self.ctx
                    .claims
                    .get_in(ns, &c)
                    .is_some_and(|c| logic::claim_is_stale(&set, &c, &pod_name))
            })
        };
        let plan = logic::plan(
            &set,
            &pods,
            &current_name,
            &update_name,
            collisions,
            claim_terminating,
            rkube_client::now(),
        );
        let api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);
        if self.expectations.satisfied(key) && set.metadata.deletion_timestamp.is_none() {
            self.claim_owners(&set, &pods).await?;
            self.repair(&set, &api, &pods).await;
            self.delete(key, &set, &api, &plan.delete).await?;
            let pods: Vec<v1::Pod> = plan
                .create
                .iter()
                .map(|&(ord, at_update)| {
                    let (rev, name) = if at_update {
                        (&update, &update_name)
                    } else {
                        (&current, &current_name)
                    };
                    let template = history::template_of(rev)
                        .unwrap_or_else(|| set.spec.clone().unwrap_or_default().template);
                    logic::pod_for(&set, &template, name, ord)
                })
                .collect();
            let create_api = Api::namespaced(&self.ctx.client, ns);
            self.create(key, &set, &create_api, &plan.create, pods)
                .await?;
        }
        self.prune(&set, &revs, &pods, &current_name, &update_name)
            .await?;
        let unchanged = set.status.as_ref().is_some_and(|s| {
            let mut s = s.clone();
            s.conditions = plan.status.conditions.clone();
            s == plan.status
        });
        if !unchanged {
            let patch = Patch::Merge(json!({"status": plan.status}));
            match Api::<StatefulSet>::namespaced(&self.ctx.client, ns)
                .patch_status(name, &patch)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(plan.requeue.map(|s| Duration::from_secs(s.max(1) as u64)))
    }

    /// Orphans named as the set's pods and matching its selector get the set as controller.
    async fn adopt(&self, set: &StatefulSet, owned: &[Arc<Pod>]) -> Result<Vec<Arc<Pod>>, Error> {
        let (ns, name) = (
            set.metadata.namespace.as_deref().unwrap_or_default(),
            set.metadata.name.as_deref().unwrap_or_default(),
        );
        let Some(sel) = selector(set.spec.as_ref().map(|s| &s.selector)) else {
            return Ok(Vec::new());
        };
        let mine: HashSet<&str> = owned
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        // The ordinals this sync could act on: those owned, and as many more as it may create
        // — never all of a huge `replicas`.
        let (start, count) = (logic::start(set), logic::replicas(set));
        let reach = count.min(i32::try_from(owned.len() + logic::MAX_CREATE).unwrap_or(i32::MAX));
        let api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);
        let mut adopted = Vec::new();
        for ord in start..start.saturating_add(reach) {
            let pod_name = format!("{name}-{ord}");
            if mine.contains(pod_name.as_str()) {
                continue;
            }
            let Some(p) = self.ctx.pods.get_in(ns, &pod_name) else {
                continue;
            };
            if controller_ref(&p.metadata).is_some()
                || p.metadata.deletion_timestamp.is_some()
                || !sel.matches(&labels_of(&p.metadata))
            {
                continue;
            }
            let mut refs = p.metadata.owner_references.clone().unwrap_or_default();
            refs.push(crate::objects::controller_of(
                "apps/v1",
                "StatefulSet",
                &set.metadata,
            ));
            let patch = Patch::Merge(json!({"metadata": {
                "ownerReferences": refs,
                "uid": p.metadata.uid,
            }}));
            match api.patch(&pod_name, &patch).await {
                Ok(p) => adopted.push(Arc::new(p)),
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(adopted)
    }

    /// The current and update revisions and the collision count (upstream's
    /// `getStatefulSetRevisions`); `None` while a just-written revision is not yet cached.
    async fn revisions(
        &self,
        set: &StatefulSet,
        revs: &[Arc<ControllerRevision>],
    ) -> Result<Option<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32)>, Error> {
        let spec = set.spec.clone().unwrap_or_default();
        let owner = revisions::Owner {
            kind: "StatefulSet",
            meta: &set.metadata,
            template: &spec.template,
            collisions: set
                .status
                .as_ref()
                .and_then(|s| s.collision_count)
                .unwrap_or(0),
        };
        let Some((update, collisions)) =
            revisions::update_revision(&self.ctx, &owner, revs).await?
        else {
            return Ok(None);
        };
        let current_name = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_deref());
        let current = revs
            .iter()
            .find(|r| current_name.is_some() && r.metadata.name.as_deref() == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok(Some((current, update, collisions)))
    }

    /// Pods that lost their identity labels get them back, and Pending pods whose claims
    /// are missing (deleted, or never made) get them made (upstream's
    /// `updateStatefulSetPod`). A failure is told as an event and does not hold up the rest
    /// of the sync (scaling and the rolling update go on).
    async fn repair(&self, set: &StatefulSet, api: &Api<Pod>, pods: &[Arc<Pod>]) {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        for p in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let Some(ord) = logic::ordinal(set_name, p) else {
                continue;
            };
            let pod_name = p.metadata.name.as_deref().unwrap_or_default();
            if let Some(labels) = logic::identity_repair(set_name, p) {
                let patch = Patch::Merge(json!({"metadata": {
                    "labels": labels,
                    "uid": p.metadata.uid,
                }}));
                match api.patch(pod_name, &patch).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => self.recorder.warning(
                        object_ref(set),
                        "FailedUpdate",
                        format!(
                            "update Pod {pod_name} in StatefulSet {set_name} failed error: {e}"
                        ),
                    ),
                }
            }
            let pending = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
            let missing =
                || logic::claim_names(set, ord).any(|c| self.ctx.claims.get_in(ns, &c).is_none());
            if pending && missing() {
                // The failure is recorded as an event by `create_claims`.
                let _ = self.create_claims(set, ord, pod_name).await;
            }
        }
    }

    /// Creates the claims of pod `ord` that do not exist yet (one event each).
    async fn create_claims(
        &self,
        set: &StatefulSet,
        ord: i32,
        pod_name: &str,
    ) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(&self.ctx.client, ns);
        for c in logic::claims_for(set, ord) {
            let cname = c.metadata.name.clone().unwrap_or_default();
            if self.ctx.claims.get_in(ns, &cname).is_some() {
                continue;
            }
            match claims.create(&c).await {
                Ok(_) => self.recorder.normal(
                    object_ref(set),
                    "SuccessfulCreate",
                    format!(
                        "create Claim {cname} Pod {pod_name} in StatefulSet {set_name} success"
                    ),
                ),
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    self.recorder.warning(
                        object_ref(set),
                        "FailedCreate",
                        format!("create Claim {cname} for Pod {pod_name} in StatefulSet {set_name} failed error: {e}"),
                    );
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Claims of the set's pods owned as the retention policy says.
    async fn claim_owners(&self, set: &StatefulSet, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(&self.ctx.client, ns);
        for p in pods {
            let Some(ord) = logic::ordinal(set_name, p) else {
                continue;
            };
            for cname in logic::claim_names(set, ord) {
                let Some(claim) = self.ctx.claims.get_in(ns, &cname) else {
                    continue;
                };
                if claim.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let existing = claim.metadata.owner_references.clone().unwrap_or_default();
                let Some(owners) = logic::claim_owners(set, p, &existing) else {
                    continue;
                };
                let patch = Patch::Merge(json!({"metadata": {
                    "ownerReferences": owners,
                    "resourceVersion": claim.metadata.resource_version,
                }}));
                // A failure (a conflict too) stops the sync before any pod is deleted: a
                // condemned pod goes only once its claims say what should become of them.
                match api.patch(&cname, &patch).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    async fn delete(
        &self,
        key: &str,
        set: &StatefulSet,
        api: &Api<Pod>,
        pods: &[(Arc<Pod>, Why)],
    ) -> Result<(), Error> {
        if pods.is_empty() {
            return Ok(());
        }
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        self.expectations
            .expect_deletions(key, pods.iter().map(|(p, _)| key_of(&**p)));
        let results = join_all(pods.iter().map(|(p, _)| async move {
            let dp = DeleteParams::with_uid(p.metadata.uid.as_deref().unwrap_or_default());
            (
                p,
                api.delete(p.metadata.name.as_deref().unwrap_or_default(), &dp)
                    .await,
            )
        }))
        .await;
        let mut failure = None;
        for (p, r) in results {
            let pod = p.metadata.name.as_deref().unwrap_or_default();
            match r {
                Ok(_) => self.recorder.normal(
                    object_ref(set),
                    "SuccessfulDelete",
                    format!("delete Pod {pod} in StatefulSet {set_name} successful"),
                ),
                Err(e) => {
                    self.expectations.deletion_observed(key, &key_of(&**p));
                    if !e.is_not_found() && !e.is_conflict() {
                        self.recorder.warning(
                            object_ref(set),
                            "FailedDelete",
                            format!("delete Pod {pod} in StatefulSet {set_name} failed error: {e}"),
                        );
                        failure = Some(e);
                    }
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Creates each pod after its missing claims, in slow-start batches.
    async fn create(
        &self,
        key: &str,
        set: &StatefulSet,
        api: &Api<v1::Pod>,
        ords: &[(i32, bool)],
        pods: Vec<v1::Pod>,
    ) -> Result<(), Error> {
        if pods.is_empty() {
            return Ok(());
        }
        self.expectations.expect_creations(key, pods.len());
        let mut failure = None;
        let mut left: Vec<(i32, v1::Pod)> = ords.iter().map(|o| o.0).zip(pods).collect();
        for batch in crate::replicaset::logic::slow_start_batches(left.len()) {
            let now: Vec<(i32, v1::Pod)> = left.drain(..batch.min(left.len())).collect();
            let results = join_all(
                now.iter()
                    .map(|(ord, p)| self.create_one(set, api, *ord, p)),
            )
            .await;
            for r in results {
                if let Err(e) = r {
                    self.expectations.creation_observed(key);
                    failure = Some(e);
                }
            }
            if failure.is_some() {
                for _ in 0..left.len() {
                    self.expectations.creation_observed(key);
                }
                break;
            }
        }
        failure.map_or(Ok(()), Err)
    }

    async fn create_one(
        &self,
        set: &StatefulSet,
        api: &Api<v1::Pod>,
        ord: i32,
        pod: &v1::Pod,
    ) -> Result<(), Error> {
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        self.create_claims(set, ord, pod_name).await?;
        match api.create(pod).await {
            Ok(_) => {
                self.recorder.normal(
                    object_ref(set),
                    "SuccessfulCreate",
                    format!("create Pod {pod_name} in StatefulSet {set_name} successful"),
                );
                Ok(())
            }
            Err(e) => {
                if !e.is_already_exists() {
                    self.recorder.warning(
                        object_ref(set),
                        "FailedCreate",
                        format!(
                            "create Pod {pod_name} in StatefulSet {set_name} failed error: {e}"
                        ),
                    );
                }
                Err(e)
            }
        }
    }

    /// Deletes revisions past `revisionHistoryLimit` that neither the set nor a pod uses.
    async fn prune(
        &self,
        set: &StatefulSet,
        revs: &[Arc<ControllerRevision>],
        pods: &[Arc<Pod>],
        current: &str,
        update: &str,
    ) -> Result<(), Error> {
        let limit = set
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let mut live: HashSet<&str> = [current, update].into();
        live.extend(pods.iter().filter_map(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(history::HASH_LABEL))
                .map(String::as_str)
        }));
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        revisions::prune(&self.ctx, ns, revs, &live, limit).await
    }
}
