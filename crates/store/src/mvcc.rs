//! `Mvcc`: the store's shared state — the redb backend, the key index at the committed
//! revision, the lessor and the watch hub — and the read path (Range at any retained revision).

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use rkube_etcd_api::*;
use tokio::time::Instant;

use crate::apply::{finish_range, plan_range};
use crate::backend::{Backend, ReadSnapshot};
use crate::error::StoreError;
use crate::index::TreeIndex;
use crate::lease::Lessor;
use crate::metrics::StoreMetrics;
use crate::watch::event::EventData;
use crate::watch::hub::Hub;

/// The lessor as recovered from disk: every lease gets its full TTL again (as on etcd), and
/// keys are re-attached from the index.
pub fn build_lessor(index: &TreeIndex, leases: &[(i64, i64)], min_ttl: i64) -> Lessor {
    let mut lessor = Lessor::new(min_ttl);
    let now = Instant::now();
    for (id, ttl) in leases {
        lessor.insert(*id, *ttl, now);
    }
    let all = crate::keyrange::KeyRange::new(&[0], &[0]);
    for (key, meta) in index.live_in(&all) {
        if meta.lease != 0 {
            lessor.attach(meta.lease, &key);
        }
    }
    lessor
}

/// The index and the revisions readers may see.
pub struct State {
    pub index: TreeIndex,
    /// The newest durable revision; reads are served at it.
    pub current_rev: i64,
    pub compact_rev: i64,
}

pub struct Mvcc {
    pub backend: Backend,
    pub state: RwLock<State>,
    pub lessor: Mutex<Lessor>,
    pub hub: Hub,
    pub cluster_id: u64,
    pub member_id: u64,
    pub metrics: StoreMetrics,
}

/// etcd reports raft term 2 on a fresh single-member cluster; we have no raft, so it is fixed.
pub const RAFT_TERM: u64 = 2;

impl Mvcc {
    pub fn open(
        data_dir: Option<&Path>,
        cache_bytes: usize,
        min_lease_ttl: i64,
        metrics: StoreMetrics,
    ) -> Result<Arc<Self>, StoreError> {
        let backend = Backend::open(data_dir, cache_bytes)?;
        let rec = backend.recover()?;
        let lessor = build_lessor(&rec.index, &rec.leases, min_lease_ttl);
        tracing::info!(
            revision = rec.current_rev,
            compact_revision = rec.compact_rev,
            keys = rec.index.len(),
            leases = rec.leases.len(),
            "store recovered"
        );
        Ok(Arc::new(Mvcc {
            backend,
            hub: Hub::new(
                rec.current_rev,
                ResponseHeader {
                    cluster_id: rec.cluster_id,
                    member_id: rec.member_id,
                    revision: 0,
                    raft_term: RAFT_TERM,
                },
            ),
            state: RwLock::new(State {
                index: rec.index,
                current_rev: rec.current_rev,
                compact_rev: rec.compact_rev,
            }),
            lessor: Mutex::new(lessor),
            cluster_id: rec.cluster_id,
            member_id: rec.member_id,
            metrics,
        }))
    }

    pub fn header(&self, revision: i64) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision,
            raft_term: RAFT_TERM,
        }
    }

    pub fn current_rev(&self) -> i64 {
        self.state.read().unwrap().current_rev
    }

    /// A Range at the committed revision (or an older retained one). The state lock is held
    /// only to pick the revisions from the index and open a snapshot; values are read from
    /// the snapshot after it is released, so a large Range never holds up the writer.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let (plan, snap, current) = {
            let st = self.state.read().unwrap();
            let plan = plan_range(&st.index, st.current_rev, st.compact_rev, req)?;
            // The snapshot is opened under the lock, so it holds every record the plan points
            // at: a compaction committed later is not visible to it.
            let snap = self.backend.read()?;
            (plan, snap, st.current_rev)
        };
        let mut resp = finish_range(plan, req, |rev| snap.get(rev))?;
        resp.header = Some(self.header(current));
        Ok(resp)
    }

    /// History for a replaying watcher: events with main revision in `[from, to]` on `range`,
    /// at most about `max` records. Returns the events and the last revision covered.
    pub fn read_events(
        &self,
        from: i64,
        to: i64,
        max: usize,
        filter: impl Fn(&EventData) -> bool,
        prev_kv: bool,
    ) -> Result<(Vec<Arc<EventData>>, i64), StoreError> {
        let st = self.state.read().unwrap();
        if from < st.compact_rev {
            return Err(StoreError::Compacted);
        }
        let snap: ReadSnapshot = self.backend.read()?;
        let records = snap.scan(from, to, max)?;
        let covered = if records.len() >= max {
            records.last().map(|(r, _)| r.main).unwrap_or(to)
        } else {
            to
        };
        let mut out = Vec::new();
        for (rev, rec) in records {
            let kind = if rec.tombstone {
                EventType::Delete
            } else {
                EventType::Put
            };
            let kv = rec.to_kv(rev.main, false);
            let mut ev = EventData::new(rev, kind, kv, None);
            if !filter(&ev) {
                continue;
            }
            if prev_kv {
                if let Some(prev_rev) = st.index.get(&rec.key).and_then(|ki| ki.previous(rev)) {
                    ev.prev = snap.get(prev_rev)?.map(|p| p.to_kv(prev_rev.main, false));
                }
            }
            out.push(Arc::new(ev));
        }
        Ok((out, covered))
    }
}
