//! The scheduling queue (upstream's `PriorityQueue`):
//! - **active**: ready to schedule, highest priority first, then first in, first out;
//! - **backoff**: failed attempts wait 1 s, 2 s, 4 s … up to 10 s before going back to active;
//! - **unschedulable**: pods no node fits, parked until a cluster event that may help (node
//!   added or changed, pod deleted) moves them, or for at most 5 minutes.
//!
//! A pod that turns out unschedulable after such an event happened *while* it was being
//! scheduled goes to backoff instead, so the event is not lost (`move_cycle`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub const UNSCHEDULABLE_MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    Active,
    Backoff(Instant),
    Unschedulable(Instant),
    /// Popped and being scheduled.
    InFlight,
}

#[derive(PartialEq, Eq)]
struct Entry {
    priority: i32,
    seq: u64,
    key: String,
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority.cmp(&o.priority).then(o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct Info {
    priority: i32,
    attempts: u32,
    /// Updated while in flight: a failed attempt retries soon instead of parking.
    updated: bool,
    at: Where,
    /// Active-heap generation: stale heap entries are skipped.
    seq: u64,
}

#[derive(Default)]
struct State {
    active: BinaryHeap<Entry>,
    pods: HashMap<String, Info>,
    seq: u64,
    move_cycle: u64,
    closed: bool,
}

#[derive(Default)]
pub struct SchedulingQueue {
    state: Mutex<State>,
    notify: Notify,
}

fn backoff_for(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(10);
    (INITIAL_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
}

impl State {
    fn push_active(&mut self, key: &str) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(info) = self.pods.get_mut(key) {
            info.at = Where::Active;
            info.seq = seq;
            self.active.push(Entry {
                priority: info.priority,
                seq,
                key: key.to_string(),
            });
        }
    }
}

impl SchedulingQueue {
    /// A new pending pod (or one seen again): active unless already queued.
    pub fn add(&self, key: &str, priority: i32) {
        let mut s = self.state.lock().unwrap();
        match s.pods.get_mut(key) {
            Some(info) => {
                info.priority = priority;
                if info.at == Where::InFlight {
                    info.updated = true;
                }
                // An update to a parked pod may make it schedulable.
                if matches!(info.at, Where::Unschedulable(_)) {
                    s.push_active(key);
                }
            }
            None => {
                s.pods.insert(
                    key.to_string(),
                    Info {
                        priority,
                        attempts: 0,
                        updated: false,
                        at: Where::Active,
                        seq: 0,
                    },
                );
                s.push_active(key);
            }
        }
        drop(s);
        self.notify.notify_one();
    }

    /// The pod is gone or bound: forget it.
    pub fn delete(&self, key: &str) {
        self.state.lock().unwrap().pods.remove(key);
    }

    /// The next pod to schedule and the move cycle at which it was taken; waits. `None` after
    /// `close`.
    pub async fn pop(&self) -> Option<(String, u64)> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.state.lock().unwrap();
                if s.closed {
                    return None;
                }
                while let Some(e) = s.active.pop() {
                    let cycle = s.move_cycle;
                    let current = s
                        .pods
                        .get_mut(&e.key)
                        .is_some_and(|i| i.at == Where::Active && i.seq == e.seq);
                    if current {
                        let info = s.pods.get_mut(&e.key).expect("present");
                        info.at = Where::InFlight;
                        info.attempts += 1;
                        info.updated = false;
                        return Some((e.key, cycle));
                    }
                }
            }
            notified.await;
        }
    }

    /// No node fits: park it, or back off if a cluster event came since `cycle`.
    pub fn unschedulable(&self, key: &str, cycle: u64) {
        let mut s = self.state.lock().unwrap();
        let moved = s.move_cycle > cycle;
        if let Some(info) = s.pods.get_mut(key) {
            let now = Instant::now();
            info.at = if moved || info.updated {
                Where::Backoff(now + backoff_for(info.attempts))
            } else {
                Where::Unschedulable(now)
            };
        }
    }

    /// An error (binding failed, API error): retry after the pod's backoff.
    pub fn backoff(&self, key: &str) {
        let mut s = self.state.lock().unwrap();
        if let Some(info) = s.pods.get_mut(key) {
            info.at = Where::Backoff(Instant::now() + backoff_for(info.attempts));
        }
    }

    /// The pod was bound: done with it.
    pub fn done(&self, key: &str) {
        self.delete(key);
    }

    /// A cluster event that may make parked pods schedulable: they go to active (or to
    /// backoff while theirs has not run out).
    pub fn move_all(&self) {
        let mut s = self.state.lock().unwrap();
        s.move_cycle += 1;
        let now = Instant::now();
        let parked: Vec<(String, u32, Instant)> = s
            .pods
            .iter()
            .filter_map(|(k, i)| match i.at {
                Where::Unschedulable(since) => Some((k.clone(), i.attempts, since)),
                _ => None,
            })
            .collect();
        let mut woke = false;
        for (k, attempts, since) in parked {
            let ready_at = since + backoff_for(attempts);
            if ready_at <= now {
                s.push_active(&k);
                woke = true;
            } else if let Some(i) = s.pods.get_mut(&k) {
                i.at = Where::Backoff(ready_at);
            }
        }
        drop(s);
        if woke {
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    /// Moves expired backoffs to active and pods parked for over 5 minutes to active; call
    /// periodically.
    pub fn flush(&self) {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        let due: Vec<String> = s
            .pods
            .iter()
            .filter(|(_, i)| match i.at {
                Where::Backoff(t) => t <= now,
                Where::Unschedulable(since) => now.duration_since(since) >= UNSCHEDULABLE_MAX,
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &due {
            s.push_active(k);
        }
        drop(s);
        if !due.is_empty() {
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    pub fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    pub fn where_is(&self, key: &str) -> Option<Where> {
        self.state.lock().unwrap().pods.get(key).map(|i| i.at)
    }

    /// (active, backoff, unschedulable) sizes.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let s = self.state.lock().unwrap();
        let mut out = (0, 0, 0);
        for i in s.pods.values() {
            match i.at {
                Where::Active => out.0 += 1,
                Where::Backoff(_) => out.1 += 1,
                Where::Unschedulable(_) => out.2 += 1,
                Where::InFlight => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn priority_then_fifo() {
        let q = SchedulingQueue::default();
        q.add("low-1", 0);
        q.add("high", 10);
        q.add("low-2", 0);
        assert_eq!(q.pop().await.unwrap().0, "high");
        assert_eq!(q.pop().await.unwrap().0, "low-1");
        assert_eq!(q.pop().await.unwrap().0, "low-2");
    }

    #[tokio::test(start_paused = true)]
    async fn unschedulable_waits_for_an_event_then_honours_backoff() {
        let q = SchedulingQueue::default();
        q.add("p", 0);
        let (k, cycle) = q.pop().await.unwrap();
        q.unschedulable(&k, cycle);
        assert!(matches!(q.where_is("p"), Some(Where::Unschedulable(_))));
        q.flush();
        assert!(
            matches!(q.where_is("p"), Some(Where::Unschedulable(_))),
            "no event, no retry"
        );
        // An event 0.5 s later: its 1 s backoff has not run out yet.
        tokio::time::advance(Duration::from_millis(500)).await;
        q.move_all();
        assert!(matches!(q.where_is("p"), Some(Where::Backoff(_))));
        tokio::time::advance(Duration::from_millis(600)).await;
        q.flush();
        assert_eq!(q.where_is("p"), Some(Where::Active));
        assert_eq!(q.pop().await.unwrap().0, "p");
    }

    #[tokio::test(start_paused = true)]
    async fn an_update_during_scheduling_is_not_lost() {
        let q = SchedulingQueue::default();
        q.add("p", 0);
        let (k, cycle) = q.pop().await.unwrap();
        q.add("p", 0); // the user added a toleration meanwhile
        q.unschedulable(&k, cycle);
        assert!(matches!(q.where_is("p"), Some(Where::Backoff(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn event_during_scheduling_is_not_lost() {
        let q = SchedulingQueue::default();
        q.add("p", 0);
        let (k, cycle) = q.pop().await.unwrap();
        q.move_all(); // a node was added while "p" was being scheduled
        q.unschedulable(&k, cycle);
        assert!(matches!(q.where_is("p"), Some(Where::Backoff(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_to_ten_seconds_and_parked_pods_retry_after_five_minutes() {
        assert_eq!(backoff_for(1), Duration::from_secs(1));
        assert_eq!(backoff_for(3), Duration::from_secs(4));
        assert_eq!(backoff_for(9), Duration::from_secs(10));
        let q = SchedulingQueue::default();
        q.add("p", 0);
        let (k, c) = q.pop().await.unwrap();
        q.unschedulable(&k, c);
        tokio::time::advance(UNSCHEDULABLE_MAX).await;
        q.flush();
        assert_eq!(q.where_is("p"), Some(Where::Active));
    }
}
