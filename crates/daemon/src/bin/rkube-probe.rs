//! `rkube-probe URL [CA_FILE [CERT_FILE KEY_FILE]]`: exits 0 when `GET URL` answers 200
//! within 2 s, 1 otherwise. `http://host:port/path`, or `https://…` verified against the PEM CA
//! in CA_FILE, presenting the client certificate in CERT_FILE/KEY_FILE when given (a store
//! with `--client-cert-auth`). The health check of rkube's container images, which have no
//! curl.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

fn probe(url: &str, ca: Option<&str>, identity: Option<(&str, &str)>) -> Result<(), String> {
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(r), _) => (false, r),
        (_, Some(r)) => (true, r),
        _ => return Err("only http:// and https:// URLs".into()),
    };
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or("no address")?;
    let t = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&addr, t).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(t)).map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n");
    let mut head = [0u8; 32];
    let n = if tls {
        let ca = ca.ok_or("https needs the CA file as the second argument")?;
        let host = hostport
            .rsplit_once(':')
            .map_or(hostport, |(h, _)| h)
            .trim_matches(['[', ']']);
        let mut stream = tls_stream(host, s, ca, identity)?;
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        stream.read(&mut head).map_err(|e| e.to_string())?
    } else {
        s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        s.read(&mut head).map_err(|e| e.to_string())?
    };
    let line = String::from_utf8_lossy(&head[..n]);
    if line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(format!("answered {:?}", line.lines().next().unwrap_or("")))
    }
}

/// A TLS client stream over `tcp` trusting only the CA in `ca_file`.
fn tls_stream(
    host: &str,
    tcp: TcpStream,
    ca_file: &str,
    identity: Option<(&str, &str)>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let pem = std::fs::read(ca_file).map_err(|e| format!("{ca_file}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| format!("{ca_file}: {e}"))?;
        roots.add(cert).map_err(|e| format!("{ca_file}: {e}"))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = rkube_daemon::tls::read_certs(std::path::Path::new(cert))
                .map_err(|e| e.to_string())?;
            let key = rkube_daemon::tls::read_key(std::path::Path::new(key))
                .map_err(|e| e.to_string())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
    };
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| {
        eprintln!("usage: rkube-probe http(s)://host:port/path [CA_FILE [CERT_FILE KEY_FILE]]");
        std::process::exit(2)
    });
    let ca = args.next();
    let (cert, key) = (args.next(), args.next());
    let identity = cert.as_deref().zip(key.as_deref());
    if let Err(e) = probe(&url, ca.as_deref(), identity) {
        eprintln!("{url}: {e}");
        std::process::exit(1);
    }
}
