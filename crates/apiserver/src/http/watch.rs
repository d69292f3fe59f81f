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
use crate::cache::object::error_line;
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
    let respond =
        |lines: futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>>| match ws {
            Some(ws) => super::websocket::send_lines(ws, lines),
            None => streaming(Body::from_stream(lines)),
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
                futures_util::stream::once(async move { Ok(line) }).boxed(),
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
    let initial: Vec<Bytes> = stream.initial;
    struct S {
        initial: std::vec::IntoIter<Bytes>,
        rx: tokio::sync::mpsc::Receiver<Bytes>,
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
            return Some((Ok::<Bytes, std::io::Error>(line), s));
        }
        tokio::select! {
            line = s.rx.recv() => line.map(|l| (Ok(l), s)),
            _ = tokio::time::sleep_until(s.deadline) => None,
            _ = s.shutdown.cancelled() => None,
        }
    })
    .inspect(move |line| {
        sent.inc();
        if let Ok(l) = line {
            registered.entry.sent(l);
        }
    });
    Ok(match printing {
        None => respond(body.boxed()),
        Some(p) => respond(
            body.map(move |line| line.map(|l| print_event(&*strategy, &l, p.include_object)))
                .boxed(),
        ),
    })
}

/// A watch event with its object replaced by a one-row Table (`kubectl get -w`); bookmarks and
/// errors pass through.
fn print_event(strategy: &dyn crate::kinds::Strategy, line: &[u8], include_object: bool) -> Bytes {
    let Ok(mut ev) = serde_json::from_slice::<serde_json::Value>(line) else {
        return Bytes::copy_from_slice(line);
    };
    match ev["type"].as_str() {
        Some("ADDED") | Some("MODIFIED") | Some("DELETED") => {
            let obj = ev["object"].take();
            let rv = rkube_api::meta::resource_version(&obj).to_string();
            ev["object"] = super::table::table(
                strategy,
                std::slice::from_ref(&obj),
                &rv,
                None,
                include_object,
            );
            let mut out = serde_json::to_vec(&ev).unwrap_or_default();
            out.push(b'\n');
            Bytes::from(out)
        }
        _ => Bytes::copy_from_slice(line),
    }
}
