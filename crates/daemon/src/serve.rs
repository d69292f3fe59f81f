//! The hardened HTTP front every rkube server runs behind (the apiserver, the store, the
//! kubelet-agent): a bounded accept loop over plain TCP or TLS, then hyper with its own
//! timers. What a client can hold, and for how long, is bounded:
//!
//! - connections: a global cap and a cap per client address (over either, the connection is
//!   closed at once);
//! - TLS handshakes: at most `max_handshakes` at a time, each within `handshake_timeout`;
//! - request heads: within `header_read_timeout` of the connection's start, or of the first
//!   byte of the next request on a kept-alive connection (slow-loris headers);
//! - idle keep-alive connections (no request in flight, nothing read or written): closed
//!   after `idle_timeout`;
//! - writes: a response that cannot be written for `write_timeout` (a client that stopped
//!   reading, a watch nobody drains) closes the connection;
//! - request bodies are bounded where they are read (size, deadline and stall time), by the
//!   server's own code.
//!
//! HTTP/1.1 always; HTTP/2 too where `Limits::http2` says so (the store's gRPC, the
//! apiserver's h2c): a connection's protocol is read from its first bytes (h2c's preface) or
//! TLS's ALPN.
//!
//! Shutdown stops accepting, asks every connection to finish its in-flight request, and gives
//! up on stragglers after `shutdown_grace`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::ShutdownToken;

/// Connections closed at once for a limit: a client sees them reset, so each is logged (at
/// most one warning per ten seconds, with how many there were since the last).
#[derive(Default)]
struct Refusals {
    since_warned: u64,
    warned_at: Option<Instant>,
}

impl Refusals {
    const EVERY: Duration = Duration::from_secs(10);

    fn note(&mut self, addr: &std::net::SocketAddr, why: &'static str) {
        self.since_warned += 1;
        if self.warned_at.is_some_and(|t| t.elapsed() < Self::EVERY) {
            tracing::debug!(%addr, "{why}");
            return;
        }
        tracing::warn!(%addr, refused = self.since_warned, "{why}");
        self.since_warned = 0;
        self.warned_at = Some(Instant::now());
    }
}

/// What one server allows its clients.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    pub max_handshakes: usize,
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Serve HTTP/2 beside HTTP/1.1 (gRPC needs it): on plain TCP to a client that opens with
    /// its preface (h2c), over TLS where ALPN chose `h2` (the server's TLS config must offer it).
    pub http2: bool,
    /// Concurrent streams one HTTP/2 connection may open.
    pub max_concurrent_streams: u32,
    /// What one HTTP/2 stream may buffer for a client that grants no flow-control window
    /// (a watch nobody reads: HTTP/1.1's `write_timeout` has no per-stream equivalent).
    pub max_send_buf: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16_384,
            max_connections_per_ip: 8_192,
            max_handshakes: 256,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            http2: false,
            max_concurrent_streams: 1000,
            // hyper's own default.
            max_send_buf: 400 * 1024,
        }
    }
}

/// Who is on the other end of a connection, as a server wants to know it: built once per
/// connection from its address and (TLS) verified client certificates, and handed to every
/// request on it as `ConnectInfo<P>`.
pub type Identify<P> =
    Arc<dyn Fn(SocketAddr, Option<&[CertificateDer<'static>]>) -> P + Send + Sync>;

/// Open connections per client address.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

impl PerIp {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<IpSlot> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            ip,
            map: self.clone(),
        })
    }
}

struct IpSlot {
    ip: IpAddr,
    map: Arc<PerIp>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut m = self.map.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is given) until `shutdown`.
