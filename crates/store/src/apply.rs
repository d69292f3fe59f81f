//! The MVCC core: applies etcd write requests (put, delete-range, txn, compaction, lease
//! grant/revoke) to the key index and a record store, and evaluates ranges. It is synchronous
//! and does no I/O of its own: the writer thread feeds it a redb write transaction, tests feed
//! it a map.

use rkube_etcd_api::*;
use tokio::time::Instant;

use crate::error::*;
use crate::index::{Meta, Rev, TreeIndex};
use crate::keyrange::KeyRange;
use crate::lease::{Lessor, MAX_LEASES, MAX_LEASE_TTL};
use crate::record::Record;

/// Where records live: a redb transaction in the server, a map in tests.
pub trait RecordStore {
    fn get(&mut self, rev: Rev) -> Result<Option<Record>, StoreError>;
    fn insert(&mut self, rev: Rev, rec: &Record) -> Result<(), StoreError>;
    fn remove(&mut self, rev: Rev) -> Result<(), StoreError>;
    fn put_lease(&mut self, id: i64, ttl: i64) -> Result<(), StoreError>;
    fn remove_lease(&mut self, id: i64) -> Result<(), StoreError>;
}

/// One committed change, as the watch hub publishes it.
#[derive(Clone, Debug)]
pub struct Change {
    pub rev: Rev,
    /// The new record; a tombstone for a deletion.
    pub record: Record,
    /// The key's previous live revision, for `prev_kv`.
    pub prev: Option<(Rev, Record)>,
}

/// A write the writer thread applies in revision order.
#[derive(Debug)]
pub enum WriteOp {
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    Compact(i64),
    LeaseGrant(LeaseGrantRequest),
    LeaseRevoke(i64),
}

#[derive(Debug)]
pub enum WriteResult {
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact(CompactionResponse),
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
}

/// The revision being built by one request: every change in it shares `main`.
struct TxnCtx {
    main: i64,
    sub: u32,
}

impl TxnCtx {
    fn next(&mut self) -> Rev {
        let r = Rev {
            main: self.main,
            sub: self.sub,
        };
        self.sub += 1;
        r
    }
    fn changed(&self) -> bool {
        self.sub > 0
    }
    /// The revision a read inside this request sees (etcd: `beginRev`, or `+1` after a write).
    fn read_rev(&self) -> i64 {
        if self.changed() {
            self.main
        } else {
            self.main - 1
        }
    }
}

pub fn header(rev: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision: rev,
        ..Default::default()
    })
}

pub struct Applier<'a, S: RecordStore> {
    pub index: &'a mut TreeIndex,
    pub lessor: &'a mut Lessor,
    pub store: &'a mut S,
    /// The newest assigned main revision.
    pub rev: i64,
    pub compact_rev: i64,
    /// The committed revision when the batch started: compaction may not go past it.
    pub batch_start_rev: i64,
    pub changes: Vec<Change>,
    pub now: Instant,
}

impl<'a, S: RecordStore> Applier<'a, S> {
    pub fn apply(&mut self, op: &WriteOp) -> Result<WriteResult, StoreError> {
        match op {
            WriteOp::Put(r) => self.put(r).map(WriteResult::Put),
            WriteOp::DeleteRange(r) => self.delete_range(r).map(WriteResult::DeleteRange),
            WriteOp::Txn(r) => self.txn(r).map(WriteResult::Txn),
            WriteOp::Compact(rev) => self.compact(*rev).map(WriteResult::Compact),
            WriteOp::LeaseGrant(r) => self.lease_grant(r).map(WriteResult::LeaseGrant),
            WriteOp::LeaseRevoke(id) => self.lease_revoke(*id).map(WriteResult::LeaseRevoke),
        }
    }

    fn begin(&self) -> TxnCtx {
        TxnCtx {
            main: self.rev + 1,
            sub: 0,
        }
    }

    fn finish(&mut self, t: &TxnCtx) {
        if t.changed() {
            self.rev = t.main;
        }
    }

    pub fn put(&mut self, req: &PutRequest) -> Result<PutResponse, StoreError> {
        self.check_put(req)?;
        let mut t = self.begin();
        let resp = self.do_put(&mut t, req)?;
        self.finish(&t);
        Ok(resp)
    }

    pub fn delete_range(
        &mut self,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        let mut t = self.begin();
        let resp = self.do_delete(&mut t, req)?;
        self.finish(&t);
        Ok(resp)
    }

    pub fn txn(&mut self, req: &TxnRequest) -> Result<TxnResponse, StoreError> {
        let mut path = Vec::new();
        self.compare_path(req, &mut path)?;
        let mut it = path.iter().copied();
        self.check_txn(req, &mut it)?;
        let mut t = self.begin();
        let mut it = path.iter().copied();
        let mut resp = self.do_txn(&mut t, req, &mut it)?;
        self.finish(&t);
        resp.header = header(self.rev);
        Ok(resp)
    }

