//! Request checks etcd runs before a request reaches the MVCC core (`v3rpc/key.go`):
//! empty keys, contradictory put flags, txn size and overlapping writes, request size.

use rkube_etcd_api::*;

use crate::error::*;
use crate::keyrange::KeyRange;

pub fn check_range(r: &RangeRequest) -> Result<(), StoreError> {
    if r.key.is_empty() {
        return Err(StoreError::invalid(ERR_EMPTY_KEY));
    }
    Ok(())
}

pub fn check_put(r: &PutRequest) -> Result<(), StoreError> {
    if r.key.is_empty() {
        return Err(StoreError::invalid(ERR_EMPTY_KEY));
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(StoreError::invalid(ERR_VALUE_PROVIDED));
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(StoreError::invalid(ERR_LEASE_PROVIDED));
    }
    Ok(())
}

pub fn check_delete(r: &DeleteRangeRequest) -> Result<(), StoreError> {
    if r.key.is_empty() {
        return Err(StoreError::invalid(ERR_EMPTY_KEY));
    }
    Ok(())
}

/// `checkTxnRequest` followed by `checkIntervals` on both branches.
pub fn check_txn(r: &TxnRequest, max_ops: usize) -> Result<(), StoreError> {
    check_txn_request(r, max_ops as i64)?;
    check_intervals(&r.success)?;
    check_intervals(&r.failure)?;
    Ok(())
}

fn check_txn_request(r: &TxnRequest, max_ops: i64) -> Result<(), StoreError> {
    let opc = r.compare.len().max(r.success.len()).max(r.failure.len()) as i64;
    if opc > max_ops {
        return Err(StoreError::invalid(ERR_TOO_MANY_OPS));
    }
    if r.compare.iter().any(|c| c.key.is_empty()) {
        return Err(StoreError::invalid(ERR_EMPTY_KEY));
    }
    for op in r.success.iter().chain(&r.failure) {
        check_op(op, max_ops - opc)?;
    }
    Ok(())
}

fn check_op(op: &RequestOp, max_ops: i64) -> Result<(), StoreError> {
    if let Some(r) = &op.request_range {
        check_range(r)
    } else if let Some(p) = &op.request_put {
        check_put(p)
    } else if let Some(d) = &op.request_delete_range {
        check_delete(d)
    } else if let Some(t) = &op.request_txn {
        check_txn_request(t, max_ops)
    } else {
        // An empty RequestOp.
        Err(StoreError::invalid(ERR_KEY_NOT_FOUND))
    }
}

/// Puts may not overlap other puts or deletes of the same branch (nested then/else puts may
/// repeat each other, since only one of them runs). Returns the puts and deletes seen.
fn check_intervals(ops: &[RequestOp]) -> Result<(Vec<Vec<u8>>, Vec<KeyRange>), StoreError> {
    let dup = || StoreError::invalid(ERR_DUPLICATE_KEY);
    let mut dels: Vec<KeyRange> = ops
        .iter()
        .filter_map(|op| op.request_delete_range.as_ref())
        .map(|d| KeyRange::new(&d.key, &d.range_end))
        .collect();
    let hits = |dels: &[KeyRange], k: &[u8]| dels.iter().any(|d| d.contains(k));
    let mut puts: Vec<Vec<u8>> = Vec::new();
    for op in ops {
        let Some(t) = &op.request_txn else { continue };
        let (puts_then, dels_then) = check_intervals(&t.success)?;
        let (puts_else, dels_else) = check_intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || hits(&dels, k) {
                return Err(dup());
            }
            puts.push(k.clone());
        }
        for k in &puts_else {
            if puts.contains(k) && !puts_then.contains(k) {
                return Err(dup());
            }
            if hits(&dels, k) {
                return Err(dup());
            }
            puts.push(k.clone());
        }
        dels.extend(dels_then);
        dels.extend(dels_else);
    }
    for op in ops {
        let Some(p) = &op.request_put else { continue };
        if puts.contains(&p.key) || hits(&dels, &p.key) {
            return Err(dup());
        }
        puts.push(p.key.clone());
    }
    Ok((puts, dels))
}

/// Whether a txn only reads (etcd serves those without a raft proposal, so without the
/// `--max-request-bytes` check).
pub fn txn_is_read_only(t: &TxnRequest) -> bool {
    t.success.iter().chain(&t.failure).all(|op| {
        op.request_range.is_some() || op.request_txn.as_ref().is_some_and(txn_is_read_only)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str) -> RequestOp {
        RequestOp::put(PutRequest {
            key: k.into(),
            value: b"v".to_vec(),
            ..Default::default()
        })
    }
    fn del(k: &str, end: &str) -> RequestOp {
        RequestOp::delete_range(DeleteRangeRequest {
            key: k.into(),
            range_end: end.into(),
            prev_kv: false,
        })
    }

    #[test]
    fn duplicate_keys() {
        let t = TxnRequest {
            success: vec![put("a"), put("a")],
            ..Default::default()
        };
        assert_eq!(
            check_txn(&t, 128).unwrap_err(),
            StoreError::invalid(ERR_DUPLICATE_KEY)
        );
        let t = TxnRequest {
            success: vec![put("a/1"), del("a/", "a0")],
            ..Default::default()
        };
        assert!(check_txn(&t, 128).is_err());
        let t = TxnRequest {
            success: vec![del("a", ""), del("a", "")],
            ..Default::default()
        };
        assert!(check_txn(&t, 128).is_ok());
        let nested = TxnRequest {
            success: vec![put("x")],
            failure: vec![put("x")],
            ..Default::default()
        };
        let t = TxnRequest {
            success: vec![RequestOp::txn(nested)],
            ..Default::default()
        };
        assert!(check_txn(&t, 128).is_ok());
        let t = TxnRequest {
            success: vec![put("a"), put("b")],
            failure: vec![put("a")],
            ..Default::default()
        };
        assert!(check_txn(&t, 128).is_ok());
    }

    #[test]
    fn too_many_ops_and_empty_ops() {
        let t = TxnRequest {
            success: (0..129).map(|i| put(&format!("k{i}"))).collect(),
            ..Default::default()
        };
        assert_eq!(
            check_txn(&t, 128).unwrap_err(),
            StoreError::invalid(ERR_TOO_MANY_OPS)
        );
        let t = TxnRequest {
            success: vec![RequestOp::default()],
            ..Default::default()
        };
        assert_eq!(
            check_txn(&t, 128).unwrap_err(),
            StoreError::invalid(ERR_KEY_NOT_FOUND)
        );
    }

    #[test]
    fn put_flags() {
        let p = PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ignore_value: true,
            ..Default::default()
        };
        assert_eq!(
            check_put(&p).unwrap_err(),
            StoreError::invalid(ERR_VALUE_PROVIDED)
        );
        let p = PutRequest {
            key: vec![],
            ..Default::default()
        };
        assert_eq!(
            check_put(&p).unwrap_err(),
            StoreError::invalid(ERR_EMPTY_KEY)
        );
    }
}
