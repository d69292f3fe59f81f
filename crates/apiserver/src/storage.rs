//! etcd3 storage for the registry, over `rkube-etcd-api` (so the same code runs on
//! rkube-store and on a real etcd): CAS creates, updates and deletes in upstream's Txn shapes,
//! paged ranges, the current revision, a lease manager for TTL objects (Events) and the
//! compactor. Values are stored without `metadata.resourceVersion`; the RV is `mod_revision`.
//! Values pass through the encryption-at-rest transformer on their way in and out.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkube_api::{meta, ApiError, ResourceDef};
use rkube_etcd_api::*;
use serde_json::{json, Value};

/// A storage error as the API reports it: a compacted revision is 410, a future one a 504
/// "Too large resource version", an unreachable store a retryable 504, anything else a 500.
pub fn storage_error(def: &ResourceDef, op: &str, e: EtcdError) -> ApiError {
    if e.is_compacted() {
        return ApiError::gone("The resourceVersion for the provided list is too old.");
    }
    if e.is_future_revision() {
        return ApiError::timeout(format!("Timeout: Too large resource version: {e}"), 0);
    }
    match e {
        EtcdError::Transport(_) => ApiError::server_timeout(&def.group_resource(), op, 2),
        other => ApiError::internal(other.to_string()),
    }
}

/// Serializes an object for storage: no resourceVersion (it is the mod_revision), no selfLink.
/// Written as it is, without a copy: the two metadata fields are skipped while serializing.
pub fn encode(obj: &Value) -> Vec<u8> {
    serde_json::to_vec(&ForStorage(obj)).unwrap_or_default()
}

/// An object as stored: its `metadata` without `resourceVersion` and `selfLink`.
struct ForStorage<'a>(&'a Value);

/// A `metadata` map without `resourceVersion` and `selfLink`.
struct StoredMeta<'a>(&'a serde_json::Map<String, Value>);

const NOT_STORED: [&str; 2] = ["resourceVersion", "selfLink"];

