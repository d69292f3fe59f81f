//! The watch hub: every synced watcher, and the fan-out of each committed batch to them.
//!
//! A watcher is *unsynced* while its stream replays history from disk (see
//! `stream::catch_up`), and *synced* once it has seen everything up to `committed`; from then
//! on the writer's `publish` hands it new events. Publishing never blocks: each stream has a
//! bounded queue, and a watcher whose events do not fit is cancelled (its client resumes from
//! the last revision it saw) so that a slow reader never holds up writers or other watchers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rkube_etcd_api::ResponseHeader;
use tokio::sync::{mpsc, Notify};

use crate::keyrange::KeyRange;
use crate::watch::event::{encode_events, EventData, Wire};
use rkube_etcd_api::EventType;

/// What a stream task receives from the hub and from its catch-up tasks.
pub enum StreamMsg {
    /// A ready-to-send response carrying events, in the stream's wire encoding; watchers
    /// that get the same events share one serialized response.
    Events { watch_id: i64, line: Bytes },
    /// A progress notification: every event up to `rev` has been delivered.
    Progress { watch_id: i64, rev: i64 },
    /// The watch ended because its start revision was compacted.
    Compacted { watch_id: i64, compact_rev: i64 },
}

#[derive(Clone)]
pub struct Watcher {
    pub stream: u64,
    pub watch_id: i64,
    pub range: KeyRange,
    pub no_put: bool,
    pub no_delete: bool,
    pub prev_kv: bool,
    pub progress_notify: bool,
    /// The first revision this watcher still needs.
    pub next_rev: i64,
    /// Events were sent since the last progress tick (which then skips this watcher).
    pub sent_since_tick: bool,
}

impl Watcher {
    pub fn wants(&self, e: &EventData) -> bool {
        e.rev.main >= self.next_rev
            && self.range.contains(e.key())
            && !(self.no_put && e.kind == EventType::Put)
            && !(self.no_delete && e.kind == EventType::Delete)
    }
}

/// Per-stream state the hub needs.
struct StreamState {
    tx: mpsc::Sender<StreamMsg>,
    wire: Wire,
    unsynced: usize,
    progress_pending: bool,
    shared: Arc<StreamShared>,
}

/// Shared between the hub and one stream task: watches cancelled for overflow.
#[derive(Default)]
pub struct StreamShared {
    pub overflowed: Mutex<Vec<i64>>,
    pub notify: Notify,
}

#[derive(Default)]
struct Inner {
    committed: i64,
    next_stream: u64,
    synced: Vec<Watcher>,
    streams: HashMap<u64, StreamState>,
}

#[derive(Default)]
pub struct Hub {
    inner: Mutex<Inner>,
    /// cluster_id/member_id/raft_term for the response headers it serializes.
    ids: ResponseHeader,
}

impl Hub {
    pub fn new(committed: i64, ids: ResponseHeader) -> Self {
        Hub {
            inner: Mutex::new(Inner {
                committed,
                ..Default::default()
            }),
            ids,
        }
    }

    pub fn committed(&self) -> i64 {
        self.inner.lock().unwrap().committed
    }

    pub fn watcher_count(&self) -> usize {
        let inner = self.inner.lock().unwrap();
        inner.synced.len() + inner.streams.values().map(|s| s.unsynced).sum::<usize>()
    }

    pub fn register_stream(
        &self,
        tx: mpsc::Sender<StreamMsg>,
        wire: Wire,
    ) -> (u64, Arc<StreamShared>) {
        let mut inner = self.inner.lock().unwrap();
        inner.next_stream += 1;
        let id = inner.next_stream;
        let shared = Arc::new(StreamShared::default());
        inner.streams.insert(
            id,
            StreamState {
                tx,
                wire,
                unsynced: 0,
                progress_pending: false,
                shared: shared.clone(),
            },
        );
        (id, shared)
    }

    pub fn unregister_stream(&self, stream: u64) {
        let mut inner = self.inner.lock().unwrap();
        inner.streams.remove(&stream);
        inner.synced.retain(|w| w.stream != stream);
    }

    /// Adds a watcher. It joins the synced set at once if it starts after everything already
    /// published; otherwise it is counted as replaying and `false` is returned, and the caller
    /// must replay history for it (`stream::catch_up`) and then call `try_sync`. Deciding under
    /// the hub lock means no commit can slip between the check and the registration.
    pub fn add_watcher(&self, w: Watcher) -> bool {
        let mut inner = self.inner.lock().unwrap();
        if w.next_rev > inner.committed {
            inner.synced.push(w);
            return true;
        }
        if let Some(s) = inner.streams.get_mut(&w.stream) {
            s.unsynced += 1;
        }
        false
    }

    /// A replaying watcher that has delivered everything up to `delivered` joins the synced
    /// set if nothing newer has been committed; otherwise returns the newer `committed`.
    ///
    /// A watch cancelled meanwhile (`cancelled`, checked under the hub lock; the stream
    /// cancels the token before it asks the hub to drop the watch) or whose stream is gone is
    /// not added, so a cancel racing the end of a replay never leaves a watcher behind.
    pub fn try_sync(
        &self,
        mut w: Watcher,
        delivered: i64,
        cancelled: &tokio_util::sync::CancellationToken,
    ) -> Result<(), i64> {
        let mut inner = self.inner.lock().unwrap();
        if inner.committed > delivered && !cancelled.is_cancelled() {
            return Err(inner.committed);
        }
        let stream = w.stream;
        if !cancelled.is_cancelled() && inner.streams.contains_key(&stream) {
            w.next_rev = delivered + 1;
            inner.synced.push(w);
        }
        Self::unsynced_done(&mut inner, stream);
        Ok(())
    }

