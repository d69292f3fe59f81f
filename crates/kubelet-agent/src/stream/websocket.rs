//! WebSocket (RFC 6455), the server's side, as kubectl's exec and port-forward use it: the
//! handshake's accept key, client frames read (masked, fragments joined, a size cap) and
//! server frames written (unmasked). Control frames are the caller's: a ping comes back as
//! [`Msg::Ping`] for the writer to answer.

use tokio::io::{AsyncRead, AsyncReadExt};

/// The `Sec-WebSocket-Accept` answering a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

pub const OP_TEXT: u8 = 1;
pub const OP_BINARY: u8 = 2;
pub const OP_CLOSE: u8 = 8;
pub const OP_PING: u8 = 9;
pub const OP_PONG: u8 = 10;

/// A whole message from the client.
#[derive(Debug, PartialEq)]
pub enum Msg {
    Binary(Vec<u8>),
    Text(Vec<u8>),
    Ping(Vec<u8>),
    Close,
}

/// A server frame (never masked).
pub fn frame(op: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | op);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= 0xffff => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with a status code (1000: normal).
pub fn close_frame(code: u16) -> Vec<u8> {
    frame(OP_CLOSE, &code.to_be_bytes())
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Reads client messages, each at most `max` bytes (fragments included).
pub struct Reader<R> {
    r: R,
    max: usize,
    /// A fragmented message in progress (a ping may arrive between its fragments).
    partial: Option<(u8, Vec<u8>)>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(r: R, max: usize) -> Self {
        Reader {
            r,
            max,
            partial: None,
        }
    }

    /// The next message; `None` at the end of the connection. Pongs are skipped.
    pub async fn next(&mut self) -> std::io::Result<Option<Msg>> {
        loop {
            let mut head = [0u8; 2];
            match self.r.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
            let fin = head[0] & 0x80 != 0;
            let op = head[0] & 0x0f;
            if head[0] & 0x70 != 0 {
                return Err(bad("reserved bits set (no extension was negotiated)"));
            }
            if head[1] & 0x80 == 0 {
                return Err(bad("an unmasked client frame"));
            }
            let len = match head[1] & 0x7f {
                126 => u64::from(self.r.read_u16().await?),
                127 => self.r.read_u64().await?,
                n => u64::from(n),
            };
            let control = op >= 8;
            if control && (len > 125 || !fin) {
                return Err(bad("an oversized or fragmented control frame"));
            }
            let so_far = self.partial.as_ref().map_or(0, |(_, m)| m.len());
            if len > (self.max - so_far.min(self.max)) as u64 {
                return Err(bad("a message over the size limit"));
            }
            let mut mask = [0u8; 4];
            self.r.read_exact(&mut mask).await?;
            let mut payload = vec![0u8; len as usize];
            self.r.read_exact(&mut payload).await?;
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
            match op {
                OP_PING => return Ok(Some(Msg::Ping(payload))),
                OP_PONG => continue,
                OP_CLOSE => return Ok(Some(Msg::Close)),
                0 => match self.partial.as_mut() {
                    Some((_, m)) => m.extend_from_slice(&payload),
                    None => return Err(bad("a continuation without a message")),
                },
                OP_TEXT | OP_BINARY if self.partial.is_none() => self.partial = Some((op, payload)),
                OP_TEXT | OP_BINARY => return Err(bad("a new message inside a fragmented one")),
                _ => return Err(bad("an unknown opcode")),
            }
            if fin {
                let (op, m) = self.partial.take().expect("set above");
                return Ok(Some(if op == OP_TEXT {
                    Msg::Text(m)
                } else {
                    Msg::Binary(m)
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut out = vec![first, 0x80 | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn fragments_join_and_control_frames_come_through() {
        let mut wire = masked(OP_BINARY, b"\x00he");
        wire.extend(masked(0x80 | OP_PING, b"p"));
        wire.extend(masked(0x80, b"llo"));
        wire.extend(masked(0x80 | OP_CLOSE, &[3, 232]));
        let mut r = Reader::new(&wire[..], 1024);
        assert_eq!(r.next().await.unwrap(), Some(Msg::Ping(b"p".to_vec())));
        assert_eq!(
            r.next().await.unwrap(),
            Some(Msg::Binary(b"\x00hello".to_vec()))
        );
        assert_eq!(r.next().await.unwrap(), Some(Msg::Close));
        assert_eq!(r.next().await.unwrap(), None);
        // Over the cap, or unmasked: refused.
        let big = masked(0x80 | OP_BINARY, &[0u8; 100]);
        assert!(Reader::new(&big[..], 10).next().await.is_err());
        assert!(Reader::new(&[0x82u8, 0x01, 0x00][..], 10)
            .next()
            .await
            .is_err());
        assert_eq!(frame(OP_BINARY, b"ab"), [0x82, 2, b'a', b'b']);
        assert_eq!(frame(OP_BINARY, &[0; 200])[..4], [0x82, 126, 0, 200]);
    }
}
