//! `etcdserverpb.Maintenance` (Status, Alarm, Defragment, Hash, Snapshot) and
//! `etcdserverpb.Cluster` (MemberList): one member, always the leader, never an alarm.

use std::io::Seek;
use std::pin::Pin;

use futures_util::Stream;
use rkube_etcd_api::pb;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::unary;
use crate::error::StoreError;
use crate::service::{App, ETCD_VERSION};

/// Snapshot bytes per message (etcd sends 32 KiB).
const CHUNK: usize = 32 * 1024;
/// Snapshots streamed at once; more are refused (each holds a copy of the database on disk).
pub const SNAPSHOTS_AT_ONCE: usize = 2;
/// How long a snapshot waits for its client to read before giving up.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Maintenance(pub App);

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

impl Maintenance {
    fn header(&self) -> Option<pb::ResponseHeader> {
        let mvcc = &self.0.mvcc;
        Some(mvcc.header(mvcc.current_rev()).into())
    }
}

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for Maintenance {
    /// No alarm is ever raised (the store has no space quota and one member): a GET lists
    /// none, and activating or deactivating one changes nothing.
    async fn alarm(
        &self,
        _: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        let resp = pb::AlarmResponse {
            header: self.header(),
            alarms: Vec::new(),
        };
        unary(&self.0, "maintenance/alarm", async { Ok(resp) }).await
    }

    async fn status(
        &self,
        _: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        unary(&self.0, "maintenance/status", async { Ok(self.0.status()) }).await
    }

    /// redb reuses freed pages itself and has no online defragmentation: answered as done.
    async fn defragment(
        &self,
        _: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        let resp = pb::DefragmentResponse {
            header: self.header(),
        };
        unary(&self.0, "maintenance/defragment", async { Ok(resp) }).await
    }

    async fn hash(
        &self,
        _: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        unary(&self.0, "maintenance/hash", async { Ok(self.0.hash()) }).await
    }

    type SnapshotStream = SnapshotStream;

    /// Writes the snapshot to an unnamed temporary file in the data directory (bounded
    /// memory however large the store), then streams it in chunks with the exact bytes
    /// remaining after each, and its SHA-256 last, as etcd does. At most
    /// `SNAPSHOTS_AT_ONCE` run at a time; a client that stops reading for
    /// `SEND_TIMEOUT` loses its stream.
    async fn snapshot(
        &self,
        _: Request<pb::SnapshotRequest>,
    ) -> Result<Response<SnapshotStream>, Status> {
        let permit = self.0.snapshots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted("etcdserver: too many snapshots in progress")
        })?;
        let mvcc = self.0.mvcc.clone();
        let dir = self.0.snapshot_dir.clone();
        let written = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
            let io = |e: std::io::Error| StoreError::Internal(format!("snapshot file: {e}"));
            let mut file = unnamed_file_in(&dir).map_err(io)?;
            let mut out = std::io::BufWriter::new(&mut file);
            let (revision, _) = crate::snapshot::write(&mvcc, &mut out)?;
            drop(out);
            // etcdctl takes a stream for a database only if it is whole 512-byte pages and
            // the digest (bbolt's files are): blank lines pad the last page.
            let len = file.stream_position().map_err(io)?;
            let pad = (512 - len % 512) % 512;
            std::io::Write::write_all(&mut file, &vec![b'\n'; pad as usize]).map_err(io)?;
            file.rewind().map_err(io)?;
            Ok((file, len + pad, revision))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let (file, len, revision) = written.map_err(|e| e.to_status())?;
        let header = Some(self.0.mvcc.header(revision).into());
        let (tx, rx) = mpsc::channel::<Result<pb::SnapshotResponse, Status>>(4);
        let shutdown = self.0.shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = shutdown.cancelled() => {
                    let _ = tx.try_send(Err(Status::unavailable("etcdserver: server stopped")));
                }
                _ = stream_file(tokio::fs::File::from_std(file), len, header, &tx) => {}
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// Sends `len` bytes of `file` then their SHA-256 (etcd's trailer; `remaining_bytes` counts
/// the database's bytes only, as etcd's does). Stops when the client goes away or stalls.
async fn stream_file(
    mut file: tokio::fs::File,
    len: u64,
    header: Option<pb::ResponseHeader>,
    tx: &mpsc::Sender<Result<pb::SnapshotResponse, Status>>,
) {
    use tokio::io::AsyncReadExt;
    let mut remaining = len;
    let mut sha = ring::digest::Context::new(&ring::digest::SHA256);
    let mut first = true;
    loop {
        let last = remaining == 0;
        let blob = if last {
            sha.clone().finish().as_ref().to_vec()
        } else {
            let mut buf = vec![0u8; CHUNK.min(remaining as usize)];
            if let Err(e) = file.read_exact(&mut buf).await {
                let _ = tx.send(Err(Status::internal(e.to_string()))).await;
                return;
            }
            sha.update(&buf);
            remaining -= buf.len() as u64;
            buf
        };
        let msg = pb::SnapshotResponse {
            header: if first { header } else { None },
            remaining_bytes: remaining,
            blob,
            version: if first {
                ETCD_VERSION.into()
            } else {
                String::new()
            },
        };
        first = false;
        match tokio::time::timeout(SEND_TIMEOUT, tx.send(Ok(msg))).await {
            Ok(Ok(())) if !last => {}
            _ => return,
        }
    }
}

/// A file in `dir`, unlinked at once: gone with its handle (and with the process).
fn unnamed_file_in(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!(
        ".snapshot-{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

pub struct Cluster(pub App);

#[tonic::async_trait]
impl pb::cluster_server::Cluster for Cluster {
    async fn member_list(
        &self,
        _: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let mvcc = &self.0.mvcc;
        let resp = pb::MemberListResponse {
            header: Some(mvcc.header(mvcc.current_rev()).into()),
            members: vec![pb::Member {
                id: mvcc.member_id,
                name: "rkube-store".into(),
                peer_ur_ls: Vec::new(),
                client_ur_ls: self.0.client_urls.clone(),
                is_learner: false,
            }],
        };
        unary(&self.0, "cluster/member/list", async { Ok(resp) }).await
    }
}
