//! `GET pods/{name}/log`: finds the pod's node and proxies the request to the kubelet serving
//! it, streaming the answer (for `follow`).
//!
//! The apiserver connects where a node's status says, so that is what an attacker who can
//! write a node's status would aim: addresses are validated when stored (`kinds::node`) and
//! again here (an IP address, never link-local, unspecified or multicast; a port), the URL is
//! built by a URL builder from validated parts, one shared client follows no redirects and has
//! connect and header timeouts, non-followed bodies are capped, a kubelet's error body is never
//! passed on, and log streams count among their user's long-running requests. With
//! `--kubelet-client-certificate` the apiserver speaks HTTPS to kubelets and presents that
//! certificate (the kubelet-agent then requires it).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rkube_api::{ApiError, Query};
use serde_json::Value;

use super::Scope;
use crate::kinds::node;

/// How the apiserver reaches kubelets (`--kubelet-client-certificate`, `--kubelet-client-key`,
/// `--kubelet-certificate-authority`).
#[derive(Clone, Debug, Default)]
pub struct KubeletConfig {
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
}

/// The one client kubelets are reached with.
pub struct KubeletClient {
    pub(crate) http: reqwest::Client,
    scheme: &'static str,
}

pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(15);
/// The most a non-followed log response carries.
const MAX_LOG_BYTES: usize = 64 * 1024 * 1024;
/// How long a log without `follow` may take to arrive in full, stalls included.
const LOG_DEADLINE: Duration = Duration::from_secs(120);

impl KubeletClient {
    /// `segments` on the kubelet of `node` (a Node object): where its status says, validated.
    pub fn url(&self, node: &Value, segments: &[&str]) -> Result<reqwest::Url, ApiError> {
        let node_name = node["metadata"]["name"].as_str().unwrap_or("");
        let unusable =
            |what: &str| ApiError::bad_request(format!("node {node_name} has no usable {what}"));
        let ip: IpAddr = node::address(node, "InternalIP")
            .and_then(|a| a.parse().ok())
            .filter(reachable)
            .ok_or_else(|| unusable("InternalIP address"))?;
        let port = match node::kubelet_port(node) {
            None => 10250,
            Some(p) => u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| unusable("kubelet port"))?,
        };
        let mut url = reqwest::Url::parse(&format!("{}://127.0.0.1/", self.scheme))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        url.set_ip_host(ip)
            .and_then(|_| url.set_port(Some(port)))
            .map_err(|_| ApiError::internal("building the kubelet URL"))?;
        url.path_segments_mut()
            .map_err(|_| ApiError::internal("building the kubelet URL"))?
            .clear()
            .extend(segments);
        Ok(url)
    }

    /// A small JSON document from a kubelet (its `/stats/summary`), within the header timeout
    /// and a size cap.
    pub async fn get_json(&self, url: reqwest::Url) -> Result<Value, String> {
        const MAX: usize = 16 * 1024 * 1024;
        let fetch = async {
            let resp = self.http.get(url).send().await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("status {}", resp.status().as_u16()));
            }
            let mut body = Vec::new();
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| e.to_string())?;
                if body.len() + chunk.len() > MAX {
                    return Err("the answer is too large".into());
                }
                body.extend_from_slice(&chunk);
            }
            serde_json::from_slice(&body).map_err(|e| e.to_string())
        };
        tokio::time::timeout(HEADER_TIMEOUT, fetch)
            .await
            .unwrap_or_else(|_| Err("no answer in time".into()))
    }

    /// Sends a request to the kubelet of `node_name`, its answer's head within the header
    /// timeout; failures said without the kubelet's own words.
    pub(crate) async fn send(
        rb: reqwest::RequestBuilder,
        node_name: &str,
    ) -> Result<reqwest::Response, ApiError> {
        match tokio::time::timeout(HEADER_TIMEOUT, rb.send()).await {
            Err(_) => Err(ApiError::internal(format!(
                "the kubelet on node {node_name} did not answer in time"
            ))),
            Ok(Err(e)) => {
                let why = if e.is_connect() {
                    "could not be reached"
                } else {
                    "failed"
                };
                Err(ApiError::internal(format!(
                    "the kubelet on node {node_name} {why}"
                )))
            }
            Ok(Ok(r)) => Ok(r),
        }
    }

    pub fn new(cfg: &KubeletConfig) -> anyhow::Result<Self> {
        // HTTP/1.1 only: exec, attach and port-forward are upgrades, which HTTP/2 has not.
        let mut b = reqwest::Client::builder()
            .http1_only()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let scheme = match (&cfg.client_cert, &cfg.client_key) {
            (Some(cert), Some(key)) => {
                let mut pem = std::fs::read(cert).map_err(|e| {
                    anyhow::anyhow!("--kubelet-client-certificate {}: {e}", cert.display())
                })?;
                pem.push(b'\n');
                pem.extend(
                    std::fs::read(key).map_err(|e| {
                        anyhow::anyhow!("--kubelet-client-key {}: {e}", key.display())
                    })?,
                );
                let id = reqwest::Identity::from_pem(&pem)
                    .map_err(|e| anyhow::anyhow!("--kubelet-client-certificate/key: {e}"))?;
                b = b.use_rustls_tls().identity(id);
                match &cfg.ca {
                    Some(ca) => {
                        let pem = std::fs::read(ca).map_err(|e| {
                            anyhow::anyhow!("--kubelet-certificate-authority {}: {e}", ca.display())
                        })?;
                        for c in reqwest::Certificate::from_pem_bundle(&pem)
                            .map_err(|e| anyhow::anyhow!("--kubelet-certificate-authority: {e}"))?
                        {
                            b = b.add_root_certificate(c);
                        }
                    }
                    // Upstream's default: kubelets' serving certificates are not verified
                    // without a CA; the apiserver still proves who it is.
                    None => b = b.danger_accept_invalid_certs(true),
                }
                "https"
            }
            (None, None) => "http",
            _ => anyhow::bail!("--kubelet-client-certificate and --kubelet-client-key go together"),
        };
        Ok(KubeletClient {
            http: b.build()?,
            scheme,
        })
    }
}

