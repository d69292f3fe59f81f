//! How the apiserver calls out to webhooks (admission and conversion alike): where a
//! `clientConfig` points (`Target`), and HTTPS trusting only the webhook's `caBundle`, to a
//! `url` or to a Service resolved through its EndpointSlices to a ready endpoint with the TLS
//! name `<service>.<namespace>.svc`; timeouts on the call and on reading the answer, a
//! bounded response, clients reused per CA bundle and endpoint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::cache::object::Filter;
use crate::registry::Registries;

/// The largest webhook response read.
const MAX_RESPONSE: usize = 16 << 20;
/// Clients kept (one per CA bundle and resolved endpoint).
const MAX_CLIENTS: usize = 128;

/// Where a webhook is called.
#[derive(Clone, Debug)]
pub enum Target {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

impl Target {
    /// Where a `clientConfig` (a webhook's, a conversion webhook's) points.
    pub fn of(cc: &Value) -> Option<Target> {
        let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
            (Some(u), _) => Some(Target::Url(u.to_string())),
            (None, Some(svc)) => Some(Target::Service {
                namespace: text(svc, "namespace"),
                name: text(svc, "name"),
                path: text(svc, "path"),
                port: svc
                    .get("port")
                    .and_then(Value::as_u64)
                    .unwrap_or(443)
                    .min(65535) as u16,
            }),
            _ => None,
        }
    }
}

/// A `clientConfig`'s `caBundle`, decoded.
pub fn ca_bundle(cc: &Value) -> Option<Vec<u8>> {
    cc.get("caBundle").and_then(Value::as_str).and_then(|b| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(b).ok()
    })
}

pub struct Caller {
    registries: Arc<Registries>,
    clients: Mutex<HashMap<String, reqwest::Client>>,
}

impl Caller {
    pub fn new(registries: Arc<Registries>) -> Self {
        Caller {
            registries,
            clients: Mutex::default(),
        }
    }

    /// POSTs the review; the response body.
    pub async fn post(
        &self,
        target: &Target,
        ca_bundle: Option<&[u8]>,
        timeout: Duration,
        body: &Value,
    ) -> Result<Vec<u8>, String> {
        let (url, resolve) = self.endpoint(target)?;
        let client = self.client(ca_bundle, resolve)?;
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(serde_json::to_vec(body).unwrap_or_default())
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    format!("failed to call webhook: Post {url:?}: context deadline exceeded")
                } else {
                    format!("failed to call webhook: Post {url:?}: {}", error_chain(&e))
                }
            })?;
        let status = resp.status().as_u16();
        let mut resp = resp;
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(timeout, resp.chunk()).await {
                Ok(Ok(Some(c))) => {
                    if out.len() + c.len() > MAX_RESPONSE {
                        return Err(
                            "received invalid webhook response: the response is too large".into(),
                        );
                    }
                    out.extend_from_slice(&c);
                }
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(format!("failed to call webhook: {e}")),
                Err(_) => {
                    return Err(format!(
                        "failed to call webhook: Post {url:?}: context deadline exceeded"
                    ))
                }
            }
        }
        if status != 200 {
            return Err(format!(
                "failed to call webhook: the server responded with the status code {status} but did not return more information"
            ));
        }
        Ok(out)
    }

    /// The URL to POST to, and for a Service the endpoint its name resolves to.
    fn endpoint(
        &self,
        target: &Target,
    ) -> Result<(String, Option<(String, std::net::SocketAddr)>), String> {
        match target {
            Target::Url(u) => Ok((u.clone(), None)),
            Target::Service {
                namespace,
                name,
                path,
                port,
            } => {
                let (ip, target_port) = self.resolve_service(namespace, name, *port)?;
                let host = format!("{name}.{namespace}.svc");
                let path = if path.starts_with('/') || path.is_empty() {
                    path.clone()
                } else {
                    format!("/{path}")
                };
                Ok((
                    format!("https://{host}:{target_port}{path}"),
                    Some((host, std::net::SocketAddr::new(ip, target_port))),
                ))
            }
        }
    }

    /// A ready endpoint of Service `ns/name` for its port `port`: its address and port.
    fn resolve_service(
        &self,
        ns: &str,
        name: &str,
        port: u16,
    ) -> Result<(std::net::IpAddr, u16), String> {
        let unavailable = || {
            format!("failed to call webhook: service \"{name}\" not found or has no ready endpoints in namespace {ns:?}")
        };
        let svc_reg = self
            .registries
            .get(&("", "services"))
            .ok_or_else(unavailable)?;
        let svc = svc_reg
            .cache
            .as_ref()
            .and_then(|c| c.get(&svc_reg.key(ns, name)).ok())
            .and_then(|(o, _)| o)
            .map(|o| o.value())
            .ok_or_else(|| format!("failed to call webhook: service \"{name}\" not found"))?;
        let svc_port = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p["port"].as_u64() == Some(u64::from(port)))
            })
            .cloned()
            .ok_or_else(|| {
                format!("failed to call webhook: service \"{name}\" has no port {port}")
            })?;
        let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
        let numeric_target = svc_port
            .get("targetPort")
            .and_then(Value::as_u64)
            .map(|p| p as u16);
        let slices = self
            .registries
            .get(&("discovery.k8s.io", "endpointslices"))
            .ok_or_else(unavailable)?;
        let cache = slices.cache.as_ref().ok_or_else(unavailable)?;
        let filter = Filter {
            namespace: Some(ns.to_string()),
            ..Default::default()
        };
        let list = cache
            .list(&filter, None, 0)
            .map_err(|e| e.status().message.clone())?;
        for o in list.items {
            if o.label("kubernetes.io/service-name") != Some(name) {
                continue;
            }
            let slice = o.value();
            let ports = slice
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ep_port = ports
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .or(if ports.len() == 1 {
                    ports.first()
                } else {
                    None
                })
                .and_then(|p| p.get("port").and_then(Value::as_u64))
                .map(|p| p as u16)
                .or(numeric_target)
                .unwrap_or(port);
            for ep in slice
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if ep.pointer("/conditions/ready") == Some(&Value::Bool(false)) {
                    continue;
                }
                if let Some(ip) = ep
                    .pointer("/addresses/0")
                    .and_then(Value::as_str)
                    .and_then(|a| a.parse().ok())
                {
                    return Ok((ip, ep_port));
                }
            }
        }
        Err(unavailable())
    }

    /// A client trusting `ca` (only it), resolving `resolve`'s name to its address.
    fn client(
        &self,
        ca: Option<&[u8]>,
        resolve: Option<(String, std::net::SocketAddr)>,
    ) -> Result<reqwest::Client, String> {
        // Keyed by the whole bundle: two bundles never share a client's trust.
        let key = format!(
            "{}|{resolve:?}",
            ca.map(|c| String::from_utf8_lossy(c).into_owned())
                .unwrap_or_default()
        );
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut b = reqwest::Client::builder()
            .http1_only()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .tls_built_in_root_certs(false);
        if let Some(ca) = ca {
            for c in reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|e| format!("failed to call webhook: caBundle: {e}"))?
            {
                b = b.add_root_certificate(c);
            }
        }
        if let Some((host, addr)) = resolve {
            b = b.resolve(&host, addr);
        }
        let client = b
            .build()
            .map_err(|e| format!("failed to call webhook: {e}"))?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// Every cause of a transport error, as Go prints them (`…: connection refused`).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        cur = s.source();
    }
    out
}
