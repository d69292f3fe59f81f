//! The Endpoints controller (upstream's `endpoint` controller): for every Service with a
//! selector, an Endpoints object of the same name listing its pods — ready ones under
//! `addresses`, the rest under `notReadyAddresses`, one subset per resolved port set, at most
//! 1000 addresses (then truncated and annotated, as upstream). A Service's deletion deletes its
//! Endpoints. What the endpoints should be is `logic` (pure).

pub mod logic;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Service,
};
use rkube_client::informer::{index, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// Addresses one Endpoints object holds at most.
pub const MAX_ADDRESSES: usize = 1000;
const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

pub struct EndpointsController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

/// Keys of the managed Services in `pod`'s namespace that select it.
pub fn services_of(ctx: &Ctx, pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    ctx.services
        .by_index(index::NAMESPACE, ns)
        .iter()
        .filter(|s| logic::managed(s) && logic::selects(s, pod))
        .map(|s| format!("{ns}/{}", s.metadata.name.as_deref().unwrap_or("")))
        .collect()
}

/// Routes changes of Services and pods to the keys of the Services concerned.
pub fn watch_services_and_pods(ctx: &Arc<Ctx>, queue: &Arc<WorkQueue<String>>) {
    let q = queue.clone();
    ctx.services.on_change(move |ch| {
        let s = match ch {
            Change::Added(s) | Change::Updated { new: s, .. } | Change::Deleted(s) => s,
        };
        q.add(rkube_client::informer::key_of(&**s));
    });
    let (q, c) = (queue.clone(), Arc::downgrade(ctx));
    ctx.pods.on_change(move |ch| {
        let Some(ctx) = c.upgrade() else {
            return;
        };
        let pods: Vec<&Arc<Pod>> = match ch {
            Change::Added(p) | Change::Deleted(p) => vec![p],
            Change::Updated { old, new } => vec![old, new],
        };
        for p in pods {
            for key in services_of(&ctx, p) {
                q.add(key);
            }
        }
    });
}

/// The Endpoints a Service should have.
pub fn desired(svc: &Service, pods: &[Arc<Pod>]) -> Endpoints {
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let mut total = 0usize;
    let mut truncated = false;
    let mut subsets = Vec::new();
    for (ports, eps) in logic::groups(svc, pods.iter().map(|p| &**p)) {
        let mut ready = Vec::new();
        let mut not_ready = Vec::new();
        for e in eps {
            if e.terminating && !publish {
                continue;
            }
            if total >= MAX_ADDRESSES {
                truncated = true;
                break;
            }
            total += 1;
            let address = EndpointAddress {
                ip: e.ip.clone(),
                hostname: e.hostname.clone(),
                node_name: e.node.clone(),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(ns.clone()),
                    name: Some(e.name.clone()),
                    uid: Some(e.uid.clone()),
                    ..Default::default()
                }),
            };
            if e.ready {
                ready.push(address);
            } else {
                not_ready.push(address);
            }
        }
        if ready.is_empty() && not_ready.is_empty() {
            continue;
        }
        subsets.push(EndpointSubset {
            addresses: (!ready.is_empty()).then_some(ready),
            not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
            ports: (!ports.is_empty()).then(|| {
                ports
                    .iter()
                    .map(|p| EndpointPort {
                        name: (!p.name.is_empty()).then(|| p.name.clone()),
                        port: p.port,
                        protocol: Some(p.protocol.clone()),
                        app_protocol: p.app_protocol.clone(),
                    })
                    .collect()
            }),
        });
    }
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), String::new());
    }
    let mut ep = Endpoints::default();
    ep.metadata.name = svc.metadata.name.clone();
    ep.metadata.namespace = Some(ns);
    ep.metadata.labels = (!labels.is_empty()).then_some(labels);
    if truncated {
        ep.metadata.annotations =
            Some([(OVER_CAPACITY.to_string(), "truncated".to_string())].into());
    }
    ep.subsets = (!subsets.is_empty()).then_some(subsets);
    ep
}

impl EndpointsController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(EndpointsController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("endpoint"),
        });
        watch_services_and_pods(&ctx, &c.queue);
        let q = c.queue.clone();
        let weak = Arc::downgrade(&ctx);
        ctx.endpoints.on_change(move |ch| {
            let e = match ch {
                Change::Added(e) | Change::Updated { new: e, .. } | Change::Deleted(e) => e,
            };
            let key = rkube_client::informer::key_of(&**e);
            if weak
                .upgrade()
                .and_then(|ctx| ctx.services.get(&key))
                .is_some_and(|s| logic::managed(&s))
            {
                q.add(key);
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "endpoint", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let api: Api<Endpoints> = Api::namespaced(&self.ctx.client, ns);
        let current = self.ctx.endpoints.get(key);
        let Some(svc) = self.ctx.services.get(key) else {
            if current.is_some() {
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(None);
        };
        if !logic::managed(&svc) {
            return Ok(None);
        }
        let pods = self.ctx.pods.by_index(index::NAMESPACE, ns);
        let want = desired(&svc, &pods);
        match current {
            None => match api.create(&want).await {
                Ok(_) => Ok(None),
                Err(e) if e.is_conflict() || e.code() == Some(409) => {
                    Ok(Some(std::time::Duration::from_millis(100)))
                }
                Err(e) => Err(e),
            },
            Some(cur) => {
                if cur.subsets == want.subsets
                    && cur.metadata.labels == want.metadata.labels
                    && cur
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(OVER_CAPACITY))
                        == want
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(OVER_CAPACITY))
                {
                    return Ok(None);
                }
                let mut next = (*cur).clone();
                next.subsets = want.subsets;
                next.metadata.labels = want.metadata.labels;
                let mut annotations = next.metadata.annotations.take().unwrap_or_default();
                annotations.remove(OVER_CAPACITY);
                annotations.extend(want.metadata.annotations.unwrap_or_default());
                next.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
                api.replace(name, &next).await.map(|_| None)
            }
        }
    }
}