    // ---- checks that run before anything is changed ------------------------------------

    fn check_put(&mut self, req: &PutRequest) -> Result<(), StoreError> {
        if (req.ignore_value || req.ignore_lease) && self.index.latest(&req.key).is_none() {
            return Err(StoreError::invalid(ERR_KEY_NOT_FOUND));
        }
        if req.lease != 0 && !self.lessor.contains(req.lease) {
            return Err(StoreError::LeaseNotFound);
        }
        Ok(())
    }

    /// Evaluates every compare of the txn tree up front, in pre-order (etcd's `compareToPath`).
    fn compare_path(&mut self, req: &TxnRequest, path: &mut Vec<bool>) -> Result<(), StoreError> {
        let mut ok = true;
        for c in &req.compare {
            if !self.compare(c)? {
                ok = false;
                break;
            }
        }
        path.push(ok);
        let ops = if ok { &req.success } else { &req.failure };
        for op in ops {
            if let Some(inner) = &op.request_txn {
                self.compare_path(inner, path)?;
            }
        }
        Ok(())
    }

    fn check_txn(
        &mut self,
        req: &TxnRequest,
        path: &mut impl Iterator<Item = bool>,
    ) -> Result<(), StoreError> {
        let ok = path.next().unwrap_or(false);
        let ops = if ok { &req.success } else { &req.failure };
        for op in ops {
            if let Some(p) = &op.request_put {
                self.check_put(p)?;
            }
            if let Some(r) = &op.request_range {
                self.check_range_rev(r.revision)?;
            }
            if let Some(inner) = &op.request_txn {
                self.check_txn(inner, path)?;
            }
        }
        Ok(())
    }

    fn check_range_rev(&self, revision: i64) -> Result<(), StoreError> {
        if revision > self.rev {
            return Err(StoreError::FutureRevision);
        }
        if revision > 0 && revision < self.compact_rev {
            return Err(StoreError::Compacted);
        }
        Ok(())
    }