pub async fn serve<P>(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: axum::Router,
    identify: Identify<P>,
    limits: Limits,
    shutdown: ShutdownToken,
) -> std::io::Result<()>
where
    P: Clone + Send + Sync + 'static,
{
    // Connections are file descriptors: take what the hard limit allows, and keep room below
    // it for the server's own (outbound connections, the database, logs).
    let fds = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(1024);
    let max_connections = limits.max_connections.min(
        usize::try_from(fds.saturating_sub(512))
            .unwrap_or(usize::MAX)
            .max(64),
    );
    if max_connections < limits.max_connections {
        tracing::info!(
            max_connections,
            open_files = fds,
            "connections capped below the open-files limit"
        );
    }
    let conns = Arc::new(Semaphore::new(max_connections));
    let handshakes = Arc::new(Semaphore::new(limits.max_handshakes));
    let per_ip = Arc::new(PerIp::default());
    let live = Arc::new(AtomicUsize::new(0));
    let drained = Arc::new(tokio::sync::Notify::new());
    // Over TLS a connection speaks HTTP/2 only when ALPN chose it (or, without ALPN, when the
    // server's config offers it): the preface alone must not bring HTTP/2 to a server whose
    // TLS offers HTTP/1.1 only.
    let tls_offers_h2 = tls
        .as_ref()
        .is_some_and(|c| c.alpn_protocols.iter().any(|p| p == b"h2"));
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut refusals = Refusals::default();
    loop {
        let (tcp, addr) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(conn_permit) = conns.clone().try_acquire_owned() else {
            refusals.note(&addr, "connection refused: server at its connection limit");
            continue;
        };
        let Some(ip_slot) = per_ip.take(addr.ip(), limits.max_connections_per_ip) else {
            refusals.note(&addr, "connection refused: client at its connection limit");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (router, identify, limits) = (router.clone(), identify.clone(), limits.clone());
        let (acceptor, handshakes, shutdown) =
            (acceptor.clone(), handshakes.clone(), shutdown.clone());
        let (live, drained) = (live.clone(), drained.clone());
        live.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _held = (conn_permit, ip_slot);
            match acceptor {
                None => {
                    let peer = identify(addr, None);
                    let http2 = limits.http2;
                    connection(tcp, peer, router, &limits, http2, shutdown).await;
                }
                Some(acceptor) => {
                    let handshake = async {
                        // A handshake slot only for a client that has said something: silent
                        // connections cannot hold the slots.
                        tcp.readable().await.ok()?;
                        let _slot = handshakes.acquire().await.ok()?;
                        acceptor.accept(tcp).await.ok()
                    };
                    match tokio::time::timeout(limits.handshake_timeout, handshake).await {
                        Ok(Some(tls)) => {
                            let session = tls.get_ref().1;
                            let peer = identify(addr, session.peer_certificates());
                            let http2 = limits.http2
                                && session
                                    .alpn_protocol()
                                    .map_or(tls_offers_h2, |p| p == b"h2");
                            connection(tls, peer, router, &limits, http2, shutdown).await;
                        }
                        _ => tracing::debug!(%addr, "TLS handshake failed or timed out"),
                    }
                }
            }
            if live.fetch_sub(1, Ordering::SeqCst) == 1 {
                drained.notify_waiters();
            }
        });
    }
    drop(listener);
    // Connections finish their requests (each was told to); stragglers are cut off.
    let waited = tokio::time::timeout(limits.shutdown_grace, async {
        while live.load(Ordering::SeqCst) > 0 {
            let notified = drained.notified();
            if live.load(Ordering::SeqCst) == 0 {
                break;
            }
            notified.await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!(
            connections = live.load(Ordering::SeqCst),
            "connections still open after the shutdown grace period"
        );
    }
    Ok(())
}

/// What a connection has been doing, for its watchdog.
struct Activity {
    epoch: Instant,
    /// Milliseconds since `epoch` (+1) since which a request head has been awaited: from the
    /// connection's start, and from the first byte read while no request is in flight; 0 while
    /// a request is in flight or the connection idles between requests.
    head_since: AtomicU64,
    /// Milliseconds since `epoch` of the last byte read or written.
    last_progress: AtomicU64,
    /// Milliseconds since `epoch` (+1) since which a write has been waiting; 0 = none.
    write_blocked_since: AtomicU64,
    /// Requests whose responses are not finished.
    in_flight: AtomicUsize,
    /// The connection speaks HTTP/2 (learnt from its first request): its frames (PINGs,
    /// WINDOW_UPDATEs) arrive between requests, so no head clock, and it idles by requests.
    h2: std::sync::atomic::AtomicBool,
    /// Milliseconds since `epoch` of the last request's start or end.
    last_request: AtomicU64,
    /// Numbers the connection's response bodies.
    next_body: AtomicU64,
    /// HTTP/2: bodies that handed hyper data and have not been asked for more since, with
    /// when (ms since `epoch`). hyper asks again as soon as the client's window lets it send.
    unpolled: Mutex<HashMap<u64, u64>>,
}

impl Activity {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }
}

