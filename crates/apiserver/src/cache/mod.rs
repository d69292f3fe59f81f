//! The watch cache (upstream's Cacher), one per resource: the current objects indexed by key,
//! a time-bounded history of recent events, and the watchers they are dispatched to.
//!
//! It follows storage with one list and one watch (`feed`); the watch starts at the oldest
//! revision storage still holds, so after an apiserver restart clients can resume watches from
//! resourceVersions they saw before it. Its resourceVersion also advances on storage progress
//! notifications, so bookmarks carry fresh versions even when nothing of this resource changes.

pub mod feed;
pub mod object;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkube_api::{ApiError, ResourceDef};
use tokio::sync::{mpsc, watch};

use crate::storage::Storage;
use object::{bookmark_line, CachedEvent, CachedObject, EventType, Filter, Line};

#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Keep events at least this long (`--watch-cache-history-window`).
    pub history_window: Duration,
    /// Bookmarks go out this often to watchers that asked (`--watch-bookmark-interval`).
    pub bookmark_interval: Duration,
    pub min_history: usize,
    pub max_history: usize,
    /// Queued lines per watcher before a slow watcher is closed.
    pub watcher_buffer: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            history_window: Duration::from_secs(75),
            bookmark_interval: Duration::from_secs(60),
            min_history: 100,
            max_history: 100 * 1024,
            watcher_buffer: 1024,
        }
    }
}

struct Watcher {
    filter: Filter,
    tx: mpsc::Sender<Line>,
    /// Events at or below this revision are not for this watcher (a watch from a future RV).
    min_rv: u64,
    bookmarks: bool,
    next_bookmark: Instant,
    deadline: Instant,
    /// The newest revision this watcher has been sent (event or bookmark).
    sent_rv: u64,
    node: Option<String>,
}

#[derive(Default)]
struct State {
    ready: bool,
    /// The resource is no longer served here: new watches are refused.
    closed: bool,
    /// Bumped on every change of the objects (events and re-lists), not on progress.
    changes: u64,
    rv: u64,
    objects: BTreeMap<String, Arc<CachedObject>>,
    history: VecDeque<Arc<CachedEvent>>,
    /// Every event with a revision at or above this one is in `history`.
    oldest_rv: u64,
    /// Storage history is being replayed into `history` (after a start).
    replaying: bool,
    /// The newest revision evicted from `history` (by age or count).
    evicted_rv: u64,
    watchers: HashMap<u64, Watcher>,
    /// Pod keys by `spec.nodeName`, so node-filtered lists and watch starts skip other pods.
    node_keys: HashMap<String, std::collections::BTreeSet<String>>,
    /// Pod watchers by their `spec.nodeName=` field selector (upstream's trigger index).
    by_node: HashMap<String, HashSet<u64>>,
    unindexed: HashSet<u64>,
}

pub struct Cacher {
    pub def: &'static ResourceDef,
    /// The kind's strategy: how stored objects are served and which fields they select by.
    pub strategy: crate::kinds::StrategyRef,
    /// `<etcd-prefix>/<resource>/`
    pub prefix: String,
    pub storage: Arc<Storage>,
    pub cfg: CacheConfig,
    state: Mutex<State>,
    rv_tx: watch::Sender<u64>,
    /// Bumped when a history replay finishes.
    replay_tx: watch::Sender<bool>,
    /// Sends progress requests on the storage watch when storage answers them (rkube-store).
    progress: Mutex<Option<rkube_etcd_api::WatchSender>>,
    pub duplex: bool,
    next_id: AtomicU64,
    /// Objects and watchers are indexed by `spec.nodeName` (the kind's strategy says so).
    node_indexed: bool,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Synthetic ADDED events for the current state, then changes.
    Snapshot,
    /// Every change after this resourceVersion.
    After(u64),
}

pub struct WatchSpec {
    pub filter: Filter,
    pub start: Start,
    pub bookmarks: bool,
    /// Mark the end of the initial events with the `k8s.io/initial-events-end` bookmark.
    pub initial_events_end: bool,
    pub deadline: Instant,
}

/// A page of cached objects.
pub struct CacheList {
    pub items: Vec<Arc<CachedObject>>,
    pub rv: u64,
    /// More objects match after the last one.
    pub more: bool,
    /// How many more match.
    pub remaining: usize,
}

/// A registered watch: lines to write first, then the live channel.
pub struct WatchStream {
    pub id: u64,
    pub initial: Vec<Line>,
    pub rx: mpsc::Receiver<Line>,
}

