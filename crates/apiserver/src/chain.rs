//! The request chain in front of every route, in upstream's order: audit init (`Audit-Id`),
//! authentication (a verified client certificate, else a bearer token or anonymous; 401), API Priority and Fairness or the max-in-flight limits (429), audit of
//! the request, authorization
//! (403), then the handler — whose response is audited (`ResponseStarted` for long-running
//! requests, `ResponseComplete` when the body ends). A handler that panics answers 500 and is
//! audited at the `Panic` stage, as upstream's panic recovery.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use rkube_api::authz::{self, UserInfo};
use rkube_api::ApiError;

use crate::audit::{Auditor, Level, Record, Stage};
use crate::auth::Auth;
use crate::http::{error_response, read_body};
use crate::inflight::{Limits, WatchGuard, Watches};
use crate::request::RequestInfo;

pub struct Chain {
    pub auth: Arc<Auth>,
    /// The legacy max-in-flight limits (when API Priority and Fairness is off).
    pub limits: Limits,
    /// API Priority and Fairness (`--enable-priority-and-fairness`).
    pub apf: Option<Arc<crate::flowcontrol::Apf>>,
    pub audit: Option<Auditor>,
    /// Open watches per user.
    pub watches: Watches,
    /// What is served, custom resources included: paths are resolved against it.
    pub registries: Arc<crate::registry::Registries>,
}

/// A request's seat: under the legacy limits or APF (with its classification headers).
#[derive(Default)]
struct Admitted {
    _legacy: Option<tokio::sync::OwnedSemaphorePermit>,
    _apf: Option<crate::flowcontrol::Seat>,
    class: Option<crate::flowcontrol::Classification>,
    /// A long-running request's slot among its user's (watches, log streams), held for as
    /// long as the stream.
    watch: Option<WatchGuard>,
}

impl Admitted {
    fn label(&self, resp: &mut Response) {
        if let Some(c) = &self.class {
            let h = resp.headers_mut();
            if let Ok(v) = c.schema_uid.parse() {
                h.insert("x-kubernetes-pf-flowschema-uid", v);
            }
            if let Ok(v) = c.level_uid.parse() {
                h.insert("x-kubernetes-pf-prioritylevel-uid", v);
            }
        }
    }
}

/// How long a response's body may keep its seat: upstream's request timeout. A seat stands for
/// the whole work of a request, including sending a large LIST, as upstream: the body carries
/// a signal whose drop (the body's end) gives the seat back, and a task gives it back after
/// this at the latest, so a client that stops reading cannot hold it for longer.
const SEAT_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Admitted {
    /// Labels the response and ties the seat (or the watch slot) to its body.
    fn attach(mut self, resp: Response) -> Response {
        let mut resp = resp;
        self.label(&mut resp);
        if let Some(slot) = self.watch.take() {
            // A watch holds no seat; its slot lasts as long as its stream.
            return resp.map(|body| Body::new(Guarded { body, _guard: slot }));
        }
        if self._legacy.is_none() && self._apf.is_none() {
            return resp;
        }
        let (done, body_ended) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _seat = self;
            let _ = tokio::time::timeout(SEAT_LIMIT, body_ended).await;
        });
        resp.map(|body| Body::new(Guarded { body, _guard: done }))
    }
}

/// A response body that keeps a guard (a seat's release signal, a long-running slot) until
/// it is dropped.
struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin + Send + 'static> http_body::Body for Guarded<G> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Runs when dropped: the end of a streamed response body.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// What a panicking handler answers.
const PANIC_MESSAGE: &str = "This request caused apiserver to panic. Look in the logs for details.";

/// Runs the handler, catching a panic (the payload's text in Err).
async fn run_guarded(next: Next, req: Request) -> Result<Response, String> {
    use futures_util::FutureExt;
    let path = req.uri().path().to_string();
    std::panic::AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .await
        .map_err(|payload| {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(%path, panic = %why, "handler panicked");
            why
        })
}

