//! The writer thread: the only code that mutates the store. Requests queue up on a channel;
//! each round takes every queued request as one batch, applies them in order (each gets its own
//! revision), commits them in one redb write transaction with one fsync, then publishes the
//! events to the watch hub and answers every request. No reply is sent before the fsync.

use std::sync::Arc;
use std::time::Instant as StdInstant;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::apply::{Applier, WriteOp, WriteResult};
use crate::backend::{BatchStore, META_COMPACT_REV, META_CURRENT_REV};
use crate::error::StoreError;
use crate::mvcc::Mvcc;
use crate::watch::event::EventData;

/// Requests applied in one group commit at most.
const MAX_BATCH: usize = 512;

pub struct WriteRequest {
    pub op: WriteOp,
    pub reply: oneshot::Sender<Result<WriteResult, StoreError>>,
}

#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<WriteRequest>,
    progress: Arc<Progress>,
}

/// What the writer is doing, for `/health`.
#[derive(Default)]
struct Progress {
    /// When the batch being applied started (milliseconds since `epoch`, +1); 0 between
    /// batches.
    batch_since_ms: std::sync::atomic::AtomicU64,
    epoch: std::sync::OnceLock<StdInstant>,
}

impl Progress {
    fn now_ms(&self) -> u64 {
        self.epoch
            .get_or_init(StdInstant::now)
            .elapsed()
            .as_millis() as u64
            + 1
    }
}

/// How long one batch may take before `/health` calls the writer stuck (a disk that stopped
/// answering fsyncs).
const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

impl Writer {
    /// Starts the writer thread. It stops when every `Writer` handle is dropped.
    pub fn start(mvcc: Arc<Mvcc>) -> Self {
        let (tx, rx) = mpsc::channel(4096);
        let progress = Arc::new(Progress::default());
        progress.now_ms();
        let p = progress.clone();
        std::thread::Builder::new()
            .name("rkube-store-writer".into())
            .spawn(move || run(mvcc, rx, p))
            .expect("spawn writer thread");
        Writer { tx, progress }
    }

    pub async fn submit(&self, op: WriteOp) -> Result<WriteResult, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteRequest { op, reply })
            .await
            .map_err(|_| StoreError::Stopped)?;
        rx.await.map_err(|_| StoreError::Stopped)?
    }

    /// Whether the writer thread is alive and keeping up: an error says why not (it has
    /// stopped, or one batch has taken longer than `STUCK_AFTER`). Between batches it waits
    /// on its queue, so a request can never wait on a writer that is neither.
    pub fn health(&self) -> Result<(), String> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.tx.is_closed() {
            return Err("the writer has stopped".into());
        }
        let p = &self.progress;
        let since = p.batch_since_ms.load(SeqCst);
        let busy_ms = if since == 0 {
            0
        } else {
            p.now_ms().saturating_sub(since)
        };
        if busy_ms > STUCK_AFTER.as_millis() as u64 {
            return Err(format!(
                "the writer has been on one batch for {} s",
                busy_ms / 1000
            ));
        }
        Ok(())
    }
}

fn run(mvcc: Arc<Mvcc>, mut rx: mpsc::Receiver<WriteRequest>, progress: Arc<Progress>) {
    use std::sync::atomic::Ordering::SeqCst;
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        progress.batch_since_ms.store(progress.now_ms(), SeqCst);
        commit_batch(&mvcc, batch);
        progress.batch_since_ms.store(0, SeqCst);
    }
    tracing::debug!("writer thread stopped");
}

fn commit_batch(mvcc: &Mvcc, batch: Vec<WriteRequest>) {
    let started = StdInstant::now();
    let n = batch.len();
    match apply_and_commit(mvcc, &batch) {
        Ok((results, events, rev)) => {
            mvcc.state.write().unwrap().current_rev = rev;
            mvcc.hub.publish(&events, rev);
            mvcc.metrics
                .commit_seconds
                .observe_duration(started.elapsed());
            mvcc.metrics.batch_size.observe(n as f64);
            for (req, res) in batch.into_iter().zip(results) {
                let _ = req.reply.send(res);
            }
        }
        Err(err) => {
            tracing::error!(error = %err, requests = n, "group commit failed; reloading state from disk");
            reload(mvcc);
            for req in batch {
                let _ = req.reply.send(Err(err.clone()));
            }
        }
    }
}

type Applied = (
    Vec<Result<WriteResult, StoreError>>,
    Vec<Arc<EventData>>,
    i64,
);

fn apply_and_commit(mvcc: &Mvcc, batch: &[WriteRequest]) -> Result<Applied, StoreError> {
    let wtx = mvcc.backend.begin_batch()?;
    let (results, events, rev, compact_changed, dirty) = {
        let mut st = mvcc.state.write().unwrap();
        let mut lessor = mvcc.lessor.lock().unwrap();
        let mut store = BatchStore::open(&wtx)?;
        let st = &mut *st;
        let start_compact = st.compact_rev;
        let mut ap = Applier {
            index: &mut st.index,
            lessor: &mut lessor,
            store: &mut store,
            rev: st.current_rev,
            compact_rev: st.compact_rev,
            batch_start_rev: st.current_rev,
            changes: Vec::new(),
            now: Instant::now(),
        };
        let mut results = Vec::with_capacity(batch.len());
        for r in batch {
            let res = ap.apply(&r.op);
            // Client errors are found before anything changes; an internal (disk) error may
            // strike halfway, so it fails the whole batch, which is then reloaded from disk.
            if let Err(e @ StoreError::Internal(_)) = &res {
                return Err(e.clone());
            }
            results.push(res);
        }
        let rev = ap.rev;
        let compact_rev = ap.compact_rev;
        let events: Vec<Arc<EventData>> = ap
            .changes
            .iter()
            .map(|c| Arc::new(EventData::from_change(c)))
            .collect();
        // Reads below a compaction fail from now on, even before it is durable.
        st.compact_rev = compact_rev;
        let dirty = store.dirty || compact_rev != start_compact;
        if dirty {
            store.set_meta(META_CURRENT_REV, rev)?;
            if compact_rev != start_compact {
                store.set_meta(META_COMPACT_REV, compact_rev)?;
            }
        }
        (results, events, rev, compact_rev != start_compact, dirty)
    };
    if dirty {
        wtx.commit()?;
    } else {
        // Only reads and failed compares: nothing to make durable.
        wtx.abort()?;
    }
    if compact_changed {
        tracing::info!(revision = rev, "compaction committed");
    }
    Ok((results, events, rev))
}

/// After a failed commit the in-memory index may hold changes that never reached disk.
fn reload(mvcc: &Mvcc) {
    match mvcc.backend.recover() {
        Ok(rec) => {
            let mut st = mvcc.state.write().unwrap();
            st.index = rec.index;
            st.current_rev = rec.current_rev;
            st.compact_rev = rec.compact_rev;
            let mut lessor = mvcc.lessor.lock().unwrap();
            let fresh = crate::mvcc::build_lessor(&st.index, &rec.leases, lessor.min_ttl);
            *lessor = fresh;
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot reload store state after a failed commit; exiting");
            std::process::exit(1);
        }
    }
}