impl Cacher {
    pub fn new(
        def: &'static ResourceDef,
        strategy: crate::kinds::StrategyRef,
        etcd_prefix: &str,
        storage: Arc<Storage>,
        cfg: CacheConfig,
        duplex: bool,
    ) -> Arc<Self> {
        let (rv_tx, _) = watch::channel(0);
        let (replay_tx, _) = watch::channel(false);
        Arc::new(Cacher {
            def,
            prefix: def.key_prefix(etcd_prefix),
            storage,
            cfg,
            state: Mutex::new(State::default()),
            rv_tx,
            replay_tx,
            progress: Mutex::new(None),
            duplex,
            next_id: AtomicU64::new(1),
            node_indexed: strategy.node_indexed(),
            strategy,
        })
    }

    /// Moves with the cache's resourceVersion.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// Ends every watch (the resource is no longer served): clients re-watch and find out.
    pub fn close(&self) {
        let mut st = self.state.lock().unwrap();
        st.closed = true;
        st.watchers.clear();
        st.by_node.clear();
        st.unindexed.clear();
    }

    /// Moves on every change of the objects (not on progress notifications).
    pub fn content_version(&self) -> u64 {
        self.state.lock().unwrap().changes
    }

    pub fn is_ready(&self) -> bool {
        self.state.lock().unwrap().ready
    }

    pub fn resource_version(&self) -> u64 {
        self.state.lock().unwrap().rv
    }

