//! Put, Range and DeleteRange.

use super::{cases, kv, kvl};
use crate::harness::{b64, json, Server};

const RANGE: &str = "/v3/kv/range";
const PUT: &str = "/v3/kv/put";
const DEL: &str = "/v3/kv/deleterange";

cases! {
    put_basic => put_basic_rkube, put_basic_etcd;
    put_lease => put_lease_rkube, put_lease_etcd;
    put_ignore_flags => put_ignore_flags_rkube, put_ignore_flags_etcd;
    put_size_limits => put_size_limits_rkube, put_size_limits_etcd;
    range_shapes => range_shapes_rkube, range_shapes_etcd;
    range_limit_count => range_limit_count_rkube, range_limit_count_etcd;
    range_revisions => range_revisions_rkube, range_revisions_etcd;
    range_sort => range_sort_rkube, range_sort_etcd;
    range_filters => range_filters_rkube, range_filters_etcd;
    delete_range => delete_range_rkube, delete_range_etcd;
}

async fn put_basic(s: &Server) {
    s.expect(PUT, r#"{"key":`foo`,"value":`bar`}"#, "{\"header\":H(2)}")
        .await;
    let want = format!(
        r#"{{"header":H(3),"prev_kv":{}}}"#,
        kv("foo", 2, 2, 1, "bar")
    );
    s.expect(PUT, r#"{"key":`foo`,"value":`bar2`,"prev_kv":true}"#, &want)
        .await;
    // A new key has no previous kv to return.
    s.expect(
        PUT,
        r#"{"key":`new`,"value":`x`,"prev_kv":true}"#,
        "{\"header\":H(4)}",
    )
    .await;
    s.expect_err(
        PUT,
        r#"{"value":`v`}"#,
        400,
        3,
        "etcdserver: key is not provided",
    )
    .await;
    s.expect(PUT, r#"{"key":`empty`}"#, "{\"header\":H(5)}")
        .await;
    s.expect(PUT, r#"{"key":`empty`,"value":""}"#, "{\"header\":H(6)}")
        .await;
    let want = format!(
        r#"{{"header":H(6),"kvs":[{}],"count":"1"}}"#,
        kv("empty", 5, 6, 2, "")
    );
    s.expect(RANGE, r#"{"key":`empty`}"#, &want).await;
    s.expect(
        PUT,
        r#"{"key":`foo`,"value":`bar3`,"ignore_value":false,"ignore_lease":false}"#,
        "{\"header\":H(7)}",
    )
    .await;
    let want = format!(
        r#"{{"header":H(7),"kvs":[{}],"count":"1"}}"#,
        kv("foo", 2, 7, 3, "bar3")
    );
    s.expect(RANGE, r#"{"key":`foo`}"#, &want).await;
    // lowerCamelCase input names.
    let want = format!(
        r#"{{"header":H(8),"prev_kv":{}}}"#,
        kv("foo", 2, 7, 3, "bar3")
    );
    s.expect(PUT, r#"{"key":`foo`,"value":`bar4`,"prevKv":true}"#, &want)
        .await;
}

async fn put_lease(s: &Server) {
    s.expect(
        "/v3/lease/grant",
        r#"{"TTL":100,"ID":1000}"#,
        r#"{"header":H(1),"ID":"1000","TTL":"100"}"#,
    )
    .await;
    s.expect(
        PUT,
        r#"{"key":`k1`,"value":`v`,"lease":1000}"#,
        "{\"header\":H(2)}",
    )
    .await;
    s.expect(
        PUT,
        r#"{"key":`k2`,"value":`v`,"lease":"1000"}"#,
        "{\"header\":H(3)}",
    )
    .await;
    let want = format!(
        r#"{{"header":H(3),"kvs":[{}],"count":"1"}}"#,
        kvl("k1", 2, 2, 1, "v", 1000)
    );
    s.expect(RANGE, r#"{"key":`k1`}"#, &want).await;
    s.expect_err(
        PUT,
        r#"{"key":`k3`,"value":`v`,"lease":"999999"}"#,
        404,
        5,
        "etcdserver: requested lease not found",
    )
    .await;
    // prev_kv of a leased key carries the lease; a put without lease detaches the key.
    let want = format!(
        r#"{{"header":H(4),"prev_kv":{}}}"#,
        kvl("k1", 2, 2, 1, "v", 1000)
    );
    s.expect(PUT, r#"{"key":`k1`,"value":`v2`,"prev_kv":true}"#, &want)
        .await;
    let ttl = json(
        &s.ok("/v3/lease/timetolive", r#"{"ID":1000,"keys":true}"#)
            .await,
    );
    assert_eq!(ttl["keys"], serde_json::json!([b64(b"k2")]));
    // keys_only keeps the lease.
    let want = format!(
        r#"{{"header":H(4),"kvs":[{{"key":"{}","create_revision":"3","mod_revision":"3","version":"1","lease":"1000"}}],"count":"1"}}"#,
        b64(b"k2")
    );
    s.expect(RANGE, r#"{"key":`k2`,"keys_only":true}"#, &want)
        .await;
}

async fn put_ignore_flags(s: &Server) {
    s.ok("/v3/lease/grant", r#"{"TTL":100,"ID":1000}"#).await;
    s.expect(
        PUT,
        r#"{"key":`k`,"value":`v1`,"lease":1000}"#,
        "{\"header\":H(2)}",
    )
    .await;
    let get = |rev: i64, kv: String| format!(r#"{{"header":H({rev}),"kvs":[{kv}],"count":"1"}}"#);

    // ignore_value without a lease keeps the value and detaches the lease.
    s.expect(
        PUT,
        r#"{"key":`k`,"ignore_value":true}"#,
        "{\"header\":H(3)}",
    )
    .await;
    s.expect(RANGE, r#"{"key":`k`}"#, &get(3, kv("k", 2, 3, 2, "v1")))
        .await;
    let ttl = json(
        &s.ok("/v3/lease/timetolive", r#"{"ID":1000,"keys":true}"#)
            .await,
    );
    assert!(ttl.get("keys").is_none(), "{ttl}");
    // ignore_value with a lease sets the lease.
    s.expect(
        PUT,
        r#"{"key":`k`,"ignore_value":true,"lease":1000}"#,
        "{\"header\":H(4)}",
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`k`}"#,
        &get(4, kvl("k", 2, 4, 3, "v1", 1000)),
    )
    .await;
    // ignore_lease replaces the value and keeps the lease.
    s.expect(
        PUT,
        r#"{"key":`k`,"value":`v2`,"ignore_lease":true}"#,
        "{\"header\":H(5)}",
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`k`}"#,
        &get(5, kvl("k", 2, 5, 4, "v2", 1000)),
    )
    .await;
    s.expect(
        PUT,
        r#"{"key":`k`,"ignore_value":true,"ignore_lease":true}"#,
        "{\"header\":H(6)}",
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`k`}"#,
        &get(6, kvl("k", 2, 6, 5, "v2", 1000)),
    )
    .await;
    // An empty value counts as no value.
    s.expect(
        PUT,
        r#"{"key":`k`,"value":"","ignore_value":true,"ignore_lease":true}"#,
        "{\"header\":H(7)}",
    )
    .await;

    let not_found = "etcdserver: key not found";
    s.expect_err(
        PUT,
        r#"{"key":`nope`,"ignore_value":true}"#,
        400,
        3,
        not_found,
    )
    .await;
    s.expect_err(
        PUT,
        r#"{"key":`nope`,"value":`x`,"ignore_lease":true}"#,
        400,
        3,
        not_found,
    )
    .await;
    s.expect_err(
        PUT,
        r#"{"key":`nope`,"value":"","ignore_value":true}"#,
        400,
        3,
        not_found,
    )
    .await;
    s.expect_err(
        PUT,
        r#"{"key":`k`,"value":`x`,"ignore_value":true}"#,
        400,
        3,
        "etcdserver: value is provided",
    )
    .await;
    s.expect_err(
        PUT,
        r#"{"key":`k`,"lease":1000,"ignore_lease":true}"#,
        400,
        3,
        "etcdserver: lease is provided",
    )
    .await;
    // Nothing above changed the revision.
    s.expect(
        RANGE,
        r#"{"key":`k`,"count_only":true}"#,
        r#"{"header":H(7),"count":"1"}"#,
    )
    .await;
}

fn put_body(value_len: usize) -> String {
    format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        b64(b"foo"),
        b64(&vec![b'a'; value_len])
    )
}

async fn put_size_limits(s: &Server) {
    let (status, body) = s.post(PUT, put_body(2 * 1024 * 1024)).await;
    let msg = "grpc: received message larger than max (2097162 vs. 2097152)";
    assert_eq!(
        (status, body.as_str()),
        (429, crate::harness::error_body(msg, 8).as_str())
    );
    let (status, body) = s.post(PUT, put_body(1572864)).await;
    let msg = "etcdserver: request is too large";
    assert_eq!(
        (status, body.as_str()),
        (400, crate::harness::error_body(msg, 3).as_str())
    );
    // The largest value etcd was seen to accept with a 3-byte key.
    let (status, body) = s.post(PUT, put_body(1572837)).await;
    assert_eq!(status, 200, "{body}");
    s.expect(
        RANGE,
        r#"{"key":`foo`,"count_only":true}"#,
        r#"{"header":H(2),"count":"1"}"#,
    )
    .await;
}

/// r/a (create 2, mod 5, version 2), r/b (3, 8, 3), r/c (4, 4, 1), r/d (6, 6, 1); revision 8.
async fn setup_r(s: &Server) {
    for (k, v) in [
        ("r/a", "a1"),
        ("r/b", "b1"),
        ("r/c", "c1"),
        ("r/a", "a2"),
        ("r/d", "d1"),
        ("r/b", "b2"),
        ("r/b", "b3"),
    ] {
        s.ok(
            PUT,
            &format!(
                r#"{{"key":"{}","value":"{}"}}"#,
                b64(k.as_bytes()),
                b64(v.as_bytes())
            ),
        )
        .await;
    }
}

fn a() -> String {
    kv("r/a", 2, 5, 2, "a2")
}
fn b() -> String {
    kv("r/b", 3, 8, 3, "b3")
}
fn c() -> String {
    kv("r/c", 4, 4, 1, "c1")
}
fn d() -> String {
    kv("r/d", 6, 6, 1, "d1")
}

fn resp(kvs: &[String], more: bool, count: i64) -> String {
    let mut s = "{\"header\":H(8)".to_string();
    if !kvs.is_empty() {
        s.push_str(&format!(",\"kvs\":[{}]", kvs.join(",")));
    }
    if more {
        s.push_str(",\"more\":true");
    }
    if count != 0 {
        s.push_str(&format!(",\"count\":\"{count}\""));
    }
    s.push('}');
    s
}

const PREFIX: &str = r#""key":`r/`,"range_end":`r0`"#;

fn prefix(extra: &str) -> String {
    if extra.is_empty() {
        format!("{{{PREFIX}}}")
    } else {
        format!("{{{PREFIX},{extra}}}")
    }
}

async fn range_shapes(s: &Server) {
    setup_r(s).await;
    s.expect(RANGE, r#"{"key":`r/a`}"#, &resp(&[a()], false, 1))
        .await;
    s.expect(RANGE, r#"{"key":`r/x`}"#, &resp(&[], false, 0))
        .await;
    s.expect(RANGE, &prefix(""), &resp(&[a(), b(), c(), d()], false, 4))
        .await;
    s.expect(
        RANGE,
        r#"{"key":`q/`,"range_end":`q0`}"#,
        &resp(&[], false, 0),
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`q/`,"range_end":`q0`,"count_only":true}"#,
        &resp(&[], false, 0),
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`r/b`,"range_end":"AA=="}"#,
        &resp(&[b(), c(), d()], false, 3),
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":"AA==","range_end":"AA=="}"#,
        &resp(&[a(), b(), c(), d()], false, 4),
    )
    .await;
    s.expect(RANGE, r#"{"key":"AA=="}"#, &resp(&[], false, 0))
        .await;
    s.expect_err(
        RANGE,
        r#"{"range_end":"AA=="}"#,
        400,
        3,
        "etcdserver: key is not provided",
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`r/c`,"range_end":`r/a`}"#,
        &resp(&[], false, 0),
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`r/c`,"range_end":`r/c`}"#,
        &resp(&[], false, 0),
    )
    .await;
    let keys_only: Vec<String> = [
        ("r/a", 2, 5, 2),
        ("r/b", 3, 8, 3),
        ("r/c", 4, 4, 1),
        ("r/d", 6, 6, 1),
    ]
    .iter()
    .map(|(k, c, m, v)| kv(k, *c, *m, *v, ""))
    .collect();
    s.expect(
        RANGE,
        &prefix(r#""keys_only":true"#),
        &resp(&keys_only, false, 4),
    )
    .await;
    s.expect(
        RANGE,
        &prefix(r#""keysOnly":true"#),
        &resp(&keys_only, false, 4),
    )
    .await;
    s.expect(
        RANGE,
        &prefix(r#""serializable":true"#),
        &resp(&[a(), b(), c(), d()], false, 4),
    )
    .await;
    // Unknown fields are ignored.
    s.expect(
        RANGE,
        r#"{"key":`r/a`,"bogus":{"x":1}}"#,
        &resp(&[a()], false, 1),
    )
    .await;
}

async fn range_limit_count(s: &Server) {
    setup_r(s).await;
    let all = [a(), b(), c(), d()];
    s.expect(RANGE, &prefix(r#""limit":2"#), &resp(&all[..2], true, 4))
        .await;
    s.expect(RANGE, &prefix(r#""limit":"2""#), &resp(&all[..2], true, 4))
        .await;
    s.expect(RANGE, &prefix(r#""limit":4"#), &resp(&all, false, 4))
        .await;
    for unlimited in [r#""limit":0"#, r#""limit":-1"#, r#""limit":null"#] {
        s.expect(RANGE, &prefix(unlimited), &resp(&all, false, 4))
            .await;
    }
    let count = resp(&[], false, 4);
    s.expect(RANGE, &prefix(r#""count_only":true"#), &count)
        .await;
    s.expect(RANGE, &prefix(r#""count_only":true,"limit":1"#), &count)
        .await;
    s.expect(
        RANGE,
        &prefix(r#""count_only":true,"keys_only":true"#),
        &count,
    )
    .await;
    s.expect(RANGE, &prefix(r#""countOnly":true"#), &count)
        .await;
}

async fn range_revisions(s: &Server) {
    setup_r(s).await;
    let at4 = [
        kv("r/a", 2, 2, 1, "a1"),
        kv("r/b", 3, 3, 1, "b1"),
        kv("r/c", 4, 4, 1, "c1"),
    ];
    // A historical read keeps the current revision in its header.
    s.expect(RANGE, &prefix(r#""revision":4"#), &resp(&at4, false, 3))
        .await;
    s.expect(RANGE, &prefix(r#""revision":"4""#), &resp(&at4, false, 3))
        .await;
    s.expect(
        RANGE,
        &prefix(r#""revision":4,"count_only":true"#),
        &resp(&[], false, 3),
    )
    .await;
    let all = [a(), b(), c(), d()];
    for current in [r#""revision":-1"#, r#""revision":0"#, r#""revision":8"#] {
        s.expect(RANGE, &prefix(current), &resp(&all, false, 4))
            .await;
    }
    s.expect(RANGE, &prefix(r#""revision":1"#), &resp(&[], false, 0))
        .await;
    let future = "etcdserver: mvcc: required revision is a future revision";
    for rev in [9, 1000] {
        s.expect_err(
            RANGE,
            &prefix(&format!(r#""revision":{rev}"#)),
            400,
            11,
            future,
        )
        .await;
    }
}

async fn range_sort(s: &Server) {
    setup_r(s).await;
    let cases: Vec<(&str, Vec<String>, bool)> = vec![
        (r#""sort_order":"DESCEND""#, vec![d(), c(), b(), a()], false),
        (
            r#""sort_order":"DESCEND","sort_target":"KEY""#,
            vec![d(), c(), b(), a()],
            false,
        ),
        (
            r#""sort_order":"ASCEND","sort_target":"MOD""#,
            vec![c(), a(), d(), b()],
            false,
        ),
        (
            r#""sort_order":"ASCEND","sort_target":"CREATE""#,
            vec![a(), b(), c(), d()],
            false,
        ),
        (
            r#""sort_order":"DESCEND","sort_target":"VERSION""#,
            vec![b(), a(), c(), d()],
            false,
        ),
        // NONE with a target other than KEY sorts ascending.
        (
            r#""sort_order":"NONE","sort_target":"VERSION""#,
            vec![c(), d(), a(), b()],
            false,
        ),
        (r#""sort_target":"MOD""#, vec![c(), a(), d(), b()], false),
        (
            r#""sortOrder":"DESCEND","sortTarget":"CREATE""#,
            vec![d(), c(), b(), a()],
            false,
        ),
        // Enums by number; unknown numbers mean the default.
        (
            r#""sort_order":2,"sort_target":3"#,
            vec![b(), d(), a(), c()],
            false,
        ),
        (r#""sort_order":7"#, vec![a(), b(), c(), d()], false),
        // Limit applies after sorting.
        (
            r#""sort_order":"DESCEND","sort_target":"MOD","limit":2"#,
            vec![b(), d()],
            true,
        ),
        (r#""sort_target":"MOD","limit":2"#, vec![c(), a()], true),
    ];
    for (extra, want, more) in cases {
        s.expect(RANGE, &prefix(extra), &resp(&want, more, 4)).await;
    }
    s.expect_err(
        RANGE,
        &prefix(r#""sort_order":"SIDEWAYS""#),
        400,
        3,
        r#"unknown value "SIDEWAYS" for enum etcdserverpb.RangeRequest_SortOrder"#,
    )
    .await;
}

async fn range_filters(s: &Server) {
    setup_r(s).await;
    // `count` is computed before the filters, `more` after them.
    let cases: Vec<(&str, Vec<String>, bool)> = vec![
        (r#""min_mod_revision":5"#, vec![a(), b(), d()], false),
        (r#""min_mod_revision":5,"limit":1"#, vec![a()], true),
        (r#""min_mod_revision":5,"limit":2"#, vec![a(), b()], true),
        (r#""max_mod_revision":4,"limit":1"#, vec![c()], false),
        (
            r#""min_create_revision":4,"limit":2"#,
            vec![c(), d()],
            false,
        ),
        (r#""max_create_revision":3"#, vec![a(), b()], false),
        (
            r#""min_mod_revision":5,"max_mod_revision":6"#,
            vec![a(), d()],
            false,
        ),
        (r#""minModRevision":6"#, vec![b(), d()], false),
        (r#""min_mod_revision":100"#, vec![], false),
        (r#""min_mod_revision":5,"count_only":true"#, vec![], false),
    ];
    for (extra, want, more) in cases {
        s.expect(RANGE, &prefix(extra), &resp(&want, more, 4)).await;
    }
}

async fn delete_range(s: &Server) {
    for k in ["d/a", "d/b", "d/c", "d/d"] {
        s.ok(
            PUT,
            &format!(
                r#"{{"key":"{}","value":"{}"}}"#,
                b64(k.as_bytes()),
                b64(b"v")
            ),
        )
        .await;
    }
    s.expect(DEL, r#"{"key":`d/a`}"#, r#"{"header":H(6),"deleted":"1"}"#)
        .await;
    let want = format!(
        r#"{{"header":H(7),"deleted":"1","prev_kvs":[{}]}}"#,
        kv("d/b", 3, 3, 1, "v")
    );
    s.expect(DEL, r#"{"key":`d/b`,"prev_kv":true}"#, &want)
        .await;
    let want = format!(
        r#"{{"header":H(8),"deleted":"2","prev_kvs":[{},{}]}}"#,
        kv("d/c", 4, 4, 1, "v"),
        kv("d/d", 5, 5, 1, "v")
    );
    s.expect(
        DEL,
        r#"{"key":`d/`,"range_end":`d0`,"prev_kv":true}"#,
        &want,
    )
    .await;
    // Deleting nothing does not bump the revision.
    s.expect(
        DEL,
        r#"{"key":`d/`,"range_end":`d0`,"prev_kv":true}"#,
        "{\"header\":H(8)}",
    )
    .await;
    s.expect(DEL, r#"{"key":`d/a`,"prev_kv":true}"#, "{\"header\":H(8)}")
        .await;
    s.expect(
        DEL,
        r#"{"key":`d/z`,"range_end":`d/a`}"#,
        "{\"header\":H(8)}",
    )
    .await;
    s.expect_err(DEL, "{}", 400, 3, "etcdserver: key is not provided")
        .await;
    // History keeps the deleted keys.
    let want = format!(
        r#"{{"header":H(8),"kvs":[{},{}],"count":"2"}}"#,
        kv("d/c", 4, 4, 1, "v"),
        kv("d/d", 5, 5, 1, "v")
    );
    s.expect(
        RANGE,
        r#"{"key":`d/`,"range_end":`d0`,"revision":7}"#,
        &want,
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`d/`,"range_end":`d0`}"#,
        "{\"header\":H(8)}",
    )
    .await;
    // Empty key/value pair: deleting a key that was just recreated.
    s.ok(PUT, r#"{"key":`d/a`,"value":`w`}"#).await;
    let want = format!(
        r#"{{"header":H(10),"deleted":"1","prev_kvs":[{}]}}"#,
        kv("d/a", 9, 9, 1, "w")
    );
    s.expect(DEL, r#"{"key":`d/a`,"prevKv":true}"#, &want).await;
}