    fn compare(&mut self, c: &Compare) -> Result<bool, StoreError> {
        let range = KeyRange::new(&c.key, &c.range_end);
        let live: Vec<(Vec<u8>, Meta)> = if range.is_single() {
            self.index
                .latest(&c.key)
                .map(|m| (c.key.clone(), m))
                .into_iter()
                .collect()
        } else {
            self.index.live_in(&range)
        };
        if live.is_empty() {
            if c.target == CompareTarget::Value {
                // A missing key has no value to compare; etcd always fails this.
                return Ok(false);
            }
            return Ok(compare_meta(c, &Meta::default(), &[]));
        }
        for (key, meta) in &live {
            let value = if c.target == CompareTarget::Value {
                let rev = self
                    .latest_rev(key)
                    .ok_or_else(|| StoreError::Internal("index lost a key".into()))?;
                self.store.get(rev)?.map(|r| r.value).unwrap_or_default()
            } else {
                Vec::new()
            };
            if !compare_meta(c, meta, &value) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn latest_rev(&self, key: &[u8]) -> Option<Rev> {
        self.index
            .get(key)
            .and_then(|ki| ki.revs.last())
            .map(|e| e.rev)
    }

    // ---- the operations ----------------------------------------------------------------

    fn do_put(&mut self, t: &mut TxnCtx, req: &PutRequest) -> Result<PutResponse, StoreError> {
        let prev_meta = self.index.latest(&req.key);
        let prev = match prev_meta {
            Some(_) => {
                let rev = self
                    .latest_rev(&req.key)
                    .expect("latest meta implies an entry");
                self.store.get(rev)?.map(|r| (rev, r))
            }
            None => None,
        };
        let value = if req.ignore_value {
            prev.as_ref()
                .map(|(_, r)| r.value.clone())
                .unwrap_or_default()
        } else {
            req.value.clone()
        };
        let old_lease = prev_meta.map(|m| m.lease).unwrap_or(0);
        let lease = if req.ignore_lease {
            old_lease
        } else {
            req.lease
        };
        let rev = t.next();
        let (create_revision, version) = match prev_meta {
            Some(m) => (m.create_revision, m.version + 1),
            None => (t.main, 1),
        };
        let record = Record {
            key: req.key.clone(),
            value,
            create_revision,
            version,
            lease,
            tombstone: false,
        };
        self.store.insert(rev, &record)?;
        self.index.put(
            &req.key,
            rev,
            Meta {
                create_revision,
                mod_revision: t.main,
                version,
                lease,
            },
        );
        if old_lease != 0 && old_lease != lease {
            self.lessor.detach(old_lease, &req.key);
        }
        if lease != 0 {
            self.lessor.attach(lease, &req.key);
        }
        let prev_kv = if req.prev_kv {
            prev.as_ref().map(|(r, rec)| rec.to_kv(r.main, false))
        } else {
            None
        };
        self.changes.push(Change { rev, record, prev });
        Ok(PutResponse {
            header: header(t.main),
            prev_kv,
        })
    }

    fn do_delete(
        &mut self,
        t: &mut TxnCtx,
        req: &DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        let range = KeyRange::new(&req.key, &req.range_end);
        let live = if range.is_single() {
            self.index
                .latest(&req.key)
                .map(|m| (req.key.clone(), m))
                .into_iter()
                .collect()
        } else {
            self.index.live_in(&range)
        };
        let mut prev_kvs = Vec::new();
        for (key, meta) in &live {
            let prev_rev = self.latest_rev(key).expect("live key has an entry");
            let prev = self.store.get(prev_rev)?;
            let rev = t.next();
            let record = Record {
                key: key.clone(),
                tombstone: true,
                ..Default::default()
            };
            self.store.insert(rev, &record)?;
            self.index.tombstone(key, rev);
            if meta.lease != 0 {
                self.lessor.detach(meta.lease, key);
            }
            if req.prev_kv {
                if let Some(p) = &prev {
                    prev_kvs.push(p.to_kv(prev_rev.main, false));
                }
            }
            self.changes.push(Change {
                rev,
                record,
                prev: prev.map(|p| (prev_rev, p)),
            });
        }
        Ok(DeleteRangeResponse {
            header: header(t.read_rev()),
            deleted: live.len() as i64,
            prev_kvs,
        })
    }

    fn do_txn(
        &mut self,
        t: &mut TxnCtx,
        req: &TxnRequest,
        path: &mut impl Iterator<Item = bool>,
    ) -> Result<TxnResponse, StoreError> {
        let ok = path.next().unwrap_or(false);
        let ops = if ok { &req.success } else { &req.failure };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            let r = if let Some(r) = &op.request_range {
                let at = t.read_rev();
                let mut resp = execute_range(self.index, at, self.compact_rev, r, |rev| {
                    self.store.get(rev)
                })?;
                resp.header = header(at);
                ResponseOp {
                    response_range: Some(resp),
                    ..Default::default()
                }
            } else if let Some(p) = &op.request_put {
                ResponseOp {
                    response_put: Some(self.do_put(t, p)?),
                    ..Default::default()
                }
            } else if let Some(d) = &op.request_delete_range {
                ResponseOp {
                    response_delete_range: Some(self.do_delete(t, d)?),
                    ..Default::default()
                }
            } else if let Some(inner) = &op.request_txn {
                let mut resp = self.do_txn(t, inner, path)?;
                // etcd leaves a nested txn's header empty.
                resp.header = Some(ResponseHeader::default());
                ResponseOp {
                    response_txn: Some(resp),
                    ..Default::default()
                }
            } else {
                return Err(StoreError::invalid(ERR_KEY_NOT_FOUND));
            };
            responses.push(r);
        }
        Ok(TxnResponse {
            header: None,
            succeeded: ok,
            responses,
        })
    }

    pub fn compact(&mut self, rev: i64) -> Result<CompactionResponse, StoreError> {
        // A revision assigned earlier in this uncommitted batch is still in the future for
        // every reader.
        if rev > self.batch_start_rev {
            return Err(StoreError::FutureRevision);
        }
        if rev <= self.compact_rev {
            return Err(StoreError::Compacted);
        }
        for r in self.index.compact(rev) {
            self.store.remove(r)?;
        }
        self.compact_rev = rev;
        Ok(CompactionResponse {
            header: header(self.rev),
        })
    }

    pub fn lease_grant(
        &mut self,
        req: &LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, StoreError> {
        if req.ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge);
        }
        if self.lessor.len() >= MAX_LEASES {
            return Err(StoreError::Exhausted(format!(
                "etcdserver: too many leases (the limit is {MAX_LEASES})"
            )));
        }
        let id = if req.id == 0 {
            loop {
                let id = rand::random::<i64>() & i64::MAX;
                if id != 0 && !self.lessor.contains(id) {
                    break id;
                }
            }
        } else {
            req.id
        };
        if self.lessor.contains(id) {
            return Err(StoreError::LeaseExists);
        }
        let ttl = self.lessor.effective_ttl(req.ttl);
        self.store.put_lease(id, ttl)?;
        self.lessor.insert(id, ttl, self.now);
        Ok(LeaseGrantResponse {
            header: header(self.rev),
            id,
            ttl,
            error: String::new(),
        })
    }

