//! The lessor: granted leases, their deadlines and attached keys. Grants and revokes are
//! persisted by the writer; deadlines live in memory and restart from the full TTL after a
//! restart, as etcd's do.

use std::collections::{BTreeSet, HashMap};

use tokio::time::{Duration, Instant};

/// etcd's `MaxLeaseTTL`.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// Leases that may exist at once: each is memory and a row on disk, and a client granting
/// them in a loop must not exhaust either.
pub const MAX_LEASES: usize = 100_000;

#[derive(Debug, Clone)]
pub struct Lease {
    pub id: i64,
    /// Granted TTL in seconds.
    pub ttl: i64,
    pub deadline: Instant,
    pub keys: BTreeSet<Vec<u8>>,
}

impl Lease {
    pub fn remaining_secs(&self, now: Instant) -> i64 {
        let left = self.deadline.saturating_duration_since(now);
        // etcd truncates the remaining time to whole seconds.
        left.as_secs() as i64
    }
}

#[derive(Default)]
pub struct Lessor {
    leases: HashMap<i64, Lease>,
    /// The smallest TTL a grant gets (etcd: 1.5 × election timeout, rounded up).
    pub min_ttl: i64,
}

impl Lessor {
    pub fn new(min_ttl: i64) -> Self {
        Lessor {
            leases: HashMap::new(),
            min_ttl,
        }
    }

    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }

    pub fn contains(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    pub fn ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.leases.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The effective TTL of a grant request.
    pub fn effective_ttl(&self, requested: i64) -> i64 {
        requested.max(self.min_ttl)
    }

    pub fn insert(&mut self, id: i64, ttl: i64, now: Instant) {
        self.leases.insert(
            id,
            Lease {
                id,
                ttl,
                deadline: now + Duration::from_secs(ttl.max(0) as u64),
                keys: BTreeSet::new(),
            },
        );
    }

    pub fn remove(&mut self, id: i64) -> Option<Lease> {
        self.leases.remove(&id)
    }

    pub fn attach(&mut self, id: i64, key: &[u8]) {
        if let Some(l) = self.leases.get_mut(&id) {
            l.keys.insert(key.to_vec());
        }
    }

    pub fn detach(&mut self, id: i64, key: &[u8]) {
        if let Some(l) = self.leases.get_mut(&id) {
            l.keys.remove(key);
        }
    }

    /// Renews a lease to its full TTL; returns the TTL, or `None` if it does not exist.
    pub fn renew(&mut self, id: i64, now: Instant) -> Option<i64> {
        let l = self.leases.get_mut(&id)?;
        if l.deadline <= now {
            // Already expired; the expiry loop is about to revoke it.
            return None;
        }
        l.deadline = now + Duration::from_secs(l.ttl as u64);
        Some(l.ttl)
    }

    /// Leases whose deadline has passed.
    pub fn expired(&self, now: Instant) -> Vec<i64> {
        self.leases
            .values()
            .filter(|l| l.deadline <= now)
            .map(|l| l.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expiry_and_renewal() {
        let mut l = Lessor::new(2);
        let now = Instant::now();
        l.insert(7, 5, now);
        l.attach(7, b"k");
        assert_eq!(l.get(7).unwrap().remaining_secs(now), 5);
        assert_eq!(
            l.get(7)
                .unwrap()
                .remaining_secs(now + Duration::from_millis(200)),
            4
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(l.expired(Instant::now()).is_empty());
        assert_eq!(l.renew(7, Instant::now()), Some(5));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(l.expired(Instant::now()), vec![7]);
        assert_eq!(l.renew(7, Instant::now()), None);
        assert_eq!(l.effective_ttl(1), 2);
    }
}
