//! The ServiceAccount controller (upstream's `serviceaccount` controller): every active
//! namespace has a `default` ServiceAccount, re-created if deleted.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ServiceAccount;
use rkube_client::informer::Change;
use rkube_client::{Api, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

pub const DEFAULT: &str = "default";

pub struct ServiceAccountsController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

impl ServiceAccountsController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(ServiceAccountsController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("serviceaccount"),
        });
        let q = c.queue.clone();
        ctx.namespaces.on_change(move |ch| {
            if let Change::Added(n) | Change::Updated { new: n, .. } = ch {
                q.add(n.metadata.name.clone().unwrap_or_default());
            }
        });
        let q = c.queue.clone();
        ctx.service_accounts.on_change(move |ch| {
            if let Change::Deleted(sa) = ch {
                if sa.metadata.name.as_deref() == Some(DEFAULT) {
                    q.add(sa.metadata.namespace.clone().unwrap_or_default());
                }
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "serviceaccount", workers, shutdown);
    }

    async fn sync(&self, ns: &str) -> Reconciled {
        let Some(n) = self.ctx.namespaces.get(ns) else {
            return Ok(None);
        };
        if n.metadata.deletion_timestamp.is_some()
            || self.ctx.service_accounts.get_in(ns, DEFAULT).is_some()
        {
            return Ok(None);
        }
        let mut sa = ServiceAccount::default();
        sa.metadata.name = Some(DEFAULT.into());
        match Api::<ServiceAccount>::namespaced(&self.ctx.client, ns)
            .create(&sa)
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if e.code() == Some(409) => Ok(None),
            // A namespace being deleted refuses new objects.
            Err(e) if e.code() == Some(403) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
