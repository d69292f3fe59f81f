//! The in-memory key index (etcd's `treeIndex`): for every key, the revisions at which it was
//! written or deleted, plus the metadata of its newest revision. Values live in redb, addressed
//! by revision; this index is rebuilt from redb at startup.

use std::collections::BTreeMap;

use crate::keyrange::KeyRange;

/// A revision: the main revision of the write transaction and the change's position inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rev {
    pub main: i64,
    pub sub: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevEntry {
    pub rev: Rev,
    pub tombstone: bool,
}

/// Metadata of a key's newest (possibly not yet committed) revision, used by the writer for
/// Txn compares and version bookkeeping without reading the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Meta {
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

#[derive(Clone, Debug, Default)]
pub struct KeyIndex {
    /// Ascending by revision.
    pub revs: Vec<RevEntry>,
    /// `None` while the key is deleted (its newest entry is a tombstone).
    pub latest: Option<Meta>,
}

impl KeyIndex {
    /// The newest entry at or below `at`, if it is not a tombstone.
    pub fn visible_at(&self, at: i64) -> Option<Rev> {
        let n = self.revs.partition_point(|e| e.rev.main <= at);
        let e = self.revs.get(n.checked_sub(1)?)?;
        (!e.tombstone).then_some(e.rev)
    }

    /// The newest entry strictly below `rev` that is not a tombstone (a watch event's prev_kv).
    pub fn previous(&self, rev: Rev) -> Option<Rev> {
        let n = self.revs.partition_point(|e| e.rev < rev);
        let e = self.revs.get(n.checked_sub(1)?)?;
        (!e.tombstone).then_some(e.rev)
    }
}

#[derive(Default)]
pub struct TreeIndex {
    keys: BTreeMap<Vec<u8>, KeyIndex>,
}

impl TreeIndex {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn get(&self, key: &[u8]) -> Option<&KeyIndex> {
        self.keys.get(key)
    }

    /// Keys in `range` visible at revision `at`, in key order, with the revision to read.
    /// Stops after `limit` matches when `limit > 0`; always returns the total count.
    pub fn range_at(&self, range: &KeyRange, at: i64, limit: usize) -> (Vec<(&[u8], Rev)>, usize) {
        let mut out = Vec::new();
        let mut count = 0;
        let Some(bounds) = range.bounds() else {
            return (out, 0);
        };
        for (k, ki) in self.keys.range::<[u8], _>(bounds) {
            if let Some(rev) = ki.visible_at(at) {
                count += 1;
                if limit == 0 || out.len() < limit {
                    out.push((k.as_slice(), rev));
                }
            }
        }
        (out, count)
    }

    /// Keys in `range` that currently exist (newest entry not a tombstone), with their metadata.
    pub fn live_in(&self, range: &KeyRange) -> Vec<(Vec<u8>, Meta)> {
        let Some(bounds) = range.bounds() else {
            return Vec::new();
        };
        self.keys
            .range::<[u8], _>(bounds)
            .filter_map(|(k, ki)| ki.latest.map(|m| (k.clone(), m)))
            .collect()
    }

    pub fn latest(&self, key: &[u8]) -> Option<Meta> {
        self.keys.get(key).and_then(|k| k.latest)
    }

    /// Records a put of `key` at `rev` whose resulting metadata is `meta`.
    pub fn put(&mut self, key: &[u8], rev: Rev, meta: Meta) {
        let ki = self.keys.entry(key.to_vec()).or_default();
        ki.revs.push(RevEntry {
            rev,
            tombstone: false,
        });
        ki.latest = Some(meta);
    }

    /// Records the deletion of `key` at `rev`.
    pub fn tombstone(&mut self, key: &[u8], rev: Rev) {
        if let Some(ki) = self.keys.get_mut(key) {
            ki.revs.push(RevEntry {
                rev,
                tombstone: true,
            });
            ki.latest = None;
        }
    }

    /// Inserts an entry while rebuilding from disk (entries arrive in revision order).
    pub fn restore(&mut self, key: Vec<u8>, rev: Rev, tombstone: bool, meta: Meta) {
        let ki = self.keys.entry(key).or_default();
        ki.revs.push(RevEntry { rev, tombstone });
        ki.latest = if tombstone { None } else { Some(meta) };
    }

    /// Drops history at or below `at` as etcd does: for each key, every revision below the
    /// newest one at or below `at` goes, and that one too if it is a tombstone. Returns the
    /// revisions removed, so their records can be deleted from disk.
    pub fn compact(&mut self, at: i64) -> Vec<Rev> {
        let mut removed = Vec::new();
        self.keys.retain(|_, ki| {
            let n = ki.revs.partition_point(|e| e.rev.main <= at);
            if n == 0 {
                return true;
            }
            let keep_from = if ki.revs[n - 1].tombstone { n } else { n - 1 };
            removed.extend(ki.revs.drain(..keep_from).map(|e| e.rev));
            !ki.revs.is_empty()
        });
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Rev {
        Rev { main, sub: 0 }
    }

    fn meta(c: i64, m: i64, v: i64) -> Meta {
        Meta {
            create_revision: c,
            mod_revision: m,
            version: v,
            lease: 0,
        }
    }

    #[test]
    fn visibility_and_history() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", r(2), meta(2, 2, 1));
        idx.put(b"a", r(4), meta(2, 4, 2));
        idx.tombstone(b"a", r(6));
        idx.put(b"b", r(3), meta(3, 3, 1));
        let all = KeyRange::new(b"\0", b"\0");
        assert_eq!(idx.range_at(&all, 1, 0).1, 0);
        assert_eq!(
            idx.range_at(&all, 3, 0).0,
            vec![(&b"a"[..], r(2)), (&b"b"[..], r(3))]
        );
        assert_eq!(idx.range_at(&all, 5, 0).0[0], (&b"a"[..], r(4)));
        assert_eq!(idx.range_at(&all, 6, 0).1, 1);
        let (limited, count) = idx.range_at(&all, 5, 1);
        assert_eq!((limited.len(), count), (1, 2));
        assert_eq!(idx.get(b"a").unwrap().previous(r(6)), Some(r(4)));
        assert_eq!(idx.latest(b"a"), None);
    }

    #[test]
    fn compaction_keeps_newest_at_or_below() {
        let mut idx = TreeIndex::default();
        idx.put(b"a", r(2), meta(2, 2, 1));
        idx.put(b"a", r(4), meta(2, 4, 2));
        idx.put(b"b", r(3), meta(3, 3, 1));
        idx.tombstone(b"b", r(5));
        let removed = idx.compact(5);
        assert_eq!(removed, vec![r(2), r(3), r(5)]);
        assert!(idx.get(b"b").is_none());
        assert_eq!(idx.get(b"a").unwrap().revs.len(), 1);
        let all = KeyRange::new(b"\0", b"\0");
        assert_eq!(idx.range_at(&all, 5, 0).0, vec![(&b"a"[..], r(4))]);
    }
}
