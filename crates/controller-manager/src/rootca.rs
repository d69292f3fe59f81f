//! The root CA publisher (upstream's `root-ca-cert-publisher`): every active namespace has a
//! `kube-root-ca.crt` ConfigMap holding the cluster CA (`ca.crt`) that pods use to trust the
//! apiserver, put back when changed or deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use rkube_client::informer::Change;
use rkube_client::{Api, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

pub const NAME: &str = "kube-root-ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub struct RootCaPublisher {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    ca: String,
}

impl RootCaPublisher {
    /// Publishes `ca` (PEM; empty when the apiserver serves plain HTTP).
    pub fn new(ctx: Arc<Ctx>, ca: String) -> Arc<Self> {
        let c = Arc::new(RootCaPublisher {
            ctx: ctx.clone(),
            queue: WorkQueue::new("root_ca_cert_publisher"),
            ca,
        });
        let q = c.queue.clone();
        ctx.namespaces.on_change(move |ch| {
            if let Change::Added(n) | Change::Updated { new: n, .. } = ch {
                q.add(n.metadata.name.clone().unwrap_or_default());
            }
        });
        let q = c.queue.clone();
        ctx.root_ca_maps.on_change(move |ch| {
            let cm = match ch {
                Change::Added(c) | Change::Updated { new: c, .. } | Change::Deleted(c) => c,
            };
            q.add(cm.metadata.namespace.clone().unwrap_or_default());
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "root-ca-cert-publisher", workers, shutdown);
    }

    fn data(&self) -> BTreeMap<String, String> {
        [("ca.crt".to_string(), self.ca.clone())].into()
    }

    async fn sync(&self, ns: &str) -> Reconciled {
        let Some(n) = self.ctx.namespaces.get(ns) else {
            return Ok(None);
        };
        if n.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let api = Api::<ConfigMap>::namespaced(&self.ctx.client, ns);
        let description = (
            "kubernetes.io/description".to_string(),
            DESCRIPTION.to_string(),
        );
        match self.ctx.root_ca_maps.get_in(ns, NAME) {
            None => {
                let mut cm = ConfigMap {
                    data: Some(self.data()),
                    ..Default::default()
                };
                cm.metadata.name = Some(NAME.into());
                cm.metadata.annotations = Some([description].into());
                match api.create(&cm).await {
                    Ok(_) => Ok(None),
                    Err(e) if e.code() == Some(409) || e.code() == Some(403) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Some(cur) => {
                let annotated = cur
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&description.0))
                    == Some(&description.1);
                if cur.data.as_ref() == Some(&self.data()) && annotated {
                    return Ok(None);
                }
                let mut next = (*cur).clone();
                next.data = Some(self.data());
                next.metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(description.0, description.1);
                api.replace(NAME, &next).await.map(|_| None)
            }
        }
    }
}
