//! Upstream's storage compactor (`etcd3/compact.go`): every interval, CAS-write the revision
//! seen one interval ago into `compact_rev_key` and compact to it, so history between one and
//! two intervals is always kept. Several apiservers coordinate through the key's version.

use std::time::Duration;

use rkube_daemon::ShutdownToken;
use rkube_etcd_api::*;

pub const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";

pub async fn run(client: EtcdClient, interval: Duration, shutdown: ShutdownToken) {
    let mut version = 0i64;
    let mut rev = 0i64;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match compact_once(&client, version, rev).await {
            Ok((v, r)) => {
                version = v;
                rev = r;
            }
            Err(e) => tracing::warn!(error = %e, "compaction round failed"),
        }
    }
}

/// One round; returns the key version and the revision to compact to next time.
pub async fn compact_once(
    client: &EtcdClient,
    version: i64,
    rev: i64,
) -> Result<(i64, i64), EtcdError> {
    let txn = TxnRequest {
        compare: vec![Compare {
            target: CompareTarget::Version,
            key: COMPACT_REV_KEY.to_vec(),
            version,
            ..Default::default()
        }],
        success: vec![RequestOp::put(PutRequest {
            key: COMPACT_REV_KEY.to_vec(),
            value: rev.to_string().into_bytes(),
            ..Default::default()
        })],
        failure: vec![RequestOp::range(RangeRequest {
            key: COMPACT_REV_KEY.to_vec(),
            ..Default::default()
        })],
    };
    let resp = client.txn(&txn).await?;
    let cur_rev = resp.header.as_ref().map(|h| h.revision).unwrap_or(0);
    if !resp.succeeded {
        let v = resp
            .responses
            .first()
            .and_then(|r| r.response_range.as_ref())
            .and_then(|r| r.kvs.first())
            .map(|kv| kv.version)
            .unwrap_or(0);
        return Ok((v, cur_rev));
    }
    if rev > 0 {
        match client
            .compact(&CompactionRequest {
                revision: rev,
                physical: false,
            })
            .await
        {
            Ok(_) => tracing::info!(revision = rev, "compacted storage"),
            Err(e) if e.is_compacted() => {}
            Err(e) => return Err(e),
        }
    }
    Ok((version + 1, cur_rev))
}
