//! Watch streams. Every body is complete before responses are read (etcd's gateway is
//! half-duplex over HTTP/1.1), and writes happen only after the `created` line arrived.

use std::time::Duration;

use super::{cases, dkv, kv};
use crate::harness::{error_body, expand, Server};

const PUT: &str = "/v3/kv/put";

/// A short bounded wait for "nothing else arrives": long enough for a wrongly sent message to
/// show up on loopback, short enough to keep the suite fast.
const QUIET: Duration = Duration::from_millis(300);

cases! {
    watch_live_events => watch_live_events_rkube, watch_live_events_etcd;
    watch_txn_and_prefix_events => watch_txn_and_prefix_events_rkube, watch_txn_and_prefix_events_etcd;
    watch_replay_and_future => watch_replay_and_future_rkube, watch_replay_and_future_etcd;
    watch_compacted => watch_compacted_rkube, watch_compacted_etcd;
    watch_filters_and_ranges => watch_filters_and_ranges_rkube, watch_filters_and_ranges_etcd;
    watch_ids => watch_ids_rkube, watch_ids_etcd;
    watch_cancel => watch_cancel_rkube, watch_cancel_etcd;
    watch_progress => watch_progress_rkube, watch_progress_etcd;
    watch_progress_notify => watch_progress_notify_rkube, watch_progress_notify_etcd;
    watch_bad_requests => watch_bad_requests_rkube, watch_bad_requests_etcd;
}

