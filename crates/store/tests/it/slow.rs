//! A watcher that stops reading never holds up writers: once its queue overflows it is
//! cancelled (with a reason), and other watchers keep receiving everything.

use std::time::Duration;

use rkube_etcd_api::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_watcher_is_cancelled_and_writers_never_wait() {
    let dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut cfg = rkube_store::Config::new(dir.path().to_path_buf());
    cfg.watch_buffer = 8;
    let shutdown = rkube_daemon::ShutdownToken::new();
    tokio::spawn(rkube_store::run(cfg, listener, shutdown.clone()));
    let url = format!("http://{addr}");
    let client = EtcdClient::new(std::slice::from_ref(&url)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.status().await.is_err() {
        assert!(Instant::now() < deadline, "store did not start");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
    }

    // The slow client: a raw connection whose response we do not read yet.
    let body = r#"{"create_request":{"key":"c2xvdy8=","range_end":"c2xvdzA="}}"#;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("POST /v3/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    slow.write_all(req.as_bytes()).await.unwrap();
    // A well-behaved watcher on the same keys.
    let create = WatchCreateRequest {
        key: b"slow/".to_vec(),
        range_end: prefix_range_end(b"slow/"),
        ..Default::default()
    };
    let mut good = client
        .watch(vec![WatchRequest::create(create)])
        .await
        .unwrap();
    assert!(good.next().await.unwrap().unwrap().created);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = reqwest::get(format!("{url}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.contains("etcd_debugging_mvcc_watcher_total 2") {
            break;
        }
        assert!(Instant::now() < deadline, "watches not registered");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
    }

    // The good watcher reads as events come.
    let reader = tokio::spawn(async move {
        let mut seen = 0usize;
        while seen < 300 {
            let resp = timeout(Duration::from_secs(30), good.next())
                .await
                .expect("good watcher keeps up")
                .unwrap()
                .unwrap();
            assert!(!resp.canceled, "a reading watcher must not be cancelled");
            seen += resp.events.len();
        }
        seen
    });
    // Far more than socket buffers and the 8-message queue can hold.
    let value = vec![b'v'; 64 * 1024];
    let writes = 300;
    let all_done = timeout(Duration::from_secs(60), async {
        for i in 0..writes {
            let key = format!("slow/{i:04}").into_bytes();
            client
                .put(&PutRequest {
                    key,
                    value: value.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    })
    .await;
    assert!(
        all_done.is_ok(),
        "writes were held up by a watcher that does not read"
    );

    // The good watcher saw every write.
    assert_eq!(reader.await.unwrap(), writes);

    // The slow one, once read, ends with a cancel that says why.
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let n = timeout(Duration::from_secs(10), slow.read(&mut chunk))
            .await
            .expect("slow stream readable")
            .unwrap();
        assert!(n > 0, "stream ended without a cancel");
        buf.extend_from_slice(&chunk[..n]);
        let tail = String::from_utf8_lossy(&buf[buf.len().saturating_sub(4096)..]).into_owned();
        if tail.contains("\"canceled\":true") {
            break tail;
        }
        assert!(Instant::now() < deadline, "no cancel within 30 s");
    };
    assert!(text.contains("cancel_reason"), "{text}");
    shutdown.cancel();
}
