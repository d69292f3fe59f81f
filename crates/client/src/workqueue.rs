//! The rate-limited work queue controllers run on (client-go's semantics):
//! - an item added while queued is queued once (dedup);
//! - an item being processed is never handed to a second worker; if it is added meanwhile it
//!   is queued again when `done` is called;
//! - `add_rate_limited` delays by max(per-item exponential backoff 5 ms → 1000 s, an overall
//!   token bucket of 10 qps / burst 100); `forget` resets the item's backoff;
//! - `add_after` delays; an item waits once, for the earliest of the delays asked for it (a
//!   later one is dropped, as client-go's `waitingForQueue` keeps one entry per item); `shutdown`
//!   wakes every waiting worker with `None`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::ratelimit::TokenBucket;

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    failures: HashMap<T, u32>,
    /// When each item waiting in `add_after` is due (the earliest asked for), and its timer.
    waiting: HashMap<T, (tokio::time::Instant, tokio::task::AbortHandle)>,
    shutting_down: bool,
}

pub struct WorkQueue<T> {
    name: String,
    state: Mutex<State<T>>,
    notify: Notify,
    bucket: TokenBucket,
    base_delay: Duration,
    max_delay: Duration,
}

impl<T: Clone + Eq + Hash + Send + 'static> WorkQueue<T> {
    pub fn new(name: &str) -> Arc<Self> {
        Arc::new(WorkQueue {
            name: name.to_string(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                failures: HashMap::new(),
                waiting: HashMap::new(),
                shutting_down: false,
            }),
            notify: Notify::new(),
            bucket: TokenBucket::new(10.0, 100),
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn add(&self, item: T) {
        let mut s = self.state.lock().unwrap();
        if s.shutting_down || s.dirty.contains(&item) {
            return;
        }
        s.dirty.insert(item.clone());
        if s.processing.contains(&item) {
            return; // re-queued by `done`
        }
        s.queue.push_back(item);
        drop(s);
        self.notify.notify_one();
    }

    /// Adds `item` after `delay`.
    pub fn add_after(self: &Arc<Self>, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        let now = tokio::time::Instant::now();
        // A delay too long to add is as good as never (the backoff caps at 1000 s anyway).
        let due = now
            .checked_add(delay)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        let mut s = self.state.lock().unwrap();
        if s.shutting_down || s.waiting.get(&item).is_some_and(|(d, _)| *d <= due) {
            return; // an earlier wait adds it
        }
        let q = self.clone();
        let it = item.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let mine = {
                let mut s = q.state.lock().unwrap();
                let mine = s.waiting.get(&it).is_some_and(|(d, _)| *d == due);
                if mine {
                    s.waiting.remove(&it);
                }
                mine
            };
            if mine {
                q.add(it);
            }
        });
        if let Some((_, replaced)) = s.waiting.insert(item, (due, timer.abort_handle())) {
            replaced.abort();
        }
    }

    /// The delay `add_rate_limited` would use now (and counts the failure).
    pub fn next_delay(&self, item: &T) -> Duration {
        let n = {
            let mut s = self.state.lock().unwrap();
            let n = s.failures.entry(item.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let per_item = self
            .base_delay
            .checked_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        per_item.max(self.bucket.reserve())
    }

    /// Adds `item` after its backoff: for a reconcile that failed.
    pub fn add_rate_limited(self: &Arc<Self>, item: T) {
        let d = self.next_delay(&item);
        self.add_after(item, d);
    }

    /// Clears `item`'s failure count: for a reconcile that succeeded.
    pub fn forget(&self, item: &T) {
        self.state.lock().unwrap().failures.remove(item);
    }

    pub fn failures(&self, item: &T) -> u32 {
        self.state
            .lock()
            .unwrap()
            .failures
            .get(item)
            .copied()
            .unwrap_or(0)
    }

    /// The next item, waiting for one; `None` once shut down.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().unwrap();
                if let Some(item) = s.queue.pop_front() {
                    s.dirty.remove(&item);
                    s.processing.insert(item.clone());
                    if !s.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(item);
                }
                if s.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `item` processed; if it was added meanwhile it goes back in the queue.
    pub fn done(&self, item: &T) {
        let mut s = self.state.lock().unwrap();
        s.processing.remove(item);
        if s.dirty.contains(item) {
            s.queue.push_back(item.clone());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queued items (not counting those being processed).
    pub fn len(&self) -> usize {
        self.state.lock().unwrap().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn shutdown(&self) {
        let mut s = self.state.lock().unwrap();
        s.shutting_down = true;
        for (_, (_, timer)) in s.waiting.drain() {
            timer.abort();
        }
        drop(s);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedups_and_never_hands_out_an_item_twice() {
        let q = WorkQueue::new("t");
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let a = q.get().await.unwrap();
        assert_eq!(a, "a");
        q.add("a"); // while processing: held back
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.len(), 0, "a must not be handed out while processing");
        q.done(&"a");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn per_item_backoff_grows_and_forget_resets() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new("t");
        let d: Vec<u128> = (0..4).map(|_| q.next_delay(&"x").as_millis()).collect();
        assert_eq!(d, [5, 10, 20, 40]);
        for _ in 0..40 {
            q.next_delay(&"x");
        }
        assert_eq!(q.next_delay(&"x"), Duration::from_secs(1000));
        q.forget(&"x");
        assert_eq!(q.next_delay(&"x"), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn overall_bucket_limits_many_items() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new("t");
        // 100 burst, then 10/s: the 111th new item waits ~1.1 s.
        let mut last = Duration::ZERO;
        for i in 0..111 {
            last = q.next_delay(&i);
        }
        assert!(last >= Duration::from_millis(1090), "{last:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_and_shutdown() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new("t");
        q.add_after("later", Duration::from_secs(5));
        let q2 = q.clone();
        let got = tokio::spawn(async move { q2.get().await });
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!got.is_finished());
        assert_eq!(got.await.unwrap(), Some("later"));
        let q3 = q.clone();
        let waiter = tokio::spawn(async move { q3.get().await });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_waits_once_for_the_earliest_delay() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new("t");
        q.add_after("x", Duration::from_secs(10));
        q.add_after("x", Duration::from_secs(1)); // earlier: replaces the wait
        q.add_after("x", Duration::from_secs(5)); // later than the one waiting: dropped
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("x"));
        q.done(&"x");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(q.is_empty(), "the dropped and replaced waits add nothing");
        // Once due, a new wait starts afresh.
        q.add_after("x", Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(3100)).await;
        assert_eq!(q.len(), 1);
    }
}
