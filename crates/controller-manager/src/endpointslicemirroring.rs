//! The EndpointSlice mirroring controller (upstream's `endpointslicemirroring`): Endpoints
//! written by hand (or by another controller) for a Service without a selector get matching
//! EndpointSlices, owned by the Endpoints and managed by
//! `endpointslicemirroring-controller.k8s.io` — at most 1000 addresses of each subset (ready
//! ones first), 100 per slice, `ready` as the only condition. Endpoints labelled
//! `endpointslice.kubernetes.io/skip-mirror: "true"` (the `kubernetes` Service's) or carrying a
//! leader-election record are not mirrored; the slices go when the Endpoints or the Service
//! go, or when the Service gains a selector. What to mirror is `desired` (pure).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rkube_client::informer::{split_key, Change};
use rkube_client::WorkQueue;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::endpointslice::{self, Content, Slices, MANAGED_BY, MAX_PER_SLICE, SERVICE_NAME};
use crate::worker::Reconciled;

pub const CONTROLLER: &str = "endpointslicemirroring-controller.k8s.io";
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";
const LEADER: &str = "control-plane.alpha.kubernetes.io/leader";
/// Addresses mirrored per subset (`--mirroring-max-endpoints-per-subset`).
pub const MAX_PER_SUBSET: usize = 1000;
/// Annotations of the Endpoints not copied to its slices.
const NOT_COPIED: &[&str] = &[
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// Does this Endpoints object want mirroring (whatever its Service)?
pub fn mirrorable(ep: &Endpoints) -> bool {
    let skip = ep
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SKIP_MIRROR))
        .is_some_and(|v| v == "true");
    let leader = ep
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(LEADER));
    !skip && !leader
}

fn endpoint_of(a: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![a.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..Default::default()
        }),
        hostname: a.hostname.clone(),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        ..Default::default()
    }
}

/// The slices' content mirroring `ep`: one port set per subset, split by address family,
/// at most `MAX_PER_SUBSET` addresses of a subset, invalid IPs skipped. None for no addresses.
pub fn desired(ep: &Endpoints) -> Vec<Content> {
    let mut out = Vec::new();
    for subset in ep.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let addresses = subset
            .addresses
            .iter()
            .flatten()
            .map(|a| (a, true))
            .chain(
                subset
                    .not_ready_addresses
                    .iter()
                    .flatten()
                    .map(|a| (a, false)),
            )
            .take(MAX_PER_SUBSET);
        let mut by_family: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
        for (a, ready) in addresses {
            let family = match a.ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => "IPv4",
                Ok(IpAddr::V6(_)) => "IPv6",
                Err(_) => continue,
            };
            by_family
                .entry(family)
                .or_default()
                .push(endpoint_of(a, ready));
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
    out
}

/// The slices' labels (the Endpoints' own, then the controller's) and annotations.
fn metadata_for(
    ep: &Endpoints,
    service: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = ep.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME.into(), service.into());
    labels.insert(MANAGED_BY.into(), CONTROLLER.into());
    let mut annotations = ep.metadata.annotations.clone().unwrap_or_default();
    for k in NOT_COPIED {
        annotations.remove(*k);
    }
    (labels, annotations)
}

pub struct MirroringController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
}

