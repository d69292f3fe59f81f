//! The etcd v3 messages rkube uses, mapped to JSON exactly as etcd's gateway does.

use crate::codec::{self, is_false, is_zero_i64, is_zero_u64};
use crate::proto_enum;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseHeader {
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s",
        alias = "clusterId"
    )]
    pub cluster_id: u64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s",
        alias = "memberId"
    )]
    pub member_id: u64,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s",
        alias = "raftTerm"
    )]
    pub raft_term: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "createRevision"
    )]
    pub create_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "modRevision"
    )]
    pub mod_revision: i64,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub version: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub value: Vec<u8>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub lease: i64,
}

proto_enum!(
    /// RangeRequest.SortOrder
    SortOrder ("etcdserverpb.RangeRequest_SortOrder") { None = 0 => "NONE", Ascend = 1 => "ASCEND", Descend = 2 => "DESCEND" }
);
proto_enum!(
    /// RangeRequest.SortTarget
    SortTarget ("etcdserverpb.RangeRequest_SortTarget") { Key = 0 => "KEY", Version = 1 => "VERSION", Create = 2 => "CREATE", Mod = 3 => "MOD", Value = 4 => "VALUE" }
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "codec::b64",
        alias = "rangeEnd"
    )]
    pub range_end: Vec<u8>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub limit: i64,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub revision: i64,
    #[serde(
        default,
        skip_serializing_if = "SortOrder::is_default",
        alias = "sortOrder"
    )]
    pub sort_order: SortOrder,
    #[serde(
        default,
        skip_serializing_if = "SortTarget::is_default",
        alias = "sortTarget"
    )]
    pub sort_target: SortTarget,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub serializable: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "keysOnly"
    )]
    pub keys_only: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "countOnly"
    )]
    pub count_only: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "minModRevision"
    )]
    pub min_mod_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "maxModRevision"
    )]
    pub max_mod_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "minCreateRevision"
    )]
    pub min_create_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "maxCreateRevision"
    )]
    pub max_create_revision: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub kvs: Vec<KeyValue>,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub more: bool,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub count: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub value: Vec<u8>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub lease: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "prevKv"
    )]
    pub prev_kv: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "ignoreValue"
    )]
    pub ignore_value: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "ignoreLease"
    )]
    pub ignore_lease: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "prevKv")]
    pub prev_kv: Option<KeyValue>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "codec::b64",
        alias = "rangeEnd"
    )]
    pub range_end: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "prevKv"
    )]
    pub prev_kv: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub deleted: i64,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        alias = "prevKvs",
        deserialize_with = "null_vec"
    )]
    pub prev_kvs: Vec<KeyValue>,
}

/// One operation of a Txn branch: exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestOp {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "requestRange"
    )]
    pub request_range: Option<RangeRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "requestPut")]
    pub request_put: Option<PutRequest>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "requestDeleteRange"
    )]
    pub request_delete_range: Option<DeleteRangeRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "requestTxn")]
    pub request_txn: Option<TxnRequest>,
}

impl RequestOp {
    pub fn range(r: RangeRequest) -> Self {
        RequestOp {
            request_range: Some(r),
            ..Default::default()
        }
    }
    pub fn put(r: PutRequest) -> Self {
        RequestOp {
            request_put: Some(r),
            ..Default::default()
        }
    }
    pub fn delete_range(r: DeleteRangeRequest) -> Self {
        RequestOp {
            request_delete_range: Some(r),
            ..Default::default()
        }
    }
    pub fn txn(r: TxnRequest) -> Self {
        RequestOp {
            request_txn: Some(r),
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseOp {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "responseRange"
    )]
    pub response_range: Option<RangeResponse>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "responsePut"
    )]
    pub response_put: Option<PutResponse>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "responseDeleteRange"
    )]
    pub response_delete_range: Option<DeleteRangeResponse>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "responseTxn"
    )]
    pub response_txn: Option<TxnResponse>,
}

