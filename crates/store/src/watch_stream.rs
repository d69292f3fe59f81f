//! One watch stream, on either wire: reads `WatchRequest`s (newline-delimited JSON from a
//! `/v3/watch` body, or gRPC messages from `etcdserverpb.Watch/Watch`) while writing
//! responses in the same wire's encoding, for any number of watches at once.
//!
//! Each watch starts *replaying* (`catch_up` reads history from disk, in order) unless it
//! starts after the committed revision, then joins the hub's synced set and receives live
//! events. The stream ends when the client goes away or the server shuts down.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use rkube_daemon::ShutdownToken;
use rkube_etcd_api::*;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::StoreError;
use crate::keyrange::KeyRange;
use crate::mvcc::Mvcc;
use crate::reqstream::RequestReader;
use crate::watch::event::{encode_events, encode_response, Wire};
use crate::watch::hub::{StreamMsg, Watcher};

/// Records read from disk per replay step.
const REPLAY_CHUNK: usize = 1000;

pub const CANCEL_REASON_SLOW: &str =
    "etcdserver: watcher buffer overflowed; re-watch from the last received revision";

pub struct WatchConfig {
    /// Messages a stream may have queued before its slowest watcher is cancelled.
    pub buffer: usize,
    /// Watchers the store holds at once, over all streams.
    pub max_watchers: usize,
    /// Watchers one stream may hold.
    pub max_watchers_per_stream: usize,
}

/// The requests of one stream, decoded; an error ends the reading of requests.
pub type Requests = Pin<Box<dyn Stream<Item = Result<WatchRequest, StoreError>> + Send>>;

/// Serves one `/v3/watch` stream. A malformed first message is refused with HTTP 500 and
/// gRPC code 2 (as etcd's gateway does); later malformed input just ends the reading of
/// requests.
pub async fn handle(
    mvcc: Arc<Mvcc>,
    cfg: Arc<WatchConfig>,
    shutdown: ShutdownToken,
    body: Body,
) -> Response {
    let mut reader = RequestReader::new(body);
    let first = match reader.next::<WatchRequest>().await {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => return StoreError::StreamDecode(e.to_string()).into_response(),
        None => None,
    };
    let requests: Requests = Box::pin(futures_util::stream::unfold(reader, |mut r| async {
        let next = r.next::<WatchRequest>().await?;
        Some((next, r))
    }));
    let out = start(mvcc, cfg, shutdown, Wire::Json, first, requests);
    crate::wire::stream_response(out)
}

/// Starts serving a stream whose `first` request (if any) was already read: responses, in
/// `wire`'s encoding, arrive on the returned channel until the client goes away (drops it)
/// or the server shuts down.
pub fn start(
    mvcc: Arc<Mvcc>,
    cfg: Arc<WatchConfig>,
    shutdown: ShutdownToken,
    wire: Wire,
    first: Option<WatchRequest>,
    requests: Requests,
) -> mpsc::Receiver<Bytes> {
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(16);
    let (msg_tx, msg_rx) = mpsc::channel::<StreamMsg>(cfg.buffer);
    tokio::spawn(run_stream(
        mvcc, cfg, shutdown, wire, requests, first, msg_tx, msg_rx, out_tx,
    ));
    out_rx
}

struct StreamCtx {
    mvcc: Arc<Mvcc>,
    config: Arc<WatchConfig>,
    id: u64,
    wire: Wire,
    msg_tx: mpsc::Sender<StreamMsg>,
    out: mpsc::Sender<Bytes>,
    /// Active watch IDs, with the token that stops a replay in progress.
    watches: HashMap<i64, CancellationToken>,
    next_id: i64,
}