impl MirroringController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(MirroringController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("endpointslicemirroring"),
        });
        let q = c.queue.clone();
        ctx.endpoints.on_change(move |ch| {
            let e = match ch {
                Change::Added(e) | Change::Updated { new: e, .. } | Change::Deleted(e) => e,
            };
            q.add(rkube_client::informer::key_of(&**e));
        });
        let q = c.queue.clone();
        ctx.services.on_change(move |ch| {
            let (svc, flipped) = match ch {
                Change::Added(s) | Change::Deleted(s) => {
                    (s, s.spec.as_ref().is_none_or(|sp| sp.selector.is_none()))
                }
                Change::Updated { old, new } => {
                    let none = |s: &k8s_openapi::api::core::v1::Service| {
                        s.spec.as_ref().is_none_or(|sp| sp.selector.is_none())
                    };
                    (new, none(old) != none(new))
                }
            };
            if flipped {
                q.add(rkube_client::informer::key_of(&**svc));
            }
        });
        endpointslice::requeue_on_own_slices(&ctx, &c.queue, CONTROLLER);
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "endpointslicemirroring", workers, shutdown);
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let (ns, name) = split_key(key);
        let ep = self.ctx.endpoints.get(key);
        let svc = self.ctx.services.get(key);
        let mirror = match (&ep, &svc) {
            (Some(ep), Some(svc)) => {
                mirrorable(ep) && svc.spec.as_ref().is_none_or(|s| s.selector.is_none())
            }
            _ => false,
        };
        let Some(ep) = ep.filter(|_| mirror) else {
            // Nothing (any longer) to mirror: remove what was mirrored.
            if !endpointslice::existing(&self.ctx, ns, name, CONTROLLER).is_empty() {
                let owner = OwnerReference::default();
                let want = Slices {
                    namespace: ns,
                    service: name,
                    controller: CONTROLLER,
                    labels: BTreeMap::new(),
                    annotations: None,
                    owner,
                };
                endpointslice::apply(&self.ctx, &want, Vec::new()).await?;
            }
            return Ok(None);
        };
        let (labels, annotations) = metadata_for(&ep, name);
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Endpoints".into(),
            name: name.to_string(),
            uid: ep.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let want = Slices {
            namespace: ns,
            service: name,
            controller: CONTROLLER,
            labels,
            annotations: Some(annotations),
            owner,
        };
        endpointslice::apply(&self.ctx, &want, desired(&ep)).await?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subsets_mirror_ready_first_capped_and_split_by_family() {
        let addrs: Vec<_> = (0..1100)
            .map(|i| json!({"ip": format!("10.1.{}.{}", i / 250, i % 250)}))
            .collect();
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "n"},
            "subsets": [
                {"addresses": [{"ip": "10.0.0.1", "hostname": "a"}, {"ip": "fd00::1"}, {"ip": "bogus"}],
                 "notReadyAddresses": [{"ip": "10.0.0.2"}],
                 "ports": [{"name": "sql", "port": 5432}]},
                {"addresses": addrs, "ports": [{"port": 80, "protocol": "TCP"}]}
            ]
        }))
        .unwrap();
        let slices = desired(&ep);
        let v4 = &slices[0];
        assert_eq!(v4.address_type, "IPv4");
        assert_eq!(v4.ports[0].name.as_deref(), Some("sql"));
        assert_eq!(v4.ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(v4.endpoints.len(), 2);
        assert_eq!(v4.endpoints[0].hostname.as_deref(), Some("a"));
        assert_eq!(
            v4.endpoints
                .iter()
                .map(|e| e.conditions.as_ref().unwrap().ready)
                .collect::<Vec<_>>(),
            [Some(true), Some(false)]
        );
        assert_eq!(slices[1].address_type, "IPv6");
        let big: Vec<usize> = slices[2..].iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(big, [100; 10], "1000 of the 1100 addresses, 100 per slice");
        let empty: Endpoints = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(desired(&empty).is_empty());
    }

    #[test]
    fn skip_label_and_leader_records_are_not_mirrored() {
        let ep = |meta: serde_json::Value| -> Endpoints {
            serde_json::from_value(json!({ "metadata": meta })).unwrap()
        };
        assert!(mirrorable(&ep(json!({"name": "a"}))));
        assert!(!mirrorable(&ep(
            json!({"name": "a", "labels": {SKIP_MIRROR: "true"}})
        )));
        assert!(!mirrorable(&ep(
            json!({"name": "a", "annotations": {LEADER: "{}"}})
        )));
        let (labels, annotations) = metadata_for(
            &ep(json!({"name": "a", "labels": {"app": "db"},
                "annotations": {"keep": "1", "endpoints.kubernetes.io/last-change-trigger-time": "t"}})),
            "a",
        );
        assert_eq!(labels[MANAGED_BY], CONTROLLER);
        assert_eq!(labels["app"], "db");
        assert_eq!(annotations.len(), 1);
    }
}
