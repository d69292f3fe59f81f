//! The ReplicaSet controller, which also runs ReplicationControllers (upstream's replication
//! manager wraps it the same way): keeps `spec.replicas` active pods per set, adopting
//! matching orphans and releasing pods that no longer match, and reports status. Decisions
//! live in `logic` (over a ReplicaSet view of either kind); this file wires informer events to
//! the queue and performs the API calls.

pub mod logic;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{self, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use rkube_client::pod::Pod;

use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::{Api, DeleteParams, Error, Patch, Resource, Store, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::{controller_key, Ctx};
use crate::expectations::Expectations;
use crate::objects::{claim_candidates, controller_ref, labels_of, selector};
use crate::worker::Reconciled;
use logic::{is_active, Diff};

/// A kind the controller keeps replicas of, seen as a ReplicaSet.
pub trait Set: Resource {
    /// The work queue's and the workers' name.
    const QUEUE: &'static str;
    /// The event source.
    const COMPONENT: &'static str;
    fn store(ctx: &Ctx) -> &Arc<Store<Self>>;
    fn view(&self) -> Cow<'_, ReplicaSet>;
}

impl Set for ReplicaSet {
    const QUEUE: &'static str = "replicaset";
    const COMPONENT: &'static str = "replicaset-controller";
    fn store(ctx: &Ctx) -> &Arc<Store<Self>> {
        &ctx.replicasets
    }
    fn view(&self) -> Cow<'_, ReplicaSet> {
        Cow::Borrowed(self)
    }
}

impl Set for ReplicationController {
    const QUEUE: &'static str = "replicationmanager";
    const COMPONENT: &'static str = "replication-controller";
    fn store(ctx: &Ctx) -> &Arc<Store<Self>> {
        &ctx.replication_controllers
    }
    /// A ReplicationController as a ReplicaSet: its selector map as `matchLabels` (defaulted
    /// from the template's labels by the apiserver).
    fn view(&self) -> Cow<'_, ReplicaSet> {
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone().map(|s| {
            serde_json::from_value(serde_json::to_value(s).unwrap_or_default()).unwrap_or_default()
        });
        Cow::Owned(ReplicaSet {
            metadata: self.metadata.clone(),
            spec: Some(ReplicaSetSpec {
                min_ready_seconds: spec.min_ready_seconds,
                replicas: spec.replicas,
                selector: LabelSelector {
                    match_labels: Some(spec.selector.unwrap_or_default())
                        .filter(|m: &BTreeMap<String, String>| !m.is_empty()),
                    match_expressions: None,
                },
                template: spec.template,
            }),
            status,
        })
    }
}

pub struct ReplicaSetController<K: Set = ReplicaSet> {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    expectations: Expectations,
    recorder: rkube_client::events::Recorder,
    kind: std::marker::PhantomData<K>,
}

/// The set key a pod's controller reference points to, if that set is cached.
fn owner_key<K: Set>(ctx: &Ctx, pod: &Pod) -> Option<String> {
    controller_key(K::store(ctx), &pod.metadata)
}

/// Sets in the pod's namespace whose selector matches it (for orphans).
fn matching_sets<K: Set>(ctx: &Ctx, pod: &Pod) -> Vec<String> {
    let views: Vec<(String, LabelSelector)> = K::store(ctx)
        .by_index(
            index::NAMESPACE,
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        )
        .iter()
        .filter_map(|o| Some((key_of(&**o), o.view().spec.as_ref()?.selector.clone())))
        .collect();
    let labels = labels_of(&pod.metadata);
    views
        .into_iter()
        .filter(|(_, sel)| selector(Some(sel)).is_some_and(|s| s.matches(&labels)))
        .map(|(k, _)| k)
        .collect()
}

