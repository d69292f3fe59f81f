//! `pods/exec`, `pods/attach` and `pods/portforward`: validated here (the pod exists and has
//! not finished, the container is one of its own, a command is given), then the upgrade is
//! proxied to the kubelet serving the pod, as upstream's upgrade-aware proxy does: the
//! client's upgrade request (WebSocket or SPDY/3.1, with its protocol offers) is repeated to
//! the kubelet with the same hardened client as logs (`logs::KubeletClient`), the kubelet's
//! 101 passed back, and the two upgraded connections joined byte for byte. Whatever the
//! protocol, the kubelet speaks it; its error bodies are never passed on.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use rkube_api::{ApiError, GroupResource};
use serde_json::Value;

use super::logs::{container_of, node_of, KubeletClient};
use super::Scope;

/// Headers of the upgrade handshake, passed on in each direction.
const REQUEST_HEADERS: [&str; 5] = [
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "x-stream-protocol-version",
];
const RESPONSE_HEADERS: [&str; 4] = [
    "upgrade",
    "sec-websocket-accept",
    "sec-websocket-protocol",
    "x-stream-protocol-version",
];

fn is_upgrade(h: &HeaderMap) -> bool {
    h.get("upgrade").is_some()
        && h.get_all("connection").iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// Where on the kubelet a request goes: path segments and query pairs.
struct Target {
    segments: Vec<String>,
    query: Vec<(String, String)>,
}

/// The kubelet path and query for the request.
fn kubelet_target(s: &Scope<'_>, pod: &Value) -> Result<Target, ApiError> {
    let (ns, name) = (s.ns.to_string(), s.name().to_string());
    let sub = s.subresource.unwrap_or("");
    let mut query: Vec<(String, String)> = Vec::new();
    if sub == "portforward" {
        for p in s.query.get_all("ports") {
            query.push(("ports".into(), p.into()));
        }
        return Ok(Target {
            segments: vec!["portForward".into(), ns, name],
            query,
        });
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        let what = if sub == "exec" {
            "exec into"
        } else {
            "attach to"
        };
        return Err(ApiError::bad_request(format!(
            "cannot {what} a container in a completed pod; current phase is {phase}"
        )));
    }
    let container = container_of(pod, &name, s.query.get("container"), true)?;
    if sub == "exec" {
        let command: Vec<&str> = s.query.get_all("command").collect();
        if command.is_empty() {
            return Err(ApiError::bad_request(
                "you must specify at least one command for the container",
            ));
        }
        query.extend(
            command
                .iter()
                .map(|c| ("command".to_string(), c.to_string())),
        );
    }
    if !["stdin", "stdout", "stderr"]
        .iter()
        .any(|f| s.query.flag(f))
    {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    for flag in ["stdin", "stdout", "stderr", "tty"] {
        if s.query.flag(flag) {
            query.push((flag.into(), "true".into()));
        }
    }
    Ok(Target {
        segments: vec![sub.to_string(), ns, name, container],
        query,
    })
}

pub async fn proxy(s: &Scope<'_>, mut req: Request) -> Result<Response, ApiError> {
    let name = s.name();
    let pod: Value =
        serde_json::from_slice(&s.reg.get(s.ns, name, None).await?).unwrap_or(Value::Null);
    let Target { segments, query } = kubelet_target(s, &pod)?;
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let (node_name, node) = node_of(s, &pod).await?;
    let kubelet = &s.state.kubelet;
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let mut url = kubelet.url(&node, &segs)?;
    if !query.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (k, v) in &query {
            pairs.append_pair(k, v);
        }
    }
    let mut out = kubelet
        .http
        .request(req.method().clone(), url)
        .header("connection", "Upgrade");
    for h in REQUEST_HEADERS {
        for v in req.headers().get_all(h) {
            out = out.header(h, v.clone());
        }
    }
    let resp = KubeletClient::send(out, &node_name).await?;
    let code = resp.status().as_u16();
    if code != 101 {
        let container = segments.get(3).map_or("", String::as_str);
        return Err(match code {
            404 if !container.is_empty() => {
                ApiError::not_found(&GroupResource::new("", "pods"), name)
                    .with_message(format!("container not found (\"{container}\")"))
            }
            404 => ApiError::not_found(&GroupResource::new("", "pods"), name),
            429 => ApiError::too_many_requests(
                format!("the kubelet on node {node_name} has too many streaming sessions"),
                1,
            ),
            _ => ApiError::bad_request(format!(
                "the kubelet on node {node_name} refused the upgrade (HTTP {code})"
            )),
        });
    }
    let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    answer = answer.header("connection", "Upgrade");
    for h in RESPONSE_HEADERS {
        for v in resp.headers().get_all(h) {
            answer = answer.header(h, v.clone());
        }
    }
    let Ok(permit) = SESSIONS.try_acquire() else {
        return Err(ApiError::too_many_requests(
            "too many streaming sessions on this apiserver",
            1,
        ));
    };
    let client_side = hyper::upgrade::on(&mut req);
    let (ns, pod_name) = (s.ns.to_string(), name.to_string());
    tokio::spawn(async move {
        let _permit = permit;
        let (client, kubelet) = match tokio::join!(client_side, resp.upgrade()) {
            (Ok(c), Ok(k)) => (c, k),
            _ => {
                tracing::debug!(%ns, pod = %pod_name, "a streaming upgrade did not complete");
                return;
            }
        };
        join(hyper_util::rt::TokioIo::new(client), kubelet).await;
        tracing::debug!(%ns, pod = %pod_name, "streaming session ended");
    });
    answer
        .body(Body::empty())
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Upgraded connections at once: they leave the server's connection accounting once upgraded.
static SESSIONS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4096);
/// Once one side has closed, how long the other has to finish.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Copies both ways until one side closes, then gives the other `CLOSE_GRACE` to finish (the
/// kubelet ends idle sessions; a client that never closes does not keep the sockets).
async fn join<C, K>(client: C, kubelet: K)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    K: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    use tokio::io::AsyncWriteExt;
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut kr, mut kw) = tokio::io::split(kubelet);
    let up = async {
        let _ = tokio::io::copy(&mut cr, &mut kw).await;
        let _ = kw.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut kr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        _ = &mut up => { let _ = tokio::time::timeout(CLOSE_GRACE, &mut down).await; }
        _ = &mut down => { let _ = tokio::time::timeout(CLOSE_GRACE, &mut up).await; }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_upgrade_requests_are_proxied() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert("upgrade", "websocket".parse().unwrap());
        h.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        assert!(is_upgrade(&h));
    }
}
