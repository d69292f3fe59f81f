//! TLS for rkube's servers (rustls with ring): a server configuration from PEM files, with
//! optional client-certificate verification against a CA — optional (the apiserver: requests
//! without a certificate go on to tokens) or required (the store with `--client-cert-auth`,
//! the kubelet-agent). Errors name the file at fault.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where a server's certificate, key and client CA are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Verify client certificates against this CA.
    pub client_ca: Option<PathBuf>,
    /// Refuse clients without a certificate (with `client_ca`).
    pub require_client_cert: bool,
}

pub fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{}: no PEM certificate", path.display());
    Ok(certs)
}

pub fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        .ok_or_else(|| anyhow::anyhow!("{}: no PEM private key", path.display()))
}

/// The subject of a (verified) certificate: its common name and organizations.
pub fn subject(cert: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    // No CN (or one that is not a string) is an empty name: callers decide what it may do.
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some((cn, orgs))
}

/// The server configuration (HTTP/1.1 only).
pub fn server_config(files: &TlsFiles) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in read_certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| anyhow::anyhow!("client CA {}: {e}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = if files.require_client_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| anyhow::anyhow!("client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(read_certs(&files.cert)?, read_key(&files.key)?)
        .map_err(|e| anyhow::anyhow!("{} / {}: {e}", files.cert.display(), files.key.display()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
