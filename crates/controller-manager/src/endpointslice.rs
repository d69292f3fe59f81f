//! The EndpointSlice controller (upstream's `endpointslice` controller): for every Service with
//! a selector, EndpointSlices labelled `kubernetes.io/service-name` and owned by the Service,
//! at most 100 endpoints each, one port set per slice, every pod with its ready / serving /
//! terminating conditions. Existing slices are reused in name order (updated only when their
//! content differs), new ones get generated names, surplus ones are deleted; a Service with no
//! endpoints keeps one empty placeholder slice, as upstream.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rkube_client::informer::{index, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::endpoints::logic;
use crate::worker::Reconciled;

pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const CONTROLLER: &str = "endpointslice-controller.k8s.io";
/// Endpoints per slice (upstream's `--max-endpoints-per-slice` default).
pub const MAX_PER_SLICE: usize = 100;

pub struct EndpointSliceController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

/// The content of one slice: (address type, ports, endpoints).
#[derive(Clone, Debug, PartialEq)]
pub struct Content {
    pub address_type: String,
    pub ports: Vec<EndpointPort>,
    pub endpoints: Vec<Endpoint>,
}

/// The slices' content a Service should have (at least one, maybe empty).
pub fn desired(svc: &Service, pods: &[Arc<Pod>]) -> Vec<Content> {
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let mut out = Vec::new();
    for (ports, eps) in logic::groups(svc, pods.iter().map(|p| &**p)) {
        let ports: Vec<EndpointPort> = ports
            .iter()
            .map(|p| EndpointPort {
                name: Some(p.name.clone()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone()),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let mut by_family: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
        for e in eps {
            let family = if e.ip.contains(':') { "IPv6" } else { "IPv4" };
            by_family.entry(family).or_default().push(Endpoint {
                addresses: vec![e.ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(e.ready),
                    serving: Some(e.serving),
                    terminating: Some(e.terminating),
                }),
                hostname: e.hostname.clone(),
                node_name: e.node.clone(),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(ns.clone()),
                    name: Some(e.name.clone()),
                    uid: Some(e.uid.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        for (family, endpoints) in by_family {
            for chunk in endpoints.chunks(MAX_PER_SLICE) {
                out.push(Content {
                    address_type: family.to_string(),
                    ports: ports.clone(),
                    endpoints: chunk.to_vec(),
                });
            }
        }
    }
    if out.is_empty() {
        out.push(Content {
            address_type: "IPv4".into(),
            ports: Vec::new(),
            endpoints: Vec::new(),
        });
    }
    out
}

fn content_of(s: &EndpointSlice) -> Content {
    Content {
        address_type: s.address_type.clone(),
        ports: s.ports.clone().unwrap_or_default(),
        endpoints: s.endpoints.clone(),
    }
}

/// The labels a Service's slices carry: the Service's own, then the controller's.
fn labels_for(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        SERVICE_NAME.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(MANAGED_BY.into(), CONTROLLER.into());
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert("service.kubernetes.io/headless".into(), String::new());
    }
    labels
}

impl EndpointSliceController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(EndpointSliceController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("endpointslice"),
        });
        crate::endpoints::watch_services_and_pods(&ctx, &c.queue);
        requeue_on_own_slices(&ctx, &c.queue, CONTROLLER);
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "endpointslice", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let Some(svc) = self.ctx.services.get(key) else {
            // Owned by the Service: the garbage collector removes them.
            return Ok(None);
        };
        if !logic::managed(&svc) {
            return Ok(None);
        }
        let pods = self.ctx.pods.by_index(index::NAMESPACE, ns);
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: name.to_string(),
            uid: svc.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let want = Slices {
            namespace: ns,
            service: name,
            controller: CONTROLLER,
            labels: labels_for(&svc),
            annotations: None,
            owner,
        };
        apply(&self.ctx, &want, desired(&svc, &pods)).await?;
        Ok(None)
    }
}

/// Queues `namespace/service` whenever one of `controller`'s slices of that Service changes
/// (someone else edited or deleted it: put it back).
pub fn requeue_on_own_slices(ctx: &Ctx, queue: &Arc<WorkQueue<String>>, controller: &'static str) {
    let q = queue.clone();
    ctx.endpoint_slices.on_change(move |ch| {
        let s = match ch {
            Change::Added(s) | Change::Updated { new: s, .. } | Change::Deleted(s) => s,
        };
        let labels = s.metadata.labels.as_ref();
        let ours = labels.and_then(|l| l.get(MANAGED_BY)).map(String::as_str) == Some(controller);
        if let (true, Some(svc)) = (ours, labels.and_then(|l| l.get(SERVICE_NAME))) {
            q.add(format!(
                "{}/{svc}",
                s.metadata.namespace.as_deref().unwrap_or("")
            ));
        }
    });
}

/// The slices one controller keeps for one Service: where, whose, labelled how.
pub struct Slices<'a> {
    pub namespace: &'a str,
    pub service: &'a str,
    /// The `managed-by` label's value: whose slices these are.
    pub controller: &'a str,
    pub labels: BTreeMap<String, String>,
    /// `None`: left as they are.
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner: OwnerReference,
}