proto_enum!(
    /// Compare.CompareResult
    CompareResult ("etcdserverpb.Compare_CompareResult") { Equal = 0 => "EQUAL", Greater = 1 => "GREATER", Less = 2 => "LESS", NotEqual = 3 => "NOT_EQUAL" }
);
proto_enum!(
    /// Compare.CompareTarget
    CompareTarget ("etcdserverpb.Compare_CompareTarget") { Version = 0 => "VERSION", Create = 1 => "CREATE", Mod = 2 => "MOD", Value = 3 => "VALUE", Lease = 4 => "LEASE" }
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    #[serde(default, skip_serializing_if = "CompareResult::is_default")]
    pub result: CompareResult,
    #[serde(default, skip_serializing_if = "CompareTarget::is_default")]
    pub target: CompareTarget,
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "codec::b64",
        alias = "rangeEnd"
    )]
    pub range_end: Vec<u8>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub version: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "createRevision"
    )]
    pub create_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "modRevision"
    )]
    pub mod_revision: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub value: Vec<u8>,
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub lease: i64,
}

impl Compare {
    /// `mod_revision(key) == rev` (rev 0 means "key absent").
    pub fn mod_revision(key: impl Into<Vec<u8>>, result: CompareResult, rev: i64) -> Self {
        Compare {
            result,
            target: CompareTarget::Mod,
            key: key.into(),
            mod_revision: rev,
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub compare: Vec<Compare>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub success: Vec<RequestOp>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub failure: Vec<RequestOp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub succeeded: bool,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub responses: Vec<ResponseOp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequest {
    #[serde(default, skip_serializing_if = "is_zero_i64", with = "codec::i64s")]
    pub revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub physical: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
}

// ---- leases -------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantRequest {
    #[serde(
        rename = "TTL",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub ttl: i64,
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub ttl: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// Request body shared by revoke and keepalive: just the lease ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseIdRequest {
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
}

pub type LeaseRevokeRequest = LeaseIdRequest;
pub type LeaseKeepAliveRequest = LeaseIdRequest;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevokeResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseKeepAliveResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub ttl: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLiveRequest {
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub keys: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLiveResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub ttl: i64,
    #[serde(
        rename = "grantedTTL",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub granted_ttl: i64,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "codec::b64_vec"
    )]
    pub keys: Vec<Vec<u8>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    #[serde(
        rename = "ID",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub id: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLeasesResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub leases: Vec<LeaseStatus>,
}

// ---- maintenance --------------------------------------------------------------------------

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(
        rename = "dbSize",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub db_size: i64,
    #[serde(default, skip_serializing_if = "is_zero_u64", with = "codec::u64s")]
    pub leader: u64,
    #[serde(
        rename = "raftIndex",
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s"
    )]
    pub raft_index: u64,
    #[serde(
        rename = "raftTerm",
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s"
    )]
    pub raft_term: u64,
    #[serde(
        rename = "raftAppliedIndex",
        default,
        skip_serializing_if = "is_zero_u64",
        with = "codec::u64s"
    )]
    pub raft_applied_index: u64,
    #[serde(
        rename = "dbSizeInUse",
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s"
    )]
    pub db_size_in_use: i64,
}

/// `/v3/maintenance/hash`; the hash is a uint32, so it is a JSON number.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub hash: u32,
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

// ---- watch --------------------------------------------------------------------------------

proto_enum!(
    /// WatchCreateRequest.FilterType
    FilterType ("etcdserverpb.WatchCreateRequest_FilterType") { NoPut = 0 => "NOPUT", NoDelete = 1 => "NODELETE" }
);
proto_enum!(
    /// mvccpb.Event.EventType
    EventType ("mvccpb.Event_EventType") { Put = 0 => "PUT", Delete = 1 => "DELETE" }
);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchCreateRequest {
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "codec::b64")]
    pub key: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "codec::b64",
        alias = "rangeEnd"
    )]
    pub range_end: Vec<u8>,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "startRevision"
    )]
    pub start_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "progressNotify"
    )]
    pub progress_notify: bool,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub filters: Vec<FilterType>,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false",
        alias = "prevKv"
    )]
    pub prev_kv: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "watchId"
    )]
    pub watch_id: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub fragment: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchCancelRequest {
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "watchId"
    )]
    pub watch_id: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchProgressRequest {}

