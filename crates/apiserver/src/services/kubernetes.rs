//! The `kubernetes` Service in `default` and its endpoints (upstream's bootstrap controller
//! with the `lease` endpoint reconciler): every apiserver keeps a short-lived record of its
//! address under `<prefix>/masterleases/`, and writes the Service's Endpoints and EndpointSlice
//! to list the records alive; a stopping apiserver removes its own first.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rkube_api::meta;
use rkube_etcd_api::{DeleteRangeRequest, PutRequest, RangeRequest};
use serde_json::{json, Value};

use crate::registry::{Decision, Registries, Registry, Unadmitted, Write};
use crate::storage::Storage;

const WRITE: Write<'static> = Write {
    admit: &Unadmitted,
    dry_run: false,
    manager: Some("kube-apiserver"),
    verb: "create",
};

/// How long an apiserver's record lives without renewal, and how often it is renewed.
const LEASE_TTL: i64 = 15;
const RENEW: Duration = Duration::from_secs(5);

/// The Service every cluster has: its first cluster IP, port 443 to the apiservers.
pub fn service(cluster_ip: &str, target_port: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cluster_ip,
            "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": target_port}],
        },
    })
}

/// The Endpoints listing `addresses` (ip → port), one subset per port.
pub fn endpoints(addresses: &[(String, u16)]) -> Value {
    let mut by_port: BTreeMap<u16, Vec<Value>> = BTreeMap::new();
    for (ip, port) in addresses {
        by_port.entry(*port).or_default().push(json!({"ip": ip}));
    }
    for addrs in by_port.values_mut() {
        addrs.dedup();
    }
    let subsets: Vec<Value> = by_port
        .into_iter()
        .map(|(port, addrs)| json!({"addresses": addrs, "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    })
}

/// The EndpointSlice listing `addresses`.
pub fn endpoint_slice(addresses: &[(String, u16)]) -> Value {
    let port = addresses.first().map_or(443, |(_, p)| *p);
    let ips: std::collections::BTreeSet<&String> = addresses.iter().map(|(ip, _)| ip).collect();
    let eps: Vec<Value> = ips
        .into_iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

pub struct Reconciler {
    storage: Arc<Storage>,
    prefix: String,
    me: SocketAddr,
    endpoints: Arc<Registry>,
    slices: Arc<Registry>,
}

impl Reconciler {
    pub fn new(
        registries: &Registries,
        storage: Arc<Storage>,
        etcd_prefix: &str,
        me: SocketAddr,
    ) -> anyhow::Result<Self> {
        let get = |g: &'static str, p: &'static str| {
            registries
                .get(&(g, p))
                .ok_or_else(|| anyhow::anyhow!("the {p} registry is missing"))
        };
        Ok(Reconciler {
            storage,
            prefix: format!("{}/masterleases/", etcd_prefix.trim_end_matches('/')),
            me,
            endpoints: get("", "endpoints")?,
            slices: get("discovery.k8s.io", "endpointslices")?,
        })
    }

    fn my_key(&self) -> String {
        format!("{}{}", self.prefix, self.me)
    }

    /// Renews this apiserver's record and rewrites the endpoints until shutdown; then removes
    /// the record and rewrites them once more.
    pub async fn run(self, shutdown: rkube_daemon::ShutdownToken) {
        loop {
            if let Err(e) = self.renew().await {
                tracing::warn!(error = %e, "could not renew the apiserver's endpoint record");
            }
            self.reconcile().await;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(RENEW) => {}
            }
        }
        let _ = self
            .storage
            .client
            .delete_range(&DeleteRangeRequest {
                key: self.my_key().into_bytes(),
                ..Default::default()
            })
            .await;
        self.reconcile().await;
    }

    async fn renew(&self) -> anyhow::Result<()> {
        let lease = self.storage.lease_for(LEASE_TTL).await?;
        let value =
            serde_json::to_vec(&json!({"ip": self.me.ip().to_string(), "port": self.me.port()}))?;
        self.storage
            .client
            .put(&PutRequest {
                key: self.my_key().into_bytes(),
                value,
                lease,
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    /// The live apiservers' addresses (records are keyed `ip:port`: several apiservers may
    /// share a host).
    async fn live(&self) -> anyhow::Result<Vec<(String, u16)>> {
        let mut end = self.prefix.clone().into_bytes();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let resp = self
            .storage
            .client
            .range(&RangeRequest {
                key: self.prefix.clone().into_bytes(),
                range_end: end,
                limit: 1000,
                ..Default::default()
            })
            .await?;
        let mut out = std::collections::BTreeSet::new();
        for kv in resp.kvs {
            let v: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            if let (Some(ip), Some(port)) = (v["ip"].as_str(), v["port"].as_u64()) {
                out.insert((ip.to_string(), port as u16));
            }
        }
        Ok(out.into_iter().collect())
    }

    async fn reconcile(&self) {
        let live = match self.live().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the apiservers' endpoint records");
                return;
            }
        };
        for (reg, desired) in [
            (&self.endpoints, endpoints(&live)),
            (&self.slices, endpoint_slice(&live)),
        ] {
            if let Err(e) = put(reg, desired).await {
                tracing::warn!(error = %e.status().message, "could not write the kubernetes endpoints");
            }
        }
    }
}

/// Creates `desired` or brings the stored object's content up to it (metadata kept).
pub async fn put(reg: &Registry, desired: Value) -> Result<(), rkube_api::ApiError> {
    let ns = meta::namespace(&desired).to_string();
    let name = meta::name(&desired).to_string();
    match reg.create(&ns, desired.clone(), WRITE).await {
        Ok(_) => return Ok(()),
        Err(e) if e.code() != 409 => return Err(e),
        Err(_) => {}
    }
    reg.guaranteed_update(&ns, &name, false, |cur| {
        let mut new = cur.clone();
        if let (Some(n), Some(d)) = (new.as_object_mut(), desired.as_object()) {
            for (k, v) in d {
                if k != "metadata" {
                    n.insert(k.clone(), v.clone());
                }
            }
        }
        for (k, v) in meta::labels(&desired) {
            let mut labels = new
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or(json!({}));
            labels[k] = json!(v);
            meta::set_meta(&mut new, "labels", labels);
        }
        Ok(Decision::Write(new))
    })
    .await
    .map(|_| ())
}

/// Creates the `kubernetes` Service unless it exists.
pub async fn ensure_service(
    services: &Registry,
    cluster_ip: &str,
    port: u16,
) -> anyhow::Result<()> {
    match services
        .create("default", service(cluster_ip, port), WRITE)
        .await
    {
        Ok(_) => {
            tracing::info!(%cluster_ip, "created the kubernetes Service");
            Ok(())
        }
        Err(e) if e.code() == 409 => Ok(()),
        // Another apiserver holds the IP for it already (it is creating the Service).
        Err(e) if e.code() == 422 && e.status().message.contains("already allocated") => Ok(()),
        Err(e) => anyhow::bail!("creating the kubernetes Service: {}", e.status().message),
    }
}
