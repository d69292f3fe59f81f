//! The Reflector: keeps a sink in step with one resource (optionally filtered) by list + watch.
//!
//! It is a state machine; `transition` is its pure core and `Reflector::run` performs the I/O.
//!
//! ```text
//!            ┌────────────── list error (backoff; "" after 410/504) ─────────────┐
//!            ▼                                                                   │
//!   ──► Listing{rv} ── pages of 500 (or a sendInitialEvents stream) ──► Watching{rv}
//!            ▲                                                          │  ▲   │
//!            │ 410 Expired (HTTP or in-stream): relist from rv,         │  │   │ events and
//!            │ then from "" if that is gone too                         │  │   │ bookmarks
//!            └──────────────────────────────────────────────────────────┘  │   │ advance rv
//!                                  stream ended (timeout, server closed) ───┘◄──┘
//!                                  transport error / 429 / 5xx: backoff, same rv, no relist
//! ```
//!
//! Backoff is 0.8 s doubling to 30 s with up to 100% jitter, reset after two minutes without a
//! failure (client-go's numbers).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{Api, ListParams, Resource};
use crate::watch::WatchEvent;
use crate::Error;

/// What a reflector keeps up to date.
pub trait Sink<K>: Send + Sync + 'static {
    /// A complete list: afterwards the sink holds exactly `items`.
    fn replace(&self, items: Vec<K>);
    fn added(&self, obj: K);
    fn modified(&self, obj: K);
    fn deleted(&self, obj: K);
}

/// Counters, shared with whoever exports metrics.
#[derive(Debug, Default)]
pub struct Stats {
    /// Completed lists, the first one included.
    pub lists: AtomicU64,
    /// Lists after the first: what bookmarks exist to avoid.
    pub relists: AtomicU64,
    /// Watch requests opened.
    pub watches: AtomicU64,
    pub bookmarks: AtomicU64,
    pub events: AtomicU64,
    /// Lists and watches that failed (transport, 5xx, 410).
    pub errors: AtomicU64,
}

/// A counter's metric name, help text and reader.
pub type Series = (&'static str, &'static str, fn(&Stats) -> u64);

impl Stats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// Every counter as a metric, for components to export (labelled by resource).
    pub const SERIES: [Series; 6] = [
        (
            "reflector_lists_total",
            "Lists done by the reflector, the first included.",
            |s| Self::get(&s.lists),
        ),
        (
            "reflector_relists_total",
            "Lists after the first (re-lists).",
            |s| Self::get(&s.relists),
        ),
        (
            "reflector_watches_total",
            "Watch requests opened by the reflector.",
            |s| Self::get(&s.watches),
        ),
        ("reflector_bookmarks_total", "Bookmarks received.", |s| {
            Self::get(&s.bookmarks)
        }),
        ("reflector_events_total", "Watch events received.", |s| {
            Self::get(&s.events)
        }),
        ("reflector_errors_total", "Failed lists and watches.", |s| {
            Self::get(&s.errors)
        }),
    ];
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Where the reflector stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// A list is due, at this resourceVersion ("" = the latest, a consistent read).
    Listing { rv: String },
    /// Watching from this resourceVersion.
    Watching { rv: String },
    /// Waiting out a backoff before going to `then`.
    Waiting { delay: Duration, then: Box<State> },
}

/// What the last step produced.
#[derive(Debug)]
pub enum Outcome {
    Listed {
        rv: String,
    },
    ListFailed {
        rv: String,
        error: Error,
    },
    /// The watch ended without an error (its timeout, or the server closed it); `rv` is the
    /// last resourceVersion seen.
    WatchClosed {
        rv: String,
    },
    /// 410: the watch's resourceVersion has left the server's history.
    WatchExpired {
        rv: String,
    },
    WatchFailed {
        rv: String,
        error: Error,
    },
}

/// Exponential backoff with jitter and a quiet-period reset.
#[derive(Debug)]
pub struct Backoff {
    init: Duration,
    max: Duration,
    current: Duration,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            init: Duration::from_millis(800),
            max: Duration::from_secs(30),
            current: Duration::ZERO,
            last_failure: None,
        }
    }
}

impl Backoff {
    /// The base delay of the next failure (before jitter).
    pub fn next_base(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|t| now.duration_since(t) > Duration::from_secs(120))
        {
            self.current = Duration::ZERO;
        }
        self.last_failure = Some(now);
        self.current = if self.current.is_zero() {
            self.init
        } else {
            (self.current * 2).min(self.max)
        };
        self.current
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Duration {
        let base = self.next_base();
        base + base.mul_f64(rand::thread_rng().gen_range(0.0..1.0))
    }
}