fn ev(kv: &str) -> String {
    format!(r#"{{"kv":{kv}}}"#)
}
fn ev_prev(kv: &str, prev: &str) -> String {
    format!(r#"{{"kv":{kv},"prev_kv":{prev}}}"#)
}
fn del(kv: &str) -> String {
    format!(r#"{{"type":"DELETE","kv":{kv}}}"#)
}
fn del_prev(kv: &str, prev: &str) -> String {
    format!(r#"{{"type":"DELETE","kv":{kv},"prev_kv":{prev}}}"#)
}
fn events(rev: i64, watch_id: i64, evs: &[String]) -> String {
    let id = if watch_id != 0 {
        format!(r#","watch_id":"{watch_id}""#)
    } else {
        String::new()
    };
    format!(
        r#"{{"result":{{"header":H({rev}){id},"events":[{}]}}}}"#,
        evs.join(",")
    )
}

async fn put(s: &Server, key: &str, value: &str) {
    s.ok(
        PUT,
        &format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            crate::harness::b64(key.as_bytes()),
            crate::harness::b64(value.as_bytes())
        ),
    )
    .await;
}

async fn watch_live_events(s: &Server) {
    let mut with_prev = s
        .watch(&[r#"{"create_request":{"key":`w/x`,"prev_kv":true}}"#])
        .await;
    with_prev
        .expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    let mut plain = s.watch(&[r#"{"createRequest":{"key":`w/x`}}"#]).await;
    plain
        .expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    put(s, "w/x", "0").await;
    put(s, "w/x", "1").await;
    s.ok("/v3/kv/deleterange", r#"{"key":`w/x`}"#).await;
    // A creation has no prev_kv; a DELETE's kv holds only key and mod_revision.
    let v1 = kv("w/x", 2, 2, 1, "0");
    let v2 = kv("w/x", 2, 3, 2, "1");
    with_prev.expect(&events(2, 0, &[ev(&v1)])).await;
    with_prev.expect(&events(3, 0, &[ev_prev(&v2, &v1)])).await;
    with_prev
        .expect(&events(4, 0, &[del_prev(&dkv("w/x", 4), &v2)]))
        .await;
    plain.expect(&events(2, 0, &[ev(&v1)])).await;
    plain.expect(&events(3, 0, &[ev(&v2)])).await;
    plain.expect(&events(4, 0, &[del(&dkv("w/x", 4))])).await;
    plain.expect_quiet(QUIET).await;
}

async fn watch_txn_and_prefix_events(s: &Server) {
    let mut w = s
        .watch(&[r#"{"create_request":{"key":`t/`,"range_end":`t0`}}"#])
        .await;
    w.expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    s.ok(
        "/v3/kv/txn",
        r#"{"success":[{"request_put":{"key":`t/z`,"value":`1`}},{"request_put":{"key":`t/a`,"value":`1`}},{"request_put":{"key":`t/m`,"value":`1`}}]}"#,
    )
    .await;
    // Events of one revision come in one message, in op order.
    w.expect(&events(
        2,
        0,
        &[
            ev(&kv("t/z", 2, 2, 1, "1")),
            ev(&kv("t/a", 2, 2, 1, "1")),
            ev(&kv("t/m", 2, 2, 1, "1")),
        ],
    ))
    .await;
    s.ok(
        "/v3/kv/txn",
        r#"{"success":[{"request_delete_range":{"key":`t/m`}},{"request_put":{"key":`t/b`,"value":`2`}},{"request_delete_range":{"key":`t/a`}}]}"#,
    )
    .await;
    w.expect(&events(
        3,
        0,
        &[
            del(&dkv("t/m", 3)),
            ev(&kv("t/b", 3, 3, 1, "2")),
            del(&dkv("t/a", 3)),
        ],
    ))
    .await;
    // A prefix delete lists its keys in key order.
    s.ok("/v3/kv/deleterange", r#"{"key":`t/`,"range_end":`t0`}"#)
        .await;
    w.expect(&events(4, 0, &[del(&dkv("t/b", 4)), del(&dkv("t/z", 4))]))
        .await;
}

async fn watch_replay_and_future(s: &Server) {
    put(s, "r", "2").await;
    put(s, "r", "3").await;
    s.ok("/v3/kv/deleterange", r#"{"key":`r`}"#).await;
    put(s, "r", "5").await;
    // History comes in one message whose header is the current revision.
    let mut w = s
        .watch(&[r#"{"create_request":{"key":`r`,"start_revision":"2","prev_kv":true}}"#])
        .await;
    w.expect(r#"{"result":{"header":H(5),"created":true}}"#)
        .await;
    let r2 = kv("r", 2, 2, 1, "2");
    let r3 = kv("r", 2, 3, 2, "3");
    w.expect(&events(
        5,
        0,
        &[
            ev(&r2),
            ev_prev(&r3, &r2),
            del_prev(&dkv("r", 4), &r3),
            ev(&kv("r", 5, 5, 1, "5")),
        ],
    ))
    .await;
    // A future start revision: only events from it on, each live.
    let mut f = s
        .watch(&[r#"{"create_request":{"key":`r`,"start_revision":7}}"#])
        .await;
    f.expect(r#"{"result":{"header":H(5),"created":true}}"#)
        .await;
    put(s, "r", "6").await;
    put(s, "r", "7").await;
    f.expect(&events(7, 0, &[ev(&kv("r", 5, 7, 3, "7"))])).await;
    w.expect(&events(
        6,
        0,
        &[ev_prev(&kv("r", 5, 6, 2, "6"), &kv("r", 5, 5, 1, "5"))],
    ))
    .await;
}

async fn watch_compacted(s: &Server) {
    for v in ["2", "3", "4", "5"] {
        put(s, "c", v).await;
    }
    s.expect(
        "/v3/kv/compaction",
        r#"{"revision":4}"#,
        "{\"header\":H(5)}",
    )
    .await;
    let canceled = |id: &str| {
        format!(
            r#"{{"result":{{"header":{{"cluster_id":"C","member_id":"M","raft_term":"2"}}{id},"canceled":true,"compact_revision":"4"}}}}"#
        )
    };
    for start in ["2", "-5", "1"] {
        let mut w = s
            .watch(&[&format!(
                r#"{{"create_request":{{"key":`c`,"start_revision":"{start}"}}}}"#
            )])
            .await;
        w.expect(r#"{"result":{"header":H(5),"created":true}}"#)
            .await;
        w.expect(&canceled("")).await;
    }
    // With an explicit id both messages carry it; other watches on the stream go on.
    let mut w = s
        .watch(&[
            r#"{"create_request":{"key":`c`,"start_revision":2,"watch_id":8}}"#,
            r#"{"create_request":{"key":`c`,"watch_id":9}}"#,
        ])
        .await;
    let mut got = vec![w.next().await, w.next().await, w.next().await];
    got.sort();
    let mut want = vec![
        expand(r#"{"result":{"header":H(5),"watch_id":"8","created":true}}"#),
        expand(r#"{"result":{"header":H(5),"watch_id":"9","created":true}}"#),
        expand(&canceled(r#","watch_id":"8""#)),
    ];
    want.sort();
    assert_eq!(got, want);
    put(s, "c", "6").await;
    w.expect(&events(6, 9, &[ev(&kv("c", 2, 6, 5, "6"))])).await;
    // Starting exactly at the compacted revision replays.
    let mut w = s
        .watch(&[r#"{"create_request":{"key":`c`,"start_revision":4}}"#])
        .await;
    w.expect(r#"{"result":{"header":H(6),"created":true}}"#)
        .await;
    w.expect(&events(
        6,
        0,
        &[
            ev(&kv("c", 2, 4, 3, "4")),
            ev(&kv("c", 2, 5, 4, "5")),
            ev(&kv("c", 2, 6, 5, "6")),
        ],
    ))
    .await;
}

async fn watch_filters_and_ranges(s: &Server) {
    let created = r#"{"result":{"header":H(1),"created":true}}"#;
    let mut no_put = s
        .watch(&[r#"{"create_request":{"key":`f`,"filters":["NOPUT"]}}"#])
        .await;
    no_put.expect(created).await;
    let mut no_del = s
        .watch(&[r#"{"create_request":{"key":`f`,"filters":[1]}}"#])
        .await;
    no_del.expect(created).await;
    let mut none = s
        .watch(&[r#"{"create_request":{"key":`f`,"filters":["NOPUT","NODELETE"]}}"#])
        .await;
    none.expect(created).await;
    let mut all = s
        .watch(&[r#"{"create_request":{"key":"AA==","range_end":"AA=="}}"#])
        .await;
    all.expect(created).await;
    let mut from_g = s
        .watch(&[r#"{"create_request":{"key":`g`,"range_end":"AA=="}}"#])
        .await;
    from_g.expect(created).await;
    let mut no_key = s.watch(&[r#"{"create_request":{}}"#]).await;
    no_key.expect(created).await;

    put(s, "f", "1").await;
    s.ok("/v3/kv/deleterange", r#"{"key":`f`}"#).await;
    put(s, "f", "3").await;
    put(s, "h", "4").await;
    no_put.expect(&events(3, 0, &[del(&dkv("f", 3))])).await;
    no_del
        .expect(&events(2, 0, &[ev(&kv("f", 2, 2, 1, "1"))]))
        .await;
    no_del
        .expect(&events(4, 0, &[ev(&kv("f", 4, 4, 1, "3"))]))
        .await;
    all.expect(&events(2, 0, &[ev(&kv("f", 2, 2, 1, "1"))]))
        .await;
    all.expect(&events(3, 0, &[del(&dkv("f", 3))])).await;
    all.expect(&events(4, 0, &[ev(&kv("f", 4, 4, 1, "3"))]))
        .await;
    all.expect(&events(5, 0, &[ev(&kv("h", 5, 5, 1, "4"))]))
        .await;
    from_g
        .expect(&events(5, 0, &[ev(&kv("h", 5, 5, 1, "4"))]))
        .await;
    none.expect_quiet(QUIET).await;
    no_put.expect_quiet(QUIET).await;
}

async fn watch_ids(s: &Server) {
    let mut w = s
        .watch(&[
            r#"{"create_request":{"key":`a`,"watch_id":7}}"#,
            r#"{"create_request":{"key":`a`,"watch_id":"9"}}"#,
            r#"{"create_request":{"key":`a`,"watch_id":1}}"#,
            r#"{"create_request":{"key":`a`}}"#,
            r#"{"create_request":{"key":`a`,"watch_id":0}}"#,
            r#"{"create_request":{"key":`a`,"watchId":7}}"#,
        ])
        .await;
    for id in ["7", "9", "1"] {
        w.expect(&format!(
            r#"{{"result":{{"header":H(1),"watch_id":"{id}","created":true}}}}"#
        ))
        .await;
    }
    // Auto ids start at 0 and skip ids in use.
    w.expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"2","created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"-1","created":true,"canceled":true,"cancel_reason":"mvcc: duplicate watch ID provided on the WatchStream"}}"#).await;
    put(s, "a", "x").await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(w.next().await);
    }
    got.sort();
    let mut want: Vec<String> = [7, 9, 1, 0, 2]
        .iter()
        .map(|id| expand(&events(2, *id, &[ev(&kv("a", 2, 2, 1, "x"))])))
        .collect();
    want.sort();
    assert_eq!(got, want);
}

async fn watch_cancel(s: &Server) {
    let mut w = s
        .watch(&[
            r#"{"create_request":{"key":`k`,"watch_id":5}}"#,
            r#"{"cancel_request":{"watch_id":5}}"#,
            r#"{"create_request":{"key":`k`}}"#,
            r#"{"cancelRequest":{"watchId":"0"}}"#,
            // Unknown and repeated cancels get no response at all.
            r#"{"cancel_request":{"watch_id":42}}"#,
            r#"{"cancel_request":{"watch_id":5}}"#,
            r#"{"create_request":{"key":`k`,"watch_id":6}}"#,
        ])
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"5","created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"5","canceled":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"canceled":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"6","created":true}}"#)
        .await;
    put(s, "k", "v").await;
    // Only the live watch 6 sees the put.
    w.expect(&events(2, 6, &[ev(&kv("k", 2, 2, 1, "v"))])).await;
    w.expect_quiet(QUIET).await;
}

async fn watch_progress(s: &Server) {
    let mut w = s.watch(&[r#"{"progress_request":{}}"#]).await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"-1"}}"#)
        .await;
    put(s, "p", "v").await;
    let mut w = s
        .watch(&[
            r#"{"create_request":{"key":`p`}}"#,
            r#"{"progressRequest":{}}"#,
        ])
        .await;
    w.expect(r#"{"result":{"header":H(2),"created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(2),"watch_id":"-1"}}"#)
        .await;
}

async fn watch_progress_notify(s: &Server) {
    // The servers run with a 1s progress interval.
    let mut w = s
        .watch(&[
            r#"{"create_request":{"key":`p`,"progress_notify":true,"watch_id":1}}"#,
            r#"{"create_request":{"key":`p`,"progressNotify":true}}"#,
        ])
        .await;
    let mut plain = s.watch(&[r#"{"create_request":{"key":`p`}}"#]).await;
    plain
        .expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"watch_id":"1","created":true}}"#)
        .await;
    w.expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    let mut got = vec![w.next().await, w.next().await];
    got.sort();
    let mut want = vec![
        expand(r#"{"result":{"header":H(1)}}"#),
        expand(r#"{"result":{"header":H(1),"watch_id":"1"}}"#),
    ];
    want.sort();
    assert_eq!(got, want);
    // The notification names the current store revision, also after an unrelated write.
    put(s, "other", "v").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let line = w.next().await;
        if line == expand(r#"{"result":{"header":H(2),"watch_id":"1"}}"#) {
            break;
        }
        assert!(
            [
                r#"{"result":{"header":H(1),"watch_id":"1"}}"#,
                r#"{"result":{"header":H(1)}}"#,
                r#"{"result":{"header":H(2)}}"#
            ]
            .iter()
            .any(|w| expand(w) == line),
            "unexpected line {line}"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress notification at revision 2"
        );
    }
    // Watches without progress_notify never get one (the interval is 1s).
    plain.expect_quiet(Duration::from_millis(1500)).await;
}

async fn watch_bad_requests(s: &Server) {
    let cases: Vec<(&str, String)> = vec![
        (
            "{not json",
            "invalid character 'n' looking for beginning of object key string".into(),
        ),
        (
            r#"{"create_request":{"key":"!!!"}}"#,
            "illegal base64 data at input byte 0".into(),
        ),
        (
            "[]",
            "json: cannot unmarshal array into Go value of type map[string]json.RawMessage".into(),
        ),
        (
            r#"{"create_request":{"key":"Zm9v","filters":["NOPE"]}}"#,
            r#"unknown value "NOPE" for enum etcdserverpb.WatchCreateRequest_FilterType"#.into(),
        ),
    ];
    for (body, msg) in cases {
        let (status, got) = s.post("/v3/watch", body.to_string()).await;
        assert_eq!((status, got), (500, error_body(&msg, 2)), "{body}");
    }
    // Garbage after a valid create is ignored; the stream stays open.
    let mut w = s
        .stream(
            "/v3/watch",
            expand("{\"create_request\":{\"key\":`g`}}\n{garbage"),
        )
        .await;
    assert_eq!(w.status, 200);
    w.expect(r#"{"result":{"header":H(1),"created":true}}"#)
        .await;
    put(s, "g", "v").await;
    w.expect(&events(2, 0, &[ev(&kv("g", 2, 2, 1, "v"))])).await;
}