impl serde::Serialize for ForStorage<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(obj) = self.0.as_object() else {
            return self.0.serialize(ser);
        };
        let mut map = ser.serialize_map(Some(obj.len()))?;
        for (k, v) in obj {
            match (k.as_str(), v) {
                ("metadata", Value::Object(m)) => map.serialize_entry(k, &StoredMeta(m))?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

impl serde::Serialize for StoredMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = ser.serialize_map(None)?;
        for (k, v) in self.0 {
            if !NOT_STORED.contains(&k.as_str()) {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// A stored value with its resourceVersion stamped in.
pub fn decode(s: &Stored) -> Result<Value, ApiError> {
    let mut v: Value = serde_json::from_slice(&s.value)
        .map_err(|e| ApiError::internal(format!("decoding stored object: {e}")))?;
    meta::set_meta(&mut v, "resourceVersion", json!(s.mod_revision.to_string()));
    Ok(v)
}

/// One stored value and its revision.
#[derive(Clone, Debug)]
pub struct Stored {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

impl Stored {
    fn from_kv(kv: KeyValue) -> Self {
        Stored {
            key: kv.key,
            value: kv.value,
            mod_revision: kv.mod_revision,
        }
    }
}

/// One page of a range.
pub struct Page {
    pub items: Vec<Stored>,
    /// The revision the page was read at.
    pub rev: i64,
    /// More keys follow in the range.
    pub more: bool,
    /// Keys in `[start, end)` at that revision, limit aside.
    pub count: i64,
}

/// The outcome of a compare-and-swap write.
pub enum Cas {
    /// Written at this revision.
    Done(i64),
    /// The key had moved on; here is what it holds now (`None`: it is gone).
    Stale(Option<Stored>),
}

pub struct Storage {
    pub client: EtcdClient,
    leases: Mutex<LeaseCache>,
    /// Encryption at rest (no resources configured: values pass unchanged); shared by the
    /// storages of `--etcd-servers-overrides`.
    pub transformer: Arc<crate::encryption::Transformer>,
}

#[derive(Default)]
struct LeaseCache {
    /// (lease id, TTL it was granted with, when it was granted, objects attached)
    current: Option<(i64, i64, Instant, usize)>,
}

/// Upstream's lease reuse window bounds (`etcd3/lease_manager.go`).
const LEASE_REUSE_MAX: Duration = Duration::from_secs(60);
const LEASE_MAX_OBJECTS: usize = 1000;

impl Storage {
    pub fn new(client: EtcdClient) -> Self {
        Storage::with_transformer(client, Default::default())
    }

    pub fn with_transformer(
        client: EtcdClient,
        transformer: Arc<crate::encryption::Transformer>,
    ) -> Self {
        Storage {
            client,
            leases: Mutex::new(LeaseCache::default()),
            transformer,
        }
    }

    /// A stored key-value with its plain value.
    pub fn plain(&self, kv: KeyValue) -> Result<Stored, EtcdError> {
        let mut s = Stored::from_kv(kv);
        if self.transformer.is_active() {
            s.value = self.decrypt(&s.key, std::mem::take(&mut s.value))?;
        }
        Ok(s)
    }

    /// The plain bytes of a value stored at `key`.
    pub fn decrypt(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, EtcdError> {
        self.transformer
            .from_storage(key, value)
            .map_err(EtcdError::Decode)
    }

    fn encrypt(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>, EtcdError> {
        self.transformer
            .to_storage(key.as_bytes(), value)
            .map_err(EtcdError::Decode)
    }

    pub async fn get(&self, key: &str) -> Result<(Option<Stored>, i64), EtcdError> {
        let resp = self
            .client
            .range(&RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            })
            .await?;
        let rev = resp.header.map(|h| h.revision).unwrap_or(0);
        let found = resp
            .kvs
            .into_iter()
            .next()
            .map(|kv| self.plain(kv))
            .transpose()?;
        Ok((found, rev))
    }

    /// The store's current revision: the header of a point read (cheap on any store).
    pub async fn current_revision(&self, prefix: &str) -> Result<i64, EtcdError> {
        let resp = self
            .client
            .range(&RangeRequest {
                key: prefix.as_bytes().to_vec(),
                limit: 1,
                keys_only: true,
                ..Default::default()
            })
            .await?;
        Ok(resp.header.map(|h| h.revision).unwrap_or(0))
    }

    /// `[start, prefix_end)` at `revision` (0 = current), at most `limit` keys (0 = all).
    pub async fn list(
        &self,
        prefix: &str,
        start: &str,
        revision: i64,
        limit: i64,
    ) -> Result<Page, EtcdError> {
        let resp = self
            .client
            .range(&RangeRequest {
                key: start.as_bytes().to_vec(),
                range_end: prefix_range_end(prefix.as_bytes()),
                revision,
                limit,
                ..Default::default()
            })
            .await?;
        let header_rev = resp.header.map(|h| h.revision).unwrap_or(0);
        let rev = if revision > 0 { revision } else { header_rev };
        Ok(Page {
            items: resp
                .kvs
                .into_iter()
                .map(|kv| self.plain(kv))
                .collect::<Result<_, _>>()?,
            rev,
            more: resp.more,
            count: resp.count,
        })
    }

    /// `Txn(If mod_revision(key)==0 Then Put)`: `Ok(Some(rev))`, or `Ok(None)` if the key exists.
    pub async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<Option<i64>, EtcdError> {
        let value = self.encrypt(key, value)?;
        let k = key.as_bytes().to_vec();
        let txn = TxnRequest {
            compare: vec![Compare::mod_revision(k.clone(), CompareResult::Equal, 0)],
            success: vec![RequestOp::put(PutRequest {
                key: k,
                value,
                lease,
                ..Default::default()
            })],
            failure: vec![],
        };
        let resp = self.client.txn(&txn).await?;
        Ok(resp
            .succeeded
            .then(|| resp.header.map(|h| h.revision).unwrap_or(0)))
    }

    /// `Txn(If mod_revision(key)==rev Then Put Else Range)`.
    pub async fn update(
        &self,
        key: &str,
        value: Vec<u8>,
        rev: i64,
        lease: i64,
    ) -> Result<Cas, EtcdError> {
        let value = self.encrypt(key, value)?;
        let k = key.as_bytes().to_vec();
        let txn = TxnRequest {
            compare: vec![Compare::mod_revision(k.clone(), CompareResult::Equal, rev)],
            success: vec![RequestOp::put(PutRequest {
                key: k.clone(),
                value,
                lease,
                ..Default::default()
            })],
            failure: vec![RequestOp::range(RangeRequest {
                key: k,
                ..Default::default()
            })],
        };
        self.cas(txn).await
    }

    /// `Txn(If mod_revision(key)==rev Then Delete Else Range)`.
    pub async fn delete(&self, key: &str, rev: i64) -> Result<Cas, EtcdError> {
        let k = key.as_bytes().to_vec();
        let txn = TxnRequest {
            compare: vec![Compare::mod_revision(k.clone(), CompareResult::Equal, rev)],
            success: vec![RequestOp::delete_range(DeleteRangeRequest {
                key: k.clone(),
                ..Default::default()
            })],
            failure: vec![RequestOp::range(RangeRequest {
                key: k,
                ..Default::default()
            })],
        };
        self.cas(txn).await
    }

    async fn cas(&self, txn: TxnRequest) -> Result<Cas, EtcdError> {
        let resp = self.client.txn(&txn).await?;
        if resp.succeeded {
            return Ok(Cas::Done(resp.header.map(|h| h.revision).unwrap_or(0)));
        }
        let current = resp
            .responses
            .into_iter()
            .next()
            .and_then(|r| r.response_range)
            .and_then(|r| r.kvs.into_iter().next())
            .map(|kv| self.plain(kv))
            .transpose()?;
        Ok(Cas::Stale(current))
    }

    /// A lease for an object that should live `ttl` seconds, reusing a recent one as upstream
    /// does: an object lives between `ttl` and `ttl + min(5% of ttl, 60s)`.
    pub async fn lease_for(&self, ttl: i64) -> Result<i64, EtcdError> {
        let reuse = Duration::from_secs_f64((ttl as f64 * 0.05).min(LEASE_REUSE_MAX.as_secs_f64()));
        {
            let mut cache = self.leases.lock().unwrap();
            if let Some((id, lease_ttl, granted, n)) = &mut cache.current {
                let expiry = *granted + Duration::from_secs(*lease_ttl as u64);
                let wanted = Instant::now() + Duration::from_secs(ttl as u64);
                if wanted < expiry && wanted + reuse > expiry && *n < LEASE_MAX_OBJECTS {
                    *n += 1;
                    return Ok(*id);
                }
            }
        }
        let granted_ttl = ttl + reuse.as_secs() as i64;
        let resp = self
            .client
            .lease_grant(&LeaseGrantRequest {
                ttl: granted_ttl,
                id: 0,
            })
            .await?;
        self.leases.lock().unwrap().current = Some((resp.id, resp.ttl, Instant::now(), 1));
        Ok(resp.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_bytes_leave_out_the_resource_version_and_self_link_only() {
        let obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7", "selfLink": "/x", "uid": "u",
                         "labels": {"resourceVersion": "kept"}},
            "data": {"resourceVersion": "kept", "selfLink": "kept"}
        });
        let stored: Value = serde_json::from_slice(&encode(&obj)).unwrap();
        let mut want = obj.clone();
        let m = want["metadata"].as_object_mut().unwrap();
        m.remove("resourceVersion");
        m.remove("selfLink");
        assert_eq!(stored, want);
        // Not an object, or metadata not a map: written as it is.
        assert_eq!(encode(&json!([1])), b"[1]");
        assert_eq!(encode(&json!({"metadata": 3})), br#"{"metadata":3}"#);
    }
}