/// Query parameters passed on to the kubelet, each validated.
const FORWARDED: [&str; 6] = [
    "follow",
    "tailLines",
    "sinceSeconds",
    "timestamps",
    "previous",
    "limitBytes",
];

/// The container a request means: the one asked for (among the app containers, or with
/// `every` also the init and ephemeral ones), else the only one, else the annotated default.
pub(crate) fn container_of(
    pod: &Value,
    name: &str,
    asked: Option<&str>,
    every: bool,
) -> Result<String, ApiError> {
    let names_in = |key: &str| -> Vec<&str> {
        pod["spec"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect()
    };
    let names = names_in("containers");
    if let Some(c) = asked.filter(|c| !c.is_empty()) {
        let others = || {
            every
                && (names_in("initContainers").contains(&c)
                    || names_in("ephemeralContainers").contains(&c))
        };
        if names.contains(&c) || others() {
            return Ok(c.to_string());
        }
        return Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        )));
    }
    if names.len() == 1 {
        return Ok(names[0].to_string());
    }
    if let Some(d) =
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str()
    {
        if names.contains(&d) {
            return Ok(d.to_string());
        }
    }
    Err(ApiError::bad_request(format!(
        "a container name must be specified for pod {name}, choose one of: [{}]",
        names.join(" ")
    )))
}

/// The forwarded options, validated as upstream's PodLogOptions and rewritten canonically.
fn log_options(q: &Query) -> Result<Vec<(&'static str, String)>, ApiError> {
    let mut out = Vec::new();
    for key in FORWARDED {
        let Some(v) = q.get(key) else { continue };
        let value = match key {
            "follow" | "timestamps" | "previous" => q.flag(key).to_string(),
            _ => {
                let n: i64 = v.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid value for {key}: {v:?}"))
                })?;
                let min = if key == "tailLines" { 0 } else { 1 };
                if n < min {
                    return Err(ApiError::invalid(
                        "",
                        "PodLogOptions",
                        "",
                        vec![rkube_api::StatusCause::invalid_raw(
                            key,
                            &n.to_string(),
                            &format!("must be greater than or equal to {min}"),
                        )],
                    ));
                }
                n.to_string()
            }
        };
        out.push((key, value));
    }
    Ok(out)
}

/// Whether the apiserver connects to a node address at all: never to link-local (cloud
/// metadata services live there), unspecified, multicast or broadcast addresses. (Loopback
/// stays: single-machine clusters run their kubelets there.)
fn reachable(ip: &IpAddr) -> bool {
    let v4_ok = |v4: std::net::Ipv4Addr| {
        !(v4.is_link_local() || v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast())
    };
    match ip {
        IpAddr::V4(v4) => v4_ok(*v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            // An IPv4 address inside: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d) or
            // NAT64 (64:ff9b::a.b.c.d).
            let embedded = v6.to_ipv4_mapped().or_else(|| {
                let compatible = s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1);
                let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
                (compatible || nat64)
                    .then(|| std::net::Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])))
            });
            if let Some(v4) = embedded {
                return v4_ok(v4);
            }
            // Cloud metadata services on IPv6 (AWS, GCP).
            let metadata = ["fd00:ec2::254", "fd20:ce::254"]
                .iter()
                .any(|m| m.parse::<std::net::Ipv6Addr>().is_ok_and(|m| m == *v6));
            !(metadata || v6.is_unspecified() || v6.is_multicast() || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// The node a pod runs on: its name and object.
pub(crate) async fn node_of(s: &Scope<'_>, pod: &Value) -> Result<(String, Value), ApiError> {
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {} does not have a host assigned",
            s.name()
        )));
    }
    let nodes = s
        .state
        .registries
        .get(&("", "nodes"))
        .ok_or_else(|| ApiError::internal("no node registry"))?;
    let node_obj: Value =
        serde_json::from_slice(&nodes.get("", node_name, None).await?).unwrap_or(Value::Null);
    Ok((node_name.to_string(), node_obj))
}

