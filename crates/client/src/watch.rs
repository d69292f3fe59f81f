//! Watch stream decoding: newline-delimited `{"type":…,"object":…}` frames from a chunked
//! body become typed `WatchEvent`s.

use std::collections::BTreeMap;

use bytes::{Buf, BytesMut};
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use rkube_api::status::Status;

use crate::Error;

/// One watch event.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum WatchEvent<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    /// Progress: the server's state up to `resource_version` has been sent.
    Bookmark {
        resource_version: String,
        annotations: BTreeMap<String, String>,
    },
    /// An in-stream error (410 Expired, …); the stream ends after it.
    Error(Status),
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize)]
struct BookmarkObject {
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Decodes one frame.
pub fn decode_event<K: DeserializeOwned>(line: &[u8]) -> Result<WatchEvent<K>, Error> {
    let f: Frame =
        serde_json::from_slice(line).map_err(|e| Error::Decode(format!("watch frame: {e}")))?;
    let obj = f.object.get();
    let typed = |o: &str| {
        serde_json::from_str::<K>(o).map_err(|e| Error::Decode(format!("watch object: {e}")))
    };
    Ok(match f.type_ {
        "ADDED" => WatchEvent::Added(typed(obj)?),
        "MODIFIED" => WatchEvent::Modified(typed(obj)?),
        "DELETED" => WatchEvent::Deleted(typed(obj)?),
        "BOOKMARK" => {
            let b: BookmarkObject =
                serde_json::from_str(obj).map_err(|e| Error::Decode(format!("bookmark: {e}")))?;
            WatchEvent::Bookmark {
                resource_version: b.metadata.resource_version,
                annotations: b.metadata.annotations,
            }
        }
        "ERROR" => WatchEvent::Error(
            serde_json::from_str(obj).map_err(|e| Error::Decode(format!("watch error: {e}")))?,
        ),
        other => return Err(Error::Decode(format!("unknown watch event type {other:?}"))),
    })
}

/// Splits a byte stream into lines and decodes each as an event.
pub fn decode_lines<K, S>(
    body: S,
) -> impl Stream<Item = Result<WatchEvent<K>, Error>> + Send + 'static
where
    K: DeserializeOwned + Send + 'static,
    S: Stream<Item = Result<bytes::Bytes, Error>> + Send + 'static,
{
    split_lines(body).map(|line| line.and_then(|l| decode_event(&l)))
}

/// A line longer than this ends the stream with an error (an event holds one object, and an
/// object is at most a few MiB).
pub const MAX_LINE: usize = 16 << 20;

/// Splits a byte stream into its non-blank lines (without their `\n`).
pub fn split_lines<S>(body: S) -> impl Stream<Item = Result<bytes::Bytes, Error>> + Send + 'static
where
    S: Stream<Item = Result<bytes::Bytes, Error>> + Send + 'static,
{
    let body = Box::pin(body);
    // `scanned`: how much of `buf` is known to hold no newline (each byte is looked at once).
    futures_util::stream::unfold(
        (body, BytesMut::new(), false, 0usize),
        |(mut body, mut buf, mut done, mut scanned)| async move {
            loop {
                if let Some(at) = memchr::memchr(b'\n', &buf[scanned..]) {
                    let line = buf.split_to(scanned + at).freeze();
                    buf.advance(1);
                    scanned = 0;
                    if line.iter().all(|b| b.is_ascii_whitespace()) {
                        continue;
                    }
                    return Some((Ok(line), (body, buf, done, scanned)));
                }
                if done {
                    if buf.iter().all(|b| b.is_ascii_whitespace()) {
                        return None;
                    }
                    let line = buf.split().freeze();
                    return Some((Ok(line), (body, buf, done, scanned)));
                }
                if buf.len() > MAX_LINE {
                    done = true;
                    buf.clear();
                    scanned = 0;
                    let e = Error::Decode(format!("a watch line longer than {MAX_LINE} bytes"));
                    return Some((Err(e), (body, buf, done, scanned)));
                }
                scanned = buf.len();
                if buf.is_empty() {
                    // Nothing pending: an idle watch holds no buffer (a thousand node watches
                    // kept ~16 KB each), and the next chunk is copied into one of its size.
                    buf = BytesMut::new();
                }
                match body.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        done = true;
                        buf.clear();
                        scanned = 0;
                        return Some((Err(e), (body, buf, done, scanned)));
                    }
                    None => done = true,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[tokio::test]
    async fn frames_split_across_chunks() {
        let chunks: Vec<Result<bytes::Bytes, Error>> = vec![
            Ok(r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}}"#.into()),
            Ok("\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n{\"type\":\"ERR".into()),
            Ok("OR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 (9)\",\"reason\":\"Expired\",\"code\":410}}\n".into()),
        ];
        let evs: Vec<_> = decode_lines::<Pod, _>(futures_util::stream::iter(chunks))
            .collect()
            .await;
        assert_eq!(evs.len(), 3);
        match &evs[0] {
            Ok(WatchEvent::Added(p)) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
            other => panic!("{other:?}"),
        }
        match &evs[1] {
            Ok(WatchEvent::Bookmark {
                resource_version,
                annotations,
            }) => {
                assert_eq!(resource_version, "9");
                assert_eq!(
                    annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
            }
            other => panic!("{other:?}"),
        }
        match &evs[2] {
            Ok(WatchEvent::Error(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_a_decode_error() {
        assert!(matches!(
            decode_event::<Pod>(b"{nope"),
            Err(Error::Decode(_))
        ));
        assert!(matches!(
            decode_event::<Pod>(br#"{"type":"WHAT","object":{}}"#),
            Err(Error::Decode(_))
        ));
    }
}