    fn unsynced_done(inner: &mut Inner, stream: u64) {
        let committed = inner.committed;
        if let Some(s) = inner.streams.get_mut(&stream) {
            s.unsynced = s.unsynced.saturating_sub(1);
            if s.unsynced == 0 && s.progress_pending {
                s.progress_pending = false;
                let _ = s.tx.try_send(StreamMsg::Progress {
                    watch_id: -1,
                    rev: committed,
                });
            }
        }
    }

    /// A replaying watcher ended without syncing (cancelled or compacted).
    pub fn drop_unsynced(&self, stream: u64) {
        let mut inner = self.inner.lock().unwrap();
        Self::unsynced_done(&mut inner, stream);
    }

    /// Removes a synced watcher; false if it was not synced.
    pub fn cancel(&self, stream: u64, watch_id: i64) -> bool {
        let mut inner = self.inner.lock().unwrap();
        let before = inner.synced.len();
        inner
            .synced
            .retain(|w| !(w.stream == stream && w.watch_id == watch_id));
        inner.synced.len() != before
    }

    /// A `progress_request` on a stream: answered once every watcher on it is synced, and
    /// queued behind every event already published, so the revision it names is complete.
    pub fn request_progress(&self, stream: u64) {
        let mut inner = self.inner.lock().unwrap();
        let committed = inner.committed;
        if let Some(s) = inner.streams.get_mut(&stream) {
            if s.unsynced == 0 {
                let _ = s.tx.try_send(StreamMsg::Progress {
                    watch_id: -1,
                    rev: committed,
                });
            } else {
                s.progress_pending = true;
            }
        }
    }

    /// Periodic progress notifications for watchers created with `progress_notify`.
    /// Like etcd, a watcher that received events since the previous tick is skipped once.
    pub fn progress_tick(&self) {
        let mut inner = self.inner.lock().unwrap();
        let Inner {
            synced,
            streams,
            committed,
            ..
        } = &mut *inner;
        for w in synced.iter_mut().filter(|w| w.progress_notify) {
            if std::mem::take(&mut w.sent_since_tick) {
                continue;
            }
            if let Some(s) = streams.get(&w.stream) {
                let _ = s.tx.try_send(StreamMsg::Progress {
                    watch_id: w.watch_id,
                    rev: *committed,
                });
            }
        }
    }

    /// Fans a committed batch out. Called by the writer, in revision order, after the fsync.
    pub fn publish(&self, events: &[Arc<EventData>], committed: i64) {
        let mut inner = self.inner.lock().unwrap();
        inner.committed = committed;
        if events.is_empty() || inner.synced.is_empty() {
            return;
        }
        let Inner {
            synced, streams, ..
        } = &mut *inner;
        let header = ResponseHeader {
            revision: committed,
            ..self.ids.clone()
        };
        let mut lines: HashMap<(Wire, i64, bool, Vec<u32>), Bytes> = HashMap::new();
        let mut dropped: Vec<(u64, i64, bool)> = Vec::new();
        let mut pending_cancels: Vec<u64> = Vec::new();
        for w in synced.iter_mut() {
            let matching: Vec<u32> = (0..events.len() as u32)
                .filter(|i| w.wants(&events[*i as usize]))
                .collect();
            if matching.is_empty() {
                continue;
            }
            let Some(s) = streams.get(&w.stream) else {
                dropped.push((w.stream, w.watch_id, false));
                continue;
            };
            let line = lines
                .entry((s.wire, w.watch_id, w.prev_kv, matching))
                .or_insert_with_key(|(wire, watch_id, prev_kv, idx)| {
                    let evs: Vec<Arc<EventData>> =
                        idx.iter().map(|i| events[*i as usize].clone()).collect();
                    encode_events(*wire, &header, *watch_id, &evs, *prev_kv)
                })
                .clone();
            let msg = StreamMsg::Events {
                watch_id: w.watch_id,
                line,
            };
            match s.tx.try_send(msg) {
                Ok(()) => w.sent_since_tick = true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    dropped.push((w.stream, w.watch_id, true))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    dropped.push((w.stream, w.watch_id, false))
                }
            }
        }
        for (stream, watch_id, overflow) in dropped {
            synced.retain(|w| !(w.stream == stream && w.watch_id == watch_id));
            if overflow {
                if let Some(s) = streams.get(&stream) {
                    tracing::warn!(
                        stream,
                        watch_id,
                        "slow watcher overflowed its buffer, cancelling it"
                    );
                    s.shared.overflowed.lock().unwrap().push(watch_id);
                    // Until its cancel is written, a progress response must not claim
                    // a revision this watcher's client has not seen.
                    pending_cancels.push(stream);
                    s.shared.notify.notify_one();
                }
            }
        }
        for stream in pending_cancels {
            if let Some(s) = streams.get_mut(&stream) {
                s.unsynced += 1;
            }
        }
    }
}