pub async fn pod_log(s: &Scope<'_>) -> Result<Response, ApiError> {
    let (ns, name) = (s.ns, s.name());
    let options = log_options(s.query)?;
    let pod: Value =
        serde_json::from_slice(&s.reg.get(ns, name, None).await?).unwrap_or(Value::Null);
    let container = container_of(&pod, name, s.query.get("container"), false)?;
    let (node_name, node_obj) = node_of(s, &pod).await?;
    let node_name = node_name.as_str();
    let kubelet = &s.state.kubelet;
    let mut url = kubelet.url(&node_obj, &["containerLogs", ns, name, &container])?;
    if !options.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (k, v) in &options {
            pairs.append_pair(k, v);
        }
    }
    let follow = s.query.flag("follow");
    let resp = KubeletClient::send(kubelet.http.get(url.clone()), node_name).await?;
    let code = resp.status().as_u16();
    if !(200..300).contains(&code) {
        // The kubelet's own words are not passed on: what answered may not be a kubelet.
        return Err(if code == 400 && s.query.flag("previous") {
            ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))
        } else if code == 404 {
            ApiError::not_found(&rkube_api::GroupResource::new("", "pods/log"), name).with_message(
                format!(
                    "the kubelet on node {node_name} has no container {container} of pod {name}"
                ),
            )
        } else {
            ApiError::bad_request(format!(
                "the kubelet on node {node_name} refused the request (HTTP {code})"
            ))
        });
    }
    let cap = if follow { usize::MAX } else { MAX_LOG_BYTES };
    let body = resp.bytes_stream().scan(0usize, move |sent, chunk| {
        let next = match chunk {
            Ok(c) if *sent < cap => {
                *sent = sent.saturating_add(c.len());
                Some(Ok::<_, std::io::Error>(c))
            }
            _ => None,
        };
        futures_util::future::ready(next)
    });
    // Past the deadline the response is cut with an error, so that the client sees a broken
    // transfer rather than a log that looks complete.
    let deadline = if follow {
        None
    } else {
        Some(tokio::time::Instant::now() + LOG_DEADLINE)
    };
    let body = futures_util::stream::unfold(
        (Box::pin(body), false),
        move |(mut body, done)| async move {
            if done {
                return None;
            }
            let next = match deadline {
                None => body.next().await,
                Some(at) => match tokio::time::timeout_at(at, body.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let late = std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the log took too long to arrive",
                        );
                        return Some((Err(late), (body, true)));
                    }
                },
            };
            next.map(|chunk| (chunk, (body, false)))
        },
    );
    Ok((
        StatusCode::OK,
        [("content-type", "text/plain")],
        Body::from_stream(body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_choice_follows_kubectl_rules() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(container_of(&one, "p", None, false).unwrap(), "a");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let e = container_of(&two, "p", None, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        assert_eq!(container_of(&two, "p", Some("b"), false).unwrap(), "b");
        assert!(container_of(&two, "p", Some("zz"), false).is_err());
        let annotated = json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "b"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(container_of(&annotated, "p", None, false).unwrap(), "b");
    }

    #[test]
    fn options_are_validated_and_rewritten() {
        let q = Query::parse("follow&tailLines=3&timestamps=0&container=x").unwrap();
        assert_eq!(
            log_options(&q).unwrap(),
            [
                ("follow", "true".to_string()),
                ("tailLines", "3".to_string()),
                ("timestamps", "false".to_string())
            ]
        );
        assert_eq!(
            log_options(&Query::parse("tailLines=-1").unwrap())
                .unwrap_err()
                .code(),
            422
        );
        assert_eq!(
            log_options(&Query::parse("limitBytes=x%26y").unwrap())
                .unwrap_err()
                .code(),
            400
        );
        for bad in [
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "fe80::1",
            "::",
            "::ffff:0.0.0.0",
            "::ffff:169.254.169.254",
            "::ffff:255.255.255.255",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd00:ec2::254",
            "fd20:ce::254",
        ] {
            assert!(!reachable(&bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "127.0.0.1",
            "10.0.0.5",
            "::1",
            "2001:db8::1",
            "::ffff:10.0.0.5",
        ] {
            assert!(reachable(&good.parse().unwrap()), "{good}");
        }
    }
}