/// Serves one connection until it ends, its watchdog fires, or shutdown.
async fn connection<I, P>(
    io: I,
    peer: P,
    router: axum::Router,
    limits: &Limits,
    http2: bool,
    shutdown: ShutdownToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    P: Clone + Send + Sync + 'static,
{
    let activity = Arc::new(Activity {
        epoch: Instant::now(),
        head_since: AtomicU64::new(1),
        last_progress: AtomicU64::new(1),
        write_blocked_since: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
        h2: std::sync::atomic::AtomicBool::new(false),
        last_request: AtomicU64::new(1),
        next_body: AtomicU64::new(0),
        unpolled: Mutex::new(HashMap::new()),
    });
    let io = Watched {
        inner: io,
        activity: activity.clone(),
    };
    let service_activity = activity.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer.clone()));
        let activity = service_activity.clone();
        if req.version() == hyper::Version::HTTP_2 {
            activity.h2.store(true, Ordering::SeqCst);
        }
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        activity.head_since.store(0, Ordering::SeqCst);
        activity
            .last_request
            .store(activity.now(), Ordering::Relaxed);
        let guard = InFlight {
            id: activity.next_body.fetch_add(1, Ordering::Relaxed),
            activity,
            unpolled: false,
        };
        let mut router = router.clone();
        async move {
            let resp = tower_service::Service::call(&mut router, req).await?;
            Ok::<_, std::convert::Infallible>(
                resp.map(|body| axum::body::Body::new(Tracked { body, guard })),
            )
        }
    });
    // Head, idle and write timeouts are the watchdog's: hyper's own header timer also runs
    // while a kept-alive connection idles between requests, which would close every pooled
    // connection after the (short) header timeout.
    if http2 {
        let mut builder =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder.http1().keep_alive(true);
        // PINGs find peers that vanished (a half-open connection would hold its quiet
        // watches for ever); unanswered within 20 s, the connection closes.
        builder
            .http2()
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(20))
            .max_concurrent_streams(limits.max_concurrent_streams)
            .max_send_buf_size(limits.max_send_buf);
        let conn = Box::pin(builder.serve_connection_with_upgrades(TokioIo::new(io), service));
        watch_connection(conn, |c| c.graceful_shutdown(), &activity, limits, shutdown).await;
    } else {
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        // Each protocol's connection on the heap at its own size: inline, every connection's
        // task carried the larger auto-detecting one too (~8 KB; 20 MB at 2,500 connections).
        let conn = Box::pin(conn);
        watch_connection(conn, |c| c.graceful_shutdown(), &activity, limits, shutdown).await;
    }
}

/// Drives a connection until it ends, its watchdog fires, or shutdown (then asks it to
/// finish gracefully).
async fn watch_connection<C, E>(
    mut conn: Pin<Box<C>>,
    graceful: impl Fn(Pin<&mut C>),
    activity: &Activity,
    limits: &Limits,
    shutdown: ShutdownToken,
) where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let tick = (limits
        .idle_timeout
        .min(limits.write_timeout)
        .min(limits.header_read_timeout)
        / 4)
    .clamp(Duration::from_millis(50), Duration::from_secs(2));
    let mut watchdog = tokio::time::interval(tick);
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutting_down = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.cancelled(), if !shutting_down => {
                shutting_down = true;
                graceful(conn.as_mut());
            }
            _ = watchdog.tick() => {
                let now = activity.now();
                let blocked = activity.write_blocked_since.load(Ordering::Relaxed);
                if blocked != 0 && now.saturating_sub(blocked) > limits.write_timeout.as_millis() as u64 {
                    tracing::debug!("closing a connection whose client stopped reading");
                    return;
                }
                let idle = activity.in_flight.load(Ordering::SeqCst) == 0;
                if activity.h2.load(Ordering::SeqCst) {
                    // A stream whose client grants no flow-control window never blocks a
                    // write: its response waits, unpolled, for ever. As HTTP/1.1's blocked
                    // write, after `write_timeout` the connection closes.
                    let oldest = activity.unpolled.lock().unwrap_or_else(|p| p.into_inner()).values().min().copied();
                    if oldest.is_some_and(|t| now.saturating_sub(t) > limits.write_timeout.as_millis() as u64) {
                        tracing::debug!("closing an HTTP/2 connection whose client stopped taking a response");
                        return;
                    }
                    // No request for `idle_timeout`: GOAWAY, so the client opens a new
                    // connection for its next call instead of racing a close.
                    let since = now.saturating_sub(activity.last_request.load(Ordering::Relaxed));
                    if idle && !shutting_down && since > limits.idle_timeout.as_millis() as u64 {
                        shutting_down = true;
                        graceful(conn.as_mut());
                    }
                    continue;
                }
                let head = activity.head_since.load(Ordering::SeqCst);
                if idle && head != 0 && now.saturating_sub(head) > limits.header_read_timeout.as_millis() as u64 {
                    tracing::debug!("closing a connection whose request head is late");
                    return;
                }
                let quiet = now.saturating_sub(activity.last_progress.load(Ordering::Relaxed));
                if idle && quiet > limits.idle_timeout.as_millis() as u64 {
                    return;
                }
            }
        }
    }
}

/// A request in flight until its response body is done (or dropped).
struct InFlight {
    activity: Arc<Activity>,
    /// Its body's number on the connection.
    id: u64,
    /// In `Activity::unpolled` now.
    unpolled: bool,
}

