//! Compaction, maintenance, plain endpoints, routing errors and request decoding errors.

use super::{cases, kv};
use crate::harness::{b64, error_body, Server};

const RANGE: &str = "/v3/kv/range";
const PUT: &str = "/v3/kv/put";
const COMPACT: &str = "/v3/kv/compaction";

cases! {
    compaction => compaction_rkube, compaction_etcd;
    status_and_plain_endpoints => status_and_plain_endpoints_rkube, status_and_plain_endpoints_etcd;
    routing_errors => routing_errors_rkube, routing_errors_etcd;
    lenient_bodies => lenient_bodies_rkube, lenient_bodies_etcd;
    decode_errors => decode_errors_rkube, decode_errors_etcd;
    v3beta_alias => v3beta_alias_rkube, v3beta_alias_etcd;
}

async fn compaction(s: &Server) {
    for v in 2..=6 {
        s.ok(
            PUT,
            &format!(
                r#"{{"key":"{}","value":"{}"}}"#,
                b64(b"k"),
                b64(format!("v{v}").as_bytes())
            ),
        )
        .await;
    }
    s.expect(COMPACT, r#"{"revision":3}"#, "{\"header\":H(6)}")
        .await;
    let compacted = "etcdserver: mvcc: required revision has been compacted";
    for body in [
        r#"{"revision":3}"#,
        r#"{"revision":2}"#,
        "{}",
        r#"{"revision":-1}"#,
    ] {
        s.expect_err(COMPACT, body, 400, 11, compacted).await;
    }
    s.expect(
        COMPACT,
        r#"{"revision":"4","physical":true}"#,
        "{\"header\":H(6)}",
    )
    .await;
    s.expect_err(
        COMPACT,
        r#"{"revision":7}"#,
        400,
        11,
        "etcdserver: mvcc: required revision is a future revision",
    )
    .await;
    s.expect_err(RANGE, r#"{"key":`k`,"revision":3}"#, 400, 11, compacted)
        .await;
    s.expect_err(
        "/v3/kv/txn",
        r#"{"success":[{"request_range":{"key":`k`,"revision":3}}]}"#,
        400,
        11,
        compacted,
    )
    .await;
    let want = format!(
        r#"{{"header":H(6),"kvs":[{}],"count":"1"}}"#,
        kv("k", 2, 4, 3, "v4")
    );
    s.expect(RANGE, r#"{"key":`k`,"revision":4}"#, &want).await;
    // Compacting at the current revision is allowed.
    s.expect(COMPACT, r#"{"revision":6}"#, "{\"header\":H(6)}")
        .await;
    s.expect_err(RANGE, r#"{"key":`k`,"revision":5}"#, 400, 11, compacted)
        .await;
    let want = format!(
        r#"{{"header":H(6),"kvs":[{}],"count":"1"}}"#,
        kv("k", 2, 6, 5, "v6")
    );
    s.expect(RANGE, r#"{"key":`k`,"revision":6}"#, &want).await;
    s.expect(RANGE, r#"{"key":`k`}"#, &want).await;
}

/// Every all-digit JSON string becomes "N" (values that differ per server and run).
fn digits_to_n(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('"') {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let end = rest.find('"').unwrap_or(rest.len());
        let inner = &rest[..end];
        if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
            out.push('N');
        } else {
            out.push_str(inner);
        }
        out.push('"');
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

async fn status_and_plain_endpoints(s: &Server) {
    let want = r#"{"header":{"cluster_id":"C","member_id":"M","revision":"N","raft_term":"N"},"version":"3.4.23","dbSize":"N","leader":"N","raftIndex":"N","raftTerm":"N","raftAppliedIndex":"N","dbSizeInUse":"N"}"#;
    for body in ["{}", ""] {
        let got = s.ok("/v3/maintenance/status", body).await;
        assert_eq!(digits_to_n(&got), want);
    }
    // No alarms: a bare `{}`. The hash is a uint32, so a JSON number.
    assert_eq!(s.ok("/v3/maintenance/alarm", "{}").await, "{}");
    let hash = s.ok("/v3/maintenance/hash", "{}").await;
    let head = crate::harness::expand(r#"{"header":H(1),"hash":"#);
    let number = hash.strip_prefix(&head).and_then(|h| h.strip_suffix('}'));
    assert!(number.is_some_and(|n| n.parse::<u32>().is_ok()), "{hash}");
    let r = s
        .http
        .get(format!("{}/health", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.text().await.unwrap(), r#"{"health":"true"}"#);
    let r = s
        .http
        .get(format!("{}/health?serializable=true", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), r#"{"health":"true"}"#);
    let r = s
        .http
        .get(format!("{}/version", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(
        r.text().await.unwrap(),
        r#"{"etcdserver":"3.4.23","etcdcluster":"3.4.0"}"#
    );
}

async fn routing_errors(s: &Server) {
    for path in [
        "/v3/kv/nothing",
        "/v3/nothing",
        "/v3/kv/lease/grant",
        "/v3/maintenance/hashkv",
        "/v3/auth/status",
    ] {
        let (status, body) = s.post(path, "{}").await;
        assert_eq!((status, body.as_str()), (404, "Not Found\n"), "{path}");
    }
    for path in ["/foo", "/v3alpha/kv/range"] {
        let (status, body) = s.post(path, "{}").await;
        assert_eq!(
            (status, body.as_str()),
            (404, "404 page not found\n"),
            "{path}"
        );
    }
    let r = s.http.get(format!("{}/foo", s.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.text().await.unwrap(), "404 page not found\n");
    let not_allowed = [
        ("GET", "/v3/kv/range"),
        ("PUT", "/v3/kv/range"),
        ("DELETE", "/v3/kv/range"),
        ("GET", "/v3/watch"),
        ("GET", "/v3/lease/leases"),
        ("GET", "/v3/maintenance/status"),
        ("POST", "/health"),
        ("POST", "/version"),
    ];
    for (method, path) in not_allowed {
        let r = s
            .http
            .request(method.parse().unwrap(), format!("{}{path}", s.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
        assert_eq!(
            r.text().await.unwrap(),
            "Method Not Allowed\n",
            "{method} {path}"
        );
    }
}

async fn lenient_bodies(s: &Server) {
    let no_key = "etcdserver: key is not provided";
    for body in ["", "null", " \n", "{}"] {
        s.expect_err(RANGE, body, 400, 3, no_key).await;
        s.expect_err(PUT, body, 400, 3, no_key).await;
    }
    // Only the first JSON value counts; Content-Type is ignored.
    s.expect(
        PUT,
        r#"{"key":`foo`,"value":`v`} trailing"#,
        "{\"header\":H(2)}",
    )
    .await;
    s.expect(
        PUT,
        r#"{"key":`foo`,"value":`v`}{"key":`bar`}"#,
        "{\"header\":H(3)}",
    )
    .await;
    s.expect(RANGE, r#"{"key":`bar`}"#, "{\"header\":H(3)}")
        .await;
    let r = s
        .http
        .post(format!("{}{RANGE}", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(crate::harness::expand(r#"{"key":`foo`,"count_only":true}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Case matters in field names; unknown ones are ignored.
    s.expect_err(RANGE, r#"{"KEY":`foo`}"#, 400, 3, no_key)
        .await;
    // null numbers and bools are zero/false; numbers may be strings with spaces.
    s.expect(
        RANGE,
        r#"{"key":`foo`,"limit":null,"count_only":null,"revision":" 3"}"#,
        &format!(
            r#"{{"header":H(3),"kvs":[{}],"count":"1"}}"#,
            kv("foo", 2, 3, 2, "v")
        ),
    )
    .await;
    s.expect(
        RANGE,
        r#"{"key":`foo`,"revision":"-0","count_only":true}"#,
        r#"{"header":H(3),"count":"1"}"#,
    )
    .await;
}

async fn decode_errors(s: &Server) {
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            RANGE,
            "{bad json",
            "invalid character 'b' looking for beginning of object key string",
        ),
        (RANGE, r#"{"key":"Zm9v""#, "unexpected EOF"),
        (
            RANGE,
            "[]",
            "json: cannot unmarshal array into Go value of type map[string]json.RawMessage",
        ),
        (
            RANGE,
            r#""str""#,
            "json: cannot unmarshal string into Go value of type map[string]json.RawMessage",
        ),
        (
            RANGE,
            "42",
            "json: cannot unmarshal number into Go value of type map[string]json.RawMessage",
        ),
        (
            RANGE,
            r#"{"key":"Zm8"}"#,
            "illegal base64 data at input byte 0",
        ),
        (
            RANGE,
            r#"{"key":"Zm8-"}"#,
            "illegal base64 data at input byte 3",
        ),
        (
            RANGE,
            r#"{"key":"!!!"}"#,
            "illegal base64 data at input byte 0",
        ),
        (
            RANGE,
            r#"{"key":5}"#,
            "json: cannot unmarshal number into Go value of type []uint8",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":"abc"}"#,
            "invalid character 'a' looking for beginning of value",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":""}"#,
            "unexpected end of JSON input",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":1.5}"#,
            "json: cannot unmarshal number 1.5 into Go value of type int64",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":1.0}"#,
            "json: cannot unmarshal number 1.0 into Go value of type int64",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":"1.0"}"#,
            "json: cannot unmarshal number 1.0 into Go value of type int64",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":"99999999999999999999"}"#,
            "json: cannot unmarshal number 99999999999999999999 into Go value of type int64",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","limit":true}"#,
            "json: cannot unmarshal bool into Go value of type int64",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","count_only":"true"}"#,
            "json: cannot unmarshal string into Go value of type bool",
        ),
        (
            RANGE,
            r#"{"key":"Zm9v","count_only":1}"#,
            "json: cannot unmarshal number into Go value of type bool",
        ),
        (
            PUT,
            r#"{"key":"Zm9v","value":"!!!"}"#,
            "illegal base64 data at input byte 0",
        ),
        (
            "/v3/kv/txn",
            "{bad",
            "invalid character 'b' looking for beginning of object key string",
        ),
        (
            "/v3/lease/grant",
            r#"{"TTL":"abc"}"#,
            "invalid character 'a' looking for beginning of value",
        ),
    ];
    for (path, body, msg) in cases {
        let (status, got) = s.post(path, body.to_string()).await;
        assert_eq!(
            (status, got),
            (400, error_body(msg, 3)),
            "POST {path} {body}"
        );
    }
}

async fn v3beta_alias(s: &Server) {
    s.expect(
        "/v3beta/kv/put",
        r#"{"key":`b`,"value":`v`}"#,
        "{\"header\":H(2)}",
    )
    .await;
    let want = format!(
        r#"{{"header":H(2),"kvs":[{}],"count":"1"}}"#,
        kv("b", 2, 2, 1, "v")
    );
    s.expect("/v3beta/kv/range", r#"{"key":`b`}"#, &want).await;
    s.expect(
        "/v3beta/lease/grant",
        r#"{"TTL":100,"ID":1}"#,
        r#"{"header":H(2),"ID":"1","TTL":"100"}"#,
    )
    .await;
    let body = s.ok("/v3beta/maintenance/status", "{}").await;
    assert!(body.contains(r#""version":"3.4.23""#), "{body}");
}
