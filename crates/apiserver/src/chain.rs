//! The request chain in front of every route, in upstream's order: audit init (`Audit-Id`),
//! authentication (a verified client certificate, else a bearer token or anonymous; 401), API Priority and Fairness or the max-in-flight limits (429), audit of
//! the request, authorization
//! (403), then the handler — whose response is audited (`ResponseStarted` for long-running
//! requests, `ResponseComplete` when the body ends).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use rkube_api::authz::{self, UserInfo};
use rkube_api::ApiError;

use crate::audit::{Auditor, Level, Record, Stage};
use crate::auth::{attributes, Auth};
use crate::http::{error_response, read_body};
use crate::inflight::{long_running, Limits};

pub struct Chain {
    pub auth: Arc<Auth>,
    /// The legacy max-in-flight limits (when API Priority and Fairness is off).
    pub limits: Limits,
    /// API Priority and Fairness (`--enable-priority-and-fairness`).
    pub apf: Option<crate::flowcontrol::Apf>,
    pub audit: Option<Auditor>,
}

/// A request's seat: under the legacy limits or APF (with its classification headers).
#[derive(Default)]
struct Admitted {
    _legacy: Option<tokio::sync::OwnedSemaphorePermit>,
    _apf: Option<crate::flowcontrol::Seat>,
    class: Option<crate::flowcontrol::Classification>,
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

/// Runs when dropped: the end of a streamed response body.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

pub async fn handle(State(chain): State<Arc<Chain>>, mut req: Request, next: Next) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    let attrs = attributes(req.method(), req.uri().path(), &query);
    let peer = req
        .extensions()
        .get::<ConnectInfo<crate::tls::Peer>>()
        .map(|c| c.0.clone());
    // A verified client certificate wins over tokens and anonymous, as upstream's union.
    let authn = match peer.as_ref().and_then(|p| p.cert_user.clone()) {
        Some(user) => Ok(user),
        None => chain.auth.authenticate(req.headers()),
    };
    let Some(auditor) = &chain.audit else {
        // No auditing: the short path.
        let user = match authn {
            Ok(u) => u,
            Err(e) => return error_response(&e),
        };
        return match admit(&chain, &user, &attrs, &query).await {
            Ok(seat) => {
                req.extensions_mut().insert(user);
                let mut resp = next.run(req).await;
                seat.label(&mut resp);
                resp
            }
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
    let source = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .or_else(|| peer.as_ref().map(|p| p.addr.ip().to_string()))
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
        Err(e) => return refuse(&record, &e),
    };
    if level >= Level::Request && !matches!(req.method().as_str(), "GET" | "HEAD") {
        let (parts, body) = req.into_parts();
        let bytes = match read_body(body).await {
            Ok(b) => b,
            Err(e) => return refuse(&record, &e),
        };
        record.attach("requestObject", &bytes, auditor.omit_managed_fields());
        req = Request::from_parts(parts, Body::from(bytes));
    }
    let seat = match admit(&chain, &user, &attrs, &query).await {
        Ok(s) => s,
        Err(e) => return refuse(&record, &e),
    };
    req.extensions_mut().insert(user);
    let mut resp = next.run(req).await;
    seat.label(&mut resp);
    drop(seat);
    let code = resp.status().as_u16();
    if long_running(&attrs, &query) && code == 200 {
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

/// A seat (APF, else the legacy in-flight limits), then authorization.
async fn admit(
    chain: &Chain,
    user: &UserInfo,
    attrs: &authz::Attributes,
    query: &str,
) -> Result<Admitted, ApiError> {
    let seat = match &chain.apf {
        Some(apf) if !long_running(attrs, query) => {
            let (seat, class) = apf.admit(user, attrs).await?;
            Admitted {
                _legacy: None,
                _apf: Some(seat),
                class: Some(class),
            }
        }
        Some(_) => Admitted::default(),
        None => Admitted {
            _legacy: chain.limits.admit(attrs, query)?,
            ..Default::default()
        },
    };
    if let Err(why) = chain.auth.authorize(user, attrs) {
        tracing::debug!(user = %user.name, verb = %attrs.verb, resource = %attrs.resource, path = %attrs.path, "forbidden");
        return Err(authz::forbidden(user, attrs, &why));
    }
    Ok(seat)
}
