//! API Priority and Fairness: each request is classified by the first matching FlowSchema
//! (lowest matching precedence) into a priority level and a flow (its user, or its namespace);
//! each limited level gets a share of the server's concurrency (`--max-requests-inflight` +
//! `--max-mutating-requests-inflight`) and queues what it cannot run at once. A flow is
//! shuffle-sharded onto a hand of the level's queues and joins the shortest; freed seats go to
//! the queue that has had the fewest (fair queuing in virtual time), so one flow flooding its
//! queues cannot starve another flow, and one level cannot take another's seats. A full queue, or a wait past the limit, is a 429 with
//! `Retry-After`. Long-running requests (watches) are not counted. The configuration is the
//! stored FlowSchemas and PriorityLevelConfigurations (upstream's defaults, created at startup
//! and editable), re-read when either watch cache moves.

pub mod defaults;

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rkube_api::authz::{Attributes, UserInfo};
use rkube_api::ApiError;
use tokio::sync::oneshot;

pub use defaults::{FlowSchema, Level, Subject};

use crate::cache::Cacher;

/// Upstream's default priority levels (what the `apiserver_flowcontrol_*` gauges report).
pub const DEFAULT_LEVELS: &[&str] = &[
    "exempt",
    "system",
    "node-high",
    "leader-election",
    "workload-high",
    "workload-low",
    "global-default",
    "catch-all",
];

/// How long a queued request may wait for a seat.
pub const MAX_WAIT: Duration = Duration::from_secs(15);

struct Waiter {
    wake: oneshot::Sender<()>,
    id: u64,
    /// Seats the request occupies (its estimated width).
    width: usize,
}

#[derive(Default)]
struct LevelState {
    /// Seats in use.
    executing: usize,
    queues: Vec<VecDeque<Waiter>>,
    /// Each queue's virtual start: the seats it has been given, in virtual time (fair
    /// queuing: the non-empty queue that has had the least goes next).
    vstart: Vec<u64>,
    /// The virtual start of the last dispatch; a queue that was idle starts here, so idling
    /// earns no credit.
    vtime: u64,
    waiting: usize,
}

struct LevelRuntime {
    spec: Level,
    /// Seats (nominal concurrency limit).
    seats: usize,
    state: Mutex<LevelState>,
}

/// One configuration: the schemas by precedence and each level's runtime.
pub struct Config {
    versions: [u64; 2],
    schemas: Vec<FlowSchema>,
    levels: Vec<Arc<LevelRuntime>>,
}

/// Seats a request needs: upstream's work estimate (LISTs by the objects they may return).
pub type Width = Box<dyn Fn(&Attributes) -> usize + Send + Sync>;

pub struct Apf {
    server_seats: usize,
    width: Option<Width>,
    /// The flowschemas and prioritylevelconfigurations caches (None: the built-in defaults).
    sources: Option<[Arc<Cacher>; 2]>,
    config: Mutex<Arc<Config>>,
    ids: std::sync::atomic::AtomicU64,
}

/// Where a request was classified.
#[derive(Clone, Debug)]
pub struct Classification {
    pub schema_uid: String,
    pub level_uid: String,
}

/// Seats: released (and the next waiters woken) on drop.
pub struct Seat {
    level: Option<Arc<LevelRuntime>>,
    width: usize,
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(l) = self.level.take() {
            let mut st = l.state.lock().unwrap();
            st.executing -= self.width;
            dispatch(&mut st, l.seats);
        }
    }
}

/// Hands free seats to waiters: the queue whose head request would finish first in virtual
/// time (its virtual start plus the request's width) goes next — waiting, and keeping its
/// turn, until the width fits — and its virtual start advances by the seats it took; so a flow
/// that has been flooding waits behind one that has not, and a narrow request behind a wide
/// one from the same point.
fn dispatch(st: &mut LevelState, seats: usize) {
    while st.executing < seats && st.waiting > 0 {
        let Some(q) = (0..st.queues.len())
            .filter_map(|i| Some((i, st.queues[i].front()?.width)))
            .min_by_key(|&(i, width)| st.vstart[i] + width as u64)
            .map(|(i, _)| i)
        else {
            return;
        };
        let width = st.queues[q].front().expect("non-empty queue").width;
        if st.executing + width > seats {
            return;
        }
        st.vtime = st.vtime.max(st.vstart[q]);
        st.vstart[q] += width as u64;
        let w = st.queues[q].pop_front().expect("non-empty queue");
        st.waiting -= 1;
        if w.wake.send(()).is_ok() {
            st.executing += width;
        }
    }
}

