//! The allocation repair loop (upstream's ipallocator and portallocator repair controllers):
//! IPAddresses whose Service is gone (or no longer holds the IP) are deleted, IPs a Service
//! holds without an IPAddress get one, and the node-port record is brought to what Services
//! hold — a port that seems leaked is freed only after it was seen leaked on three rounds, so a
//! Service being created meanwhile keeps its port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::meta;
use serde_json::Value;

use super::cluster_ip::is_parent;
use super::{plan, Allocator};
use crate::registry::{Registries, Registry};

/// An IPAddress younger than this is not judged (its Service may be being created).
const GRACE_SECS: i64 = 60;
/// Rounds a port is seen leaked before it is freed.
const LEAK_ROUNDS: u32 = 3;

pub struct Repair {
    alloc: Arc<Allocator>,
    services: Arc<Registry>,
    ipaddresses: Arc<Registry>,
    leaked: BTreeMap<u16, u32>,
}

impl Repair {
    pub fn new(alloc: Arc<Allocator>, registries: &Registries) -> anyhow::Result<Self> {
        let get = |g: &'static str, p: &'static str| {
            registries
                .get(&(g, p))
                .ok_or_else(|| anyhow::anyhow!("the {p} registry is missing"))
        };
        Ok(Repair {
            alloc,
            services: get("", "services")?,
            ipaddresses: get("networking.k8s.io", "ipaddresses")?,
            leaked: BTreeMap::new(),
        })
    }

    pub async fn run(mut self, every: Duration, shutdown: rkube_daemon::ShutdownToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            self.round().await;
        }
    }

    /// One repair round over the watch caches' view.
    pub async fn round(&mut self) {
        let (Some(sc), Some(ic)) = (&self.services.cache, &self.ipaddresses.cache) else {
            return;
        };
        if !sc.is_ready() || !ic.is_ready() {
            return;
        }
        let services = sc.values();
        let mut held_ips: BTreeMap<IpAddr, (String, String)> = BTreeMap::new();
        let mut held_ports: BTreeSet<u16> = BTreeSet::new();
        for s in &services {
            let (ips, ports) = plan::held(s);
            for ip in ips {
                held_ips.insert(
                    ip,
                    (meta::namespace(s).to_string(), meta::name(s).to_string()),
                );
            }
            held_ports.extend(ports);
        }
        let now = now();
        let mut recorded: BTreeSet<IpAddr> = BTreeSet::new();
        for ipa in ic.values() {
            let Ok(ip) = meta::name(&ipa).parse::<IpAddr>() else {
                continue;
            };
            recorded.insert(ip);
            let owned = held_ips
                .get(&ip)
                .is_some_and(|(ns, name)| is_parent(&ipa, ns, name));
            let managed = ipa
                .pointer("/metadata/labels/ipaddress.kubernetes.io~1managed-by")
                .and_then(Value::as_str)
                == Some("ipallocator.k8s.io");
            let age = meta::parse_rfc3339(meta::meta_str(&ipa, "creationTimestamp"))
                .map_or(0, |t| now - t);
            if !owned && managed && age >= GRACE_SECS {
                let ns = ipa
                    .pointer("/spec/parentRef/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let name = ipa
                    .pointer("/spec/parentRef/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                tracing::info!(%ip, "releasing a cluster IP no Service holds");
                self.alloc.ips.release(ns, name, ip).await;
            }
        }
        for (ip, (ns, name)) in &held_ips {
            if !recorded.contains(ip) {
                tracing::info!(%ip, %ns, %name, "recording a cluster IP a Service holds");
                let _ = self
                    .alloc
                    .ips
                    .allocate(ns, name, ip.is_ipv4(), Some(*ip), false)
                    .await;
            }
        }
        let Ok(stored) = self.alloc.ports.in_use().await else {
            return;
        };
        self.leaked
            .retain(|p, _| stored.contains(p) && !held_ports.contains(p));
        for p in stored.difference(&held_ports) {
            *self.leaked.entry(*p).or_default() += 1;
        }
        let free: BTreeSet<u16> = self
            .leaked
            .iter()
            .filter(|(_, n)| **n >= LEAK_ROUNDS)
            .map(|(p, _)| *p)
            .collect();
        let missing: BTreeSet<u16> = held_ports.difference(&stored).copied().collect();
        if free.is_empty() && missing.is_empty() {
            return;
        }
        let r = self
            .alloc
            .ports
            .set(|ports| {
                for p in &free {
                    ports.remove(p);
                }
                ports.extend(missing.iter().copied());
                Ok(Some(()))
            })
            .await;
        match r {
            Ok(()) => {
                for p in &free {
                    self.leaked.remove(p);
                }
                tracing::info!(freed = ?free, recorded = ?missing, "repaired the node port record");
            }
            Err(e) => tracing::warn!(error = %e, "could not repair the node port record"),
        }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
