//! What each etcd call does, on typed requests: the one home both fronts call — the JSON
//! gateway (`http`) after parsing, gRPC (`grpc`) after converting from protobuf. Validation,
//! etcd's raft-size limit, the writer and the response header live here; wire limits and
//! encodings stay with each front.

use std::sync::Arc;

use rkube_daemon::ShutdownToken;
use rkube_etcd_api::*;
use tokio::time::Instant;

use crate::apply::{WriteOp, WriteResult};
use crate::error::*;
use crate::mvcc::Mvcc;
use crate::watch_stream::WatchConfig;
use crate::writer::Writer;
use crate::{protosize, validate};

/// The etcd version this API level corresponds to (what `/version` and status report).
pub const ETCD_VERSION: &str = "3.4.23";
pub const ETCD_CLUSTER_VERSION: &str = "3.4.0";

/// Everything a request handler needs, shared by both fronts.
#[derive(Clone)]
pub struct App {
    pub mvcc: Arc<Mvcc>,
    pub writer: Writer,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub watch: Arc<WatchConfig>,
    pub shutdown: ShutdownToken,
    /// The URLs clients reach this member on (MemberList's clientURLs).
    pub client_urls: Vec<String>,
    /// Snapshots in progress (Maintenance.Snapshot), bounded.
    pub snapshots: Arc<tokio::sync::Semaphore>,
    /// Where snapshots are staged: the data directory (the system's temporary one when
    /// ephemeral).
    pub snapshot_dir: std::path::PathBuf,
}

/// etcd's limit on the raft proposal carrying a write (`--max-request-bytes`).
fn check_raft_size(field: u32, size: usize, max: usize) -> Result<(), StoreError> {
    if protosize::raft(field, size) > max {
        return Err(StoreError::invalid(ERR_REQUEST_TOO_LARGE));
    }
    Ok(())
}

impl App {
    fn header(&self, h: &mut Option<ResponseHeader>) {
        let rev = h.as_ref().map(|h| h.revision).unwrap_or(0);
        *h = Some(self.mvcc.header(rev));
    }

    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse, StoreError> {
        validate::check_range(&req)?;
        // Small reads answer inline; a scan that may touch many keys goes to the blocking pool.
        if req.count_only || req.limit > 0 && req.limit < 64 || req.range_end.is_empty() {
            return self.mvcc.range(&req);
        }
        let mvcc = self.mvcc.clone();
        tokio::task::spawn_blocking(move || mvcc.range(&req))
            .await
            .map_err(|e| StoreError::Internal(e.to_string()))?
    }

