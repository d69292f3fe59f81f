//! SPDY/3.1 framing as kubectl's streams use it (Go's `spdystream`): control and data frames,
//! and the header blocks, zlib-compressed over the whole connection with SPDY/3's preset
//! dictionary. Headers we receive are inflated (miniz_oxide, its window primed with the
//! dictionary, the decompressed size capped); headers we send are "compressed" as stored
//! deflate blocks, each block ending with a sync-flush marker as zlib's writers do.

use std::sync::OnceLock;

use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;
use tokio::io::{AsyncRead, AsyncReadExt};

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
pub const FLAG_FIN: u8 = 1;
/// RST_STREAM's status for a stream we will not serve.
pub const REFUSED_STREAM: u32 = 3;

/// The header-compression dictionary of the SPDY/3 draft (section 2.6.10.1): the
/// length-prefixed names and values below, then a run of common text.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: [&str; 65] = [
            "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
            "accept-encoding", "accept-language", "accept-ranges", "age", "allow",
            "authorization", "cache-control", "connection", "content-base", "content-encoding",
            "content-language", "content-length", "content-location", "content-md5",
            "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
            "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since",
            "last-modified", "location", "max-forwards", "pragma", "proxy-authenticate",
            "proxy-authorization", "range", "referer", "retry-after", "server", "te", "trailer",
            "transfer-encoding", "upgrade", "user-agent", "vary", "via", "warning",
            "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
            "public", "set-cookie", "keep-alive", "origin",
        ];
        const TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";
        let mut d = Vec::with_capacity(1424);
        for w in WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(TAIL.as_bytes());
        d
    })
}

pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

