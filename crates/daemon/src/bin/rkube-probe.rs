//! `rkube-probe URL`: exits 0 when `GET URL` (plain `http://host:port/path`) answers 200 within
//! 2 s, 1 otherwise. The health check of rkube's container images, which have no curl.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

fn probe(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
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
    write!(s, "GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut head = [0u8; 32];
    let n = s.read(&mut head).map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    if line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(format!("answered {:?}", line.lines().next().unwrap_or("")))
    }
}

fn main() {
    let url = std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: rkube-probe http://host:port/path");
        std::process::exit(2)
    });
    if let Err(e) = probe(&url) {
        eprintln!("{url}: {e}");
        std::process::exit(1);
    }
}