/// The controller's existing slices of the Service, by name.
pub fn existing(ctx: &Ctx, ns: &str, service: &str, controller: &str) -> Vec<Arc<EndpointSlice>> {
    let mut out: Vec<Arc<EndpointSlice>> = ctx
        .endpoint_slices
        .by_index(index::NAMESPACE, ns)
        .into_iter()
        .filter(|s| {
            let l = s.metadata.labels.as_ref();
            l.and_then(|l| l.get(SERVICE_NAME)).map(String::as_str) == Some(service)
                && l.and_then(|l| l.get(MANAGED_BY)).map(String::as_str) == Some(controller)
        })
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// Makes the controller's slices of a Service hold `contents`: existing slices are reused in
/// name order (written only when they differ), new ones get generated names, surplus ones are
/// deleted.
pub async fn apply(ctx: &Ctx, want: &Slices<'_>, contents: Vec<Content>) -> Result<(), Error> {
    let api: Api<EndpointSlice> = Api::namespaced(&ctx.client, want.namespace);
    let mut unused = existing(ctx, want.namespace, want.service, want.controller);
    for content in contents {
        // Reuse a slice with the same address type and ports (the first by name).
        let reuse = unused
            .iter()
            .position(|s| {
                s.address_type == content.address_type
                    && s.ports.clone().unwrap_or_default() == content.ports
            })
            .or_else(|| {
                unused
                    .iter()
                    .position(|s| s.address_type == content.address_type)
            });
        match reuse.map(|i| unused.remove(i)) {
            Some(cur) => {
                let same_annotations = want
                    .annotations
                    .as_ref()
                    .is_none_or(|a| cur.metadata.annotations.clone().unwrap_or_default() == *a);
                let same_owner = cur.metadata.owner_references.as_deref()
                    == Some(std::slice::from_ref(&want.owner));
                if content_of(&cur) == content
                    && cur.metadata.labels.as_ref() == Some(&want.labels)
                    && same_annotations
                    && same_owner
                {
                    continue;
                }
                let mut next = (*cur).clone();
                next.ports = Some(content.ports);
                next.endpoints = content.endpoints;
                next.metadata.labels = Some(want.labels.clone());
                if let Some(a) = &want.annotations {
                    next.metadata.annotations = (!a.is_empty()).then(|| a.clone());
                }
                next.metadata.owner_references = Some(vec![want.owner.clone()]);
                api.replace(next.metadata.name.as_deref().unwrap_or(""), &next)
                    .await?;
            }
            None => {
                let mut s = EndpointSlice {
                    address_type: content.address_type,
                    endpoints: content.endpoints,
                    ports: Some(content.ports),
                    ..Default::default()
                };
                s.metadata.generate_name = Some(format!("{}-", want.service));
                s.metadata.namespace = Some(want.namespace.to_string());
                s.metadata.labels = Some(want.labels.clone());
                s.metadata.annotations = want.annotations.clone().filter(|a| !a.is_empty());
                s.metadata.owner_references = Some(vec![want.owner.clone()]);
                api.create(&s).await?;
            }
        }
    }
    for s in unused {
        match api
            .delete(
                s.metadata.name.as_deref().unwrap_or(""),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slices_hold_at_most_a_hundred_and_an_empty_service_keeps_a_placeholder() {
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}))
            .unwrap();
        let pods: Vec<Arc<Pod>> = (0..250)
            .map(|i| {
                Arc::new(serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "default", "labels": {"app": "web"}},
                    "spec": {"containers": []},
                    "status": {"podIP": format!("10.0.{}.{}", i / 250, i % 250), "phase": "Running",
                               "conditions": [{"type": "Ready", "status": "True"}]}
                })).unwrap())
            })
            .collect();
        let slices = desired(&svc, &pods);
        assert_eq!(
            slices.iter().map(|s| s.endpoints.len()).collect::<Vec<_>>(),
            vec![100, 100, 50]
        );
        assert_eq!(slices[0].ports[0].port, Some(80));
        let empty = desired(&svc, &[]);
        assert_eq!(empty.len(), 1);
        assert!(empty[0].endpoints.is_empty() && empty[0].ports.is_empty());
    }
}
