//! Services made real (upstream's `pkg/registry/core/service/{ipallocator,portallocator}` and
//! the apiserver's bootstrap controller): cluster IPs allocated as 1.33 does, one `IPAddress`
//! object per IP inside a `ServiceCIDR` (so apiservers sharing a store never hand out the same
//! IP, and a restart keeps every allocation); node ports from a compare-and-swap range record
//! in storage; both released on delete and repaired by a loop; the `kubernetes` Service with
//! Endpoints and an EndpointSlice listing the live apiservers (lease-based).
//!
//! `Allocator` implements the registry's `Hooks` for Services: the registry calls it before a
//! Service is stored and after it is removed; what it decides is in `plan` (pure).

pub mod cluster_ip;
pub mod kubernetes;
pub mod node_port;
pub mod plan;
pub mod repair;

use std::net::IpAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rkube_api::cidr::Cidr;
use rkube_api::{meta, ApiError, StatusCause};
use serde_json::Value;

use crate::registry::{Hooks, Registries, Registry};
use crate::storage::Storage;

/// `--service-cluster-ip-range` and `--service-node-port-range`.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// One range per IP family, primary first (dual-stack: `10.96.0.0/12,fd00::/108`).
    pub cluster_ip_ranges: Vec<Cidr>,
    pub node_ports: (u16, u16),
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            cluster_ip_ranges: vec![Cidr::parse("10.96.0.0/12").expect("default range")],
            node_ports: (30000, 32767),
        }
    }
}

impl ServiceConfig {
    /// Parses `--service-cluster-ip-range` (one or two CIDRs, at most one per family).
    pub fn parse_ranges(text: &str) -> Result<Vec<Cidr>, String> {
        let ranges: Vec<Cidr> = text
            .split(',')
            .map(|c| Cidr::parse(c.trim()))
            .collect::<Result<_, _>>()?;
        match ranges.as_slice() {
            [_] => Ok(ranges),
            [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ranges),
            [_, _] => Err("dual-stack ranges must be one IPv4 and one IPv6 CIDR".into()),
            _ => Err("one or two CIDRs (one per IP family) are allowed".into()),
        }
    }

    /// Parses `--service-node-port-range` (`30000-32767`).
    pub fn parse_ports(text: &str) -> Result<(u16, u16), String> {
        let (a, b) = text
            .split_once('-')
            .ok_or_else(|| format!("invalid port range {text:?}: want FROM-TO"))?;
        let lo: u16 = a
            .trim()
            .parse()
            .map_err(|_| format!("invalid port {a:?}"))?;
        let hi: u16 = b
            .trim()
            .parse()
            .map_err(|_| format!("invalid port {b:?}"))?;
        if lo == 0 || lo > hi {
            return Err(format!("invalid port range {text:?}"));
        }
        Ok((lo, hi))
    }
}

/// The Services registry's hooks.
pub struct Allocator {
    pub config: ServiceConfig,
    pub ips: cluster_ip::IpAllocator,
    pub ports: node_port::PortAllocator,
}

impl Allocator {
    pub fn new(
        config: ServiceConfig,
        registries: &Registries,
        storage: Arc<Storage>,
        etcd_prefix: &str,
    ) -> anyhow::Result<Arc<Self>> {
        let ipaddresses = registry(registries, "networking.k8s.io", "ipaddresses")?;
        let cidrs = registry(registries, "networking.k8s.io", "servicecidrs")?;
        Ok(Arc::new(Allocator {
            ips: cluster_ip::IpAllocator::new(config.cluster_ip_ranges.clone(), ipaddresses, cidrs),
            ports: node_port::PortAllocator::new(config.node_ports, storage, etcd_prefix),
            config,
        }))
    }

