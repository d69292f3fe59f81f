//! The on-disk encoding of one key revision (etcd's `mvccpb.KeyValue` plus a tombstone flag),
//! stored in redb under its `(main, sub)` revision.

use rkube_etcd_api::KeyValue;

/// One revision of one key. `mod_revision` is not stored: it is the record's main revision.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
    /// A deletion marker: the key ceased to exist at this revision.
    pub tombstone: bool,
}

const HEADER: usize = 1 + 8 + 8 + 8 + 4;

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.key.len() + self.value.len());
        out.push(u8::from(self.tombstone));
        out.extend_from_slice(&self.create_revision.to_be_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.lease.to_be_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
        out
    }

    /// Decodes a record; `None` if the bytes are not a record (corruption).
    pub fn decode(b: &[u8]) -> Option<Record> {
        if b.len() < HEADER {
            return None;
        }
        let i64_at = |o: usize| i64::from_be_bytes(b[o..o + 8].try_into().unwrap());
        let klen = u32::from_be_bytes(b[25..29].try_into().unwrap()) as usize;
        if b.len() < HEADER + klen {
            return None;
        }
        Some(Record {
            tombstone: b[0] != 0,
            create_revision: i64_at(1),
            version: i64_at(9),
            lease: i64_at(17),
            key: b[HEADER..HEADER + klen].to_vec(),
            value: b[HEADER + klen..].to_vec(),
        })
    }

    /// Reads only the key and metadata, skipping the value (index rebuild at startup).
    pub fn decode_meta(b: &[u8]) -> Option<(Vec<u8>, bool, i64, i64, i64)> {
        if b.len() < HEADER {
            return None;
        }
        let i64_at = |o: usize| i64::from_be_bytes(b[o..o + 8].try_into().unwrap());
        let klen = u32::from_be_bytes(b[25..29].try_into().unwrap()) as usize;
        if b.len() < HEADER + klen {
            return None;
        }
        Some((
            b[HEADER..HEADER + klen].to_vec(),
            b[0] != 0,
            i64_at(1),
            i64_at(9),
            i64_at(17),
        ))
    }

    /// The wire KeyValue for this record at `mod_revision`. A tombstone becomes the DELETE
    /// event's kv: only the key and the delete revision.
    pub fn to_kv(&self, mod_revision: i64, keys_only: bool) -> KeyValue {
        if self.tombstone {
            return KeyValue {
                key: self.key.clone(),
                mod_revision,
                ..Default::default()
            };
        }
        KeyValue {
            key: self.key.clone(),
            create_revision: self.create_revision,
            mod_revision,
            version: self.version,
            value: if keys_only {
                Vec::new()
            } else {
                self.value.clone()
            },
            lease: self.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = Record {
            key: b"/a/b".to_vec(),
            value: b"hello".to_vec(),
            create_revision: 3,
            version: 2,
            lease: 7,
            tombstone: false,
        };
        assert_eq!(Record::decode(&r.encode()), Some(r.clone()));
        let (k, t, c, v, l) = Record::decode_meta(&r.encode()).unwrap();
        assert_eq!((k.as_slice(), t, c, v, l), (&b"/a/b"[..], false, 3, 2, 7));
        assert_eq!(Record::decode(b"short"), None);
    }
}