/// Upstream's list work estimate: a LIST may return every stored object of its resource, and
/// takes one seat per 100 of them (at most 10); everything else takes one.
pub fn list_width(verb: &str, objects: usize) -> usize {
    if verb == "list" {
        objects.div_ceil(100).clamp(1, 10)
    } else {
        1
    }
}

fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (schema, distinguisher).hash(&mut h);
    h.finish()
}

/// Deals `hand` distinct queue indices out of `queues` from a flow's hash (upstream's
/// shuffle sharding: the hash read as digits in falling bases).
pub fn deal(mut hash: u64, queues: usize, hand: usize) -> Vec<usize> {
    let hand = hand.min(queues).max(1);
    let mut picked: Vec<usize> = Vec::with_capacity(hand);
    for i in 0..hand {
        let base = (queues - i) as u64;
        let mut card = (hash % base) as usize;
        hash /= base;
        // Skip the cards already dealt, as in a shrinking deck.
        let mut sorted = picked.clone();
        sorted.sort_unstable();
        for p in sorted {
            if card >= p {
                card += 1;
            }
        }
        picked.push(card);
    }
    picked
}

/// Builds a configuration's runtimes, keeping `old`'s runtime (and its queues) for every level
/// whose spec and seats are unchanged.
fn build(
    server_seats: usize,
    versions: [u64; 2],
    (schemas, levels): (Vec<FlowSchema>, Vec<Level>),
    old: Option<&Config>,
) -> Config {
    let total: u64 = levels
        .iter()
        .filter(|l| !l.exempt)
        .map(|l| l.shares as u64)
        .sum();
    let levels = levels
        .into_iter()
        .map(|spec| {
            let seats = if spec.exempt {
                usize::MAX
            } else {
                ((server_seats as u64 * spec.shares as u64).div_ceil(total.max(1))).max(1) as usize
            };
            if let Some(same) = old
                .into_iter()
                .flat_map(|o| o.levels.iter())
                .find(|l| l.spec == spec && l.seats == seats)
            {
                return same.clone();
            }
            let n = spec.queues.max(1);
            Arc::new(LevelRuntime {
                spec,
                seats,
                state: Mutex::new(LevelState {
                    queues: (0..n).map(|_| VecDeque::new()).collect(),
                    vstart: vec![0; n],
                    ..Default::default()
                }),
            })
        })
        .collect();
    Config {
        versions,
        schemas,
        levels,
    }
}

impl Apf {
    /// Upstream's default configuration over `server_seats` seats.
    pub fn new(server_seats: usize) -> Self {
        let config = build(server_seats, [0, 0], defaults::configuration(), None);
        Apf {
            server_seats,
            width: None,
            sources: None,
            config: Mutex::new(Arc::new(config)),
            ids: Default::default(),
        }
    }

    /// The configuration stored in these caches (flowschemas, prioritylevelconfigurations);
    /// the defaults until they hold any.
    pub fn from_caches(server_seats: usize, sources: [Arc<Cacher>; 2]) -> Self {
        Apf {
            sources: Some(sources),
            ..Self::new(server_seats)
        }
    }

    /// Estimates each request's width (default: one seat).
    pub fn with_width(self, width: Width) -> Self {
        Apf {
            width: Some(width),
            ..self
        }
    }

    /// The current configuration, rebuilt when a source cache has moved.
    fn current(&self) -> Arc<Config> {
        let mut cfg = self.config.lock().unwrap();
        let Some(sources) = &self.sources else {
            return cfg.clone();
        };
        let versions = sources.each_ref().map(|c| c.resource_version());
        if versions != cfg.versions {
            let (schemas, levels) = (sources[0].values(), sources[1].values());
            let parsed = if schemas.is_empty() && levels.is_empty() {
                defaults::configuration()
            } else {
                defaults::from_objects(&schemas, &levels)
            };
            *cfg = Arc::new(build(self.server_seats, versions, parsed, Some(&cfg)));
            tracing::debug!(?versions, "flow control configuration rebuilt");
        }
        cfg.clone()
    }

    /// The seats of each level (name → seats), for metrics and tests.
    pub fn seats(&self) -> Vec<(String, usize)> {
        self.current()
            .levels
            .iter()
            .map(|l| (l.spec.name.clone(), l.seats))
            .collect()
    }

    /// Requests waiting in a level's queues.
    pub fn queued(&self, level: &str) -> usize {
        self.current()
            .levels
            .iter()
            .find(|l| l.spec.name == level)
            .map_or(0, |l| l.state.lock().unwrap().waiting)
    }

    /// Seats a level's executing requests hold.
    pub fn executing(&self, level: &str) -> usize {
        self.current()
            .levels
            .iter()
            .find(|l| l.spec.name == level)
            .map_or(0, |l| l.state.lock().unwrap().executing)
    }

