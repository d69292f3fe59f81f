//! `rkube dashboard NAME`: the web view (`rkube_apiserver::ui`) for a cluster a browser
//! cannot authenticate to (a browser will not present the admin's client certificate): the
//! page served on a loopback port, and every other request passed to the cluster's
//! apiserver with the admin's credentials from its kubeconfig, as `kubectl proxy` does. A
//! watch the page opens over WebSocket is watched over HTTP upstream and passed on a line
//! per message. Only loopback host names are served, and a request whose `Origin` is another
//! site is refused: no other page may drive the admin's credentials (nor read a watch, which
//! WebSocket's lack of CORS would otherwise allow).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rkube_api::ApiError;
use rkube_apiserver::http::{error_response, websocket, MAX_BODY};

use super::home::Home;

/// `rkube dashboard`.
#[derive(clap::Args, Debug)]
pub struct Flags {
    pub name: String,
    /// The loopback port to serve on (default 8001 if free, else any; 0: any free port; the
    /// printed URL says which).
    #[arg(long)]
    pub port: Option<u16>,
}

/// How long the apiserver may take to answer a request's headers (streams then run on).
const HEADERS_TIMEOUT: Duration = Duration::from_secs(30);

/// `kubectl proxy`'s port, when free.
const DEFAULT_PORT: u16 = 8001;

struct Upstream {
    server: String,
    token: Option<String>,
    /// Requests: 30 s overall.
    http: reqwest::Client,
    /// Watches and followed logs: no overall timeout (they end upstream).
    stream: reqwest::Client,
}

pub async fn dashboard(f: Flags) -> anyhow::Result<()> {
    let home = Home::of(&f.name)?;
    home.load()?;
    let cfg = rkube_client::Config::from_kubeconfig(&home.kubeconfig())
        .with_context(|| format!("cluster {}'s kubeconfig", f.name))?;
    let upstream = Upstream {
        server: cfg.server.clone(),
        token: cfg.token.clone(),
        http: rkube_client::client::http_client(&cfg, Some(Duration::from_secs(30)))?,
        stream: rkube_client::client::http_client(&cfg, None)?,
    };
    let listener = match f.port {
        Some(port) => tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("port {port} is taken: choose another with --port"))?,
        None => match tokio::net::TcpListener::bind(("127.0.0.1", DEFAULT_PORT)).await {
            Ok(l) => l,
            Err(_) => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?,
        },
    };
    println!(
        "Dashboard of cluster {}: http://{}/ui/ (Ctrl-C to stop)",
        f.name,
        listener.local_addr()?
    );
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Arc::new(upstream));
    // Ctrl-C: requests in flight get a moment; streams (watches, followed logs) do not hold
    // the exit up.
    let serve = axum::serve(listener, app).with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    tokio::select! {
        r = serve => r?,
        _ = async {
            let _ = tokio::signal::ctrl_c().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        } => {}
    }
    Ok(())
}

/// The host named in `Host` when it is a loopback name (`127.0.0.1`, `localhost`, `[::1]`,
/// with any port): a DNS-rebound name of another site is not served.
fn loopback_host(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get("host")?.to_str().ok()?;
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "127.0.0.1" | "localhost" | "[::1]").then_some(host)
}

/// Refuses what another site's page could send: a foreign `Host` or `Origin`, or what the
/// browser says came from another site (`Sec-Fetch-Site`: an image or script tag, a link).
fn check_site(headers: &HeaderMap) -> Result<(), ApiError> {
    if matches!(
        headers.get("sec-fetch-site").map(|v| v.as_bytes()),
        Some(b"cross-site" | b"same-site")
    ) {
        return Err(ApiError::forbidden_path(
            "a request from another site is refused".into(),
        ));
    }
    loopback_host(headers).ok_or_else(|| {
        ApiError::forbidden_path("the dashboard serves loopback host names only".into())
    })?;
    websocket::check_origin(headers)
}

async fn handle(State(up): State<Arc<Upstream>>, req: Request) -> Response {
    if let Err(e) = check_site(req.headers()) {
        return error_response(&e);
    }
    let path = req.uri().path();
    if path == "/" {
        return axum::response::Redirect::temporary("/ui/").into_response();
    }
    if let Some(r) = rkube_apiserver::ui::route(path) {
        return r.unwrap_or_else(|e| error_response(&e));
    }
    let target = format!(
        "{}{}",
        up.server,
        req.uri().path_and_query().map_or("/", |pq| pq.as_str())
    );
    // Read as the apiserver reads it: a watch, or another long-running stream (logs).
    let info = match rkube_apiserver::request::RequestInfo::parse(req.method(), req.uri()) {
        Ok(info) => info,
        Err(e) => return error_response(&e),
    };
    if websocket::is_request(req.headers()) {
        if info.verb != "watch" {
            return error_response(&ApiError::bad_request(
                "the dashboard upgrades watches only (watch=1)",
            ));
        }
        let (mut parts, _) = req.into_parts();
        let agent = parts.headers.get("user-agent").cloned();
        return match websocket::upgrade(&mut parts).await {
            Ok(ws) => watch(&up, ws, &target, agent).await,
            Err(e) => error_response(&e),
        };
    }
    forward(&up, req, &target, info.long_running())
        .await
        .unwrap_or_else(|e| error_response(&e))
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        503,
        "ServiceUnavailable",
        format!("the cluster's apiserver: {e}"),
        None,
    )
}

