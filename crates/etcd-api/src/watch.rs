//! The client half of a watch stream, on either transport: the gateway's `/v3/watch` (a
//! full-duplex HTTP stream: requests go up as newline-delimited JSON in a chunked request
//! body, responses come back one JSON object per line) or gRPC's `Watch/Watch` (protobuf
//! messages both ways on one HTTP/2 stream).

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::error::{api_error, EtcdError};
use crate::pb;
use crate::types::*;

/// Sends further requests on an open watch stream. Dropping it ends the request body.
#[derive(Clone)]
pub struct WatchSender {
    tx: Tx,
}

#[derive(Clone)]
enum Tx {
    Json(mpsc::Sender<Bytes>),
    Grpc(mpsc::Sender<pb::WatchRequest>),
}

impl WatchSender {
    pub async fn send(&self, req: &WatchRequest) -> Result<(), EtcdError> {
        let sent = match &self.tx {
            Tx::Json(tx) => {
                let mut line =
                    serde_json::to_vec(req).map_err(|e| EtcdError::Decode(e.to_string()))?;
                line.push(b'\n');
                tx.send(Bytes::from(line)).await.is_ok()
            }
            Tx::Grpc(tx) => tx.send(req.clone().into()).await.is_ok(),
        };
        sent.then_some(())
            .ok_or_else(|| EtcdError::Transport("watch stream closed".into()))
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
    rx: Rx,
}

enum Rx {
    Json {
        body: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
        buf: BytesMut,
        scanned: usize,
        done: bool,
    },
    Grpc {
        responses: tonic::Streaming<pb::WatchResponse>,
        /// The request side stays open as long as the receiver lives (dropping it ends the
        /// stream, as dropping a gateway watch closes its connection).
        _requests: mpsc::Sender<pb::WatchRequest>,
    },
}

impl WatchReceiver {
    /// The next response; `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<Result<WatchResponse, EtcdError>> {
        match &mut self.rx {
            Rx::Grpc { responses, .. } => match responses.message().await {
                Ok(Some(r)) => Some(Ok(r.into())),
                Ok(None) => None,
                Err(s) => Some(Err(crate::grpc::status_error(s))),
            },
            Rx::Json {
                body,
                buf,
                scanned,
                done,
            } => next_line(body, buf, scanned, done).await,
        }
    }
}

async fn next_line(
    body: &mut futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    buf: &mut BytesMut,
    scanned: &mut usize,
    done: &mut bool,
) -> Option<Result<WatchResponse, EtcdError>> {
    loop {
        if let Some(pos) = buf[*scanned..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|p| p + *scanned)
        {
            *scanned = 0;
            let line = buf.split_to(pos + 1);
            let line = &line[..pos];
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            return Some(parse_line(line));
        }
        if *done {
            if buf.iter().all(|b| b.is_ascii_whitespace()) {
                return None;
            }
            let rest = buf.split();
            return Some(parse_line(&rest));
        }
        *scanned = buf.len();
        match body.next().await {
            Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
            Some(Err(e)) => {
                *done = true;
                buf.clear();
                return Some(Err(EtcdError::Transport(e.to_string())));
            }
            None => *done = true,
        }
    }
}

/// Opens a gRPC watch stream carrying `first`. The requests are queued before the call:
/// etcd sends the response headers with the first response, not before.
pub(crate) async fn open_grpc(
    channel: tonic::transport::Channel,
    first: Vec<WatchRequest>,
) -> Result<(Option<WatchSender>, WatchReceiver), EtcdError> {
    let (tx, rx) = mpsc::channel::<pb::WatchRequest>(64);
    for r in first {
        tx.send(r.into())
            .await
            .map_err(|_| EtcdError::Transport("closed".into()))?;
    }
    let mut client = pb::watch_client::WatchClient::new(channel)
        .max_decoding_message_size(crate::grpc::MAX_RESPONSE);
    let call = client.watch(tokio_stream::wrappers::ReceiverStream::new(rx));
    let responses = tokio::time::timeout(crate::grpc::CALL_TIMEOUT, call)
        .await
        .map_err(|_| EtcdError::Transport("no answer to a watch in 30 s".into()))?
        .map_err(crate::grpc::status_error)?
        .into_inner();
    Ok((
        Some(WatchSender {
            tx: Tx::Grpc(tx.clone()),
        }),
        WatchReceiver {
            rx: Rx::Grpc {
                responses,
                _requests: tx,
            },
        },
    ))
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
            Some(WatchSender { tx: Tx::Json(tx) }),
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
            rx: Rx::Json {
                body: resp.bytes_stream().boxed(),
                buf: BytesMut::new(),
                scanned: 0,
                done: false,
            },
        },
    ))
}
