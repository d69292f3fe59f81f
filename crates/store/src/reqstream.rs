//! Reads a stream of JSON requests from a request body (watch and keepalive streams): values
//! may be separated by newlines or nothing at all, as Go's `json.Decoder` reads them.

use axum::body::{Body, BodyDataStream};
use bytes::BytesMut;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::StoreError;

pub struct RequestReader {
    body: BodyDataStream,
    buf: BytesMut,
    eof: bool,
}

impl RequestReader {
    pub fn new(body: Body) -> Self {
        RequestReader {
            body: body.into_data_stream(),
            buf: BytesMut::new(),
            eof: false,
        }
    }

    /// The next request; `None` at the end of the body. A malformed value is an error, after
    /// which the reader is finished.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Option<Result<T, StoreError>> {
        loop {
            let start = self.buf.iter().position(|b| !b.is_ascii_whitespace());
            if let Some(start) = start {
                let slice = &self.buf[start..];
                if let Some(msg) = crate::http::non_object(slice) {
                    self.buf.clear();
                    self.eof = true;
                    return Some(Err(StoreError::invalid(msg)));
                }
                let mut it = serde_json::Deserializer::from_slice(slice).into_iter::<T>();
                match it.next() {
                    Some(Ok(v)) => {
                        let used = start + it.byte_offset();
                        let _ = self.buf.split_to(used);
                        return Some(Ok(v));
                    }
                    Some(Err(e)) if e.is_eof() && !self.eof => {}
                    Some(Err(e)) => {
                        let err = crate::http::json_error(&e, slice);
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