impl<K: Set> ReplicaSetController<K> {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(ReplicaSetController {
            ctx: ctx.clone(),
            queue: WorkQueue::new(K::QUEUE),
            expectations: Expectations::default(),
            recorder: ctx.recorder.for_component(K::COMPONENT),
            kind: std::marker::PhantomData,
        });
        let me = c.clone();
        K::store(&ctx).on_change(move |ch| match ch {
            Change::Added(rs) | Change::Updated { new: rs, .. } => me.queue.add(key_of(&**rs)),
            Change::Deleted(rs) => {
                let k = key_of(&**rs);
                me.expectations.forget(&k);
                me.queue.add(k);
            }
        });
        let me = c.clone();
        ctx.pods.on_change(move |ch| me.on_pod(ch));
        c
    }

    fn on_pod(&self, ch: &Change<Pod>) {
        match ch {
            Change::Added(p) => {
                if p.metadata.deletion_timestamp.is_some() {
                    return self.pod_gone(p);
                }
                match owner_key::<K>(&self.ctx, p) {
                    Some(k) => {
                        self.expectations.creation_observed(&k);
                        self.queue.add(k);
                    }
                    None if controller_ref(&p.metadata).is_none() => {
                        for k in matching_sets::<K>(&self.ctx, p) {
                            self.queue.add(k);
                        }
                    }
                    None => {}
                }
            }
            Change::Updated { old, new } => {
                if new.metadata.deletion_timestamp.is_some()
                    && old.metadata.deletion_timestamp.is_none()
                {
                    self.pod_gone(new);
                }
                let old_owner = owner_key::<K>(&self.ctx, old);
                let new_owner = owner_key::<K>(&self.ctx, new);
                if old_owner != new_owner {
                    if let Some(k) = old_owner {
                        self.queue.add(k);
                    }
                }
                match new_owner {
                    Some(k) => {
                        // Availability changes after minReadySeconds: look again then.
                        if let Some(set) = K::store(&self.ctx).get(&k) {
                            let mrs = set
                                .view()
                                .spec
                                .as_ref()
                                .and_then(|s| s.min_ready_seconds)
                                .unwrap_or(0);
                            if let Some(secs) =
                                logic::until_available(new, mrs, rkube_client::now())
                            {
                                self.queue
                                    .add_after(k.clone(), Duration::from_secs(secs as u64));
                            }
                        }
                        self.queue.add(k);
                    }
                    None if controller_ref(&new.metadata).is_none() => {
                        for k in matching_sets::<K>(&self.ctx, new) {
                            self.queue.add(k);
                        }
                    }
                    None => {}
                }
            }
            Change::Deleted(p) => self.pod_gone(p),
        }
    }

    fn pod_gone(&self, p: &Pod) {
        if let Some(r) = controller_ref(&p.metadata) {
            if r.kind == K::KIND {
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                let k = format!("{ns}/{}", r.name);
                self.expectations.deletion_observed(&k, &key_of(p));
                self.queue.add(k);
            }
        }
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::spawn_workers(
            K::QUEUE,
            self.queue.clone(),
            workers,
            &self.ctx.metrics,
            shutdown,
            self.clone(),
            |me, key| async move { me.sync(&key).await },
        );
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(obj) = K::store(&self.ctx).get(key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let rs = obj.view();
        let (ns, name) = split_key(key);
        let Some(sel) = selector(rs.spec.as_ref().map(|s| &s.selector)) else {
            return Ok(None); // invalid selectors are rejected by validation
        };
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let needs_sync = self.expectations.satisfied(key);
        let pods_api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);

        // Claim: adopt matching orphans, release owned pods that stopped matching.
        let mut owned = Vec::new();
        for p in claim_candidates(&self.ctx.pods, &uid, ns) {
            let matches = sel.matches(&labels_of(&p.metadata));
            match controller_ref(&p.metadata) {
                Some(r) if r.uid == uid => {
                    if matches {
                        owned.push(p);
                    } else if rs.metadata.deletion_timestamp.is_none() {
                        self.release(&pods_api, &p, &uid).await?;
                    }
                }
                None if matches && is_active(&p) && rs.metadata.deletion_timestamp.is_none() => {
                    if let Some(adopted) = self.adopt(&pods_api, &p, &rs).await? {
                        owned.push(Arc::new(adopted));
                    }
                }
                _ => {}
            }
        }
        let active: Vec<Arc<Pod>> = owned.into_iter().filter(|p| is_active(p)).collect();

        // Pods created or deleted by this sync (each one's event syncs the set again), or why
        // that failed.
        let mut acted = 0;
        let mut failure = None;
        if needs_sync && rs.metadata.deletion_timestamp.is_none() {
            let desired = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let managed = match logic::diff(desired, &active) {
                Diff::Create(n) => self.create_pods(key, &obj, &rs, n).await,
                Diff::Delete(names) => self.delete_pods(key, &obj, ns, &names).await,
                Diff::None => Ok(0),
            };
            match managed {
                Ok(n) => acted = n,
                Err(e) => failure = Some(e),
            }
        }

        // Status. Counted before this sync's creations and deletions, it is stale once any
        // succeeded, and their events bring the next sync, which writes it: upstream writes
        // both, and the first costs a write that competes with the new pods' scheduling. A
        // failure is written at once (its ReplicaFailure condition), as upstream's.
        let now = rkube_client::now();
        let message = failure.as_ref().map(Error::to_string);
        let status = logic::status(&rs, &active, now, message.as_deref());
        if (acted == 0 || failure.is_some()) && rs.status.as_ref() != Some(&status) {
            let mut patch = json!({"status": status});
            if status.conditions.is_none() {
                patch["status"]["conditions"] = serde_json::Value::Null; // a merge patch's removal
            }
            let patch = Patch::Merge(patch);
            match Api::<K>::namespaced(&self.ctx.client, ns)
                .patch_status(name, &patch)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = failure {
            return Err(e); // retried with the queue's backoff
        }
        let mrs = rs
            .spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0);
        let next = active
            .iter()
            .filter_map(|p| logic::until_available(p, mrs, now))
            .min();
        Ok(next.map(|s| Duration::from_secs(s as u64)))
    }

    fn pod_from_template(rs: &ReplicaSet) -> v1::Pod {
        let template: PodTemplateSpec = rs
            .spec
            .as_ref()
            .and_then(|s| s.template.clone())
            .unwrap_or_default();
        let tm = template.metadata.unwrap_or_default();
        v1::Pod {
            metadata: ObjectMeta {
                generate_name: Some(format!(
                    "{}-",
                    rs.metadata.name.as_deref().unwrap_or_default()
                )),
                namespace: rs.metadata.namespace.clone(),
                labels: tm.labels,
                annotations: tm.annotations,
                finalizers: tm.finalizers,
                owner_references: Some(vec![crate::objects::controller_of(
                    K::API_VERSION,
                    K::KIND,
                    &rs.metadata,
                )]),
                ..Default::default()
            },
            spec: template.spec,
            status: None,
        }
    }

    async fn create_pods(
        &self,
        key: &str,
        obj: &K,
        rs: &ReplicaSet,
        n: usize,
    ) -> Result<usize, Error> {
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<v1::Pod> = Api::namespaced(&self.ctx.client, ns);
        let pod = Self::pod_from_template(rs);
        self.expectations.expect_creations(key, n);
        let mut created = 0;
        let mut skipped = n;
        for batch in logic::slow_start_batches(n) {
            skipped -= batch;
            let results = join_all((0..batch).map(|_| api.create(&pod))).await;
            let mut failure = None;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        self.recorder.normal(
                            object_ref(obj),
                            "SuccessfulCreate",
                            format!("Created pod: {}", p.metadata.name.unwrap_or_default()),
                        );
                    }
                    Err(e) => {
                        // Never to be observed: lower the expectation.
                        self.expectations.creation_observed(key);
                        if e.is_already_exists() {
                            continue;
                        }
                        self.recorder.warning(
                            object_ref(obj),
                            "FailedCreate",
                            format!("Error creating: {e}"),
                        );
                        failure = Some(e);
                    }
                }
            }
            if let Some(e) = failure {
                for _ in 0..skipped {
                    self.expectations.creation_observed(key);
                }
                tracing::warn!(replicaset = key, created, error = %e, "pod creation failed; slow start stops");
                return Err(e);
            }
        }
        tracing::debug!(replicaset = key, created, "created pods");
        Ok(created)
    }

    async fn delete_pods(
        &self,
        key: &str,
        obj: &K,
        ns: &str,
        names: &[String],
    ) -> Result<usize, Error> {
        let api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);
        self.expectations
            .expect_deletions(key, names.iter().map(|n| format!("{ns}/{n}")));
        let results = join_all(names.iter().map(|n| {
            let uid = self
                .ctx
                .pods
                .get_in(ns, n)
                .and_then(|p| p.metadata.uid.clone());
            let api = api.clone();
            async move {
                let dp = uid
                    .as_deref()
                    .map(DeleteParams::with_uid)
                    .unwrap_or_default();
                (n, api.delete(n, &dp).await)
            }
        }))
        .await;
        let mut failure = None;
        let mut deleted = 0;
        for (n, r) in results {
            match r {
                Ok(_) => {
                    deleted += 1;
                    self.recorder.normal(
                        object_ref(obj),
                        "SuccessfulDelete",
                        format!("Deleted pod: {n}"),
                    )
                }
                Err(e) => {
                    self.expectations
                        .deletion_observed(key, &format!("{ns}/{n}"));
                    if !e.is_not_found() && e.code() != Some(409) {
                        self.recorder.warning(
                            object_ref(obj),
                            "FailedDelete",
                            format!("Error deleting: {e}"),
                        );
                        failure = Some(e);
                    }
                }
            }
        }
        failure.map_or(Ok(deleted), Err)
    }

    async fn adopt(&self, api: &Api<Pod>, p: &Pod, rs: &ReplicaSet) -> Result<Option<Pod>, Error> {
        let mut refs = p.metadata.owner_references.clone().unwrap_or_default();
        refs.push(crate::objects::controller_of(
            K::API_VERSION,
            K::KIND,
            &rs.metadata,
        ));
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": p.metadata.uid}});
        let name = p.metadata.name.as_deref().unwrap_or_default();
        match api.patch(name, &Patch::Merge(patch)).await {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.is_not_found() || e.code() == Some(409) || e.code() == Some(422) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn release(&self, api: &Api<Pod>, p: &Pod, uid: &str) -> Result<(), Error> {
        let refs: Vec<_> = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.uid != uid)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": p.metadata.uid}});
        let name = p.metadata.name.as_deref().unwrap_or_default();
        match api.patch(name, &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.code() == Some(409) || e.code() == Some(422) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