#[allow(clippy::too_many_arguments)]
async fn run_stream(
    mvcc: Arc<Mvcc>,
    config: Arc<WatchConfig>,
    shutdown: ShutdownToken,
    wire: Wire,
    mut requests: Requests,
    first: Option<WatchRequest>,
    msg_tx: mpsc::Sender<StreamMsg>,
    mut msg_rx: mpsc::Receiver<StreamMsg>,
    out: mpsc::Sender<Bytes>,
) {
    let (id, shared) = mvcc.hub.register_stream(msg_tx.clone(), wire);
    let mut ctx = StreamCtx {
        mvcc: mvcc.clone(),
        config,
        id,
        wire,
        msg_tx,
        out,
        watches: HashMap::new(),
        next_id: 0,
    };
    let mut reading = true;
    if let Some(req) = first {
        if !ctx.handle_request(req).await {
            return cleanup(&ctx);
        }
    }
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            req = requests.next(), if reading => match req {
                Some(Ok(r)) => if !ctx.handle_request(r).await { break },
                // The end of the request body (or garbage in it) stops reading requests; the
                // watches already created keep streaming. A gRPC stream that sends garbage
                // ends (etcd ends it with the error) rather than ignoring later requests.
                Some(Err(_)) if wire == Wire::Proto => break,
                Some(Err(_)) | None => reading = false,
            },
            msg = msg_rx.recv() => match msg {
                Some(m) => if !ctx.write_msg(m).await { break },
                None => break,
            },
            _ = shared.notify.notified() => {
                // Watches the hub dropped for overflow: tell the client once their queued
                // events have been written.
                while let Ok(m) = msg_rx.try_recv() {
                    if !ctx.write_msg(m).await { return cleanup(&ctx); }
                }
                let ids: Vec<i64> = std::mem::take(&mut *shared.overflowed.lock().unwrap());
                for wid in ids {
                    ctx.watches.remove(&wid);
                    let resp = WatchResponse {
                        header: Some(ctx.mvcc.header(ctx.mvcc.hub.committed())),
                        watch_id: wid,
                        canceled: true,
                        cancel_reason: CANCEL_REASON_SLOW.into(),
                        ..Default::default()
                    };
                    if !ctx.write_result(&resp).await { return cleanup(&ctx); }
                    ctx.mvcc.hub.drop_unsynced(ctx.id);
                }
            }
            // The client went away: stop even when nothing is being written.
            _ = ctx.out.closed() => break,
        }
    }
    cleanup(&ctx)
}

fn cleanup(ctx: &StreamCtx) {
    for token in ctx.watches.values() {
        token.cancel();
    }
    ctx.mvcc.hub.unregister_stream(ctx.id);
}

impl StreamCtx {
    async fn write_result(&self, resp: &WatchResponse) -> bool {
        self.out
            .send(encode_response(self.wire, resp))
            .await
            .is_ok()
    }

    async fn write_msg(&mut self, m: StreamMsg) -> bool {
        match m {
            StreamMsg::Events { watch_id, line } => {
                if !self.watches.contains_key(&watch_id) {
                    return true; // cancelled meanwhile
                }
                self.out.send(line).await.is_ok()
            }
            StreamMsg::Progress { watch_id, rev } => {
                let resp = WatchResponse {
                    header: Some(self.mvcc.header(rev)),
                    watch_id,
                    ..Default::default()
                };
                self.write_result(&resp).await
            }
            StreamMsg::Compacted {
                watch_id,
                compact_rev,
            } => {
                self.watches.remove(&watch_id);
                let mut header = self.mvcc.header(0);
                header.revision = 0;
                let resp = WatchResponse {
                    header: Some(header),
                    watch_id,
                    canceled: true,
                    compact_revision: compact_rev,
                    ..Default::default()
                };
                self.write_result(&resp).await
            }
        }
    }

    /// Returns false when the client is gone.
    async fn handle_request(&mut self, req: WatchRequest) -> bool {
        if let Some(c) = req.create_request {
            return self.create(c).await;
        }
        if let Some(c) = req.cancel_request {
            if let Some(token) = self.watches.remove(&c.watch_id) {
                token.cancel();
                self.mvcc.hub.cancel(self.id, c.watch_id);
                let resp = WatchResponse {
                    header: Some(self.mvcc.header(self.mvcc.hub.committed())),
                    watch_id: c.watch_id,
                    canceled: true,
                    ..Default::default()
                };
                return self.write_result(&resp).await;
            }
            return true;
        }
        if req.progress_request.is_some() {
            self.mvcc.hub.request_progress(self.id);
        }
        true
    }