    /// A level's seats (0 for an unknown level, and for exempt ones, as upstream reports
    /// them: they take no seats).
    pub fn nominal_seats(&self, level: &str) -> usize {
        self.current()
            .levels
            .iter()
            .find(|l| l.spec.name == level && !l.spec.exempt)
            .map_or(0, |l| l.seats)
    }

    /// The matching schema (its index in the configuration) and its level.
    fn classify(&self, user: &UserInfo, a: &Attributes) -> (Arc<Config>, usize, Arc<LevelRuntime>) {
        let cfg = self.current();
        let schema = cfg
            .schemas
            .iter()
            .position(|s| s.matches(user, a))
            .unwrap_or(cfg.schemas.len() - 1);
        let name = &cfg.schemas[schema].level;
        let level = cfg
            .levels
            .iter()
            .find(|l| l.spec.name == *name)
            .unwrap_or_else(|| cfg.levels.last().expect("levels"))
            .clone();
        (cfg, schema, level)
    }

    /// Waits for a seat for the request (none needed for exempt levels), or 429.
    pub async fn admit(
        &self,
        user: &UserInfo,
        a: &Attributes,
    ) -> Result<(Seat, Classification), ApiError> {
        let (cfg, schema, level) = self.classify(user, a);
        let schema = &cfg.schemas[schema];
        let class = Classification {
            schema_uid: schema.uid.clone(),
            level_uid: level.spec.uid.clone(),
        };
        if level.spec.exempt {
            return Ok((
                Seat {
                    level: None,
                    width: 0,
                },
                class,
            ));
        }
        // A request wider than its level runs alone.
        let width = self
            .width
            .as_ref()
            .map_or(1, |w| w(a))
            .clamp(1, level.seats);
        let distinguisher = match schema.distinguisher {
            Some(defaults::By::User) => user.name.as_str(),
            Some(defaults::By::Namespace) => a.namespace.as_str(),
            None => "",
        };
        let rx = {
            let mut st = level.state.lock().unwrap();
            if st.executing + width <= level.seats && st.waiting == 0 {
                st.executing += width;
                return Ok((
                    Seat {
                        level: Some(level.clone()),
                        width,
                    },
                    class,
                ));
            }
            let hand = deal(
                flow_hash(&schema.name, distinguisher),
                st.queues.len(),
                level.spec.hand_size,
            );
            let q = *hand
                .iter()
                .min_by_key(|&&q| st.queues[q].len())
                .expect("a hand has cards");
            if st.queues[q].len() >= level.spec.queue_length_limit {
                return Err(too_many(&level));
            }
            let (tx, rx) = oneshot::channel();
            let id = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if st.queues[q].is_empty() {
                st.vstart[q] = st.vstart[q].max(st.vtime);
            }
            st.queues[q].push_back(Waiter {
                wake: tx,
                id,
                width,
            });
            st.waiting += 1;
            (rx, q, id)
        };
        let (rx, q, id) = rx;
        // Until it holds a seat, the request is a `Pending`: however the wait ends — timeout,
        // or the client going away and the future being dropped — its drop leaves the queue
        // or gives back the seats it was just handed.
        let mut pending = Pending {
            level: level.clone(),
            q,
            id,
            width,
            rx: Some(rx),
        };
        let woken = tokio::time::timeout(MAX_WAIT, pending.rx.as_mut().expect("set above")).await;
        match woken {
            Ok(Ok(())) => {
                pending.rx = None;
                Ok((
                    Seat {
                        level: Some(level.clone()),
                        width,
                    },
                    class,
                ))
            }
            _ => {
                drop(pending);
                Err(too_many(&level))
            }
        }
    }
}

/// A queued request that has no seat yet (see `Apf::admit`).
struct Pending {
    level: Arc<LevelRuntime>,
    q: usize,
    id: u64,
    width: usize,
    /// None once the seats became a `Seat`.
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let mut st = self.level.state.lock().unwrap();
        if let Some(pos) = st.queues[self.q].iter().position(|w| w.id == self.id) {
            st.queues[self.q].remove(pos);
            st.waiting -= 1;
        } else if rx.try_recv().is_ok() {
            // Dispatched (its seats counted) but never taken up.
            st.executing -= self.width;
        }
        // A wide head leaving may let narrower requests behind it run.
        dispatch(&mut st, self.level.seats);
    }
}

fn too_many(level: &LevelRuntime) -> ApiError {
    ApiError::too_many_requests(
        format!(
            "The {} priority level is over its concurrency and queue limits, please try again later.",
            level.spec.name
        ),
        1,
    )
}

#[cfg(test)]
mod tests;
