//! Streaming a watch: HTTP 200 with one JSON event per line, flushed as events come; the
//! stream ends silently at its deadline (`timeoutSeconds`, or a random 30–60 minutes), at
//! shutdown, or when a slow watcher is dropped. Errors after the request was accepted (an
//! expired resourceVersion) are sent as a single in-stream ERROR event. Over WebSocket
//! (`websocket`), each line is one message.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use rkube_api::{ApiError, ListOptions};

use super::ApiState;
use crate::cache::object::{error_line, Line};
use crate::cache::Cacher;
use crate::registry::Registry;

/// Upstream's `--min-request-timeout`: a watch without `timeoutSeconds` lasts 1–2× this.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

fn streaming(body: Body) -> Response {
    (
        StatusCode::OK,
        [
            ("content-type", "application/json"),
            ("cache-control", "no-cache, private"),
        ],
        body,
    )
        .into_response()
}

/// Removes the watcher from its cache when the response body is dropped.
struct Guard {
    cache: Arc<Cacher>,
    id: u64,
    metrics: Arc<crate::metrics::ApiMetrics>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.cache.remove_watcher(self.id);
        self.metrics.watches.dec();
    }
}

pub async fn serve(
    state: &ApiState,
    reg: &Arc<Registry>,
    ns: Option<&str>,
    name: Option<&str>,
    opts: &ListOptions,
    printing: Option<super::Printing>,
    opened: crate::watches::Opened,
    ws: Option<axum::extract::ws::WebSocketUpgrade>,
) -> Result<Response, ApiError> {
    // Over HTTP a line goes out as its three pieces (the object is the cache's own bytes);
    // a WebSocket message is the whole line.
    let respond = |lines: futures_util::stream::BoxStream<'static, Line>| match ws {
        Some(ws) => {
            super::websocket::send_lines(ws, lines.map(|l| Ok::<_, std::io::Error>(l.to_bytes())))
        }
        None => streaming(Body::from_stream(lines.flat_map(|l| {
            futures_util::stream::iter(l.frames().map(Ok::<_, std::io::Error>))
        }))),
    };
    let timeout = match opts.timeout_seconds {
        // Clamped to a day so the deadline arithmetic cannot overflow.
        Some(s) if s > 0 => Duration::from_secs((s as u64).min(86_400)),
        _ => MIN_REQUEST_TIMEOUT.mul_f64(1.0 + rand::random::<f64>()),
    };
    let deadline = Instant::now() + timeout;
    let stream = match reg.watch(ns, name, opts, deadline).await {
        Ok(s) => s,
        Err(e)
            if e.code() == 410 || (e.code() == 504 && opts.send_initial_events == Some(true)) =>
        {
            state.watches.expired(&opened.client);
            let line = error_line(e.status());
            return Ok(respond(
                futures_util::stream::once(async move { line }).boxed(),
            ));
        }
        Err(e) => return Err(e),
    };
    let cache = reg.cache.clone().expect("watch served from a cache");
    state.metrics.watches.inc();
    let guard = Guard {
        cache,
        id: stream.id,
        metrics: state.metrics.clone(),
    };
    let shutdown = state.shutdown.clone();
    let initial: Vec<Line> = stream.initial;
    struct S {
        initial: std::vec::IntoIter<Line>,
        rx: tokio::sync::mpsc::Receiver<Line>,
        deadline: tokio::time::Instant,
        shutdown: rkube_daemon::ShutdownToken,
        _guard: Guard,
    }
    let s = S {
        initial: initial.into_iter(),
        rx: stream.rx,
        deadline: tokio::time::Instant::from_std(deadline),
        shutdown,
        _guard: guard,
    };
    let strategy = reg.strategy.clone();
    let sent = state
        .metrics
        .watch_events(reg.def.group, reg.def.version, reg.def.kind);
    // In the table while the body lives (the closure below holds it).
    let registered = state.watches.open(opened);
    let body = futures_util::stream::unfold(s, |mut s| async move {
        if let Some(line) = s.initial.next() {
            return Some((line, s));
        }
        tokio::select! {
            line = s.rx.recv() => line.map(|l| (l, s)),
            _ = tokio::time::sleep_until(s.deadline) => None,
            _ = s.shutdown.cancelled() => None,
        }
    })
    .inspect(move |line| {
        sent.inc();
        registered.entry.sent(line);
    });
    Ok(match printing {
        None => respond(body.boxed()),
        Some(p) => respond(
            body.map(move |l| print_event(&*strategy, l, p.include_object))
                .boxed(),
        ),
    })
}

/// A watch event with its object replaced by a one-row Table (`kubectl get -w`); bookmarks and
/// errors pass through.
fn print_event(strategy: &dyn crate::kinds::Strategy, line: Line, include_object: bool) -> Line {
    if !line.is_change() {
        return line;
    }
    let Ok(obj) = serde_json::from_slice::<serde_json::Value>(&line.object) else {
        return line;
    };
    let rv = rkube_api::meta::resource_version(&obj).to_string();
    let table = super::table::table(
        strategy,
        std::slice::from_ref(&obj),
        &rv,
        None,
        include_object,
    );
    line.with_object(Bytes::from(serde_json::to_vec(&table).unwrap_or_default()))
}
