//! The store's snapshot (Maintenance.Snapshot, `etcdctl snapshot save`): every key at one
//! revision, in the file format `rkube snapshot save` writes (so `rkube snapshot restore`
//! reads either) — JSON lines: `{"kind":"RkubeSnapshot","version":1,"cluster":…,
//! "revision":…,"keys":N}`, then `{"k":base64,"v":base64[,"lease":true]}` per key. etcd
//! streams its bbolt file instead; no client reads the blob's format, only restore tools.
//! Maintenance.Snapshot pads it with blank lines to whole 512-byte pages and appends the
//! SHA-256 of that, as etcd's stream looks; `rkube snapshot restore` checks and strips both.

use std::io::Write;

use rkube_etcd_api::codec::encode_b64;
use rkube_etcd_api::RangeRequest;

use crate::error::StoreError;
use crate::mvcc::Mvcc;

/// Keys read per page.
const PAGE: i64 = 1000;

/// Writes every key at the current revision to `out`; returns the revision and key count.
/// Pages are read at that one revision, so writes meanwhile are not in it (a compaction past
/// it fails the snapshot with `Compacted`).
pub fn write(mvcc: &Mvcc, out: &mut impl Write) -> Result<(i64, i64), StoreError> {
    let io = |e: std::io::Error| StoreError::Internal(format!("writing the snapshot: {e}"));
    let all = |key: Vec<u8>, revision: i64| RangeRequest {
        key,
        range_end: vec![0],
        revision,
        ..Default::default()
    };
    let counted = mvcc.range(&RangeRequest {
        count_only: true,
        ..all(vec![0], 0)
    })?;
    let revision = counted.header.map(|h| h.revision).unwrap_or_default();
    let header = serde_json::json!({
        "kind": "RkubeSnapshot",
        "version": 1,
        "cluster": "rkube-store",
        "revision": revision,
        "keys": counted.count,
    });
    writeln!(out, "{header}").map_err(io)?;
    let mut from = vec![0];
    let mut written = 0i64;
    loop {
        let page = mvcc.range(&RangeRequest {
            limit: PAGE,
            ..all(from.clone(), revision)
        })?;
        for kv in &page.kvs {
            let mut line = format!(
                r#"{{"k":"{}","v":"{}""#,
                encode_b64(&kv.key),
                encode_b64(&kv.value)
            );
            if kv.lease != 0 {
                line.push_str(r#","lease":true"#);
            }
            line.push('}');
            writeln!(out, "{line}").map_err(io)?;
        }
        written += page.kvs.len() as i64;
        match page.kvs.last() {
            Some(last) if page.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    out.flush().map_err(io)?;
    Ok((revision, written))
}
