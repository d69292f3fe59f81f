//! etcd's JSON gateway on the wire, shared by the request handlers and the streaming
//! endpoints: Go-worded decode errors (what etcd's gateway answers for malformed JSON) and
//! streamed responses.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::StoreError;

/// Go's error for a request that is a JSON value but not an object (etcd's gateway decodes
/// into `map[string]json.RawMessage` first). `slice` starts at the value.
pub fn non_object(slice: &[u8]) -> Option<String> {
    let kind = match slice.first()? {
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "bool",
        b'-' | b'0'..=b'9' => "number",
        _ => return None,
    };
    Some(format!(
        "json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage"
    ))
}

/// Turns a serde error into etcd's InvalidArgument, in Go's `encoding/json` wording.
pub fn json_error(e: &serde_json::Error, input: &[u8]) -> StoreError {
    use serde_json::error::Category;
    let msg = e.to_string();
    let msg = match e.classify() {
        Category::Syntax => {
            let offset = line_col_offset(input, e.line(), e.column());
            match input.get(offset.saturating_sub(1)).copied() {
                Some(c) if msg.contains("key must be a string") => {
                    format!(
                        "invalid character '{}' looking for beginning of object key string",
                        c as char
                    )
                }
                Some(c) => format!(
                    "invalid character '{}' looking for beginning of value",
                    c as char
                ),
                None => "unexpected EOF".to_string(),
            }
        }
        Category::Eof => "unexpected EOF".to_string(),
        _ => {
            let m = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            go_type_error(&m).unwrap_or(m)
        }
    };
    StoreError::invalid(msg)
}

/// serde's `invalid type: string "x", expected a boolean` as Go words it.
fn go_type_error(m: &str) -> Option<String> {
    let rest = m.strip_prefix("invalid type: ")?;
    let (got, expected) = rest.split_once(", expected ")?;
    let got = match got.split_whitespace().next()? {
        "string" => "string",
        "integer" | "floating" => "number",
        "boolean" => "bool",
        "sequence" => "array",
        "map" => "object",
        _ => return None,
    };
    let want = if expected.contains("boolean") {
        "bool"
    } else if expected.contains("base64") {
        "[]uint8"
    } else if expected.contains("integer") {
        "int64"
    } else if expected.contains("sequence") {
        "[]json.RawMessage"
    } else {
        "map[string]json.RawMessage"
    };
    Some(format!(
        "json: cannot unmarshal {got} into Go value of type {want}"
    ))
}

fn line_col_offset(input: &[u8], line: usize, col: usize) -> usize {
    let mut l = 1;
    let mut start = 0;
    for (i, b) in input.iter().enumerate() {
        if l == line {
            break;
        }
        if *b == b'\n' {
            l += 1;
            start = i + 1;
        }
    }
    start + col
}

/// A chunked JSON response fed by a channel of lines.
pub fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::io::Error>(b), rx))
    });
    (
        [("content-type", "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}
