//! Crash test: writers issue acknowledged writes while rkube-store is killed with SIGKILL at
//! random moments. After every restart all acknowledged writes are present, revisions continue
//! monotonically, and a watch from revision 1 replays exactly the committed history.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rkube_daemon::port::free_port;
use rkube_etcd_api::*;
use tokio::process::{Child, Command};
use tokio::time::{timeout, Instant};

const ROUNDS: usize = 5;
const WRITERS: usize = 8;

async fn start(dir: &std::path::Path, port: u16) -> (Child, EtcdClient) {
    let child = Command::new(env!("CARGO_BIN_EXE_rkube-store"))
        .args(["--data-dir", dir.to_str().unwrap()])
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn rkube-store");
    let client = EtcdClient::new(&[format!("http://127.0.0.1:{port}")]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if client.status().await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rkube-store did not come up on port {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // polling interval, not a wait-and-hope
    }
    (child, client)
}

/// Acknowledged writes: key → (value, revision).
type Acked = Arc<Mutex<BTreeMap<Vec<u8>, (Vec<u8>, i64)>>>;

async fn writer(client: EtcdClient, round: usize, w: usize, acked: Acked) {
    for i in 0.. {
        let key = format!("crash/{round}/{w}/{i:06}").into_bytes();
        let value = format!("value-{round}-{w}-{i}").into_bytes();
        // Alternate plain puts and the apiserver's create shape.
        let rev = if i % 2 == 0 {
            match client
                .put(&PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    ..Default::default()
                })
                .await
            {
                Ok(r) => r.header.map(|h| h.revision).unwrap_or(0),
                Err(_) => return,
            }
        } else {
            let txn = TxnRequest {
                compare: vec![Compare::mod_revision(key.clone(), CompareResult::Equal, 0)],
                success: vec![RequestOp::put(PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    ..Default::default()
                })],
                failure: vec![],
            };
            match client.txn(&txn).await {
                Ok(r) if r.succeeded => r.header.map(|h| h.revision).unwrap_or(0),
                Ok(r) => panic!("create of a fresh key failed: {r:?}"),
                Err(_) => return,
            }
        };
        acked.lock().unwrap().insert(key, (value, rev));
    }
}

async fn current_revision(client: &EtcdClient) -> i64 {
    let r = client
        .range(&RangeRequest {
            key: b"crash/".to_vec(),
            range_end: prefix_range_end(b"crash/"),
            count_only: true,
            ..Default::default()
        })
        .await
        .unwrap();
    r.header.unwrap().revision
}

async fn verify_all_present(client: &EtcdClient, acked: &Acked) {
    let resp = client
        .range(&RangeRequest {
            key: b"crash/".to_vec(),
            range_end: prefix_range_end(b"crash/"),
            ..Default::default()
        })
        .await
        .unwrap();
    let stored: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = resp
        .kvs
        .into_iter()
        .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
        .collect();
    let acked = acked.lock().unwrap();
    for (k, v) in acked.iter() {
        assert_eq!(
            stored.get(k),
            Some(v),
            "acknowledged write {} lost or changed",
            String::from_utf8_lossy(k)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let acked: Acked = Arc::default();
    let mut last_rev = 0;
    for round in 0..ROUNDS {
        let (mut child, client) = start(dir.path(), port).await;
        verify_all_present(&client, &acked).await;
        let rev = current_revision(&client).await;
        assert!(
            rev >= last_rev,
            "revision went backwards after restart: {rev} < {last_rev}"
        );
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(writer(client.clone(), round, w, acked.clone())))
            .collect();
        let delay = rand::thread_rng().gen_range(100..600);
        tokio::time::sleep(Duration::from_millis(delay)).await; // a random moment to crash at
        child.start_kill().unwrap();
        let _ = child.wait().await;
        for t in tasks {
            timeout(Duration::from_secs(30), t)
                .await
                .expect("writer stops after the crash")
                .unwrap();
        }
        last_rev = acked
            .lock()
            .unwrap()
            .values()
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(last_rev)
            .max(rev);
        assert!(
            !acked.lock().unwrap().is_empty(),
            "no write was acknowledged in round {round}"
        );
    }

    // Final restart: everything acknowledged is there, new writes get newer revisions, and the
    // history replays in order.
    let (_child, client) = start(dir.path(), port).await;
    verify_all_present(&client, &acked).await;
    let put = client
        .put(&PutRequest {
            key: b"crash/final".to_vec(),
            value: b"x".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let final_rev = put.header.unwrap().revision;
    assert!(
        final_rev > last_rev,
        "a new write got revision {final_rev}, not above {last_rev}"
    );

    let create = WatchCreateRequest {
        key: b"crash/".to_vec(),
        range_end: prefix_range_end(b"crash/"),
        start_revision: 1,
        ..Default::default()
    };
    let mut rx = client
        .watch(vec![WatchRequest::create(create)])
        .await
        .unwrap();
    let mut history: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while history.last().map(|h| h.0) != Some(final_rev) {
        let left = deadline.saturating_duration_since(Instant::now());
        let resp = timeout(left, rx.next())
            .await
            .expect("replay reaches the final revision")
            .expect("stream open")
            .unwrap();
        for ev in resp.events {
            assert_eq!(ev.kind, EventType::Put);
            let kv = ev.kv.unwrap();
            history.push((kv.mod_revision, kv.key, kv.value));
        }
    }
    // Every committed revision from 2 on holds exactly one put, in order, with no gaps.
    for (i, (rev, _, _)) in history.iter().enumerate() {
        assert_eq!(
            *rev,
            i as i64 + 2,
            "replayed history has a gap or is out of order"
        );
    }
    let by_key: BTreeMap<&[u8], (&[u8], i64)> = history
        .iter()
        .map(|(r, k, v)| (k.as_slice(), (v.as_slice(), *r)))
        .collect();
    for (k, (v, r)) in acked.lock().unwrap().iter() {
        assert_eq!(
            by_key.get(k.as_slice()),
            Some(&(v.as_slice(), *r)),
            "acknowledged write missing from replay"
        );
    }
}