fn bad(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

/// The receiving side of the connection's header compression.
pub struct Inflater {
    state: Box<DecompressorOxide>,
    window: Vec<u8>,
    pos: usize,
    started: bool,
}

const WINDOW: usize = 32 * 1024;

impl Default for Inflater {
    fn default() -> Self {
        let dict = dictionary();
        let mut window = vec![0u8; WINDOW];
        window[..dict.len()].copy_from_slice(dict);
        Inflater {
            state: Box::default(),
            window,
            pos: dict.len(),
            started: false,
        }
    }
}

impl Inflater {
    /// One frame's header block, inflated to at most `max` bytes.
    pub fn inflate(&mut self, mut block: &[u8], max: usize) -> std::io::Result<Vec<u8>> {
        if !self.started {
            let [cmf, flg, rest @ ..] = block else {
                return Err(bad("a header block without its zlib header"));
            };
            if cmf & 0x0f != 8 || ((u16::from(*cmf) << 8) | u16::from(*flg)) % 31 != 0 {
                return Err(bad("not a zlib stream"));
            }
            block = rest;
            if flg & 0x20 != 0 {
                let Some((id, rest)) = block.split_first_chunk::<4>() else {
                    return Err(bad("a truncated zlib header"));
                };
                if u32::from_be_bytes(*id) != adler32(dictionary()) {
                    return Err(bad("the header block uses another dictionary"));
                }
                block = rest;
            }
            self.started = true;
        }
        let mut out = Vec::new();
        loop {
            let (status, used, written) = decompress(
                &mut self.state,
                block,
                &mut self.window,
                self.pos,
                inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            out.extend_from_slice(&self.window[self.pos..self.pos + written]);
            self.pos = (self.pos + written) & (WINDOW - 1);
            block = &block[used..];
            if out.len() > max {
                return Err(bad("a header block over the size limit"));
            }
            if used == 0 && written == 0 && status != TINFLStatus::Done && !block.is_empty() {
                return Err(bad("header block: inflate made no progress"));
            }
            match status {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done if block.is_empty() => {
                    return Ok(out)
                }
                TINFLStatus::NeedsMoreInput => continue,
                s => return Err(bad(format!("header block: inflate failed ({s:?})"))),
            }
        }
    }
}

/// The sending side: a zlib stream (with the dictionary's id) of stored blocks.
#[derive(Default)]
pub struct Deflater {
    started: bool,
}

impl Deflater {
    pub fn deflate(&mut self, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(raw.len() + 16);
        if !self.started {
            // CMF 0x78 (deflate, 32 KiB window); FLG 0x20: preset dictionary, level 0.
            out.extend_from_slice(&[0x78, 0x20]);
            out.extend_from_slice(&adler32(dictionary()).to_be_bytes());
            self.started = true;
        }
        let mut rest = raw;
        loop {
            let n = rest.len().min(0xffff);
            let len = n as u16;
            out.push(0); // not final, stored
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if rest.is_empty() {
                // An empty stored block ends each header block, as zlib's sync flush does:
                // Go's inflater reads one block past the data, and must find it in this frame.
                out.extend_from_slice(&[0, 0, 0, 0xff, 0xff]);
                return out;
            }
        }
    }
}

/// Name/value pairs as a SPDY/3 header block (uncompressed).
pub fn encode_headers(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = (headers.len() as u32).to_be_bytes().to_vec();
    for (k, v) in headers {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// A header block's pairs (names lowercase), at most 100 of them.
pub fn decode_headers(mut b: &[u8]) -> std::io::Result<Vec<(String, String)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> std::io::Result<&'a [u8]> {
        if b.len() < n {
            return Err(bad("a truncated header block"));
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Ok(head)
    }
    fn u32_of(b: &mut &[u8]) -> std::io::Result<usize> {
        let x = take(b, 4)?;
        Ok(u32::from_be_bytes([x[0], x[1], x[2], x[3]]) as usize)
    }
    let n = u32_of(&mut b)?;
    if n > 100 {
        return Err(bad("too many headers"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let kl = u32_of(&mut b)?;
        let k = String::from_utf8_lossy(take(&mut b, kl)?).to_ascii_lowercase();
        let vl = u32_of(&mut b)?;
        let v = String::from_utf8_lossy(take(&mut b, vl)?).into_owned();
        out.push((k, v));
    }
    Ok(out)
}

/// What the client sends that the server acts on.
#[derive(Debug, PartialEq)]
pub enum Frame {
    SynStream {
        id: u32,
        fin: bool,
        headers: Vec<(String, String)>,
    },
    Data {
        id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    RstStream {
        id: u32,
    },
    Ping(u32),
    GoAway,
    /// SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY, NOOP: nothing to do.
    Other,
}

/// Reads frames of at most `max` bytes.
pub struct FrameReader<R> {
    r: R,
    inflater: Inflater,
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(r: R, max: usize) -> Self {
        FrameReader {
            r,
            inflater: Inflater::default(),
            max,
        }
    }

    /// The next frame; `None` at the end of the connection.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        let mut head = [0u8; 8];
        match self.r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let flags = head[4];
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        if len > self.max {
            return Err(bad("a frame over the size limit"));
        }
        let mut body = vec![0u8; len];
        self.r.read_exact(&mut body).await?;
        let fin = flags & FLAG_FIN != 0;
        if head[0] & 0x80 == 0 {
            let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            return Ok(Some(Frame::Data {
                id,
                fin,
                data: body,
            }));
        }
        let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
        if version != VERSION {
            return Err(bad(format!("SPDY version {version}")));
        }
        let stream_id = |b: &[u8]| -> std::io::Result<u32> {
            b.get(..4)
                .map(|x| u32::from_be_bytes([x[0] & 0x7f, x[1], x[2], x[3]]))
                .ok_or_else(|| bad("a truncated control frame"))
        };
        let kind = u16::from_be_bytes([head[2], head[3]]);
        Ok(Some(match kind {
            SYN_STREAM => {
                let id = stream_id(&body)?;
                let block = body
                    .get(10..)
                    .ok_or_else(|| bad("a truncated SYN_STREAM"))?;
                let raw = self.inflater.inflate(block, 64 * 1024)?;
                Frame::SynStream {
                    id,
                    fin,
                    headers: decode_headers(&raw)?,
                }
            }
            SYN_REPLY | HEADERS => {
                // Inflated all the same: the compression context spans the connection.
                let block = body
                    .get(4..)
                    .ok_or_else(|| bad("a truncated header frame"))?;
                self.inflater.inflate(block, 64 * 1024)?;
                Frame::Other
            }
            RST_STREAM => Frame::RstStream {
                id: stream_id(&body)?,
            },
            PING => Frame::Ping(
                stream_id(&body)
                    .map(|_| u32::from_be_bytes([body[0], body[1], body[2], body[3]]))?,
            ),
            GOAWAY => Frame::GoAway,
            _ => Frame::Other,
        }))
    }
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    out
}

/// Builds the server's frames.
#[derive(Default)]
pub struct FrameWriter {
    deflater: Deflater,
}

impl FrameWriter {
    pub fn syn_reply(&mut self, id: u32, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut payload = id.to_be_bytes().to_vec();
        payload.extend(self.deflater.deflate(&encode_headers(headers)));
        control(SYN_REPLY, 0, &payload)
    }

    /// Data on a stream, split into frames of at most 16 KiB; `fin` closes our side.
    pub fn data(id: u32, fin: bool, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() + 8);
        let mut chunks: Vec<&[u8]> = data.chunks(16 * 1024).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        for (i, c) in chunks.into_iter().enumerate() {
            out.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
            out.push(if fin && i == last { FLAG_FIN } else { 0 });
            out.extend_from_slice(&(c.len() as u32).to_be_bytes()[1..]);
            out.extend_from_slice(c);
        }
        out
    }

    pub fn ping(id: u32) -> Vec<u8> {
        control(PING, 0, &id.to_be_bytes())
    }

    pub fn rst_stream(id: u32, status: u32) -> Vec<u8> {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(&status.to_be_bytes());
        control(RST_STREAM, 0, &p)
    }

    pub fn goaway(last_id: u32) -> Vec<u8> {
        let mut p = last_id.to_be_bytes().to_vec();
        p.extend_from_slice(&0u32.to_be_bytes());
        control(GOAWAY, 0, &p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(&d[..11], b"\0\0\0\x07options");
        assert!(d.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn headers_round_trip_through_both_compressors() {
        // What we send is what a zlib reader with the dictionary reads back, across frames.
        let (mut tx, mut rx) = (Deflater::default(), Inflater::default());
        for hs in [
            vec![("streamtype", "error")],
            vec![("streamtype", "data"), ("port", "80"), ("requestid", "0")],
        ] {
            let raw = encode_headers(&hs);
            let back = decode_headers(&rx.inflate(&tx.deflate(&raw), 1024).unwrap()).unwrap();
            let back: Vec<(&str, &str)> =
                back.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(back, hs);
        }
        assert!(Inflater::default().inflate(&[1, 2, 3], 10).is_err());
    }

    #[tokio::test]
    async fn frames_are_read_as_written() {
        let mut wire = Vec::new();
        // A SYN_STREAM as a client sends it: id, associated id, priority, headers.
        let mut payload = 1u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        payload.extend(Deflater::default().deflate(&encode_headers(&[("streamtype", "stdout")])));
        wire.extend(control(SYN_STREAM, 0, &payload));
        wire.extend(FrameWriter::data(1, true, b"hi"));
        wire.extend(FrameWriter::ping(7));
        let mut r = FrameReader::new(&wire[..], 1 << 20);
        assert_eq!(
            r.next().await.unwrap(),
            Some(Frame::SynStream {
                id: 1,
                fin: false,
                headers: vec![("streamtype".into(), "stdout".into())]
            })
        );
        assert_eq!(
            r.next().await.unwrap(),
            Some(Frame::Data {
                id: 1,
                fin: true,
                data: b"hi".to_vec()
            })
        );
        assert_eq!(r.next().await.unwrap(), Some(Frame::Ping(7)));
        assert_eq!(r.next().await.unwrap(), None);
        // A frame over the cap is refused before it is read.
        let big = FrameWriter::data(1, false, &[0; 100]);
        assert!(FrameReader::new(&big[..], 10).next().await.is_err());
    }
}
