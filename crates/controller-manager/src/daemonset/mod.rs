//! The DaemonSet controller: one pod per eligible node, added and removed as nodes come, go
//! and change, replaced on template changes by RollingUpdate (within `maxUnavailable`, or
//! `maxSurge` new pods started beside old ones) or left for OnDelete, with upstream's status
//! counts and a revision history (`kubectl rollout history|undo`). Decisions live in `logic`
//! and `history`; this file wires node, pod and DaemonSet events to the queue and performs the
//! API calls.

pub mod logic;

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    self, Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, Patch, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::expectations::Expectations;
use crate::objects::controller_ref;
use crate::podcontrol;
use crate::worker::Reconciled;
use crate::{history, revisions};

pub struct DaemonSetController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    expectations: Expectations,
    recorder: rkube_client::events::Recorder,
}

impl DaemonSetController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(DaemonSetController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("daemonset"),
            expectations: Expectations::default(),
            recorder: ctx.recorder.for_component("daemonset-controller"),
        });
        let me = c.clone();
        ctx.daemonsets.on_change(move |ch| match ch {
            Change::Added(d) | Change::Updated { new: d, .. } => me.queue.add(key_of(&**d)),
            Change::Deleted(d) => {
                let k = key_of(&**d);
                me.expectations.forget(&k);
                me.queue.add(k);
            }
        });
        // Any node change may change where daemons run.
        let me = c.clone();
        ctx.nodes.on_change(move |ch| {
            let relevant = match ch {
                Change::Updated { old, new } => {
                    old.metadata.labels != new.metadata.labels
                        || old.spec != new.spec
                        || ready(old) != ready(new)
                }
                _ => true,
            };
            if relevant {
                for k in me.ctx.daemonsets.keys() {
                    me.queue.add(k);
                }
            }
        });
        let me = c.clone();
        ctx.pods.on_change(move |ch| {
            let Some((k, _, _)) = podcontrol::observe(&me.expectations, ("apps", "DaemonSet"), ch)
            else {
                return;
            };
            me.queue.add(k);
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "daemonset", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(ds) = self.ctx.daemonsets.get(key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let (ns, name) = split_key(key);
        let needs_sync = self.expectations.satisfied(key);
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .ctx
            .pods
            .by_index(index::OWNER_UID, &uid)
            .into_iter()
            .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        if ds.metadata.deletion_timestamp.is_some() {
            // Being deleted: the collector removes its pods and revisions; nothing to write.
            return Ok(None);
        }
        let revs = revisions::owned(&self.ctx, &ds.metadata);
        let spec = ds.spec.clone().unwrap_or_default();
        let owner = revisions::Owner {
            kind: "DaemonSet",
            meta: &ds.metadata,
            template: &spec.template,
            collisions: ds
                .status
                .as_ref()
                .and_then(|s| s.collision_count)
                .unwrap_or(0),
        };
        let Some((update, collisions)) =
            revisions::update_revision(&self.ctx, &owner, &revs).await?
        else {
            return Ok(Some(std::time::Duration::from_millis(100)));
        };
        let hash = update
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(history::HASH_LABEL))
            .cloned()
            .unwrap_or_default();
        let nodes = self.ctx.nodes.list();
        let mut plan = logic::plan(&ds, &nodes, &pods, &hash, rkube_client::now());
        plan.status.collision_count = Some(collisions).filter(|c| *c > 0);
        let api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);
        if needs_sync && ds.metadata.deletion_timestamp.is_none() {
            let owner = podcontrol::Owner {
                key,
                regarding: object_ref(&*ds),
                recorder: &self.recorder,
                expectations: &self.expectations,
            };
            if !plan.delete.is_empty() {
                podcontrol::delete(&owner, &api, &plan.delete).await?;
            }
            if !plan.create.is_empty() {
                let pods: Vec<v1::Pod> = plan
                    .create
                    .iter()
                    .map(|n| Self::pod_for(&ds, n, &hash))
                    .collect();
                podcontrol::create(&owner, &Api::namespaced(&self.ctx.client, ns), &pods).await?;
            }
        }
        // The update revision and every pod's stay; older ones past the limit go.
        let ds_name = ds.metadata.name.as_deref().unwrap_or_default();
        let live_names: Vec<String> = pods
            .iter()
            .filter_map(|p| p.metadata.labels.as_ref()?.get(history::HASH_LABEL))
            .map(|h| format!("{ds_name}-{h}"))
            .collect();
        let mut live: HashSet<&str> = live_names.iter().map(String::as_str).collect();
        live.insert(update.metadata.name.as_deref().unwrap_or_default());
        let limit = spec.revision_history_limit.unwrap_or(10);
        revisions::prune(&self.ctx, ns, &revs, &live, limit).await?;
        if ds.status.as_ref() != Some(&plan.status) {
            // Absent fields are cleared, not left as they were (a merge patch keeps what it
            // does not name).
            let mut status = json!(plan.status);
            if plan.status.number_unavailable.is_none() {
                status["numberUnavailable"] = serde_json::Value::Null;
            }
            let patch = Patch::Merge(json!({ "status": status }));
            match Api::<DaemonSet>::namespaced(&self.ctx.client, ns)
                .patch_status(name, &patch)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        // Pods ready but not yet available (`minReadySeconds`): look again when they are.
        let mrs = spec.min_ready_seconds.unwrap_or(0);
        let now = rkube_client::now();
        Ok(pods
            .iter()
            .filter_map(|p| crate::replicaset::logic::until_available(p, mrs, now))
            .min()
            .map(|s| std::time::Duration::from_secs(s.max(1) as u64)))
    }

    /// The daemon pod for `node`: the template, the daemon tolerations, bound to the node by a
    /// `metadata.name` affinity term (the scheduler still binds it).
    fn pod_for(ds: &DaemonSet, node: &str, hash: &str) -> v1::Pod {
        let spec = ds.spec.clone().unwrap_or_default();
        let tm = spec.template.metadata.unwrap_or_default();
        let mut pod_spec = spec.template.spec.unwrap_or_default();
        pod_spec.tolerations = Some(logic::daemon_tolerations(&pod_spec));
        let term = NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.into()]),
            }]),
            match_expressions: None,
        };
        let affinity = pod_spec.affinity.get_or_insert_with(Affinity::default);
        let na = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
            node_selector_terms: vec![term],
        });
        let mut labels = tm.labels.unwrap_or_default();
        labels.insert(history::HASH_LABEL.into(), hash.into());
        labels.insert(
            logic::GENERATION_LABEL.into(),
            ds.metadata.generation.unwrap_or(1).to_string(),
        );
        let name = ds.metadata.name.clone().unwrap_or_default();
        v1::Pod {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: ds.metadata.namespace.clone(),
                labels: Some(labels),
                annotations: tm.annotations,
                finalizers: tm.finalizers,
                owner_references: Some(vec![crate::objects::controller_of(
                    "apps/v1",
                    "DaemonSet",
                    &ds.metadata,
                )]),
                ..Default::default()
            },
            spec: Some(pod_spec),
            status: None,
        }
    }
}

fn ready(n: &k8s_openapi::api::core::v1::Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}