    /// Takes what `want` asks for; on an error, gives back what was taken so far.
    async fn take(
        &self,
        svc: &Value,
        want: &plan::Want,
        dry_run: bool,
    ) -> Result<plan::Taken, ApiError> {
        let ns = meta::namespace(svc);
        let name = meta::name(svc);
        let mut taken = plan::Taken::default();
        let result: Result<(), ApiError> = async {
            for (i, req) in want.ips.iter().enumerate() {
                let ip = self
                    .ips
                    .allocate(ns, name, req.family_v4, req.ip, dry_run)
                    .await
                    .map_err(|why| ip_error(svc, req.ip, i, &why))?;
                taken.ips.push(ip);
            }
            // Every port of the Service in one compare-and-swap, however many it has.
            let asked: Vec<Option<u16>> = want.ports.iter().map(|(_, r)| *r).collect();
            let got = self
                .ports
                .allocate_all(&asked, dry_run)
                .await
                .map_err(|(k, why)| {
                    let (i, req) = want.ports[k];
                    port_error(svc, i, req, &why)
                })?;
            taken.ports = want.ports.iter().map(|(i, _)| *i).zip(got).collect();
            Ok(())
        }
        .await;
        match result {
            Ok(()) => Ok(taken),
            Err(e) => {
                if !dry_run {
                    self.give_back(
                        ns,
                        name,
                        &taken.ips,
                        &taken.ports.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
                    )
                    .await;
                }
                Err(e)
            }
        }
    }

    async fn give_back(&self, ns: &str, name: &str, ips: &[IpAddr], ports: &[u16]) {
        for ip in ips {
            self.ips.release(ns, name, *ip).await;
        }
        self.ports.release(ports).await;
    }
}

fn registry(
    r: &Registries,
    group: &'static str,
    plural: &'static str,
) -> anyhow::Result<Arc<Registry>> {
    r.get(&(group, plural))
        .ok_or_else(|| anyhow::anyhow!("the {plural} registry is missing"))
}

/// The 422 of an IP that cannot be had.
fn ip_error(svc: &Value, requested: Option<IpAddr>, i: usize, why: &str) -> ApiError {
    let shown = match requested {
        Some(ip) => format!("[]string{{{:?}}}", ip.to_string()),
        None => "[]string{}".into(),
    };
    let what = match requested {
        Some(ip) => format!("failed to allocate IP {ip}: {why}"),
        None => format!("failed to allocate a serviceIP: {why}"),
    };
    ApiError::invalid(
        "",
        "Service",
        meta::name(svc),
        vec![StatusCause::invalid_raw(
            &format!("spec.clusterIPs[{i}]"),
            &shown,
            &what,
        )],
    )
}

/// The 422 of a node port that cannot be had.
fn port_error(svc: &Value, i: usize, requested: Option<u16>, why: &str) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        meta::name(svc),
        vec![StatusCause::invalid_raw(
            &format!("spec.ports[{i}].nodePort"),
            &requested.map_or("0".into(), |p| p.to_string()),
            why,
        )],
    )
}

impl Hooks for Allocator {
    fn begin_create<'a>(
        &'a self,
        obj: &'a mut Value,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let want = plan::for_create(obj, &self.config)
                .map_err(|c| ApiError::invalid("", "Service", meta::name(obj), vec![c]))?;
            let taken = self.take(obj, &want, dry_run).await?;
            plan::apply(obj, &want, &taken);
            Ok(())
        })
    }

    fn finish_create<'a>(&'a self, obj: &'a Value, stored: bool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !stored {
                let (ips, ports) = plan::held(obj);
                self.give_back(meta::namespace(obj), meta::name(obj), &ips, &ports)
                    .await;
            }
        })
    }

    fn begin_update<'a>(
        &'a self,
        old: &'a Value,
        new: &'a mut Value,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let want = plan::for_update(old, new, &self.config)
                .map_err(|c| ApiError::invalid("", "Service", meta::name(new), vec![c]))?;
            let taken = self.take(new, &want, dry_run).await?;
            plan::apply(new, &want, &taken);
            Ok(())
        })
    }

    fn finish_update<'a>(
        &'a self,
        old: &'a Value,
        new: &'a Value,
        stored: bool,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let (old_ips, old_ports) = plan::held(old);
            let (new_ips, new_ports) = plan::held(new);
            let (from, keep_ips, keep_ports) = if stored {
                ((old_ips, old_ports), new_ips, new_ports)
            } else {
                ((new_ips, new_ports), old_ips, old_ports)
            };
            let ips: Vec<IpAddr> = from
                .0
                .into_iter()
                .filter(|ip| !keep_ips.contains(ip))
                .collect();
            let ports: Vec<u16> = from
                .1
                .into_iter()
                .filter(|p| !keep_ports.contains(p))
                .collect();
            self.give_back(meta::namespace(new), meta::name(new), &ips, &ports)
                .await;
        })
    }

    fn after_delete<'a>(&'a self, obj: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let (ips, ports) = plan::held(obj);
            self.give_back(meta::namespace(obj), meta::name(obj), &ips, &ports)
                .await;
        })
    }
}
