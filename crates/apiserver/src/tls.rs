//! HTTPS (`--tls-cert-file`, `--tls-private-key-file`) with rustls, and with
//! `--client-ca-file` x509 client-certificate authentication: a certificate signed by that CA
//! makes its subject's CN the user and its O entries the groups; requests without one go on to
//! bearer tokens or anonymous, and a certificate from another CA fails the handshake. Serving
//! itself (handshakes, connection limits, timeouts) is `rkube_daemon::serve`'s.

use std::net::SocketAddr;
use std::sync::Arc;

use rkube_api::authz::UserInfo;
use rustls::pki_types::CertificateDer;

pub use rkube_daemon::tls::TlsFiles;

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The user of a verified client certificate.
    pub cert_user: Option<UserInfo>,
}

/// The server configuration: client certificates verified against `client_ca` when given,
/// but not required (requests without one go on to tokens or anonymous).
pub fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    rkube_daemon::tls::server_config(&TlsFiles {
        require_client_cert: false,
        ..files.clone()
    })
}

/// Who a connection is: its address, and the user of its verified client certificate.
pub fn identify() -> rkube_daemon::serve::Identify<Peer> {
    Arc::new(|addr, certs| Peer {
        addr,
        cert_user: certs.and_then(|c| c.first()).and_then(user_of),
    })
}

/// The user a client certificate names: CN the user, each O a group.
pub fn user_of(cert: &CertificateDer<'_>) -> Option<UserInfo> {
    let (cn, groups) = rkube_daemon::tls::subject(cert)?;
    if cn.is_empty() {
        // Upstream's x509 authenticator: a certificate without a CN names nobody.
        return None;
    }
    Some(UserInfo::authenticated(&cn, "", groups))
}