/// The pure core: the state after an outcome.
pub fn transition(outcome: Outcome, backoff: &mut Backoff) -> State {
    let wait = |backoff: &mut Backoff, then: State| State::Waiting {
        delay: backoff.next(),
        then: Box::new(then),
    };
    match outcome {
        Outcome::Listed { rv } => State::Watching { rv },
        Outcome::ListFailed { error, .. } if error.is_gone() => {
            State::Listing { rv: String::new() }
        }
        Outcome::ListFailed { error, .. } if error.is_too_large_rv() => {
            wait(backoff, State::Listing { rv: String::new() })
        }
        Outcome::ListFailed { rv, .. } => wait(backoff, State::Listing { rv }),
        Outcome::WatchClosed { rv } => State::Watching { rv },
        Outcome::WatchExpired { rv } => State::Listing { rv },
        Outcome::WatchFailed { error, .. } if error.is_too_large_rv() => {
            wait(backoff, State::Listing { rv: String::new() })
        }
        Outcome::WatchFailed { rv, .. } => wait(backoff, State::Watching { rv }),
    }
}

/// Tunables; the defaults are client-go's.
#[derive(Clone, Debug)]
pub struct Options {
    pub page_size: u32,
    /// Each watch asks for a timeout uniform in [min, 2·min].
    pub min_watch_timeout: Duration,
    /// List through a `sendInitialEvents=true` watch instead of paged GETs.
    pub streaming_list: bool,
    /// Ask for bookmarks (always on in client-go; off only to measure what they save).
    pub bookmarks: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: 500,
            min_watch_timeout: Duration::from_secs(300),
            streaming_list: false,
            bookmarks: true,
        }
    }
}

pub struct Reflector<K: Resource, S> {
    api: Api<K>,
    params: ListParams,
    sink: Arc<S>,
    opts: Options,
    stats: Arc<Stats>,
    last_rv: Arc<Mutex<String>>,
}

impl<K: Resource, S: Sink<K>> Reflector<K, S> {
    /// `params` carries the label/field selectors; paging and RVs are the reflector's.
    pub fn new(api: Api<K>, params: ListParams, sink: Arc<S>, opts: Options) -> Self {
        Reflector {
            api,
            params,
            sink,
            opts,
            stats: Arc::default(),
            last_rv: Arc::default(),
        }
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The last resourceVersion synced (from a list, an event or a bookmark).
    pub fn last_rv(&self) -> Arc<Mutex<String>> {
        self.last_rv.clone()
    }

    fn kind() -> &'static str {
        K::KIND
    }

    /// Runs until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut state = State::Listing { rv: String::new() };
        let mut backoff = Backoff::default();
        loop {
            let step = async {
                match &state {
                    State::Listing { rv } => {
                        let outcome = if self.opts.streaming_list {
                            self.stream_list_and_watch(rv).await
                        } else {
                            self.list(rv).await
                        };
                        transition(outcome, &mut backoff)
                    }
                    State::Watching { rv } => transition(self.watch(rv).await, &mut backoff),
                    State::Waiting { delay, then } => {
                        tokio::time::sleep(*delay).await;
                        (**then).clone()
                    }
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                next = step => {
                    if let State::Waiting { delay, then } = &next {
                        tracing::debug!(kind = Self::kind(), ?delay, next = ?then, "reflector backing off");
                    }
                    state = next;
                }
            }
        }
    }

    fn set_rv(&self, rv: &str) {
        if !rv.is_empty() {
            *self.last_rv.lock().unwrap() = rv.to_string();
        }
    }

    fn count_list(&self) {
        if self.stats.lists.fetch_add(1, Ordering::Relaxed) > 0 {
            bump(&self.stats.relists);
        }
    }

