//! The one conversion between the JSON-gateway types (`crate::types`, which rkube-store's core
//! and the apiserver's storage layer work with) and the gRPC messages (`pb`), both ways.
//! Fields move (no byte copies); enum numbers unknown to rkube become the default, as
//! protobuf's open enums read into a closed set.

use super::etcdserverpb as pb;
use crate::types as t;

/// `Option`/`Vec` of convertible messages.
trait Conv<T> {
    fn conv(self) -> T;
}

impl<A: Into<B>, B> Conv<Option<B>> for Option<A> {
    fn conv(self) -> Option<B> {
        self.map(Into::into)
    }
}

impl<A: Into<B>, B> Conv<Vec<B>> for Vec<A> {
    fn conv(self) -> Vec<B> {
        self.into_iter().map(Into::into).collect()
    }
}

/// Both directions for messages whose fields have the same names: `same` fields move as
/// they are, `conv` fields are nested messages (optional or repeated).
macro_rules! both {
    ($a:ident { $($same:ident),* $(,)? } { $($conv:ident),* $(,)? }) => {
        both!($a => $a { $($same),* } { $($conv),* });
    };
    ($a:ident => $b:ident { $($same:ident),* $(,)? } { $($conv:ident),* $(,)? }) => {
        impl From<t::$a> for pb::$b {
            #[allow(clippy::needless_update)]
            fn from(x: t::$a) -> Self {
                pb::$b { $($same: x.$same,)* $($conv: Conv::conv(x.$conv),)* ..Default::default() }
            }
        }
        impl From<pb::$b> for t::$a {
            #[allow(clippy::needless_update)]
            fn from(x: pb::$b) -> Self {
                t::$a { $($same: x.$same,)* $($conv: Conv::conv(x.$conv),)* ..Default::default() }
            }
        }
    };
}

both!(ResponseHeader { cluster_id, member_id, revision, raft_term } {});
both!(KeyValue { key, create_revision, mod_revision, version, value, lease } {});
both!(RangeResponse { more, count } { header, kvs });
both!(PutRequest { key, value, lease, prev_kv, ignore_value, ignore_lease } {});
both!(PutResponse {} { header, prev_kv });
both!(DeleteRangeRequest { key, range_end, prev_kv } {});
both!(DeleteRangeResponse { deleted } { header, prev_kvs });
both!(TxnRequest {} { compare, success, failure });
both!(TxnResponse { succeeded } { header, responses });
both!(CompactionRequest { revision, physical } {});
both!(CompactionResponse {} { header });
both!(LeaseGrantRequest { ttl, id } {});
both!(LeaseGrantResponse { id, ttl, error } { header });
both!(LeaseIdRequest => LeaseRevokeRequest { id } {});
both!(LeaseIdRequest => LeaseKeepAliveRequest { id } {});
both!(LeaseRevokeResponse {} { header });
both!(LeaseKeepAliveResponse { id, ttl } { header });
both!(LeaseTimeToLiveRequest { id, keys } {});
both!(LeaseTimeToLiveResponse { id, ttl, granted_ttl, keys } { header });
both!(LeaseStatus { id } {});
both!(LeaseLeasesResponse {} { header, leases });
both!(StatusResponse { version, db_size, leader, raft_index, raft_term, raft_applied_index, db_size_in_use } { header });
both!(HashResponse { hash } { header });
both!(WatchCancelRequest { watch_id } {});
both!(WatchResponse { watch_id, created, canceled, compact_revision, cancel_reason, fragment } { header, events });

impl From<t::RangeRequest> for pb::RangeRequest {
    fn from(x: t::RangeRequest) -> Self {
        pb::RangeRequest {
            key: x.key,
            range_end: x.range_end,
            limit: x.limit,
            revision: x.revision,
            sort_order: x.sort_order.as_i32(),
            sort_target: x.sort_target.as_i32(),
            serializable: x.serializable,
            keys_only: x.keys_only,
            count_only: x.count_only,
            min_mod_revision: x.min_mod_revision,
            max_mod_revision: x.max_mod_revision,
            min_create_revision: x.min_create_revision,
            max_create_revision: x.max_create_revision,
        }
    }
}

impl From<pb::RangeRequest> for t::RangeRequest {
    fn from(x: pb::RangeRequest) -> Self {
        t::RangeRequest {
            key: x.key,
            range_end: x.range_end,
            limit: x.limit,
            revision: x.revision,
            sort_order: t::SortOrder::from_i32(x.sort_order),
            sort_target: t::SortTarget::from_i32(x.sort_target),
            serializable: x.serializable,
            keys_only: x.keys_only,
            count_only: x.count_only,
            min_mod_revision: x.min_mod_revision,
            max_mod_revision: x.max_mod_revision,
            min_create_revision: x.min_create_revision,
            max_create_revision: x.max_create_revision,
        }
    }
}