/// A watch upgraded here: watched over HTTP upstream (as the browser's User-Agent), each line
/// a message. An upstream
/// refusal goes out as one ERROR event holding its Status.
async fn watch(
    up: &Upstream,
    ws: axum::extract::ws::WebSocketUpgrade,
    target: &str,
    agent: Option<axum::http::HeaderValue>,
) -> Response {
    let mut rb = up.stream.get(target);
    if let Some(a) = agent {
        // The apiserver's /debug/watches names the browser, not this proxy.
        rb = rb.header("user-agent", a);
    }
    if let Some(t) = &up.token {
        rb = rb.bearer_auth(t);
    }
    type Lines = futures_util::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>;
    let error_event = |status: serde_json::Value| -> Lines {
        let line = serde_json::json!({"type": "ERROR", "object": status}).to_string();
        futures_util::stream::once(async move { Ok(bytes::Bytes::from(line)) }).boxed()
    };
    let answer = tokio::time::timeout(HEADERS_TIMEOUT, rb.send()).await;
    let lines = match answer.map_err(|_| unavailable("no answer in time")) {
        Err(e) => error_event(serde_json::to_value(e.status()).unwrap_or_default()),
        Ok(answer) => match answer {
            Ok(r) if r.status().is_success() => {
                let body = r
                    .bytes_stream()
                    .map(|c| c.map_err(|e| rkube_client::Error::Transport(e.to_string())));
                rkube_client::watch::split_lines(body)
                    .map(|l| l.map_err(|e| std::io::Error::other(e.to_string())))
                    .boxed()
            }
            Ok(r) => {
                let code = r.status().as_u16();
                let status = r.json::<serde_json::Value>().await.unwrap_or_else(|e| {
                    serde_json::to_value(ApiError::new(code, "", format!("{e}"), None).status())
                        .unwrap_or_default()
                });
                error_event(status)
            }
            Err(e) => {
                error_event(serde_json::to_value(unavailable(e).status()).unwrap_or_default())
            }
        },
    };
    websocket::send_lines(ws, lines)
}

/// Any other request, passed on with its method, path, query, body and media types.
async fn forward(
    up: &Upstream,
    req: Request,
    target: &str,
    streams: bool,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::request_entity_too_large("the request body is too large"))?;
    let client = if streams { &up.stream } else { &up.http };
    let mut rb = client.request(parts.method, target).body(body);
    for h in ["content-type", "accept", "user-agent"] {
        if let Some(v) = parts.headers.get(h) {
            rb = rb.header(h, v);
        }
    }
    if let Some(t) = &up.token {
        rb = rb.bearer_auth(t);
    }
    let r = tokio::time::timeout(HEADERS_TIMEOUT, rb.send())
        .await
        .map_err(|_| unavailable("no answer in time"))?
        .map_err(unavailable)?;
    // What comes back (pod logs, say) is never active content on this origin.
    let mut out = Response::builder()
        .status(r.status())
        .header("x-content-type-options", "nosniff")
        .header("content-security-policy", "sandbox");
    for (name, value) in r.headers() {
        if matches!(
            name.as_str(),
            "content-type" | "warning" | "retry-after" | "location"
        ) {
            out = out.header(name, value);
        }
    }
    Ok(out
        .body(Body::from_stream(r.bytes_stream()))
        .unwrap_or_else(|e| error_response(&ApiError::internal(e.to_string()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn only_loopback_hosts_and_their_own_origin_are_served() {
        assert!(check_site(&headers(&[("host", "127.0.0.1:8001")])).is_ok());
        assert!(check_site(&headers(&[
            ("host", "localhost:8001"),
            ("origin", "http://localhost:8001")
        ]))
        .is_ok());
        assert!(check_site(&headers(&[("host", "[::1]:8001")])).is_ok());
        // DNS rebinding: another site's name resolving to 127.0.0.1.
        assert!(check_site(&headers(&[("host", "evil.example:8001")])).is_err());
        assert!(check_site(&headers(&[])).is_err());
        assert!(check_site(&headers(&[
            ("host", "127.0.0.1:8001"),
            ("sec-fetch-site", "cross-site")
        ]))
        .is_err());
        assert!(check_site(&headers(&[
            ("host", "127.0.0.1:8001"),
            ("sec-fetch-site", "same-origin")
        ]))
        .is_ok());
        // Another site's page opening a WebSocket or posting to us.
        let e = check_site(&headers(&[
            ("host", "127.0.0.1:8001"),
            ("origin", "http://evil.example"),
        ]))
        .unwrap_err();
        assert_eq!(e.code(), 403);
        assert!(check_site(&headers(&[
            ("host", "127.0.0.1:8001"),
            ("origin", "http://127.0.0.1:9999")
        ]))
        .is_err());
    }
}