    pub fn lease_revoke(&mut self, id: i64) -> Result<LeaseRevokeResponse, StoreError> {
        let Some(lease) = self.lessor.get(id) else {
            return Err(StoreError::LeaseNotFound);
        };
        let keys: Vec<Vec<u8>> = lease.keys.iter().cloned().collect();
        let mut t = self.begin();
        for key in keys {
            let req = DeleteRangeRequest {
                key,
                range_end: Vec::new(),
                prev_kv: false,
            };
            self.do_delete(&mut t, &req)?;
        }
        self.finish(&t);
        self.lessor.remove(id);
        self.store.remove_lease(id)?;
        Ok(LeaseRevokeResponse {
            header: header(self.rev),
        })
    }
}

fn compare_meta(c: &Compare, m: &Meta, value: &[u8]) -> bool {
    use std::cmp::Ordering;
    let ord: Ordering = match c.target {
        CompareTarget::Version => m.version.cmp(&c.version),
        CompareTarget::Create => m.create_revision.cmp(&c.create_revision),
        CompareTarget::Mod => m.mod_revision.cmp(&c.mod_revision),
        CompareTarget::Lease => m.lease.cmp(&c.lease),
        CompareTarget::Value => value.cmp(c.value.as_slice()),
    };
    match c.result {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Greater => ord == Ordering::Greater,
        CompareResult::Less => ord == Ordering::Less,
    }
}

/// A Range with etcd 3.4's semantics, read at `current` (or `req.revision`) through `fetch`.
/// The header is left for the caller.
pub fn execute_range(
    index: &TreeIndex,
    current: i64,
    compact_rev: i64,
    req: &RangeRequest,
    fetch: impl FnMut(Rev) -> Result<Option<Record>, StoreError>,
) -> Result<RangeResponse, StoreError> {
    let plan = plan_range(index, current, compact_rev, req)?;
    finish_range(plan, req, fetch)
}

/// What a Range reads, decided from the index alone (cheap, under the state lock).
pub struct RangePlan {
    revs: Vec<Rev>,
    count: usize,
}

/// The revisions a Range will read, checked against the current and compacted revisions.
pub fn plan_range(
    index: &TreeIndex,
    current: i64,
    compact_rev: i64,
    req: &RangeRequest,
) -> Result<RangePlan, StoreError> {
    let at = if req.revision <= 0 {
        current
    } else {
        req.revision
    };
    if at > current {
        return Err(StoreError::FutureRevision);
    }
    if at < compact_rev {
        return Err(StoreError::Compacted);
    }
    let range = KeyRange::new(&req.key, &req.range_end);
    // etcd pushes the limit (+1 for `more`) down only when nothing reorders or drops keys.
    let pushed_limit = if req.sort_order != SortOrder::None || filtered(req) || req.limit <= 0 {
        0
    } else {
        req.limit as usize + 1
    };
    let (revs, count) = index.range_at(&range, at, if req.count_only { 1 } else { pushed_limit });
    Ok(RangePlan {
        revs: revs.into_iter().map(|(_, rev)| rev).collect(),
        count,
    })
}

fn filtered(req: &RangeRequest) -> bool {
    req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0
}

/// Reads a planned Range's values (from a snapshot, without the state lock) and shapes the
/// response: filters, order, limit, keys only.
pub fn finish_range(
    plan: RangePlan,
    req: &RangeRequest,
    mut fetch: impl FnMut(Rev) -> Result<Option<Record>, StoreError>,
) -> Result<RangeResponse, StoreError> {
    let RangePlan { revs, count } = plan;
    let filtered = filtered(req);
    let mut resp = RangeResponse {
        header: None,
        kvs: Vec::new(),
        more: false,
        count: count as i64,
    };
    if req.count_only {
        return Ok(resp);
    }
    let mut kvs = Vec::with_capacity(revs.len());
    for rev in &revs {
        if let Some(rec) = fetch(*rev)? {
            kvs.push(rec.to_kv(rev.main, false));
        }
    }
    if filtered {
        kvs.retain(|kv| {
            !(req.max_mod_revision != 0 && kv.mod_revision > req.max_mod_revision
                || req.min_mod_revision != 0 && kv.mod_revision < req.min_mod_revision
                || req.max_create_revision != 0 && kv.create_revision > req.max_create_revision
                || req.min_create_revision != 0 && kv.create_revision < req.min_create_revision)
        });
    }
    let mut order = req.sort_order;
    if req.sort_target != SortTarget::Key && order == SortOrder::None {
        order = SortOrder::Ascend;
    }
    if order != SortOrder::None {
        let key_fn = |a: &KeyValue, b: &KeyValue| match req.sort_target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        };
        if order == SortOrder::Descend {
            kvs.sort_by(|a, b| key_fn(b, a));
        } else {
            kvs.sort_by(key_fn);
        }
    }
    if req.limit > 0 && kvs.len() > req.limit as usize {
        kvs.truncate(req.limit as usize);
        resp.more = true;
    }
    if req.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    resp.kvs = kvs;
    Ok(resp)
}