/// One message on the watch request stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchRequest {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "createRequest"
    )]
    pub create_request: Option<WatchCreateRequest>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "cancelRequest"
    )]
    pub cancel_request: Option<WatchCancelRequest>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "progressRequest"
    )]
    pub progress_request: Option<WatchProgressRequest>,
}

impl WatchRequest {
    pub fn create(c: WatchCreateRequest) -> Self {
        WatchRequest {
            create_request: Some(c),
            ..Default::default()
        }
    }
    pub fn cancel(watch_id: i64) -> Self {
        WatchRequest {
            cancel_request: Some(WatchCancelRequest { watch_id }),
            ..Default::default()
        }
    }
    pub fn progress() -> Self {
        WatchRequest {
            progress_request: Some(WatchProgressRequest {}),
            ..Default::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    #[serde(
        rename = "type",
        default,
        skip_serializing_if = "EventType::is_default"
    )]
    pub kind: EventType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KeyValue>,
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "prevKv")]
    pub prev_kv: Option<KeyValue>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<ResponseHeader>,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "watchId"
    )]
    pub watch_id: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub created: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub canceled: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        with = "codec::i64s",
        alias = "compactRevision"
    )]
    pub compact_revision: i64,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        alias = "cancelReason"
    )]
    pub cancel_reason: String,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "codec::null_false"
    )]
    pub fragment: bool,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_vec"
    )]
    pub events: Vec<Event>,
}

/// The error body etcd's gateway writes: `{"error","message","code"}` (gRPC code).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub code: i32,
}

/// One line of a streamed response (`/v3/watch`, `/v3/lease/keepalive`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamLine<T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

fn null_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// The `range_end` that selects every key with `prefix` (etcd's `clientv3.GetPrefixRangeEnd`).
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.last_mut() {
        if *last < 0xff {
            *last += 1;
            return end;
        }
        end.pop();
    }
    // All 0xff (or empty): the range extends to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int64_out_as_strings_zero_omitted() {
        let kv = KeyValue {
            key: b"/a".to_vec(),
            create_revision: 2,
            mod_revision: 2,
            version: 1,
            value: b"x".to_vec(),
            lease: 0,
        };
        let s = serde_json::to_string(&kv).unwrap();
        assert_eq!(
            s,
            r#"{"key":"L2E=","create_revision":"2","mod_revision":"2","version":"1","value":"eA=="}"#
        );
    }

    #[test]
    fn input_accepts_camel_case_and_numbers() {
        let r: RangeRequest = serde_json::from_str(r#"{"key":"L2E=","rangeEnd":"L2I=","limit":5,"countOnly":true,"sortOrder":2,"sort_target":"MOD"}"#).unwrap();
        assert_eq!(r.range_end, b"/b");
        assert_eq!(r.limit, 5);
        assert!(r.count_only);
        assert_eq!(r.sort_order, SortOrder::Descend);
        assert_eq!(r.sort_target, SortTarget::Mod);
    }

    #[test]
    fn put_event_has_no_type_field() {
        let e = Event {
            kind: EventType::Put,
            kv: Some(KeyValue {
                key: b"k".to_vec(),
                ..Default::default()
            }),
            prev_kv: None,
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"kv":{"key":"aw=="}}"#
        );
        let d = Event {
            kind: EventType::Delete,
            ..e
        };
        assert!(serde_json::to_string(&d)
            .unwrap()
            .starts_with(r#"{"type":"DELETE""#));
    }

    #[test]
    fn prefix_end() {
        assert_eq!(prefix_range_end(b"/registry/pods/"), b"/registry/pods0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b""), vec![0]);
    }
}
