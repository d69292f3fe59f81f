//! etcd's key-range convention: an empty `range_end` means one key, `range_end == "\0"` means
//! every key `>= key`, otherwise the half-open interval `[key, range_end)`.

/// Lower and upper bound of a BTreeMap range scan.
pub type Bounds<'a> = (std::ops::Bound<&'a [u8]>, std::ops::Bound<&'a [u8]>);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub key: Vec<u8>,
    /// `None`: the single key. `Some(empty)`: unbounded above. `Some(end)`: exclusive end.
    end: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn new(key: &[u8], range_end: &[u8]) -> Self {
        let end = match range_end {
            [] => None,
            [0] => Some(Vec::new()),
            e => Some(e.to_vec()),
        };
        KeyRange {
            key: key.to_vec(),
            end,
        }
    }

    pub fn is_single(&self) -> bool {
        self.end.is_none()
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        match &self.end {
            None => k == self.key.as_slice(),
            Some(e) if e.is_empty() => k >= self.key.as_slice(),
            Some(e) => k >= self.key.as_slice() && k < e.as_slice(),
        }
    }

    /// Bounds for a BTreeMap range scan; `None` when the interval is empty.
    pub fn bounds(&self) -> Option<Bounds<'_>> {
        use std::ops::Bound::*;
        match &self.end {
            None => Some((Included(self.key.as_slice()), Included(self.key.as_slice()))),
            Some(e) if e.is_empty() => Some((Included(self.key.as_slice()), Unbounded)),
            Some(e) if e.as_slice() <= self.key.as_slice() => None,
            Some(e) => Some((Included(self.key.as_slice()), Excluded(e.as_slice()))),
        }
    }

    /// Whether two ranges share at least one key (duplicate-key checks in a txn).
    pub fn overlaps(&self, other: &KeyRange) -> bool {
        let (a0, a1) = self.interval();
        let (b0, b1) = other.interval();
        let a_before_b_end = match &b1 {
            Some(e) => a0.as_slice() < e.as_slice(),
            None => true,
        };
        let b_before_a_end = match &a1 {
            Some(e) => b0.as_slice() < e.as_slice(),
            None => true,
        };
        a_before_b_end && b_before_a_end
    }

    /// `[start, end)` with `None` as +infinity.
    fn interval(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match &self.end {
            None => {
                let mut e = self.key.clone();
                e.push(0);
                (self.key.clone(), Some(e))
            }
            Some(e) if e.is_empty() => (self.key.clone(), None),
            Some(e) => (self.key.clone(), Some(e.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let single = KeyRange::new(b"a", b"");
        assert!(single.contains(b"a") && !single.contains(b"ab"));
        let prefix = KeyRange::new(b"a/", b"a0");
        assert!(prefix.contains(b"a/x") && !prefix.contains(b"a0"));
        let from = KeyRange::new(b"b", b"\0");
        assert!(from.contains(b"zzz") && !from.contains(b"a"));
        assert!(KeyRange::new(b"b", b"a").bounds().is_none());
        assert!(!single.overlaps(&prefix));
        assert!(KeyRange::new(b"a/x", b"").overlaps(&prefix));
        assert!(from.overlaps(&KeyRange::new(b"c", b"")));
    }
}