pub async fn handle(State(chain): State<Arc<Chain>>, req: Request, next: Next) -> Response {
    // Parsed once: every stage below reads this, and the handler gets it as an extension.
    let custom = |g: &str, v: &str, p: &str| chain.registries.custom_def(g, v, p);
    let info = match RequestInfo::parse_with(req.method(), req.uri(), &custom) {
        Ok(i) => Arc::new(i),
        Err(e) => return error_response(&e),
    };
    let attrs = info.attributes();
    let peer = req
        .extensions()
        .get::<ConnectInfo<crate::tls::Peer>>()
        .map(|c| c.0.clone());
    // A verified client certificate wins over tokens and anonymous, as upstream's union.
    let authn = match peer.as_ref().and_then(|p| p.cert_user.clone()) {
        Some(user) => Ok(user),
        None => chain.auth.authenticate(req.headers()).await,
    }
    .and_then(|user| impersonate(&chain, user, req.headers()));
    let Some(auditor) = &chain.audit else {
        // No auditing: the short path.
        let user = match authn {
            Ok(u) => u,
            Err(e) => return refused(req, error_response(&e)).await,
        };
        if let Err(e) = authorize(&chain, &user, &attrs) {
            return refused(req, error_response(&e)).await;
        }
        let req = match read_whole_body(req).await {
            Ok(r) => r,
            Err(e) => return error_response(&e),
        };
        return match seat(&chain, &user, &info, &attrs).await {
            Ok(seat) => seat.attach(run(next, req, user, info).await),
            Err(e) => error_response(&e),
        };
    };
    let audit_id = req
        .headers()
        .get("audit-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(String::from)
        .unwrap_or_else(|| rkube_api::meta::new_uid(&mut || rand::random::<u64>()));
    let user = authn.as_ref().cloned().unwrap_or_default();
    let (level, omit) = auditor.level(&user, &attrs);
    let source = peer
        .as_ref()
        .map(|p| p.addr.ip().to_string())
        .unwrap_or_default();
    let agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let uri = req.uri().to_string();
    let mut record = Record::new(level, omit, &audit_id, &uri, &user, &attrs, &source, &agent);
    if record.wants(Stage::RequestReceived) {
        auditor.emit(record.at(Stage::RequestReceived, None));
    }
    let with_id = |mut resp: Response| {
        if let Ok(v) = audit_id.parse() {
            resp.headers_mut().insert("audit-id", v);
        }
        resp
    };
    let refuse = |record: &Record, e: &ApiError| {
        if record.wants(Stage::ResponseComplete) {
            auditor.emit(record.at(Stage::ResponseComplete, Some(e.code())));
        }
        with_id(error_response(e))
    };
    let user = match authn {
        Ok(u) => u,
        Err(e) => return refused(req, refuse(&record, &e)).await,
    };
    if let Err(e) = authorize(&chain, &user, &attrs) {
        return refused(req, refuse(&record, &e)).await;
    }
    let req = match read_whole_body(req).await {
        Ok(r) => r,
        Err(e) => return refuse(&record, &e),
    };
    if level >= Level::Request {
        if let Some(bytes) = req.extensions().get::<BodyBytes>() {
            record.attach("requestObject", &bytes.0, auditor.omit_managed_fields());
        }
    }
    let seat = match seat(&chain, &user, &info, &attrs).await {
        Ok(s) => s,
        Err(e) => return refuse(&record, &e),
    };
    let long_running = info.long_running();
    let resp = match run_guarded(next, with_identity(req, user, info)).await {
        Ok(resp) => seat.attach(resp),
        Err(_) => {
            drop(seat);
            if record.wants(Stage::Panic) {
                auditor.emit(record.at(Stage::Panic, Some(500)));
            }
            return with_id(error_response(&ApiError::internal(PANIC_MESSAGE)));
        }
    };
    let code = resp.status().as_u16();
    if let Some(a) = resp.extensions().get::<crate::audit::Annotations>() {
        record.annotate(&a.0);
    }
    if long_running && code == 200 {
        if record.wants(Stage::ResponseStarted) {
            auditor.emit(record.at(Stage::ResponseStarted, Some(code)));
        }
        if !record.wants(Stage::ResponseComplete) {
            return with_id(resp);
        }
        // Complete when the stream ends (or the client goes away).
        let chain = chain.clone();
        let done = OnDrop(Some(move || {
            if let Some(a) = &chain.audit {
                a.emit(record.at(Stage::ResponseComplete, Some(code)));
            }
        }));
        let (parts, body) = resp.into_parts();
        let stream = body.into_data_stream().map(move |chunk| {
            let _keep = &done;
            chunk
        });
        return with_id(Response::from_parts(parts, Body::from_stream(stream)));
    }
    if !record.wants(Stage::ResponseComplete) {
        return with_id(resp);
    }
    let resp = if level == Level::RequestResponse {
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        record.attach("responseObject", &bytes, auditor.omit_managed_fields());
        Response::from_parts(parts, Body::from(bytes))
    } else {
        resp
    };
    auditor.emit(record.at(Stage::ResponseComplete, Some(code)));
    with_id(resp)
}

/// The request's body as read by the chain (also what audit records).
#[derive(Clone)]
pub struct BodyBytes(pub bytes::Bytes);

/// A refusal (401, 403) of a request whose body was not read: what the client is still
/// sending is discarded first (bounded), so that it reads the refusal rather than a reset.
/// A client waiting for `100 Continue` is not invited to send: it gets the refusal at once.
async fn refused(req: Request, resp: Response) -> Response {
    let waits = req
        .headers()
        .get(axum::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !waits {
        rkube_daemon::serve::discard(req.into_body(), crate::http::body::MAX_BODY).await;
    }
    resp
}

/// Reads the whole body of a request that has one, under the body limits (size, and the
/// time it may take), before the request takes a seat: a slow upload holds a connection,
/// never a seat of its priority level.
async fn read_whole_body(req: Request) -> Result<Request, ApiError> {
    if matches!(req.method().as_str(), "GET" | "HEAD" | "OPTIONS") {
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let bytes = read_body(body).await?;
    parts.extensions.insert(BodyBytes(bytes.clone()));
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The request as the handler gets it: with its user and its request info.
fn with_identity(mut req: Request, user: UserInfo, info: Arc<RequestInfo>) -> Request {
    req.extensions_mut().insert(user);
    req.extensions_mut().insert(info);
    req
}

/// Runs the handler without auditing: a panic is a 500.
async fn run(next: Next, req: Request, user: UserInfo, info: Arc<RequestInfo>) -> Response {
    match run_guarded(next, with_identity(req, user, info)).await {
        Ok(resp) => resp,
        Err(_) => error_response(&ApiError::internal(PANIC_MESSAGE)),
    }
}

/// The `--authorization-mode` chain's verdict (403 with upstream's message). It needs nothing
/// of the body, so a request nobody may make is refused before its body is read.
/// Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`; extras are
/// accepted and not kept): the requester must be allowed to `impersonate` each (users,
/// groups, uids, or the ServiceAccount a `system:serviceaccount:<ns>:<name>` user names); the
/// request then runs as the user named, with the groups named (a ServiceAccount's groups, and
/// `system:authenticated`, added as upstream).
fn impersonate(
    chain: &Chain,
    requester: UserInfo,
    headers: &axum::http::HeaderMap,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(String::from)
            .collect()
    };
    let user = values("impersonate-user").into_iter().next();
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    if user.is_none() && groups.is_empty() && uid.is_none() {
        return Ok(requester);
    }
    let Some(name) = user else {
        return Err(ApiError::bad_request(
            "requested impersonation of groups or a uid without impersonating a user",
        ));
    };
    let check = |group: &str, resource: &str, namespace: &str, n: &str| {
        let attrs = authz::Attributes {
            verb: "impersonate".into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: n.into(),
            path: String::new(),
        };
        authorize(chain, &requester, &attrs)
    };
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match sa {
        Some((ns, sa_name)) => check("", "serviceaccounts", ns, sa_name)?,
        None => check("", "users", "", &name)?,
    }
    for g in &groups {
        check("", "groups", "", g)?;
    }
    if let Some(u) = &uid {
        check("authentication.k8s.io", "uids", "", u)?;
    }
    let mut all = groups;
    if let Some((ns, _)) = sa {
        for g in [
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ] {
            if !all.contains(&g) {
                all.push(g);
            }
        }
    }
    let extra = if name == authz::ANONYMOUS {
        authz::UNAUTHENTICATED
    } else {
        authz::AUTHENTICATED
    };
    if !all.iter().any(|g| g == extra) {
        all.push(extra.into());
    }
    Ok(UserInfo {
        name,
        uid: uid.unwrap_or_default(),
        groups: all,
    })
}

fn authorize(chain: &Chain, user: &UserInfo, attrs: &authz::Attributes) -> Result<(), ApiError> {
    chain.auth.authorize(user, attrs).map_err(|why| {
        tracing::debug!(user = %user.name, verb = %attrs.verb, resource = %attrs.resource, path = %attrs.path, "forbidden");
        authz::forbidden(user, attrs, &why)
    })
}

/// A seat (APF, else the legacy in-flight limits; none for health checks), or for a
/// long-running request (a watch, a log stream) one of its user's long-running slots instead.
async fn seat(
    chain: &Chain,
    user: &UserInfo,
    info: &RequestInfo,
    attrs: &authz::Attributes,
) -> Result<Admitted, ApiError> {
    let mut seat = Admitted::default();
    if info.long_running() {
        seat.watch = Some(chain.watches.admit(&user.name)?);
    } else if !info.is_health() {
        match &chain.apf {
            Some(apf) => {
                let (s, class) = apf.admit(user, attrs).await?;
                seat._apf = Some(s);
                seat.class = Some(class);
            }
            None => seat._legacy = chain.limits.admit(&attrs.verb)?,
        }
    }
    Ok(seat)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves `path` (and `/api/v1/fine`, answering "ok") behind a chain with `limits` and
    /// `audit`; its base URL.
    async fn serve(
        limits: Limits,
        audit: Option<Auditor>,
        path: &str,
        route: axum::routing::MethodRouter,
    ) -> String {
        let chain = Arc::new(Chain {
            auth: Arc::new(Auth::new(&Default::default(), &Default::default(), None).unwrap()),
            limits,
            apf: None,
            audit,
            watches: Watches::new(0),
            registries: Default::default(),
        });
        let app = axum::Router::new()
            .route(path, route)
            .route("/api/v1/fine", axum::routing::get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(chain, handle));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_seat_is_held_until_the_response_body_is_written() {
        // One read seat; /slow's body ends only when told to.
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(Some(rx)));
        let slow = axum::routing::get(move || {
            let rx = rx.lock().unwrap().take().unwrap();
            async move {
                let first = futures_util::stream::once(async {
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"first "))
                });
                let rest = futures_util::stream::once(async move {
                    let _ = rx.await;
                    Ok(bytes::Bytes::from_static(b"last"))
                });
                Body::from_stream(first.chain(rest))
            }
        });
        let base = serve(Limits::new(1, 1), None, "/api/v1/slow", slow).await;
        let http = reqwest::Client::new();
        let mut slow = http
            .get(format!("{base}/api/v1/slow"))
            .send()
            .await
            .unwrap();
        assert_eq!(slow.status(), 200);
        assert_eq!(&slow.chunk().await.unwrap().unwrap()[..], b"first ");
        // The handler has returned, but its body is still being sent: the seat is taken.
        let busy = http
            .get(format!("{base}/api/v1/fine"))
            .send()
            .await
            .unwrap();
        assert_eq!(busy.status(), 429);
        tx.send(()).unwrap();
        assert_eq!(&slow.chunk().await.unwrap().unwrap()[..], b"last");
        assert!(slow.chunk().await.unwrap().is_none());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let r = http
                .get(format!("{base}/api/v1/fine"))
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the seat never came back"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_is_audited_at_the_panic_stage() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        let audit = Auditor::new(&crate::audit::AuditConfig {
            policy_file: Some(policy),
            log_path: Some(dir.path().join("audit.log")),
            max_size_mb: 0,
            max_backup: 0,
        })
        .unwrap();
        let boom = axum::routing::get(|| async {
            if true {
                panic!("kaboom");
            }
            "unreachable"
        });
        let base = serve(Limits::new(0, 0), audit, "/api/v1/boom", boom).await;
        let http = reqwest::Client::new();
        let resp = http
            .get(format!("{base}/api/v1/boom"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 500);
        let id = resp.headers()["audit-id"].to_str().unwrap().to_string();
        let status: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(status["reason"], "InternalError");
        assert_eq!(
            status["message"],
            format!("Internal error occurred: {PANIC_MESSAGE}")
        );
        // The server goes on serving.
        let fine = http
            .get(format!("{base}/api/v1/fine"))
            .send()
            .await
            .unwrap();
        assert_eq!(fine.status(), 200);
        let log = dir.path().join("audit.log");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let stages = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let stages: Vec<String> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|e| e["auditID"] == id.as_str())
                .map(|e| format!("{} {}", e["stage"], e["responseStatus"]["code"]))
                .collect();
            if stages.len() >= 2 || std::time::Instant::now() > deadline {
                break stages;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling interval
        };
        assert_eq!(stages, ["\"RequestReceived\" null", "\"Panic\" 500"]);
    }
}
