//! The Job controller: runs a Job's pods to its completions (NonIndexed or Indexed), tracking
//! each finished pod through the `batch.kubernetes.io/job-tracking` finalizer and
//! `status.uncountedTerminatedPods` so no pod is counted twice or lost, with backoff after
//! failures, `backoffLimit`, `activeDeadlineSeconds` and `suspend`. Decisions live in `logic`;
//! this file wires informer events to the queue and performs the API calls in the plan's order.

pub mod logic;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{self, EnvVar, EnvVarSource, ObjectFieldSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, Error, Patch, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::expectations::Expectations;
use crate::objects::controller_ref;
use crate::podcontrol;
use crate::worker::Reconciled;
use logic::{INDEX_KEY, TRACKING_FINALIZER};

pub struct JobController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    expectations: Expectations,
    /// Job key → UIDs of pods whose finalizer removal is not yet seen in the cache.
    releasing: Mutex<HashMap<String, HashSet<String>>>,
    /// Job key → the resourceVersion of this controller's last status write: a cached Job
    /// older than that is stale (its counts would undercount pods already released), and
    /// the sync waits for the newer one the informer is about to deliver.
    written: Mutex<HashMap<String, u64>>,
    recorder: rkube_client::events::Recorder,
    backoff: Duration,
}

impl JobController {
    /// `backoff`: the delay after the first failed pod (upstream: 10 s), doubling after each.
    pub fn new(ctx: Arc<Ctx>, backoff: Duration) -> Arc<Self> {
        let c = Arc::new(JobController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("job"),
            expectations: Expectations::default(),
            releasing: Mutex::default(),
            written: Mutex::default(),
            recorder: ctx.recorder.for_component("job-controller"),
            backoff,
        });
        let me = c.clone();
        ctx.jobs.on_change(move |ch| match ch {
            Change::Added(j) | Change::Updated { new: j, .. } => me.queue.add(key_of(&**j)),
            Change::Deleted(j) => {
                let k = key_of(&**j);
                me.expectations.forget(&k);
                me.releasing.lock().unwrap().remove(&k);
                me.written.lock().unwrap().remove(&k);
                me.queue.add(k);
            }
        });
        let me = c.clone();
        ctx.pods.on_change(move |ch| {
            let Some((k, p, gone)) = podcontrol::observe(&me.expectations, ("batch", "Job"), ch)
            else {
                return;
            };
            let released = gone
                || !p
                    .metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == TRACKING_FINALIZER);
            if released {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(set) = me.releasing.lock().unwrap().get_mut(&k) {
                    set.remove(&uid);
                }
            }
            me.queue.add(k);
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "job", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let Some(job) = self.ctx.jobs.get(key) else {
            self.expectations.forget(key);
            // The Job is gone: its pods must not keep the finalizer (they would never go).
            let orphans: Vec<Arc<Pod>> = self
                .ctx
                .pods
                .by_index(index::NAMESPACE, ns)
                .into_iter()
                .filter(|p| {
                    controller_ref(&p.metadata).is_some_and(|r| r.kind == "Job" && r.name == name)
                        && p.metadata
                            .finalizers
                            .iter()
                            .flatten()
                            .any(|f| f == TRACKING_FINALIZER)
                })
                .collect();
            self.release(&Api::namespaced(&self.ctx.client, ns), &orphans)
                .await?;
            return Ok(None);
        };
        let rv_of = |j: &Job| {
            j.metadata
                .resource_version
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(cached), Some(w)) = (rv_of(&job), self.written.lock().unwrap().get(key)) {
            if cached < *w {
                return Ok(None); // stale: the informer brings our write next
            }
        }
        // Before the pods are read: a creation seen after this must not count for a list
        // taken before it.
        let needs_sync = self.expectations.satisfied(key);
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .ctx
            .pods
            .by_index(index::OWNER_UID, &uid)
            .into_iter()
            .filter(|p| controller_ref(&p.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        let releasing = self
            .releasing
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default();
        let plan = logic::plan(&job, &pods, rkube_client::now(), self.backoff, &releasing);
        let jobs: Api<Job> = Api::namespaced(&self.ctx.client, ns);
        let pods_api: Api<Pod> = Api::namespaced(&self.ctx.client, ns);

        // Status writes are compare-and-swap on the cached resourceVersion: a stale cache
        // must never overwrite counts it has not seen.
        let mut rv = job.metadata.resource_version.clone();
        let write = |rv: &Option<String>, status| {
            let mut j = (*job).clone();
            j.metadata.resource_version = rv.clone();
            j.metadata.managed_fields = None;
            j.status = Some(status);
            j
        };
        if let Some(rec) = plan.record.clone() {
            match jobs.replace_status(name, &write(&rv, rec)).await {
                Ok(j) => {
                    if let Some(v) = rv_of(&j) {
                        self.written.lock().unwrap().insert(key.to_string(), v);
                    }
                    rv = j.metadata.resource_version
                }
                Err(e) if e.is_not_found() || e.code() == Some(409) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        {
            let mut r = self.releasing.lock().unwrap();
            let set = r.entry(key.to_string()).or_default();
            set.extend(plan.finalize.iter().filter_map(|p| p.metadata.uid.clone()));
            // Bounded: UIDs whose pods the cache no longer holds are done.
            set.retain(|u| {
                pods.iter()
                    .any(|p| p.metadata.uid.as_deref() == Some(u.as_str()))
            });
        }
        if let Err(e) = self.release(&pods_api, &plan.finalize).await {
            // Not released: the next sync must see these pods again.
            if let Some(set) = self.releasing.lock().unwrap().get_mut(key) {
                for p in &plan.finalize {
                    set.remove(p.metadata.uid.as_deref().unwrap_or_default());
                }
            }
            return Err(e);
        }
        let written = job.status.as_ref() != Some(&plan.status) || plan.record.is_some();
        if written {
            match jobs
                .replace_status(name, &write(&rv, plan.status.clone()))
                .await
            {
                Ok(j) => {
                    if let Some(v) = rv_of(&j) {
                        self.written.lock().unwrap().insert(key.to_string(), v);
                    }
                }
                Err(e) if e.is_not_found() || e.code() == Some(409) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        crate::objects::record(&self.recorder, object_ref(&*job), &plan.events);
        if !needs_sync {
            return Ok(plan.requeue);
        }
        let owner = podcontrol::Owner {
            key,
            regarding: object_ref(&*job),
            recorder: &self.recorder,
            expectations: &self.expectations,
        };
        if !plan.delete.is_empty() {
            podcontrol::delete(&owner, &pods_api, &plan.delete).await?;
        }
        if !plan.create.is_empty() {
            let pods: Vec<v1::Pod> = plan
                .create
                .iter()
                .map(|i| {
                    let failures = i.and_then(|i| plan.index_failures.get(&i).copied());
                    Self::pod_for(&job, *i, failures)
                })
                .collect();
            podcontrol::create(&owner, &Api::namespaced(&self.ctx.client, ns), &pods).await?;
        }
        Ok(plan.requeue)
    }

    /// Takes the tracking finalizer off `pods`.
    async fn release(&self, api: &Api<Pod>, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let released = join_all(pods.iter().map(|p| async move {
            let rest: Vec<&String> = p
                .metadata
                .finalizers
                .iter()
                .flatten()
                .filter(|f| *f != TRACKING_FINALIZER)
                .collect();
            // None left: the field goes, as Go's omitempty drops an empty list.
            let rest = if rest.is_empty() {
                json!(null)
            } else {
                json!(rest)
            };
            let patch = json!({"metadata": {"uid": p.metadata.uid, "finalizers": rest}});
            let name = p.metadata.name.as_deref().unwrap_or_default();
            match api.patch(name, &Patch::Merge(patch)).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_not_found() || e.code() == Some(409) => Ok(()),
                Err(e) => Err(e),
            }
        }))
        .await;
        released.into_iter().collect()
    }

    /// A pod of `job` with completion `index` (Indexed Jobs) and the failures of that index
    /// before it (`backoffLimitPerIndex`).
    fn pod_for(job: &Job, index: Option<i32>, failures: Option<i32>) -> v1::Pod {
        let name = job.metadata.name.clone().unwrap_or_default();
        let template = job
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let tm = template.metadata.unwrap_or_default();
        let mut labels = tm.labels.unwrap_or_default();
        let mut annotations = tm.annotations.unwrap_or_default();
        let mut spec = template.spec.unwrap_or_default();
        let mut finalizers = tm.finalizers.unwrap_or_default();
        finalizers.push(TRACKING_FINALIZER.into());
        let generate_name = match index {
            Some(i) => {
                labels.insert(INDEX_KEY.into(), i.to_string());
                annotations.insert(INDEX_KEY.into(), i.to_string());
                let per_index = job
                    .spec
                    .as_ref()
                    .is_some_and(|s| s.backoff_limit_per_index.is_some());
                if per_index {
                    annotations.insert(
                        logic::INDEX_FAILURE_KEY.into(),
                        failures.unwrap_or(0).to_string(),
                    );
                }
                if spec.hostname.is_none() {
                    spec.hostname = Some(format!("{name}-{i}"));
                }
                let env = EnvVar {
                    name: "JOB_COMPLETION_INDEX".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: format!("metadata.annotations['{INDEX_KEY}']"),
                            api_version: None,
                        }),
                        ..Default::default()
                    }),
                    value: None,
                };
                for c in spec
                    .containers
                    .iter_mut()
                    .chain(spec.init_containers.iter_mut().flatten())
                {
                    let envs = c.env.get_or_insert_with(Vec::new);
                    if !envs.iter().any(|e| e.name == env.name) {
                        envs.push(env.clone());
                    }
                }
                format!("{name}-{i}-")
            }
            None => format!("{name}-"),
        };
        v1::Pod {
            metadata: ObjectMeta {
                generate_name: Some(generate_name),
                namespace: job.metadata.namespace.clone(),
                labels: Some(labels),
                annotations: (!annotations.is_empty()).then_some(annotations),
                finalizers: Some(finalizers),
                owner_references: Some(vec![crate::objects::controller_of(
                    "batch/v1",
                    "Job",
                    &job.metadata,
                )]),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }
}