    pub async fn put(&self, req: PutRequest) -> Result<PutResponse, StoreError> {
        validate::check_put(&req)?;
        check_raft_size(
            protosize::RAFT_PUT,
            protosize::put(&req),
            self.max_request_bytes,
        )?;
        let WriteResult::Put(mut resp) = self.writer.submit(WriteOp::Put(req)).await? else {
            unreachable!("a put answers with a put")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    pub async fn delete_range(
        &self,
        req: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, StoreError> {
        validate::check_delete(&req)?;
        check_raft_size(
            protosize::RAFT_DELETE_RANGE,
            protosize::delete_range(&req),
            self.max_request_bytes,
        )?;
        let WriteResult::DeleteRange(mut resp) =
            self.writer.submit(WriteOp::DeleteRange(req)).await?
        else {
            unreachable!("a delete answers with a delete")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse, StoreError> {
        validate::check_txn(&req, self.max_txn_ops)?;
        if !validate::txn_is_read_only(&req) {
            check_raft_size(
                protosize::RAFT_TXN,
                protosize::txn(&req),
                self.max_request_bytes,
            )?;
        }
        self.mvcc.metrics.observe_txn_shape(txn_shape(&req));
        let WriteResult::Txn(mut resp) = self.writer.submit(WriteOp::Txn(req)).await? else {
            unreachable!("a txn answers with a txn")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    pub async fn compact(&self, req: CompactionRequest) -> Result<CompactionResponse, StoreError> {
        let WriteResult::Compact(mut resp) =
            self.writer.submit(WriteOp::Compact(req.revision)).await?
        else {
            unreachable!("a compaction answers with a compaction")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    pub async fn lease_grant(
        &self,
        req: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, StoreError> {
        let WriteResult::LeaseGrant(mut resp) =
            self.writer.submit(WriteOp::LeaseGrant(req)).await?
        else {
            unreachable!("a grant answers with a grant")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, StoreError> {
        let WriteResult::LeaseRevoke(mut resp) =
            self.writer.submit(WriteOp::LeaseRevoke(id)).await?
        else {
            unreachable!("a revoke answers with a revoke")
        };
        self.header(&mut resp.header);
        Ok(resp)
    }

    /// One keep-alive: the renewed TTL, or 0 for a lease that does not exist (etcd's stream
    /// answers so rather than failing).
    pub fn lease_keepalive(&self, id: i64) -> LeaseKeepAliveResponse {
        let ttl = self
            .mvcc
            .lessor
            .lock()
            .unwrap()
            .renew(id, Instant::now())
            .unwrap_or(0);
        LeaseKeepAliveResponse {
            header: Some(self.mvcc.header(self.mvcc.current_rev())),
            id,
            ttl,
        }
    }

    pub fn lease_time_to_live(&self, req: LeaseTimeToLiveRequest) -> LeaseTimeToLiveResponse {
        let rev = self.mvcc.current_rev();
        let lessor = self.mvcc.lessor.lock().unwrap();
        match lessor.get(req.id) {
            Some(l) => LeaseTimeToLiveResponse {
                header: Some(self.mvcc.header(rev)),
                id: req.id,
                ttl: l.remaining_secs(Instant::now()),
                granted_ttl: l.ttl,
                keys: if req.keys {
                    l.keys.iter().cloned().collect()
                } else {
                    Vec::new()
                },
            },
            None => LeaseTimeToLiveResponse {
                header: Some(self.mvcc.header(rev)),
                id: req.id,
                ttl: -1,
                ..Default::default()
            },
        }
    }

    pub fn lease_leases(&self) -> LeaseLeasesResponse {
        let rev = self.mvcc.current_rev();
        let ids = self.mvcc.lessor.lock().unwrap().ids();
        LeaseLeasesResponse {
            header: Some(self.mvcc.header(rev)),
            leases: ids.into_iter().map(|id| LeaseStatus { id }).collect(),
        }
    }

    pub fn status(&self) -> StatusResponse {
        let rev = self.mvcc.current_rev();
        let size = self.mvcc.backend.size() as i64;
        StatusResponse {
            header: Some(self.mvcc.header(rev)),
            version: ETCD_VERSION.into(),
            db_size: size,
            leader: self.mvcc.member_id,
            raft_index: rev as u64,
            raft_term: crate::mvcc::RAFT_TERM,
            raft_applied_index: rev as u64,
            db_size_in_use: size,
        }
    }

    /// A digest of the revision state (etcd hashes its whole backend); it is only compared
    /// between members, and there is one.
    pub fn hash(&self) -> HashResponse {
        let (rev, compact) = {
            let st = self.mvcc.state.read().unwrap();
            (st.current_rev, st.compact_rev)
        };
        let hash = (rev as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ compact as u64;
        HashResponse {
            header: Some(self.mvcc.header(rev)),
            hash: (hash >> 32) as u32 | 1,
        }
    }
}

/// Classifies a Txn by the shapes the Kubernetes apiserver sends.
fn txn_shape(t: &TxnRequest) -> &'static str {
    let single_mod = t.compare.len() == 1
        && t.compare[0].target == CompareTarget::Mod
        && t.compare[0].result == CompareResult::Equal;
    let put_only = t.success.len() == 1 && t.success[0].request_put.is_some();
    let del_only = t.success.len() == 1 && t.success[0].request_delete_range.is_some();
    match (
        single_mod,
        t.compare.first().map(|c| c.mod_revision),
        put_only,
        del_only,
    ) {
        (true, Some(0), true, _) => "create",
        (true, Some(_), true, _) => "update",
        (true, Some(_), _, true) => "delete",
        _ => "other",
    }
}