/// A JSON op sets one field; if a malformed one sets several, the first counts (the store
/// validates JSON ops before they get here).
impl From<t::RequestOp> for pb::RequestOp {
    fn from(x: t::RequestOp) -> Self {
        use pb::request_op::Request;
        let request = if let Some(r) = x.request_range {
            Some(Request::RequestRange(r.into()))
        } else if let Some(r) = x.request_put {
            Some(Request::RequestPut(r.into()))
        } else if let Some(r) = x.request_delete_range {
            Some(Request::RequestDeleteRange(r.into()))
        } else {
            x.request_txn.map(|r| Request::RequestTxn(r.into()))
        };
        pb::RequestOp { request }
    }
}

impl From<pb::RequestOp> for t::RequestOp {
    fn from(x: pb::RequestOp) -> Self {
        use pb::request_op::Request;
        match x.request {
            Some(Request::RequestRange(r)) => t::RequestOp::range(r.into()),
            Some(Request::RequestPut(r)) => t::RequestOp::put(r.into()),
            Some(Request::RequestDeleteRange(r)) => t::RequestOp::delete_range(r.into()),
            Some(Request::RequestTxn(r)) => t::RequestOp::txn(r.into()),
            None => t::RequestOp::default(),
        }
    }
}

impl From<t::ResponseOp> for pb::ResponseOp {
    fn from(x: t::ResponseOp) -> Self {
        use pb::response_op::Response;
        let response = if let Some(r) = x.response_range {
            Some(Response::ResponseRange(r.into()))
        } else if let Some(r) = x.response_put {
            Some(Response::ResponsePut(r.into()))
        } else if let Some(r) = x.response_delete_range {
            Some(Response::ResponseDeleteRange(r.into()))
        } else {
            x.response_txn.map(|r| Response::ResponseTxn(r.into()))
        };
        pb::ResponseOp { response }
    }
}

impl From<pb::ResponseOp> for t::ResponseOp {
    fn from(x: pb::ResponseOp) -> Self {
        use pb::response_op::Response;
        let mut op = t::ResponseOp::default();
        match x.response {
            Some(Response::ResponseRange(r)) => op.response_range = Some(r.into()),
            Some(Response::ResponsePut(r)) => op.response_put = Some(r.into()),
            Some(Response::ResponseDeleteRange(r)) => op.response_delete_range = Some(r.into()),
            Some(Response::ResponseTxn(r)) => op.response_txn = Some(r.into()),
            None => {}
        }
        op
    }
}

/// The JSON Compare carries every target field; the protobuf one the target's only (etcd
/// reads the field its `target` names, so nothing else matters).
impl From<t::Compare> for pb::Compare {
    fn from(x: t::Compare) -> Self {
        use pb::compare::TargetUnion;
        let target_union = Some(match x.target {
            t::CompareTarget::Version => TargetUnion::Version(x.version),
            t::CompareTarget::Create => TargetUnion::CreateRevision(x.create_revision),
            t::CompareTarget::Mod => TargetUnion::ModRevision(x.mod_revision),
            t::CompareTarget::Value => TargetUnion::Value(x.value),
            t::CompareTarget::Lease => TargetUnion::Lease(x.lease),
        });
        pb::Compare {
            result: x.result.as_i32(),
            target: x.target.as_i32(),
            key: x.key,
            range_end: x.range_end,
            target_union,
        }
    }
}

impl From<pb::Compare> for t::Compare {
    fn from(x: pb::Compare) -> Self {
        use pb::compare::TargetUnion;
        let mut c = t::Compare {
            result: t::CompareResult::from_i32(x.result),
            target: t::CompareTarget::from_i32(x.target),
            key: x.key,
            range_end: x.range_end,
            ..Default::default()
        };
        match x.target_union {
            Some(TargetUnion::Version(v)) => c.version = v,
            Some(TargetUnion::CreateRevision(v)) => c.create_revision = v,
            Some(TargetUnion::ModRevision(v)) => c.mod_revision = v,
            Some(TargetUnion::Value(v)) => c.value = v,
            Some(TargetUnion::Lease(v)) => c.lease = v,
            None => {}
        }
        c
    }
}

impl From<t::WatchCreateRequest> for pb::WatchCreateRequest {
    fn from(x: t::WatchCreateRequest) -> Self {
        pb::WatchCreateRequest {
            key: x.key,
            range_end: x.range_end,
            start_revision: x.start_revision,
            progress_notify: x.progress_notify,
            filters: x.filters.into_iter().map(t::FilterType::as_i32).collect(),
            prev_kv: x.prev_kv,
            watch_id: x.watch_id,
            fragment: x.fragment,
        }
    }
}

