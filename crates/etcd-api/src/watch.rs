//! The client half of `/v3/watch`: a full-duplex HTTP stream. Requests go up as
//! newline-delimited JSON in a chunked request body; responses come back one JSON object per line.

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::error::{api_error, EtcdError};
use crate::types::*;

/// Sends further requests on an open watch stream. Dropping it ends the request body.
#[derive(Clone)]
pub struct WatchSender {
    tx: mpsc::Sender<Bytes>,
}

impl WatchSender {
    pub async fn send(&self, req: &WatchRequest) -> Result<(), EtcdError> {
        let mut line = serde_json::to_vec(req).map_err(|e| EtcdError::Decode(e.to_string()))?;
        line.push(b'\n');
        self.tx
            .send(Bytes::from(line))
            .await
            .map_err(|_| EtcdError::Transport("watch stream closed".into()))
    }
    pub async fn create(&self, create: WatchCreateRequest) -> Result<(), EtcdError> {
        self.send(&WatchRequest {
            create_request: Some(create),
            ..Default::default()
        })
        .await
    }
    pub async fn cancel(&self, watch_id: i64) -> Result<(), EtcdError> {
        self.send(&WatchRequest {
            cancel_request: Some(WatchCancelRequest { watch_id }),
            ..Default::default()
        })
        .await
    }
    pub async fn request_progress(&self) -> Result<(), EtcdError> {
        self.send(&WatchRequest {
            progress_request: Some(WatchProgressRequest {}),
            ..Default::default()
        })
        .await
    }
}

/// Yields parsed watch responses in order.
pub struct WatchReceiver {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    buf: BytesMut,
    /// Bytes of `buf` already known to hold no newline.
    scanned: usize,
    done: bool,
}

impl WatchReceiver {
    /// The next response; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Option<Result<WatchResponse, EtcdError>> {
        loop {
            if let Some(pos) = self.buf[self.scanned..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|p| p + self.scanned)
            {
                self.scanned = 0;
                let line = self.buf.split_to(pos + 1);
                let line = &line[..pos];
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                return Some(parse_line(line));
            }
            if self.done {
                if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                    return None;
                }
                let rest = self.buf.split();
                return Some(parse_line(&rest));
            }
            self.scanned = self.buf.len();
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    self.done = true;
                    self.buf.clear();
                    return Some(Err(EtcdError::Transport(e.to_string())));
                }
                None => self.done = true,
            }
        }
    }
}

fn parse_line(line: &[u8]) -> Result<WatchResponse, EtcdError> {
    let parsed: StreamLine<WatchResponse> = serde_json::from_slice(line)
        .map_err(|e| EtcdError::Decode(format!("{e}: {}", String::from_utf8_lossy(line))))?;
    match (parsed.result, parsed.error) {
        (Some(r), _) => Ok(r),
        (None, Some(e)) => Err(EtcdError::Api {
            status: 200,
            code: e.code,
            message: e.message,
        }),
        (None, None) => Ok(WatchResponse::default()),
    }
}

/// Opens `/v3/watch`. With `duplex`, the request body stays open for further requests through
/// the returned sender (rkube-store answers at once; etcd's gateway answers nothing until the
/// body ends, so use `duplex = false` there: the body is just `first` and then ends).
pub(crate) async fn open(
    http: &reqwest::Client,
    endpoint: &str,
    first: Vec<WatchRequest>,
    duplex: bool,
) -> Result<(Option<WatchSender>, WatchReceiver), EtcdError> {
    let mut body_bytes = Vec::new();
    for r in &first {
        body_bytes.extend(serde_json::to_vec(r).map_err(|e| EtcdError::Decode(e.to_string()))?);
        body_bytes.push(b'\n');
    }
    let (body, sender) = if duplex {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        tx.send(Bytes::from(body_bytes))
            .await
            .map_err(|_| EtcdError::Transport("closed".into()))?;
        let body_stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<Bytes, std::io::Error>(b), rx))
        });
        (
            reqwest::Body::wrap_stream(body_stream),
            Some(WatchSender { tx }),
        )
    } else {
        (reqwest::Body::from(body_bytes), None)
    };
    let resp = http
        .post(format!("{endpoint}/v3/watch"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = resp.status().as_u16();
    if status != 200 {
        let body = resp.bytes().await.unwrap_or_default();
        return Err(api_error(status, &body));
    }
    Ok((
        sender,
        WatchReceiver {
            body: resp.bytes_stream().boxed(),
            buf: BytesMut::new(),
            scanned: 0,
            done: false,
        },
    ))
}
