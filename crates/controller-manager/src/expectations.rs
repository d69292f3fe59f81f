//! Controller expectations: what a controller has asked for and not yet seen through its watch,
//! so a lagging cache never makes it create or delete twice (upstream's
//! `UIDTrackingControllerExpectations`). Expectations older than five minutes are treated as
//! satisfied, so a lost event cannot wedge a controller.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Entry {
    adds: i64,
    dels: HashSet<String>,
    at: Option<Instant>,
}

#[derive(Default)]
pub struct Expectations {
    map: Mutex<HashMap<String, Entry>>,
}

impl Expectations {
    /// True when nothing is outstanding for `key` (or the expectations expired).
    pub fn satisfied(&self, key: &str) -> bool {
        let m = self.map.lock().unwrap();
        match m.get(key) {
            None => true,
            Some(e) => (e.adds <= 0 && e.dels.is_empty()) || e.at.is_none_or(|t| t.elapsed() > TTL),
        }
    }

    pub fn expect_creations(&self, key: &str, n: usize) {
        let mut m = self.map.lock().unwrap();
        let e = m.entry(key.to_string()).or_default();
        e.adds = n as i64;
        e.dels.clear();
        e.at = Some(Instant::now());
    }

    /// `pods`: the keys (`ns/name`) of the objects about to be deleted.
    pub fn expect_deletions(&self, key: &str, pods: impl IntoIterator<Item = String>) {
        let mut m = self.map.lock().unwrap();
        let e = m.entry(key.to_string()).or_default();
        e.adds = 0;
        e.dels = pods.into_iter().collect();
        e.at = Some(Instant::now());
    }

    /// A creation was seen (or failed, so will never be seen).
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.map.lock().unwrap().get_mut(key) {
            e.adds -= 1;
        }
    }

    pub fn deletion_observed(&self, key: &str, pod: &str) {
        if let Some(e) = self.map.lock().unwrap().get_mut(key) {
            e.dels.remove(pod);
        }
    }

    pub fn forget(&self, key: &str) {
        self.map.lock().unwrap().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn creations_and_deletions_are_counted_down() {
        let e = Expectations::default();
        assert!(e.satisfied("rs"));
        e.expect_creations("rs", 2);
        assert!(!e.satisfied("rs"));
        e.creation_observed("rs");
        assert!(!e.satisfied("rs"));
        e.creation_observed("rs");
        assert!(e.satisfied("rs"));
        e.expect_deletions("rs", ["ns/a".to_string(), "ns/b".to_string()]);
        e.deletion_observed("rs", "ns/a");
        e.deletion_observed("rs", "ns/a");
        assert!(
            !e.satisfied("rs"),
            "the same deletion seen twice counts once"
        );
        e.deletion_observed("rs", "ns/b");
        assert!(e.satisfied("rs"));
    }

    #[tokio::test(start_paused = true)]
    async fn stale_expectations_expire() {
        let e = Expectations::default();
        e.expect_creations("rs", 5);
        tokio::time::advance(Duration::from_secs(301)).await;
        assert!(e.satisfied("rs"));
    }
}