    async fn create(&mut self, c: WatchCreateRequest) -> bool {
        let committed = self.mvcc.hub.committed();
        if self.watches.len() >= self.config.max_watchers_per_stream
            || self.mvcc.hub.watcher_count() >= self.config.max_watchers
        {
            // Refused as etcd refuses a watch it cannot create: created and canceled at once.
            let resp = WatchResponse {
                header: Some(self.mvcc.header(committed)),
                watch_id: -1,
                created: true,
                canceled: true,
                cancel_reason: "etcdserver: too many watchers".into(),
                ..Default::default()
            };
            return self.write_result(&resp).await;
        }
        let id = if c.watch_id != 0 {
            if self.watches.contains_key(&c.watch_id) {
                let resp = WatchResponse {
                    header: Some(self.mvcc.header(committed)),
                    watch_id: -1,
                    created: true,
                    canceled: true,
                    cancel_reason: "mvcc: duplicate watch ID provided on the WatchStream".into(),
                    ..Default::default()
                };
                return self.write_result(&resp).await;
            }
            c.watch_id
        } else {
            while self.watches.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            let id = self.next_id;
            self.next_id += 1;
            id
        };
        let key = if c.key.is_empty() {
            vec![0]
        } else {
            c.key.clone()
        };
        let start = if c.start_revision == 0 {
            committed + 1
        } else {
            c.start_revision
        };
        let watcher = Watcher {
            stream: self.id,
            watch_id: id,
            range: KeyRange::new(&key, &c.range_end),
            no_put: c.filters.contains(&FilterType::NoPut),
            no_delete: c.filters.contains(&FilterType::NoDelete),
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            next_rev: start,
            sent_since_tick: false,
        };
        let token = CancellationToken::new();
        self.watches.insert(id, token.clone());
        let created = WatchResponse {
            header: Some(self.mvcc.header(committed)),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        if !self.write_result(&created).await {
            return false;
        }
        if !self.mvcc.hub.add_watcher(watcher.clone()) {
            let mvcc = self.mvcc.clone();
            let tx = self.msg_tx.clone();
            let stream = watcher.stream;
            let wire = self.wire;
            tokio::spawn(async move {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => mvcc.hub.drop_unsynced(stream),
                    _ = catch_up(mvcc.clone(), tx, watcher, wire, token.clone()) => {}
                }
            });
        }
        true
    }
}

/// Replays history from `w.next_rev` until the watcher has seen everything committed, then
/// hands it to the hub. A start below the compacted revision cancels the watch.
async fn catch_up(
    mvcc: Arc<Mvcc>,
    tx: mpsc::Sender<StreamMsg>,
    w: Watcher,
    wire: Wire,
    token: CancellationToken,
) {
    let mut next = w.next_rev;
    loop {
        let target = mvcc.hub.committed();
        while next <= target {
            let m = mvcc.clone();
            let wf = w.clone();
            let read = tokio::task::spawn_blocking(move || {
                m.read_events(next, target, REPLAY_CHUNK, |e| wf.wants(e), wf.prev_kv)
            })
            .await;
            match read {
                Ok(Ok((events, covered))) => {
                    if !events.is_empty() {
                        let line = encode_events(
                            wire,
                            &mvcc.header(target),
                            w.watch_id,
                            &events,
                            w.prev_kv,
                        );
                        let msg = StreamMsg::Events {
                            watch_id: w.watch_id,
                            line,
                        };
                        if tx.send(msg).await.is_err() {
                            mvcc.hub.drop_unsynced(w.stream);
                            return;
                        }
                    }
                    next = covered + 1;
                }
                Ok(Err(StoreError::Compacted)) => {
                    let compact_rev = mvcc.state.read().unwrap().compact_rev;
                    let _ = tx
                        .send(StreamMsg::Compacted {
                            watch_id: w.watch_id,
                            compact_rev,
                        })
                        .await;
                    mvcc.hub.drop_unsynced(w.stream);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, watch_id = w.watch_id, "watch replay failed");
                    mvcc.hub.drop_unsynced(w.stream);
                    return;
                }
                Err(_) => {
                    mvcc.hub.drop_unsynced(w.stream);
                    return;
                }
            }
        }
        let mut synced = w.clone();
        synced.next_rev = next;
        if mvcc.hub.try_sync(synced, next - 1, &token).is_ok() {
            return;
        }
    }
}
