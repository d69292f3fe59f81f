//! The TTL-after-finished controller: deletes a finished Job (Complete or Failed)
//! `spec.ttlSecondsAfterFinished` after it finished, in the background so its pods go with it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use rkube_client::informer::{key_of, split_key, Change};
use rkube_client::{Api, DeleteParams, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::job::logic::{finished, finished_at};
use crate::worker::Reconciled;

pub struct TtlAfterFinished {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

/// How long until `job` expires (zero: now); `None` when it never does.
pub fn expires_in(
    job: &Job,
    now: k8s_openapi::chrono::DateTime<k8s_openapi::chrono::Utc>,
) -> Option<Duration> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    if job.metadata.deletion_timestamp.is_some() || finished(job).is_none() {
        return None;
    }
    let at = finished_at(job).unwrap_or(now)
        + k8s_openapi::chrono::Duration::seconds(i64::from(ttl.max(0)));
    Some((at - now).to_std().unwrap_or_default())
}

impl TtlAfterFinished {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(TtlAfterFinished {
            ctx: ctx.clone(),
            queue: WorkQueue::new("ttl_jobs_to_delete"),
        });
        let me = c.clone();
        ctx.jobs.on_change(move |ch| match ch {
            Change::Added(j) | Change::Updated { new: j, .. } => {
                if expires_in(j, rkube_client::now()).is_some() {
                    me.queue.add(key_of(&**j));
                }
            }
            Change::Deleted(_) => {}
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "ttl_jobs_to_delete", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(job) = self.ctx.jobs.get(key) else {
            return Ok(None);
        };
        match expires_in(&job, rkube_client::now()) {
            None => Ok(None),
            Some(d) if !d.is_zero() => Ok(Some(d)),
            Some(_) => {
                let (ns, name) = split_key(key);
                // The UID precondition: never a re-created Job of the same name.
                let dp = DeleteParams::with_uid(job.metadata.uid.as_deref().unwrap_or_default())
                    .propagation("Background");
                match Api::<Job>::namespaced(&self.ctx.client, ns)
                    .delete(name, &dp)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(job = key, "finished job expired; deleted");
                        Ok(None)
                    }
                    Err(e) if e.is_not_found() || e.code() == Some(409) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finished_jobs_expire_after_their_ttl() {
        let now = rkube_client::now();
        let ago = now - k8s_openapi::chrono::Duration::seconds(30);
        let job = |ttl: Option<i32>, cond: &str| -> Job {
            serde_json::from_value(json!({"spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": [{"type": cond, "status": "True", "lastTransitionTime": ago}]}}))
            .unwrap()
        };
        assert_eq!(
            expires_in(&job(Some(100), "Complete"), now),
            Some(Duration::from_secs(70))
        );
        assert_eq!(
            expires_in(&job(Some(10), "Failed"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(expires_in(&job(None, "Complete"), now), None);
        assert_eq!(
            expires_in(&job(Some(10), "Suspended"), now),
            None,
            "not finished"
        );
    }
}
