//! For the crate's unit tests: reading one HTTP/1.1 request off a raw connection, so a test
//! server can answer what it likes.

use tokio::io::AsyncReadExt;

/// The next request's head and body (as long as its Content-Length says; chunked bodies are
/// not read), or `None` if the connection ends first.
pub async fn read_request(conn: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16384];
    loop {
        let n = conn.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_string();
        let len = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
            })
            .unwrap_or(0);
        if got.len() >= end + 4 + len {
            return Some((head, got[end + 4..end + 4 + len].to_vec()));
        }
    }
}