    pub fn len(&self) -> usize {
        self.state.lock().unwrap().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn watcher_count(&self) -> usize {
        self.state.lock().unwrap().watchers.len()
    }

    fn not_ready() -> ApiError {
        ApiError::too_many_requests("storage is (re)initializing", 1)
    }

    /// Asks storage for a progress notification, so `rv` catches up with storage even when this
    /// resource is idle.
    pub async fn request_progress(&self) {
        let sender = self.progress.lock().unwrap().clone();
        if let Some(s) = sender {
            let _ = s.request_progress().await;
        }
    }

    /// Waits until the cache has reached `rv`: 504 "Too large resource version" after `timeout`.
    pub async fn wait_fresh(&self, rv: u64, timeout: Duration) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.rv_tx.subscribe();
        let mut asked = false;
        loop {
            let (ready, cur) = {
                let st = self.state.lock().unwrap();
                (st.ready, st.rv)
            };
            if ready && cur >= rv {
                return Ok(());
            }
            if ready && !asked && self.duplex {
                asked = true;
                self.request_progress().await;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    let (ready, cur) = {
                        let st = self.state.lock().unwrap();
                        (st.ready, st.rv)
                    };
                    if !ready {
                        return Err(Self::not_ready());
                    }
                    if cur >= rv {
                        return Ok(());
                    }
                    return Err(ApiError::too_large_resource_version(rv, cur, 1));
                }
            }
        }
    }

    /// A consistent read point: storage's current revision, once the cache has reached it.
    /// `None` when the cache cannot confirm it quickly (storage without progress requests);
    /// the caller then reads from storage, as upstream falls back to etcd.
    pub async fn consistent_rv(&self) -> Result<Option<u64>, ApiError> {
        let cur = self
            .storage
            .current_revision(&self.prefix)
            .await
            .map_err(|e| crate::storage::storage_error(self.def, "list", e))?
            as u64;
        if self.resource_version() >= cur && self.is_ready() {
            return Ok(Some(cur));
        }
        if !self.duplex {
            return Ok(None);
        }
        match self.wait_fresh(cur, Duration::from_secs(3)).await {
            Ok(()) => Ok(Some(cur)),
            Err(e) if e.code() == 429 => Err(e),
            Err(_) => Ok(None),
        }
    }

    pub fn get(&self, key: &str) -> Result<(Option<Arc<CachedObject>>, u64), ApiError> {
        let st = self.state.lock().unwrap();
        if !st.ready {
            return Err(Self::not_ready());
        }
        Ok((st.objects.get(key).cloned(), st.rv))
    }

    /// Every object as JSON (none until the cache is ready): what the RBAC, flow control and
    /// quota snapshots are built from.
    pub fn values(&self) -> Vec<serde_json::Value> {
        self.list(&Filter::default(), None, 0)
            .map(|l| l.items.iter().map(|o| o.value()).collect())
            .unwrap_or_default()
    }

    /// Objects matching `filter` in key order, starting after `after` (a full key), at the
    /// cache's revision. Stops after `limit` matches (0 = all); also says whether more match.
    pub fn list(
        &self,
        filter: &Filter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<CacheList, ApiError> {
        let st = self.state.lock().unwrap();
        if !st.ready {
            return Err(Self::not_ready());
        }
        let scope = match (&filter.namespace, self.def.namespaced) {
            (Some(ns), true) => format!("{}{ns}/", self.prefix),
            _ => self.prefix.clone(),
        };
        let start = match after {
            Some(a) if a.as_bytes() >= scope.as_bytes() => std::ops::Bound::Excluded(a.to_string()),
            _ => std::ops::Bound::Included(scope.clone()),
        };
        let mut out = Vec::new();
        let mut more = false;
        let mut remaining = 0;
        let after_key = match &start {
            std::ops::Bound::Excluded(a) => Some(a.clone()),
            _ => None,
        };
        let indexed = self.node_indexed && filter.fields.exact("spec.nodeName").is_some();
        let iter: Box<dyn Iterator<Item = (&String, &Arc<CachedObject>)>> = if indexed {
            Box::new(candidates(&st, filter, self.node_indexed).map(|o| (&o.key, o)))
        } else {
            Box::new(st.objects.range((start, std::ops::Bound::Unbounded)))
        };
        for (k, o) in iter {
            if indexed && (!k.starts_with(&scope) || after_key.as_ref().is_some_and(|a| k <= a)) {
                continue;
            }
            if !k.starts_with(&scope) {
                break;
            }
            if !filter.matches(o) {
                continue;
            }
            if limit > 0 && out.len() >= limit {
                more = true;
                remaining += 1;
                continue;
            }
            out.push(o.clone());
        }
        Ok(CacheList {
            items: out,
            rv: st.rv,
            more,
            remaining,
        })
    }

    /// Registers a watch. A start below the retained history is 410 Expired (which the
    /// handler sends as an in-stream ERROR event).
    pub fn watch(&self, spec: WatchSpec) -> Result<WatchStream, ApiError> {
        let mut snapshot: Vec<Arc<CachedObject>> = Vec::new();
        let mut replay: Vec<Arc<CachedEvent>> = Vec::new();
        let replay_filter = matches!(spec.start, Start::After(_)).then(|| spec.filter.clone());
        let (id, rx, snapshot_rv) = {
            let mut st = self.state.lock().unwrap();
            if st.closed {
                return Err(ApiError::too_many_requests(
                    "the resource is being reinstalled",
                    1,
                ));
            }
            if !st.ready {
                return Err(Self::not_ready());
            }
            let min_rv = match spec.start {
                Start::Snapshot => {
                    // Only pointers are taken under the lock; lines are built after it.
                    snapshot.extend(
                        candidates(&st, &spec.filter, self.node_indexed)
                            .filter(|o| spec.filter.matches(o))
                            .cloned(),
                    );
                    st.rv
                }
                Start::After(n) => {
                    if n.saturating_add(1) < st.oldest_rv {
                        return Err(ApiError::gone(format!(
                            "too old resource version: {n} ({})",
                            st.oldest_rv - 1
                        )));
                    }
                    // Only pointers under the lock too: an older version is read back from
                    // its compressed form, up to a run of them for each line.
                    let from = st.history.partition_point(|e| e.rv <= n);
                    replay.extend(st.history.iter().skip(from).cloned());
                    n.max(st.rv)
                }
            };
            let (tx, rx) = mpsc::channel(self.cfg.watcher_buffer);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let node = if self.node_indexed {
                spec.filter.fields.exact("spec.nodeName").map(String::from)
            } else {
                None
            };
            match &node {
                Some(n) => {
                    st.by_node.entry(n.clone()).or_default().insert(id);
                }
                None => {
                    st.unindexed.insert(id);
                }
            }
            let now = Instant::now();
            let w = Watcher {
                filter: spec.filter,
                tx,
                min_rv,
                bookmarks: spec.bookmarks,
                next_bookmark: self.next_bookmark(now, spec.deadline),
                deadline: spec.deadline,
                sent_rv: min_rv,
                node,
            };
            st.watchers.insert(id, w);
            (id, rx, min_rv)
        };
        let mut initial: Vec<Line> = snapshot
            .iter()
            .map(|o| Line::event(EventType::Added, o.json()))
            .collect();
        if matches!(spec.start, Start::Snapshot) && spec.initial_events_end {
            initial.push(bookmark_line(self.def, snapshot_rv, true));
        }
        if let Some(filter) = replay_filter {
            initial.extend(replay.iter().filter_map(|ev| ev.line_for(&filter)));
        }
        Ok(WatchStream { id, initial, rx })
    }

    fn next_bookmark(&self, now: Instant, deadline: Instant) -> Instant {
        let regular = now + self.cfg.bookmark_interval;
        let before_deadline = deadline
            .checked_sub(Duration::from_secs(2))
            .unwrap_or(deadline);
        if before_deadline > now {
            regular.min(before_deadline)
        } else {
            regular
        }
    }

    pub fn remove_watcher(&self, id: u64) {
        let mut st = self.state.lock().unwrap();
        remove_watcher(&mut st, id);
    }

    /// Sends due bookmarks (called about every second).
    pub fn bookmark_tick(&self) -> bool {
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        let rv = st.rv;
        let mut line: Option<Line> = None;
        let mut dead = Vec::new();
        let mut any_bookmarks = false;
        let due: Vec<u64> = st
            .watchers
            .iter()
            .filter(|(_, w)| {
                any_bookmarks |= w.bookmarks;
                w.bookmarks && now >= w.next_bookmark
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let next = {
                let w = &st.watchers[&id];
                self.next_bookmark(now, w.deadline)
            };
            let w = st.watchers.get_mut(&id).expect("due watcher exists");
            w.next_bookmark = if now + Duration::from_secs(2) >= w.deadline {
                w.deadline + Duration::from_secs(3600)
            } else {
                next
            };
            if rv <= w.sent_rv {
                continue;
            }
            let l = line
                .get_or_insert_with(|| bookmark_line(self.def, rv, false))
                .clone();
            match w.tx.try_send(l) {
                Ok(()) => w.sent_rv = rv,
                Err(_) => dead.push(id),
            }
        }
        for id in dead {
            remove_watcher(&mut st, id);
        }
        any_bookmarks
    }

    // ---- called by the feed ----------------------------------------------------------

    fn replace(&self, objects: BTreeMap<String, Arc<CachedObject>>, rv: u64) {
        let mut st = self.state.lock().unwrap();
        // Like upstream, every watcher is closed on a relist; clients resume from their RV.
        let ids: Vec<u64> = st.watchers.keys().copied().collect();
        for id in ids {
            remove_watcher(&mut st, id);
        }
        st.node_keys.clear();
        if self.node_indexed {
            for o in objects.values() {
                st.node_keys
                    .entry(o.node().to_string())
                    .or_default()
                    .insert(o.key.clone());
            }
        }
        st.objects = objects;
        st.changes += 1;
        st.rv = rv;
        st.history.clear();
        st.oldest_rv = rv + 1;
        st.evicted_rv = 0;
        st.ready = true;
        drop(st);
        self.rv_tx.send_replace(rv);
    }

    fn set_not_ready(&self) {
        self.state.lock().unwrap().ready = false;
    }

    /// A history replay starts: watches from before the list wait for it (`wait_history`).
    fn begin_replay(&self) {
        self.state.lock().unwrap().replaying = true;
    }

    /// The replay is complete: the history is whole from `oldest` on.
    fn set_oldest(&self, oldest: u64) {
        let mut st = self.state.lock().unwrap();
        // Never claim history that trimming already evicted during the replay.
        st.oldest_rv = st.oldest_rv.min(oldest.max(1)).max(st.evicted_rv + 1);
        st.replaying = false;
        drop(st);
        self.replay_tx.send_replace(true);
    }

    /// Before answering a watch from `rv` with 410, gives a history replay in progress up to
    /// `timeout` to reach back that far.
    pub async fn wait_history(&self, rv: u64, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.replay_tx.subscribe();
        loop {
            {
                let st = self.state.lock().unwrap();
                if rv.saturating_add(1) >= st.oldest_rv || !st.replaying {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// An event from before the list revision, replayed from storage history: history only.
    fn prefill(&self, ev: CachedEvent) {
        let mut st = self.state.lock().unwrap();
        if st.history.back().is_some_and(|last| last.rv > ev.rv) || ev.rv <= st.evicted_rv {
            return; // already replayed (a re-watch after a break)
        }
        let pos = st.history.partition_point(|e| e.rv <= ev.rv);
        st.history.insert(pos, Arc::new(ev));
        self.trim(&mut st);
    }

    /// Applies a live event: state, history, watchers.
    fn apply(&self, mut ev: CachedEvent) {
        let mut st = self.state.lock().unwrap();
        // Several events may share one revision (a multi-key transaction).
        if ev.rv < st.rv
            || st
                .history
                .back()
                .is_some_and(|last| last.rv == ev.rv && last.obj.key == ev.obj.key)
        {
            return; // already reflected (an event the list included)
        }
        st.changes += 1;
        // Share the previous state with the object map instead of a second decoded copy.
        if let Some(existing) = st.objects.get(&ev.obj.key) {
            if ev.prev.as_ref().is_some_and(|p| p.rv == existing.rv) {
                ev.prev = Some(existing.clone());
            }
        }
        match ev.kind {
            object::EventType::Deleted => {
                if let Some(old) = st.objects.remove(&ev.obj.key) {
                    unindex_node(&mut st, &old);
                }
            }
            _ => {
                if let Some(old) = st.objects.insert(ev.obj.key.clone(), ev.obj.clone()) {
                    unindex_node(&mut st, &old);
                }
                if self.node_indexed {
                    st.node_keys
                        .entry(ev.obj.node().to_string())
                        .or_default()
                        .insert(ev.obj.key.clone());
                }
            }
        }
        st.rv = ev.rv;
        let ev = Arc::new(ev);
        st.history.push_back(ev.clone());
        self.trim(&mut st);
        self.dispatch(&mut st, &ev);
        drop(st);
        self.rv_tx.send_replace(ev.rv);
        // The version this event replaced is the history's alone from now on.
        if let Some(prev) = &ev.prev {
            prev.pack(&ev.obj);
        }
    }

    /// A progress notification: every change up to `rv` has been seen.
    fn progress(&self, rv: u64) {
        let mut st = self.state.lock().unwrap();
        if rv > st.rv {
            st.rv = rv;
            drop(st);
            self.rv_tx.send_replace(rv);
        }
    }

    fn trim(&self, st: &mut State) {
        let now = Instant::now();
        while st.history.len() > self.cfg.min_history {
            let front = st.history.front().expect("non-empty");
            let too_many = st.history.len() > self.cfg.max_history;
            if !too_many && now.duration_since(front.at) < self.cfg.history_window {
                break;
            }
            // Evict every event of that revision together.
            let rv = front.rv;
            while st.history.front().is_some_and(|e| e.rv == rv) {
                st.history.pop_front();
            }
            st.oldest_rv = st.oldest_rv.max(rv + 1);
            st.evicted_rv = st.evicted_rv.max(rv);
        }
    }

    fn dispatch(&self, st: &mut State, ev: &Arc<CachedEvent>) {
        let mut targets: Vec<u64> = st.unindexed.iter().copied().collect();
        if self.node_indexed {
            for obj in std::iter::once(&ev.obj).chain(ev.prev.iter()) {
                if let Some(ids) = st.by_node.get(obj.field("spec.nodeName")) {
                    targets.extend(ids.iter().copied());
                }
            }
            targets.sort_unstable();
            targets.dedup();
        }
        let mut dead = Vec::new();
        for id in targets {
            let Some(w) = st.watchers.get_mut(&id) else {
                continue;
            };
            if ev.rv <= w.min_rv {
                continue;
            }
            let Some(line) = ev.line_for(&w.filter) else {
                continue;
            };
            match w.tx.try_send(line) {
                Ok(()) => w.sent_rv = ev.rv,
                Err(_) => dead.push(id),
            }
        }
        for id in dead {
            tracing::debug!(
                resource = self.def.plural,
                watcher = id,
                "closing slow or gone watcher"
            );
            remove_watcher(st, id);
        }
    }
}

fn unindex_node(st: &mut State, old: &CachedObject) {
    if let Some(keys) = st.node_keys.get_mut(old.node()) {
        keys.remove(&old.key);
        if keys.is_empty() {
            st.node_keys.remove(old.node());
        }
    }
}

/// The objects a filter can match, in key order: for pods pinned to a node, only that node's.
fn candidates<'a>(
    st: &'a State,
    filter: &Filter,
    node_indexed: bool,
) -> Box<dyn Iterator<Item = &'a Arc<CachedObject>> + 'a> {
    if node_indexed {
        if let Some(node) = filter.fields.exact("spec.nodeName") {
            return match st.node_keys.get(node) {
                Some(keys) => Box::new(keys.iter().filter_map(|k| st.objects.get(k))),
                None => Box::new(std::iter::empty()),
            };
        }
    }
    Box::new(st.objects.values())
}

fn remove_watcher(st: &mut State, id: u64) {
    if let Some(w) = st.watchers.remove(&id) {
        match w.node {
            Some(n) => {
                if let Some(set) = st.by_node.get_mut(&n) {
                    set.remove(&id);
                    if set.is_empty() {
                        st.by_node.remove(&n);
                    }
                }
            }
            None => {
                st.unindexed.remove(&id);
            }
        }
    }
}
