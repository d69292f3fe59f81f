//! The CronJob controller: starts a Job for each scheduled time (in the CronJob's time zone),
//! keeps `status.active`, `lastScheduleTime` and `lastSuccessfulTime`, replaces or waits for
//! running Jobs as `concurrencyPolicy` says, and trims finished Jobs to the history limits.
//! Time comes from the controller-manager's clock, so tests can move it. Decisions live in
//! `logic`; this file wires informer events to the queue and performs the API calls.

pub mod logic;

use std::sync::Arc;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::{Api, DeleteParams, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::objects::controller_ref;
use crate::worker::Reconciled;
use crate::Clock;

pub struct CronJobController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    recorder: rkube_client::events::Recorder,
    clock: Clock,
}

impl CronJobController {
    pub fn new(ctx: Arc<Ctx>, clock: Clock) -> Arc<Self> {
        let c = Arc::new(CronJobController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("cronjob"),
            recorder: ctx.recorder.for_component("cronjob-controller"),
            clock,
        });
        let me = c.clone();
        ctx.cronjobs.on_change(move |ch| match ch {
            Change::Added(j) | Change::Updated { new: j, .. } | Change::Deleted(j) => {
                me.queue.add(key_of(&**j))
            }
        });
        let me = c.clone();
        ctx.jobs.on_change(move |ch| {
            let j = match ch {
                Change::Added(j) | Change::Updated { new: j, .. } | Change::Deleted(j) => j,
            };
            if let Some(r) = controller_ref(&j.metadata).filter(|r| r.kind == "CronJob") {
                let ns = j.metadata.namespace.as_deref().unwrap_or_default();
                me.queue.add(format!("{ns}/{}", r.name));
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "cronjob", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(cj) = self.ctx.cronjobs.get(key) else {
            return Ok(None);
        };
        let (ns, name) = split_key(key);
        let uid = cj.metadata.uid.clone().unwrap_or_default();
        let jobs: Vec<Arc<Job>> = self
            .ctx
            .jobs
            .by_index(index::OWNER_UID, &uid)
            .into_iter()
            .filter(|j| controller_ref(&j.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        let plan = logic::plan(&cj, &jobs, (self.clock)());
        let jobs_api: Api<Job> = Api::namespaced(&self.ctx.client, ns);
        crate::objects::record(&self.recorder, object_ref(&*cj), &plan.events);
        for j in &plan.delete {
            let n = j.metadata.name.as_deref().unwrap_or_default();
            let dp = DeleteParams::with_uid(j.metadata.uid.as_deref().unwrap_or_default())
                .propagation("Background");
            match jobs_api.delete(n, &dp).await {
                Ok(_) => self.recorder.normal(
                    object_ref(&*cj),
                    "SuccessfulDelete",
                    format!("Deleted job {n}"),
                ),
                Err(e) if e.is_not_found() || e.code() == Some(409) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(job) = &plan.create {
            let n = job.metadata.name.clone().unwrap_or_default();
            match jobs_api.create(job).await {
                Ok(_) => self.recorder.normal(
                    object_ref(&*cj),
                    "SuccessfulCreate",
                    format!("Created job {n}"),
                ),
                // Created before (the cache lags): the status still records it.
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    self.recorder.warning(
                        object_ref(&*cj),
                        "FailedCreate",
                        format!("Error creating job: {e}"),
                    );
                    return Err(e);
                }
            }
        }
        if cj.status.as_ref() != Some(&plan.status) {
            let mut c = (*cj).clone();
            c.metadata.managed_fields = None;
            c.status = Some(plan.status.clone());
            match Api::<CronJob>::namespaced(&self.ctx.client, ns)
                .replace_status(name, &c)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(plan.requeue)
    }
}