impl InFlight {
    /// HTTP/2: the body is being asked for data (`asked`), or has just handed some over. The
    /// connection's map is locked only when that changes.
    fn note_poll(&mut self, asked: bool) {
        let a = &self.activity;
        if asked != self.unpolled || !a.h2.load(Ordering::Relaxed) {
            return;
        }
        let mut unpolled = a.unpolled.lock().unwrap_or_else(|p| p.into_inner());
        if asked {
            unpolled.remove(&self.id);
        } else {
            unpolled.insert(self.id, a.now());
        }
        self.unpolled = !asked;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.activity;
        a.in_flight.fetch_sub(1, Ordering::SeqCst);
        a.last_progress.store(a.now(), Ordering::Relaxed);
        a.last_request.store(a.now(), Ordering::Relaxed);
        self.note_poll(true);
    }
}

/// A response body that keeps its request counted as in flight (and, over HTTP/2, says when
/// it waits for hyper to ask for more).
struct Tracked {
    body: axum::body::Body,
    guard: InFlight,
}

impl http_body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.guard.note_poll(true);
        let r = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if f.is_data() {
                self.guard.note_poll(false);
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A stream that records its progress and how long a write has been waiting.
struct Watched<I> {
    inner: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let a = &self.activity;
            let now = a.now();
            a.last_progress.store(now, Ordering::Relaxed);
            // The first byte of a request head while none is in flight starts its clock
            // (HTTP/1.1; HTTP/2 connections send frames between requests).
            if a.in_flight.load(Ordering::SeqCst) == 0 && !a.h2.load(Ordering::SeqCst) {
                let _ = a
                    .head_since
                    .compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> Watched<I> {
    /// A write that waits starts the blocked clock; one that completes stops it; only bytes
    /// written count as progress (hyper flushes whenever its task is polled).
    fn note_write<T>(&self, r: &Poll<std::io::Result<T>>, wrote: bool) {
        let a = &self.activity;
        match r {
            Poll::Pending => {
                let _ = a.write_blocked_since.compare_exchange(
                    0,
                    a.now(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => {
                a.write_blocked_since.store(0, Ordering::Relaxed);
                if wrote {
                    a.last_progress.store(a.now(), Ordering::Relaxed);
                }
            }
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        let wrote = matches!(r, Poll::Ready(Ok(n)) if n > 0);
        self.note_write(&r, wrote);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        let wrote = matches!(r, Poll::Ready(Ok(n)) if n > 0);
        self.note_write(&r, wrote);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.note_write(&r, false);
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Why a request body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// More than the limit.
    TooLarge,
    /// Not all there within the deadline, or stalled too long.
    Timeout,
    /// The connection failed.
    Broken(String),
}

/// How long a request body may take: in all, and between two chunks.
pub const BODY_DEADLINE: Duration = Duration::from_secs(60);
pub const BODY_STALL: Duration = Duration::from_secs(10);

/// Reads a whole request body: at most `max` bytes, arriving within `BODY_DEADLINE` and never
/// stalling for `BODY_STALL` — a slow upload costs its connection, nothing more.
pub async fn read_body(body: axum::body::Body, max: usize) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::BodyExt;
    let deadline = tokio::time::Instant::now() + BODY_DEADLINE;
    let mut body = body;
    let mut out = bytes::BytesMut::new();
    loop {
        let until = deadline.min(tokio::time::Instant::now() + BODY_STALL);
        let next = tokio::time::timeout_at(until, body.frame())
            .await
            .map_err(|_| BodyError::Timeout)?;
        let Some(frame) = next else { break };
        let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                drain(body, max.saturating_mul(3), deadline).await;
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// Discards a body a request was refused before reading (up to `budget` bytes, for a few
/// seconds at most), so that the client reads the refusal rather than a reset.
pub async fn discard(body: axum::body::Body, budget: usize) {
    drain(body, budget, tokio::time::Instant::now() + DISCARD_DEADLINE).await;
}

/// How long a refused request's body is read for, at most.
const DISCARD_DEADLINE: Duration = Duration::from_secs(5);

/// Reads and discards what remains of a refused body (up to `budget` bytes, within the
/// deadline), so that the client, still sending, gets to read the refusal instead of a
/// connection reset.
async fn drain(mut body: axum::body::Body, budget: usize, deadline: tokio::time::Instant) {
    use http_body_util::BodyExt;
    let mut seen = 0usize;
    while seen < budget {
        let until = deadline.min(tokio::time::Instant::now() + BODY_STALL);
        match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                seen += frame.data_ref().map_or(0, |d| d.len());
            }
            _ => return,
        }
    }
}

/// A plain-HTTP peer: its address only.
pub fn by_address() -> Identify<SocketAddr> {
    Arc::new(|addr, _| addr)
}

#[cfg(test)]
mod tests;
