use super::*;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn quick() -> Limits {
    Limits {
        max_connections: 64,
        max_connections_per_ip: 4,
        max_handshakes: 4,
        handshake_timeout: Duration::from_millis(500),
        header_read_timeout: Duration::from_millis(400),
        idle_timeout: Duration::from_millis(600),
        write_timeout: Duration::from_millis(600),
        shutdown_grace: Duration::from_secs(2),
        ..Limits::default()
    }
}

/// `/` answers "ok"; `/flood` streams 64 KiB chunks for as long as it is read.
async fn start(limits: Limits) -> (SocketAddr, ShutdownToken, tokio::task::JoinHandle<()>) {
    let router = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .route(
            "/flood",
            axum::routing::get(|| async {
                let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
                let s = futures_util::stream::repeat(chunk).map(Ok::<_, std::io::Error>);
                axum::body::Body::from_stream(s)
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = crate::shutdown::ShutdownToken::default();
    let s = shutdown.clone();
    let task = tokio::spawn(async move {
        serve(listener, None, router, by_address(), limits, s)
            .await
            .unwrap();
    });
    (addr, shutdown, task)
}

/// Reads until the server closes the connection (Ok) or `within` passes (Err).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Result<(), &'static str> {
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .map_err(|_| "still open")
}

#[tokio::test]
async fn a_slow_header_is_cut_off() {
    let (addr, _s, _t) = start(quick()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    // The rest of the head never comes.
    closed_within(&mut c, Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let (addr, _s, _t) = start(quick()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = c.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    // Kept alive, then nothing more: closed after the idle timeout.
    closed_within(&mut c, Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected() {
    let (addr, _s, _t) = start(quick()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Read nothing for a while: the server's writes block, then it gives up.
    tokio::time::sleep(Duration::from_secs(2)).await; // the client is deliberately idle
    let mut buf = vec![0u8; 1 << 20];
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert_eq!(drained, Ok(true), "the endless response was cut off");
}

#[tokio::test]
async fn connections_per_client_are_capped() {
    let (addr, _s, _t) = start(quick()).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        assert!(c.read(&mut buf).await.unwrap() > 0);
        held.push(c);
    }
    // The fifth is closed without an answer.
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    let _ = fifth.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(5), fifth.read(&mut buf))
        .await
        .expect("closed promptly")
        .unwrap_or(0);
    assert_eq!(n, 0);
    // Once one closes, a new connection is served again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        if tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf))
            .await
            .ok()
            .and_then(|r| r.ok())
            .is_some_and(|n| n > 0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
    }
}

#[tokio::test]
async fn shutdown_finishes() {
    let (addr, s, task) = start(quick()).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    assert!(c.read(&mut buf).await.unwrap() > 0);
    s.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("serve returned")
        .unwrap();
}

#[tokio::test]
async fn a_kept_alive_connection_outlives_the_header_timeout_until_it_idles() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(5),
        ..quick()
    };
    let (addr, _s, _t) = start(limits).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 512];
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(c.read(&mut buf).await.unwrap() > 0);
    // Longer than the header timeout, shorter than the idle timeout: still usable.
    tokio::time::sleep(Duration::from_secs(1)).await; // the client is deliberately idle
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
}

/// What `h2_flood` hands back: the `/flood` response, the task driving the client connection
/// (it ends when the server closes it), and what must live as long as the test — the
/// connection's request handle (dropped, the client closes the connection itself) and the
/// server's stop token.
type H2Flood = (
    hyper::Response<hyper::body::Incoming>,
    tokio::task::JoinHandle<hyper::Result<()>>,
    (
        hyper::client::conn::http2::SendRequest<axum::body::Body>,
        ShutdownToken,
    ),
);

/// An HTTP/2 server (`quick` limits), a client connection to it and its `/flood` response.
async fn h2_flood() -> H2Flood {
    let (addr, stop, _task) = start(Limits {
        http2: true,
        ..quick()
    })
    .await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake::<_, axum::body::Body>(TokioIo::new(tcp))
            .await
            .unwrap();
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{addr}/flood"))
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    (resp, driver, (send, stop))
}

#[tokio::test]
async fn an_http2_client_that_grants_no_window_is_disconnected() {
    let (resp, driver, _keep) = h2_flood().await;
    // The body is never read: the window the client granted fills and the stream waits, its
    // socket never blocked. Past `write_timeout` the server closes the connection.
    let ended = tokio::time::timeout(Duration::from_secs(5), driver).await;
    assert!(ended.is_ok(), "the connection is still open");
    drop(resp);
}

#[tokio::test]
async fn an_http2_client_that_reads_keeps_its_connection() {
    let (resp, driver, _keep) = h2_flood().await;
    let mut body = resp.into_body();
    // Reading for three write timeouts: the stream keeps going.
    let until = tokio::time::Instant::now() + Duration::from_millis(1800);
    let mut got = 0usize;
    while tokio::time::Instant::now() < until {
        let frame = http_body_util::BodyExt::frame(&mut body).await;
        got += frame.unwrap().unwrap().into_data().map_or(0, |d| d.len());
    }
    assert!(got > 1024 * 1024, "{got} bytes");
    assert!(!driver.is_finished());
}