    /// Paged list at `rv`; replaces the sink's contents on success.
    async fn list(&self, rv: &str) -> Outcome {
        let mut items = Vec::new();
        let mut lp = self.params.clone();
        lp.limit = Some(self.opts.page_size);
        lp.resource_version = (!rv.is_empty()).then(|| rv.to_string());
        lp.resource_version_match = (!rv.is_empty()).then(|| "NotOlderThan".to_string());
        let list_rv = loop {
            match self.api.list(&lp).await {
                Ok(page) => {
                    items.extend(page.items);
                    match page.metadata.continue_.filter(|c| !c.is_empty()) {
                        Some(c) => {
                            lp.continue_token = Some(c);
                            lp.resource_version = None;
                            lp.resource_version_match = None;
                        }
                        None => break page.metadata.resource_version.unwrap_or_default(),
                    }
                }
                Err(error) => {
                    bump(&self.stats.errors);
                    tracing::warn!(kind = Self::kind(), rv, %error, "list failed");
                    return Outcome::ListFailed {
                        rv: rv.to_string(),
                        error,
                    };
                }
            }
        };
        self.count_list();
        tracing::debug!(kind = Self::kind(), rv = %list_rv, items = items.len(), "listed");
        self.set_rv(&list_rv);
        self.sink.replace(items);
        Outcome::Listed { rv: list_rv }
    }

    fn watch_params(&self, rv: &str) -> ListParams {
        let mut lp = self.params.clone();
        lp.resource_version = Some(rv.to_string());
        let min = self.opts.min_watch_timeout.as_secs().max(1);
        lp.timeout_seconds = Some(rand::thread_rng().gen_range(min..=2 * min) as u32);
        lp.allow_watch_bookmarks = self.opts.bookmarks;
        lp
    }

    /// Watches from `rv` until the stream ends; returns how it ended.
    async fn watch(&self, rv: &str) -> Outcome {
        let lp = self.watch_params(rv);
        bump(&self.stats.watches);
        let stream = match self.api.watch(&lp).await {
            Ok(s) => s,
            Err(e) => return self.watch_error(rv.to_string(), e),
        };
        self.consume(stream, rv.to_string(), None).await
    }

    /// A `sendInitialEvents=true` watch: ADDED events up to the `initial-events-end` bookmark
    /// are the list; the same stream then carries on as the watch.
    async fn stream_list_and_watch(&self, rv: &str) -> Outcome {
        let mut lp = self.watch_params(rv);
        lp.allow_watch_bookmarks = true;
        lp.send_initial_events = true;
        lp.resource_version = (!rv.is_empty()).then(|| rv.to_string());
        lp.resource_version_match = Some("NotOlderThan".into());
        bump(&self.stats.watches);
        let stream = match self.api.watch(&lp).await {
            Ok(s) => s,
            Err(error) => {
                bump(&self.stats.errors);
                return Outcome::ListFailed {
                    rv: rv.to_string(),
                    error,
                };
            }
        };
        self.consume(stream, rv.to_string(), Some(Vec::new())).await
    }

