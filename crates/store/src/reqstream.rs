//! Reads a stream of JSON requests from a request body (watch and keepalive streams): values
//! may be separated by newlines or nothing at all, as Go's `json.Decoder` reads them.

use axum::body::{Body, BodyDataStream};
use bytes::BytesMut;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::StoreError;

/// The most a stream may buffer for one unfinished request.
pub const MAX_BUFFERED: usize = 4 * 1024 * 1024;

pub struct RequestReader {
    body: BodyDataStream,
    buf: BytesMut,
    eof: bool,
    /// `buf.len()` at the last incomplete parse: no new data, no new parse.
    incomplete_at: Option<usize>,
}

impl RequestReader {
    pub fn new(body: Body) -> Self {
        RequestReader {
            body: body.into_data_stream(),
            buf: BytesMut::new(),
            eof: false,
            incomplete_at: None,
        }
    }

    /// The next request; `None` at the end of the body. A malformed value is an error, after
    /// which the reader is finished.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Option<Result<T, StoreError>> {
        loop {
            let start = self.buf.iter().position(|b| !b.is_ascii_whitespace());
            if self.incomplete_at == Some(self.buf.len()) && !self.eof {
                // Nothing new since the last attempt: wait for more data.
            } else if let Some(start) = start {
                let slice = &self.buf[start..];
                if let Some(msg) = crate::wire::non_object(slice) {
                    self.buf.clear();
                    self.eof = true;
                    return Some(Err(StoreError::invalid(msg)));
                }
                let mut it = serde_json::Deserializer::from_slice(slice).into_iter::<T>();
                match it.next() {
                    Some(Ok(v)) => {
                        let used = start + it.byte_offset();
                        let _ = self.buf.split_to(used);
                        self.incomplete_at = None;
                        return Some(Ok(v));
                    }
                    Some(Err(e)) if e.is_eof() && !self.eof => {
                        if self.buf.len() > MAX_BUFFERED {
                            self.buf.clear();
                            self.eof = true;
                            return Some(Err(StoreError::invalid(
                                crate::error::ERR_REQUEST_TOO_LARGE,
                            )));
                        }
                        self.incomplete_at = Some(self.buf.len());
                    }
                    Some(Err(e)) => {
                        let err = crate::wire::json_error(&e, slice);
                        self.buf.clear();
                        self.eof = true;
                        return Some(Err(err));
                    }
                    None => {}
                }
            } else {
                self.buf.clear();
                if self.eof {
                    return None;
                }
            }
            if self.eof {
                return None;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(_)) | None => self.eof = true,
            }
        }
    }
}
