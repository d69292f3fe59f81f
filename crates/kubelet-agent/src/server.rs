//! The agent's HTTP server (upstream's kubelet port): `/healthz` and `/metrics` for anyone,
//! the simulated container logs, usage, exec, attach and port-forward only for the apiserver. With `--tls-cert-file` it serves
//! HTTPS, and with `--client-ca-file` the logs need a client certificate from that CA naming
//! the apiserver (`kube-apiserver-kubelet-client`, or a `system:masters` identity): whoever
//! can reach a node's port cannot read its pods' logs. Behind `rkube_daemon::serve`'s limits.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rustls::pki_types::CertificateDer;

/// `--tls-cert-file`, `--tls-private-key-file`, `--client-ca-file`.
pub use rkube_daemon::tls::TlsFiles as Tls;

/// Who connected, as far as the logs care.
#[derive(Clone, Debug)]
pub struct Caller {
    pub addr: SocketAddr,
    /// May read logs: the apiserver's certificate (or no client authentication configured).
    pub may_read_logs: bool,
}

/// Whether a verified certificate names the apiserver (or a cluster admin).
fn is_apiserver(cert: &CertificateDer<'_>) -> bool {
    rkube_daemon::tls::subject(cert).is_some_and(|(cn, orgs)| {
        cn == "kube-apiserver-kubelet-client" || orgs.iter().any(|o| o == "system:masters")
    })
}

/// How each connection is identified: with client authentication on, only a verified
/// certificate naming the apiserver may read logs.
pub fn identify(client_auth: bool) -> rkube_daemon::serve::Identify<Caller> {
    Arc::new(move |addr, certs| Caller {
        addr,
        may_read_logs: !client_auth || certs.and_then(|c| c.first()).is_some_and(is_apiserver),
    })
}

/// Refuses the logs to callers that may not read them (401, as a kubelet without a valid
/// client certificate answers).
pub async fn guard_logs(req: Request, next: Next) -> Response {
    let allowed = req
        .extensions()
        .get::<ConnectInfo<Caller>>()
        .is_some_and(|c| c.0.may_read_logs);
    let path = req.uri().path();
    let guarded = [
        "/containerLogs/",
        "/stats/",
        "/exec/",
        "/attach/",
        "/portForward/",
    ];
    if !allowed && guarded.iter().any(|g| path.starts_with(g)) {
        return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    }
    next.run(req).await
}

/// The rustls configuration: client certificates verified when offered, never required (so
/// `/healthz` stays open).
pub fn server_config(tls: &Tls) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    rkube_daemon::tls::server_config(&Tls {
        require_client_cert: false,
        ..tls.clone()
    })
}