    /// Feeds events to the sink. With `initial = Some(buffer)` the stream is a streaming list
    /// until its end bookmark.
    async fn consume(
        &self,
        stream: impl futures_util::Stream<Item = Result<WatchEvent<K>, Error>>,
        mut rv: String,
        mut initial: Option<Vec<K>>,
    ) -> Outcome {
        futures_util::pin_mut!(stream);
        let started = Instant::now();
        let mut received = 0usize;
        while let Some(ev) = stream.next().await {
            received += 1;
            let ev = match ev {
                Ok(ev) => ev,
                // A broken streaming list is a failed list: its buffer is not a complete state.
                Err(error) if initial.is_some() => {
                    bump(&self.stats.errors);
                    return Outcome::ListFailed {
                        rv: String::new(),
                        error,
                    };
                }
                Err(e) => return self.watch_error(rv, e),
            };
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)
                    if initial.is_some() =>
                {
                    let buf = initial.as_mut().unwrap();
                    rv = o.metadata().resource_version.clone().unwrap_or(rv);
                    buf.push(o);
                }
                WatchEvent::Added(o) => {
                    rv = self.event_rv(&o, rv);
                    self.sink.added(o);
                }
                WatchEvent::Modified(o) => {
                    rv = self.event_rv(&o, rv);
                    self.sink.modified(o);
                }
                WatchEvent::Deleted(o) => {
                    rv = self.event_rv(&o, rv);
                    self.sink.deleted(o);
                }
                WatchEvent::Bookmark {
                    resource_version,
                    annotations,
                } => {
                    bump(&self.stats.bookmarks);
                    rv = resource_version;
                    self.set_rv(&rv);
                    if annotations
                        .get(rkube_api::INITIAL_EVENTS_END_ANNOTATION)
                        .map(String::as_str)
                        == Some("true")
                    {
                        if let Some(items) = initial.take() {
                            self.count_list();
                            tracing::debug!(kind = Self::kind(), rv = %rv, items = items.len(), "streamed list");
                            self.sink.replace(items);
                        }
                    }
                }
                WatchEvent::Error(status) => {
                    bump(&self.stats.errors);
                    let e = Error::from_status(status);
                    if initial.is_some() {
                        return Outcome::ListFailed { rv, error: e };
                    }
                    return self.watch_error(rv, e);
                }
            }
        }
        if initial.is_some() {
            // The stream ended before the list was complete: list again.
            return Outcome::ListFailed {
                rv,
                error: Error::Transport(
                    "watch ended before the initial-events-end bookmark".into(),
                ),
            };
        }
        if received == 0 && started.elapsed() < Duration::from_secs(1) {
            // client-go's VeryShortWatchError: a server or proxy that closes at once must not
            // make us spin; back off as for any failure.
            bump(&self.stats.errors);
            let error = Error::Transport("very short watch: unexpected watch close - watch lasted less than a second and no items received".into());
            return Outcome::WatchFailed { rv, error };
        }
        Outcome::WatchClosed { rv }
    }

    fn event_rv(&self, o: &K, rv: String) -> String {
        bump(&self.stats.events);
        match o.metadata().resource_version.as_deref() {
            Some(r) if !r.is_empty() => {
                self.set_rv(r);
                r.to_string()
            }
            _ => rv,
        }
    }

    fn watch_error(&self, rv: String, error: Error) -> Outcome {
        if error.is_gone() {
            tracing::info!(kind = Self::kind(), rv, "watch expired (410); relisting");
            bump(&self.stats.errors);
            return Outcome::WatchExpired { rv };
        }
        bump(&self.stats.errors);
        tracing::warn!(kind = Self::kind(), rv, %error, "watch failed");
        Outcome::WatchFailed { rv, error }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_err(code: u16, msg: &str) -> Error {
        Error::from_reply(
            code,
            format!(r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{msg}","code":{code}}}"#).as_bytes(),
        )
    }

    #[test]
    fn list_then_watch_from_its_rv() {
        let mut b = Backoff::default();
        assert_eq!(
            transition(Outcome::Listed { rv: "10".into() }, &mut b),
            State::Watching { rv: "10".into() }
        );
    }

    #[test]
    fn closed_stream_rewatches_without_relist() {
        let mut b = Backoff::default();
        assert_eq!(
            transition(Outcome::WatchClosed { rv: "42".into() }, &mut b),
            State::Watching { rv: "42".into() }
        );
    }

    #[test]
    fn expired_watch_relists_from_last_rv_then_latest() {
        let mut b = Backoff::default();
        assert_eq!(
            transition(Outcome::WatchExpired { rv: "42".into() }, &mut b),
            State::Listing { rv: "42".into() }
        );
        let gone = api_err(410, "too old resource version: 42 (50)");
        assert_eq!(
            transition(
                Outcome::ListFailed {
                    rv: "42".into(),
                    error: gone
                },
                &mut b
            ),
            State::Listing { rv: String::new() }
        );
    }

    #[test]
    fn transport_errors_back_off_and_keep_the_rv() {
        let mut b = Backoff::default();
        match transition(
            Outcome::WatchFailed {
                rv: "7".into(),
                error: Error::Transport("refused".into()),
            },
            &mut b,
        ) {
            State::Waiting { delay, then } => {
                assert!(
                    delay >= Duration::from_millis(800) && delay < Duration::from_millis(1600),
                    "{delay:?}"
                );
                assert_eq!(*then, State::Watching { rv: "7".into() });
            }
            other => panic!("{other:?}"),
        }
        let too_large = api_err(504, "Too large resource version: 99, current: 50");
        match transition(
            Outcome::WatchFailed {
                rv: "99".into(),
                error: too_large,
            },
            &mut b,
        ) {
            State::Waiting { delay, then } => {
                assert!(delay >= Duration::from_millis(1600), "{delay:?}");
                assert_eq!(*then, State::Listing { rv: String::new() });
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_caps_and_resets_after_quiet() {
        let mut b = Backoff::default();
        let seq: Vec<u64> = (0..8).map(|_| b.next_base().as_millis() as u64).collect();
        assert_eq!(seq, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.next_base(), Duration::from_millis(800));
    }
}
