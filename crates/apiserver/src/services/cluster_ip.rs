//! Cluster IPs as 1.33 allocates them: an IP is taken by creating the `IPAddress` object named
//! by it (whose parent is the Service); the create's compare-and-swap is the only arbiter, so
//! apiservers sharing a store never hand out the same IP, and what is stored survives
//! restarts. IPs come from the `--service-cluster-ip-range` (the `kubernetes` ServiceCIDR)
//! and any other ServiceCIDR; dynamic allocation prefers the upper part of a range, leaving
//! the lower band for IPs users ask for, as upstream.

use std::net::IpAddr;
use std::sync::Arc;

use rkube_api::cidr::Cidr;
use rkube_api::meta;
use serde_json::{json, Value};

use crate::registry::{Registry, Unadmitted, Write};

/// The default ServiceCIDR's name.
pub const DEFAULT_CIDR: &str = "kubernetes";

const WRITE: Write<'static> = Write {
    admit: &Unadmitted,
    dry_run: false,
    manager: Some("ipallocator.k8s.io"),
    verb: "create",
};

/// Creates past a taken IP before giving up.
const MAX_CONFLICTS: usize = 64;

pub struct IpAllocator {
    ranges: Vec<Cidr>,
    ipaddresses: Arc<Registry>,
    cidrs: Arc<Registry>,
}

impl IpAllocator {
    pub fn new(ranges: Vec<Cidr>, ipaddresses: Arc<Registry>, cidrs: Arc<Registry>) -> Self {
        IpAllocator {
            ranges,
            ipaddresses,
            cidrs,
        }
    }

    /// Every range of a family: the configured one, then other ServiceCIDRs.
    fn ranges_of(&self, v4: bool) -> Vec<Cidr> {
        let mut out: Vec<Cidr> = self
            .ranges
            .iter()
            .copied()
            .filter(|c| c.is_ipv4() == v4)
            .collect();
        if let Some(cache) = &self.cidrs.cache {
            for obj in cache.values() {
                if meta::deletion_timestamp(&obj).is_some() {
                    continue;
                }
                for c in obj
                    .pointer("/spec/cidrs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(|c| Cidr::parse(c).ok())
                {
                    if c.is_ipv4() == v4 && !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    /// Whether the IPAddress of `ip` exists, as the watch cache knows (a hint; the create
    /// decides).
    fn known_taken(&self, ip: &IpAddr) -> bool {
        let key = self.ipaddresses.key("", &ip.to_string());
        self.ipaddresses
            .cache
            .as_ref()
            .and_then(|c| c.get(&key).ok())
            .is_some_and(|(o, _)| o.is_some())
    }

    /// Takes `requested`, or any free IP of the family; the error is the reason as upstream
    /// words it.
    pub async fn allocate(
        &self,
        ns: &str,
        name: &str,
        v4: bool,
        requested: Option<IpAddr>,
        dry_run: bool,
    ) -> Result<IpAddr, String> {
        let ranges = self.ranges_of(v4);
        if ranges.is_empty() {
            return Err(format!(
                "no ServiceCIDR serves {}",
                if v4 { "IPv4" } else { "IPv6" }
            ));
        }
        if let Some(ip) = requested {
            let usable = ranges.iter().any(|r| {
                r.offset_of(&ip)
                    .is_some_and(|o| o != 0 && !(ip.is_ipv4() && o == r.size() - 1))
            });
            if !usable {
                return Err("the provided network does not match the current range".into());
            }
            if dry_run {
                return if self.known_taken(&ip) {
                    Err("provided IP is already allocated".into())
                } else {
                    Ok(ip)
                };
            }
            return match self.claim(ip, ns, name).await? {
                true => Ok(ip),
                false => Err("provided IP is already allocated".into()),
            };
        }
        let mut conflicts = 0;
        for range in &ranges {
            for ip in candidates(range) {
                if self.known_taken(&ip) {
                    continue;
                }
                if dry_run {
                    return Ok(ip);
                }
                if self.claim(ip, ns, name).await? {
                    return Ok(ip);
                }
                conflicts += 1;
                if conflicts >= MAX_CONFLICTS {
                    return Err("range is full".into());
                }
            }
        }
        Err("range is full".into())
    }

    /// Creates the IPAddress of `ip` for the Service: true when it was free.
    async fn claim(&self, ip: IpAddr, ns: &str, name: &str) -> Result<bool, String> {
        let obj = json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": ip.to_string(),
                "labels": {
                    "ipaddress.kubernetes.io/ip-family": if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                    "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
                },
            },
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": ns, "name": name}},
        });
        match self.ipaddresses.create("", obj, WRITE).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == 409 => Ok(false),
            Err(e) => Err(format!(
                "failed to record the allocation: {}",
                e.status().message
            )),
        }
    }

    /// Deletes the IPAddress of `ip` if the Service is still its parent.
    pub async fn release(&self, ns: &str, name: &str, ip: IpAddr) {
        let ip_name = ip.to_string();
        let Ok(bytes) = self.ipaddresses.get("", &ip_name, None).await else {
            return;
        };
        let Ok(obj) = serde_json::from_slice::<Value>(&bytes) else {
            return;
        };
        if !is_parent(&obj, ns, name) {
            return;
        }
        let opts = rkube_api::DeleteOptions {
            precondition_uid: Some(meta::uid(&obj).to_string()),
            ..Default::default()
        };
        if let Err(e) = self.ipaddresses.delete("", &ip_name, &opts, WRITE).await {
            if e.code() != 404 {
                tracing::warn!(ip = %ip_name, error = %e.status().message, "could not release a cluster IP");
            }
        }
    }

    /// Creates the default ServiceCIDR (the configured ranges) unless it exists.
    pub async fn ensure_default_cidr(&self) -> anyhow::Result<()> {
        let cidrs: Vec<String> = self.ranges.iter().map(Cidr::to_string).collect();
        let obj = json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "ServiceCIDR",
            "metadata": {"name": DEFAULT_CIDR},
            "spec": {"cidrs": cidrs},
        });
        match self.cidrs.create("", obj, WRITE).await {
            Ok(_) => {}
            Err(e) if e.code() == 409 => {}
            Err(e) => anyhow::bail!("creating the default ServiceCIDR: {}", e.status().message),
        }
        let now = meta::now_rfc3339();
        let _ = self
            .cidrs
            .guaranteed_update("", DEFAULT_CIDR, false, |cur| {
                let ready = cur
                    .pointer("/status/conditions/0/status")
                    .and_then(Value::as_str)
                    == Some("True");
                let mut new = cur.clone();
                if !ready {
                    new["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "", "message": "Kubernetes Service CIDR is ready", "lastTransitionTime": now}]});
                }
                Ok(crate::registry::Decision::Write(new))
            })
            .await;
        Ok(())
    }
}

