//! The Deployment controller: owns ReplicaSets `<name>-<pod-template-hash>`, rolls from old to
//! new under maxSurge/maxUnavailable (or Recreate), scales proportionally, keeps revision
//! history, and reports status. Decisions live in `logic`; this file does the I/O.

pub mod logic;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error, Patch, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::{controller_key, selecting, Ctx};
use crate::objects::{claim_candidates, controller_ref, labels_of, selector};
use crate::worker::Reconciled;
use logic::*;

pub struct DeploymentController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    recorder: rkube_client::events::Recorder,
}

fn owner_of(ctx: &Ctx, rs: &ReplicaSet) -> Option<String> {
    controller_key(&ctx.deployments, &rs.metadata)
}

fn matching_deployments(ctx: &Ctx, rs: &ReplicaSet) -> Vec<String> {
    selecting(&ctx.deployments, &rs.metadata, |d: &Deployment| {
        d.spec.as_ref().map(|s| &s.selector)
    })
}

fn name(m: &ObjectMeta) -> String {
    m.name.clone().unwrap_or_default()
}

impl DeploymentController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(DeploymentController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("deployment"),
            recorder: ctx.recorder.for_component("deployment-controller"),
        });
        let me = c.clone();
        ctx.deployments.on_change(move |ch| match ch {
            Change::Added(d) | Change::Updated { new: d, .. } | Change::Deleted(d) => {
                me.queue.add(key_of(&**d))
            }
        });
        let me = c.clone();
        ctx.replicasets.on_change(move |ch| {
            let (rs, old) = match ch {
                Change::Added(rs) | Change::Deleted(rs) => (rs, None),
                Change::Updated { old, new } => (new, Some(old)),
            };
            if let Some(old) = old {
                if let Some(k) = owner_of(&me.ctx, old) {
                    me.queue.add(k);
                }
            }
            match owner_of(&me.ctx, rs) {
                Some(k) => me.queue.add(k),
                None if controller_ref(&rs.metadata).is_none() => {
                    for k in matching_deployments(&me.ctx, rs) {
                        me.queue.add(k);
                    }
                }
                None => {}
            }
        });
        // Recreate waits for old pods to be gone.
        let me = c.clone();
        ctx.pods.on_change(move |ch| {
            if let Change::Deleted(p) = ch {
                if let Some(r) = controller_ref(&p.metadata).filter(|r| r.kind == "ReplicaSet") {
                    let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                    if let Some(rs) = me.ctx.replicasets.get_in(ns, &r.name) {
                        if let Some(k) = owner_of(&me.ctx, &rs) {
                            if me.ctx.deployments.get(&k).is_some_and(|d| is_recreate(&d)) {
                                me.queue.add(k);
                            }
                        }
                    }
                }
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "deployment", workers, shutdown);
    }

    fn rs_api(&self, ns: &str) -> Api<ReplicaSet> {
        Api::namespaced(&self.ctx.client, ns)
    }

    /// The sets this deployment controls, adopting matching orphans and releasing strays.
    async fn claim(&self, d: &Deployment) -> Result<Vec<ReplicaSet>, Error> {
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let Some(sel) = selector(d.spec.as_ref().map(|s| &s.selector)) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for rs in claim_candidates(&self.ctx.replicasets, &uid, ns) {
            let matches = sel.matches(&labels_of(&rs.metadata));
            match controller_ref(&rs.metadata) {
                Some(r) if r.uid == uid => {
                    if matches {
                        out.push((*rs).clone());
                    } else if d.metadata.deletion_timestamp.is_none() {
                        let refs: Vec<_> = rs
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .filter(|r| r.uid != uid)
                            .cloned()
                            .collect();
                        let patch =
                            json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                        ignore_gone(
                            self.rs_api(ns)
                                .patch(&name(&rs.metadata), &Patch::Merge(patch))
                                .await,
                        )?;
                    }
                }
                None if matches
                    && d.metadata.deletion_timestamp.is_none()
                    && rs.metadata.deletion_timestamp.is_none() =>
                {
                    let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(controller_ref_to(d));
                    let patch =
                        json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                    if let Some(adopted) = ignore_gone(
                        self.rs_api(ns)
                            .patch(&name(&rs.metadata), &Patch::Merge(patch))
                            .await,
                    )? {
                        out.push(adopted);
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(d) = self.ctx.deployments.get(key) else {
            return Ok(None);
        };
        let mut d = (*d).clone();
        let start_revision = revision_annotation(&d);
        if selector(d.spec.as_ref().map(|s| &s.selector)).is_none() {
            self.recorder.warning(
                object_ref(&d),
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.".into(),
            );
            return Ok(None);
        }
        let sets = self.claim(&d).await?;
        let mut refs: Vec<&ReplicaSet> = sets.iter().collect();
        sort_oldest_first(&mut refs);
        let new_rs = refs
            .iter()
            .copied()
            .find(|rs| {
                match (
                    rs.spec.as_ref().and_then(|s| s.template.as_ref()),
                    d.spec.as_ref().map(|s| &s.template),
                ) {
                    (Some(a), Some(b)) => equal_ignore_hash(a, b),
                    _ => false,
                }
            })
            .cloned();
        let old: Vec<&ReplicaSet> = refs
            .iter()
            .copied()
            .filter(|rs| Some(&rs.metadata.uid) != new_rs.as_ref().map(|n| &n.metadata.uid))
            .collect();

        if d.metadata.deletion_timestamp.is_some() {
            return self.sync_status(&d, &refs, new_rs.as_ref(), None).await;
        }
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let active = active_sets(&refs);
        if paused || is_scaling_event(&d, &active) {
            // Upstream's `sync`: an existing new set's revision is brought in step first (a
            // template changed back while paused makes an old set new again); none is created.
            let fresh = match &new_rs {
                Some(rs) => {
                    self.sync_new_revision(&mut d, rs.clone(), &old, false)
                        .await?
                }
                None => None,
            };
            let swap = |rs: &ReplicaSet| -> ReplicaSet {
                match &fresh {
                    Some(f) if f.metadata.uid == rs.metadata.uid => f.clone(),
                    _ => rs.clone(),
                }
            };
            let sets: Vec<ReplicaSet> = refs.iter().map(|rs| swap(rs)).collect();
            let refs: Vec<&ReplicaSet> = sets.iter().collect();
            let active = active_sets(&refs);
            let new_rs = fresh;
            let sizes = proportional_sizes(&d, &active, new_rs.as_ref());
            self.apply_sizes(&d, &refs, &sizes).await?;
            self.annotate_all(&d, &refs).await?;
            if paused {
                self.cleanup_history(&d, &old).await?; // as upstream's paused sync
            }
            let revised = revision_annotation(&d).filter(|r| start_revision.as_ref() != Some(r));
            return self
                .sync_status(&d, &refs, new_rs.as_ref(), revised.as_deref())
                .await;
        }

        let new_rs = match new_rs {
            Some(rs) => self.sync_new_revision(&mut d, rs, &old, true).await?,
            None if is_recreate(&d)
                && old.iter().any(|rs| pod_count(rs) > 0 || self.has_pods(rs)) =>
            {
                None
            }
            None => Some(self.create_new_rs(&mut d, &old).await?),
        };
        // The revision this sync set (on its copy): written with the status.
        let revised = revision_annotation(&d).filter(|r| start_revision.as_ref() != Some(r));
        let revised = revised.as_deref();
        let Some(new_rs) = new_rs else {
            // Recreate: old sets go to zero first.
            let sizes: Vec<(String, i32)> = old
                .iter()
                .filter(|rs| spec_replicas(rs) > 0)
                .map(|rs| (name(&rs.metadata), 0))
                .collect();
            self.apply_sizes(&d, &refs, &sizes).await?;
            return self.sync_status(&d, &refs, None, revised).await;
        };
        let mut all: Vec<&ReplicaSet> = old.clone();
        all.push(&new_rs);

        if is_recreate(&d) {
            let sizes: Vec<(String, i32)> = old
                .iter()
                .filter(|rs| spec_replicas(rs) > 0)
                .map(|rs| (name(&rs.metadata), 0))
                .collect();
            if !sizes.is_empty() {
                self.apply_sizes(&d, &all, &sizes).await?;
                return self.sync_status(&d, &all, Some(&new_rs), revised).await;
            }
            if old.iter().any(|rs| self.has_pods(rs)) {
                return self.sync_status(&d, &all, Some(&new_rs), revised).await;
            }
            let want = replicas(&d);
            if spec_replicas(&new_rs) != want {
                self.apply_sizes(&d, &all, &[(name(&new_rs.metadata), want)])
                    .await?;
                return self.sync_status(&d, &all, Some(&new_rs), revised).await;
            }
        } else {
            let target = new_rs_replicas(&d, &all, &new_rs);
            if target != spec_replicas(&new_rs) {
                self.apply_sizes(&d, &all, &[(name(&new_rs.metadata), target)])
                    .await?;
                return self.sync_status(&d, &all, Some(&new_rs), revised).await;
            }
            let sizes = scale_down_old(&d, &new_rs, &old);
            if !sizes.is_empty() {
                self.apply_sizes(&d, &all, &sizes).await?;
                return self.sync_status(&d, &all, Some(&new_rs), revised).await;
            }
        }
        let status = calculate_status(&d, &all, Some(&new_rs), rkube_client::now());
        if is_complete(&d, &status) {
            self.cleanup_history(&d, &old).await?;
        }
        self.sync_status(&d, &all, Some(&new_rs), revised).await
    }

    /// Deletes the old sets beyond the revision history limit.
    async fn cleanup_history(&self, d: &Deployment, old: &[&ReplicaSet]) -> Result<(), Error> {
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        for n in history_to_delete(d, old) {
            let rs = old
                .iter()
                .find(|rs| rs.metadata.name.as_deref() == Some(&n))
                .expect("listed");
            let dp = DeleteParams::with_uid(rs.metadata.uid.as_deref().unwrap_or_default());
            ignore_gone(self.rs_api(ns).delete(&n, &dp).await)?;
        }
        Ok(())
    }

    fn has_pods(&self, rs: &ReplicaSet) -> bool {
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        self.ctx
            .pods
            .by_index(index::OWNER_UID, &uid)
            .iter()
            .any(|p: &Arc<Pod>| {
                let phase = p
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or("");
                phase != "Succeeded" && phase != "Failed"
            })
    }

    /// Bumps the reused set's revision (how `rollout undo` works) and keeps its annotations and
    /// minReadySeconds in step; its replica annotations too unless `replica_annotations` is
    /// false (a paused or scaling sync, whose sizes write them). The set as it now is.
    async fn sync_new_revision(
        &self,
        d: &mut Deployment,
        rs: ReplicaSet,
        old: &[&ReplicaSet],
        replica_annotations: bool,
    ) -> Result<Option<ReplicaSet>, Error> {
        let new_revision = max_revision(old) + 1;
        let mrs = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
        let ann = match replica_annotations {
            true => set_annotations(d, &rs, new_revision, true),
            false => revised_annotations(d, &rs, new_revision),
        };
        let mrs_changed = rs.spec.as_ref().and_then(|s| s.min_ready_seconds) != mrs;
        let mut rs = rs;
        if ann.is_some() || mrs_changed {
            if let Some(a) = ann {
                rs.metadata.annotations = Some(a);
            }
            if let Some(s) = rs.spec.as_mut() {
                s.min_ready_seconds = mrs;
            }
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            rs = self.rs_api(&ns).replace(&name(&rs.metadata), &rs).await?;
        }
        Self::set_deployment_revision(d, revision(&rs));
        Ok(Some(rs))
    }

    /// Sets the revision annotation on the local copy; `sync_status` writes it with the status
    /// (through the status subresource, as upstream's controller: no new generation).
    fn set_deployment_revision(d: &mut Deployment, rev: i64) {
        d.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(REVISION.into(), rev.to_string());
    }

    async fn create_new_rs(
        &self,
        d: &mut Deployment,
        old: &[&ReplicaSet],
    ) -> Result<ReplicaSet, Error> {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let spec = d.spec.clone().unwrap_or_default();
        let collision = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&spec.template, collision);
        let mut template = spec.template.clone();
        let tm = template.metadata.get_or_insert_with(Default::default);
        tm.labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let labels = tm.labels.clone();
        let mut sel = spec.selector.clone();
        sel.match_labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", name(&d.metadata))),
                namespace: Some(ns.clone()),
                labels,
                owner_references: Some(vec![controller_ref_to(d)]),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector: sel,
                template: Some(template),
            }),
            status: None,
        };
        let mut all: Vec<&ReplicaSet> = old.to_vec();
        all.push(&rs);
        let n = new_rs_replicas(d, &all, &rs);
        rs.spec.as_mut().unwrap().replicas = Some(n);
        rs.metadata.annotations = set_annotations(d, &rs, max_revision(old) + 1, true);
        let created = match self.rs_api(&ns).create(&rs).await {
            Ok(c) => c,
            Err(e) if e.is_already_exists() => {
                let existing = self.rs_api(&ns).get(&name(&rs.metadata)).await?;
                let ours = controller_ref(&existing.metadata)
                    .is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref());
                let same = match (
                    existing.spec.as_ref().and_then(|s| s.template.as_ref()),
                    rs.spec.as_ref().and_then(|s| s.template.as_ref()),
                ) {
                    (Some(a), Some(b)) => equal_ignore_hash(a, b),
                    _ => false,
                };
                if ours && same {
                    return Ok(existing);
                }
                // A hash collision: bump collisionCount so the next attempt hashes differently.
                let mut d2 = d.clone();
                let st = d2.status.get_or_insert_with(Default::default);
                st.collision_count = Some(collision.unwrap_or(0) + 1);
                Api::<Deployment>::namespaced(&self.ctx.client, &ns)
                    .replace_status(&name(&d.metadata), &d2)
                    .await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if n > 0 {
            self.recorder.normal(
                object_ref(d),
                "ScalingReplicaSet",
                format!(
                    "Scaled up replica set {} from 0 to {n}",
                    name(&created.metadata)
                ),
            );
        }
        Self::set_deployment_revision(d, revision(&created));
        Ok(created)
    }

    /// Resizes sets (by name) and records ScalingReplicaSet events.
    async fn apply_sizes(
        &self,
        d: &Deployment,
        sets: &[&ReplicaSet],
        sizes: &[(String, i32)],
    ) -> Result<(), Error> {
        for (n, size) in sizes {
            let Some(rs) = sets
                .iter()
                .find(|rs| rs.metadata.name.as_deref() == Some(n))
            else {
                continue;
            };
            let from = spec_replicas(rs);
            if from == *size {
                continue;
            }
            let mut rs2 = (*rs).clone();
            rs2.spec.get_or_insert_with(Default::default).replicas = Some(*size);
            if let Some(a) = set_annotations(d, &rs2, 0, false) {
                rs2.metadata.annotations = Some(a);
            }
            let ns = rs.metadata.namespace.clone().unwrap_or_default();
            self.rs_api(&ns).replace(n, &rs2).await?;
            let verb = if *size > from { "up" } else { "down" };
            self.recorder.normal(
                object_ref(d),
                "ScalingReplicaSet",
                format!("Scaled {verb} replica set {n} from {from} to {size}"),
            );
        }
        Ok(())
    }

    /// Records the replica count every active set was sized for.
    async fn annotate_all(&self, d: &Deployment, sets: &[&ReplicaSet]) -> Result<(), Error> {
        for rs in sets.iter().filter(|rs| spec_replicas(rs) > 0) {
            if let Some(a) = set_annotations(d, rs, 0, false) {
                let ns = rs.metadata.namespace.clone().unwrap_or_default();
                let patch = json!({"metadata": {"annotations": a}});
                ignore_gone(
                    self.rs_api(&ns)
                        .patch(&name(&rs.metadata), &Patch::Merge(patch))
                        .await,
                )?;
            }
        }
        Ok(())
    }

    async fn sync_status(
        &self,
        d: &Deployment,
        all: &[&ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        revised: Option<&str>,
    ) -> Reconciled {
        let now = rkube_client::now();
        let mut status = calculate_status(d, all, new_rs, now);
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused {
            set_condition(
                &mut status,
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
                now,
            );
        } else if status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.reason.as_deref() == Some("DeploymentPaused"))
        {
            set_condition(
                &mut status,
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed".into(),
                now,
            );
        }
        let recheck = progressing(d, &mut status, new_rs, now);
        if !paused {
            replica_failure(&mut status, all, new_rs);
        }
        // A revision set by this sync goes with the status, in one write (as upstream's
        // UpdateStatus, which keeps annotations and leaves the generation alone), unless the
        // stored object has it already.
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        let stored = self.ctx.deployments.get(&key_of(d));
        let new_rev = revised
            .filter(|r| stored.as_deref().and_then(revision_annotation).as_deref() != Some(*r));
        if d.status.as_ref() != Some(&status) || new_rev.is_some() {
            // The controller is the status's only writer: a merge patch needs no resourceVersion
            // and so does not conflict with spec or annotation writes.
            let mut patch = json!({"status": status});
            if let Some(r) = new_rev {
                patch["metadata"] = json!({"annotations": {REVISION: r}});
            }
            let patch = Patch::Merge(patch);
            ignore_gone(
                Api::<Deployment>::namespaced(&self.ctx.client, ns)
                    .patch_status(&name(&d.metadata), &patch)
                    .await,
            )?;
        }
        Ok(recheck.map(|s| Duration::from_secs(s.max(1) as u64)))
    }
}

/// The Deployment's `deployment.kubernetes.io/revision` annotation.
fn revision_annotation(d: &Deployment) -> Option<String> {
    d.metadata.annotations.as_ref()?.get(REVISION).cloned()
}

fn controller_ref_to(d: &Deployment) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: name(&d.metadata),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// 404 (and a UID precondition's 409) mean the object is already gone: nothing to do.
fn ignore_gone<T>(r: Result<T, Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}
