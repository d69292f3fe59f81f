//! Protobuf-encoded sizes of requests, which is what etcd measures: gRPC refuses a message over
//! its receive limit (`--max-request-bytes` + 512 KiB) with the exact size in the error, and
//! the server refuses a raft proposal (`InternalRaftRequest`) over `--max-request-bytes`.

use rkube_etcd_api::*;

fn varint(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn tag(field: u32) -> usize {
    varint(u64::from(field) << 3)
}

/// An int64/enum field; proto3 omits zero.
fn int(field: u32, v: i64) -> usize {
    if v == 0 {
        0
    } else {
        tag(field) + varint(v as u64)
    }
}

fn boolean(field: u32, v: bool) -> usize {
    if v {
        tag(field) + 1
    } else {
        0
    }
}

/// A length-delimited field (bytes or a message); `always` for set messages and oneofs.
fn delimited(field: u32, len: usize, always: bool) -> usize {
    if len == 0 && !always {
        0
    } else {
        tag(field) + varint(len as u64) + len
    }
}

pub fn range(r: &RangeRequest) -> usize {
    delimited(1, r.key.len(), false)
        + delimited(2, r.range_end.len(), false)
        + int(3, r.limit)
        + int(4, r.revision)
        + int(5, r.sort_order as i64)
        + int(6, r.sort_target as i64)
        + boolean(7, r.serializable)
        + boolean(8, r.keys_only)
        + boolean(9, r.count_only)
        + int(10, r.min_mod_revision)
        + int(11, r.max_mod_revision)
        + int(12, r.min_create_revision)
        + int(13, r.max_create_revision)
}

pub fn put(r: &PutRequest) -> usize {
    delimited(1, r.key.len(), false)
        + delimited(2, r.value.len(), false)
        + int(3, r.lease)
        + boolean(4, r.prev_kv)
        + boolean(5, r.ignore_value)
        + boolean(6, r.ignore_lease)
}

pub fn delete_range(r: &DeleteRangeRequest) -> usize {
    delimited(1, r.key.len(), false)
        + delimited(2, r.range_end.len(), false)
        + boolean(3, r.prev_kv)
}

fn compare(c: &Compare) -> usize {
    // The compared field is a oneof member: present even when zero.
    let target = match c.target {
        CompareTarget::Version => tag(4) + varint(c.version as u64),
        CompareTarget::Create => tag(5) + varint(c.create_revision as u64),
        CompareTarget::Mod => tag(6) + varint(c.mod_revision as u64),
        CompareTarget::Value => delimited(7, c.value.len(), true),
        CompareTarget::Lease => tag(8) + varint(c.lease as u64),
    };
    int(1, c.result as i64)
        + int(2, c.target as i64)
        + delimited(3, c.key.len(), false)
        + target
        + delimited(64, c.range_end.len(), false)
}

fn op(o: &RequestOp) -> usize {
    if let Some(r) = &o.request_range {
        delimited(1, range(r), true)
    } else if let Some(p) = &o.request_put {
        delimited(2, put(p), true)
    } else if let Some(d) = &o.request_delete_range {
        delimited(3, delete_range(d), true)
    } else if let Some(t) = &o.request_txn {
        delimited(4, txn(t), true)
    } else {
        0
    }
}

pub fn txn(t: &TxnRequest) -> usize {
    t.compare
        .iter()
        .map(|c| delimited(1, compare(c), true))
        .sum::<usize>()
        + t.success
            .iter()
            .map(|o| delimited(2, op(o), true))
            .sum::<usize>()
        + t.failure
            .iter()
            .map(|o| delimited(3, op(o), true))
            .sum::<usize>()
}

/// The size of the raft proposal carrying a request of `size` bytes in `InternalRaftRequest`
/// field `field`, with a request header whose ID takes the full 10 bytes (etcd's IDs start
/// with member bits, so they usually do).
pub fn raft(field: u32, size: usize) -> usize {
    let header = delimited(100, tag(1) + 10, true);
    header + delimited(field, size, true)
}

/// `InternalRaftRequest` field numbers.
pub const RAFT_PUT: u32 = 4;
pub const RAFT_DELETE_RANGE: u32 = 5;
pub const RAFT_TXN: u32 = 6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_etcd() {
        let p = PutRequest {
            key: b"foo".to_vec(),
            value: vec![b'a'; 2 * 1024 * 1024],
            ..Default::default()
        };
        // etcd: "grpc: received message larger than max (2097162 vs. 2097152)".
        assert_eq!(put(&p), 2_097_162);
        // etcd 3.4 accepted a 1572837-byte value with a 3-byte key, not 1572838.
        let p = PutRequest {
            key: b"foo".to_vec(),
            value: vec![b'a'; 1_572_837],
            ..Default::default()
        };
        assert_eq!(raft(RAFT_PUT, put(&p)), 1_572_864);
        assert_eq!(varint(0), 1);
        assert_eq!(varint(127), 1);
        assert_eq!(varint(128), 2);
        assert_eq!(varint(u64::MAX), 10);
    }
}