/// Whether an IPAddress belongs to the Service `ns/name`.
pub fn is_parent(ipaddress: &Value, ns: &str, name: &str) -> bool {
    let r = |k: &str| {
        ipaddress
            .pointer(&format!("/spec/parentRef/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    r("resource") == "services"
        && r("group").is_empty()
        && r("namespace") == ns
        && r("name") == name
}

/// The order IPs of a range are tried in: random points in the upper part first (the lower
/// band is for IPs users ask for), then every usable IP from a random start, upper part
/// first. The network address (and IPv4's broadcast address) are never handed out.
fn candidates(range: &Cidr) -> impl Iterator<Item = IpAddr> + '_ {
    let size = range.size();
    let last = if range.is_ipv4() {
        size.saturating_sub(2)
    } else {
        size.saturating_sub(1)
    };
    let band = (size / 16).clamp(16, 256).min(last / 2).max(1);
    let upper = last.saturating_sub(band).saturating_add(1);
    let random = (0..16)
        .filter(move |_| upper > 0)
        .map(move |_| band + rand::random::<u128>() % upper);
    let start = if upper > 0 {
        rand::random::<u128>() % upper
    } else {
        0
    };
    let sweep_upper = (0..upper).map(move |i| band + (start + i) % upper);
    let sweep_lower = 1..band.min(last + 1);
    random
        .chain(sweep_upper)
        .chain(sweep_lower)
        .filter(move |o| *o >= 1 && *o <= last)
        .filter_map(move |o| range.nth(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_cover_a_small_range_without_its_edges() {
        let r = Cidr::parse("10.0.0.0/28").unwrap();
        let all: std::collections::BTreeSet<String> =
            candidates(&r).map(|ip| ip.to_string()).collect();
        assert_eq!(all.len(), 14, "{all:?}");
        assert!(!all.contains("10.0.0.0") && !all.contains("10.0.0.15"));
        let big = Cidr::parse("10.96.0.0/12").unwrap();
        let first = candidates(&big).next().unwrap();
        let offset = big.offset_of(&first).unwrap();
        assert!(
            offset >= 256,
            "dynamic IPs come from above the static band: {first}"
        );
    }
}