impl From<pb::WatchCreateRequest> for t::WatchCreateRequest {
    fn from(x: pb::WatchCreateRequest) -> Self {
        t::WatchCreateRequest {
            key: x.key,
            range_end: x.range_end,
            start_revision: x.start_revision,
            progress_notify: x.progress_notify,
            // etcd ignores filters it does not know.
            filters: x
                .filters
                .into_iter()
                .filter(|f| (0..=1).contains(f))
                .map(t::FilterType::from_i32)
                .collect(),
            prev_kv: x.prev_kv,
            watch_id: x.watch_id,
            fragment: x.fragment,
        }
    }
}

impl From<t::WatchRequest> for pb::WatchRequest {
    fn from(x: t::WatchRequest) -> Self {
        use pb::watch_request::RequestUnion;
        let request_union = if let Some(c) = x.create_request {
            Some(RequestUnion::CreateRequest(c.into()))
        } else if let Some(c) = x.cancel_request {
            Some(RequestUnion::CancelRequest(c.into()))
        } else {
            x.progress_request
                .map(|_| RequestUnion::ProgressRequest(pb::WatchProgressRequest {}))
        };
        pb::WatchRequest { request_union }
    }
}

impl From<pb::WatchRequest> for t::WatchRequest {
    fn from(x: pb::WatchRequest) -> Self {
        use pb::watch_request::RequestUnion;
        match x.request_union {
            Some(RequestUnion::CreateRequest(c)) => t::WatchRequest::create(c.into()),
            Some(RequestUnion::CancelRequest(c)) => t::WatchRequest::cancel(c.watch_id),
            Some(RequestUnion::ProgressRequest(_)) => t::WatchRequest::progress(),
            None => t::WatchRequest::default(),
        }
    }
}

impl From<t::Event> for pb::Event {
    fn from(x: t::Event) -> Self {
        pb::Event {
            r#type: x.kind.as_i32(),
            kv: x.kv.map(Into::into),
            prev_kv: x.prev_kv.map(Into::into),
        }
    }
}

impl From<pb::Event> for t::Event {
    fn from(x: pb::Event) -> Self {
        t::Event {
            kind: t::EventType::from_i32(x.r#type),
            kv: x.kv.map(Into::into),
            prev_kv: x.prev_kv.map(Into::into),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_txn_survives_the_round_trip_through_protobuf_bytes() {
        let txn = t::TxnRequest {
            compare: vec![
                t::Compare::mod_revision("/a", t::CompareResult::Equal, 7),
                t::Compare {
                    target: t::CompareTarget::Value,
                    result: t::CompareResult::NotEqual,
                    key: b"/b".to_vec(),
                    value: b"v".to_vec(),
                    ..Default::default()
                },
            ],
            success: vec![t::RequestOp::put(t::PutRequest {
                key: b"/a".to_vec(),
                value: vec![0, 1, 2, 255],
                lease: 42,
                prev_kv: true,
                ..Default::default()
            })],
            failure: vec![t::RequestOp::range(t::RangeRequest {
                key: b"/a".to_vec(),
                sort_order: t::SortOrder::Descend,
                sort_target: t::SortTarget::Mod,
                ..Default::default()
            })],
        };
        let bytes = pb::TxnRequest::from(txn.clone()).encode_to_vec();
        let back: t::TxnRequest = pb::TxnRequest::decode(bytes.as_slice()).unwrap().into();
        assert_eq!(back, txn);
    }

    #[test]
    fn watch_requests_and_events_convert_both_ways() {
        let create = t::WatchRequest::create(t::WatchCreateRequest {
            key: b"/r".to_vec(),
            range_end: b"/s".to_vec(),
            start_revision: 3,
            filters: vec![t::FilterType::NoDelete],
            prev_kv: true,
            watch_id: 9,
            ..Default::default()
        });
        for req in [
            create,
            t::WatchRequest::cancel(9),
            t::WatchRequest::progress(),
        ] {
            let back: t::WatchRequest = pb::WatchRequest::from(req.clone()).into();
            assert_eq!(back, req);
        }
        let ev = t::Event {
            kind: t::EventType::Delete,
            kv: Some(t::KeyValue {
                key: b"k".to_vec(),
                mod_revision: 5,
                ..Default::default()
            }),
            prev_kv: None,
        };
        assert_eq!(pb::Event::from(ev.clone()).r#type, 1);
        assert_eq!(t::Event::from(pb::Event::from(ev.clone())), ev);
    }

    #[test]
    fn unknown_enum_numbers_read_as_the_default() {
        let r: t::RangeRequest = pb::RangeRequest {
            sort_order: 77,
            ..Default::default()
        }
        .into();
        assert_eq!(r.sort_order, t::SortOrder::None);
    }
}
