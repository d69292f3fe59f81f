//! Leases: grant, revoke, time-to-live, listing, keepalive streams and expiry.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{cases, dkv, kvl};
use crate::harness::{b64, expand, json, Server};

const GRANT: &str = "/v3/lease/grant";

cases! {
    lease_grant => lease_grant_rkube, lease_grant_etcd;
    lease_revoke => lease_revoke_rkube, lease_revoke_etcd;
    lease_time_to_live_and_list => lease_time_to_live_and_list_rkube, lease_time_to_live_and_list_etcd;
    lease_keepalive => lease_keepalive_rkube, lease_keepalive_etcd;
    lease_expiry => lease_expiry_rkube, lease_expiry_etcd;
}

fn ttl_of(body: &str) -> i64 {
    json(body)["TTL"]
        .as_str()
        .expect("TTL")
        .parse()
        .expect("TTL number")
}

async fn lease_grant(s: &Server) {
    let body = s.ok(GRANT, r#"{"TTL":100}"#).await;
    let id = json(&body)["ID"].as_str().expect("ID").to_string();
    assert!(id.parse::<i64>().expect("numeric ID") != 0);
    assert_eq!(
        body,
        expand(&format!(r#"{{"header":H(1),"ID":"{id}","TTL":"100"}}"#))
    );
    s.expect(
        GRANT,
        r#"{"TTL":100,"ID":1000}"#,
        r#"{"header":H(1),"ID":"1000","TTL":"100"}"#,
    )
    .await;
    s.expect(
        GRANT,
        r#"{"TTL":"100","ID":"-7"}"#,
        r#"{"header":H(1),"ID":"-7","TTL":"100"}"#,
    )
    .await;
    s.expect_err(
        GRANT,
        r#"{"TTL":100,"ID":1000}"#,
        412,
        9,
        "etcdserver: lease already exists",
    )
    .await;
    // The minimum TTL is 2 (1.5 x the 1s election timeout, rounded up).
    for body in [r#"{"TTL":1}"#, r#"{"TTL":0}"#, r#"{"TTL":-5}"#, "{}"] {
        assert_eq!(ttl_of(&s.ok(GRANT, body).await), 2, "{body}");
    }
    s.expect(
        GRANT,
        r#"{"TTL":9000000000,"ID":2000}"#,
        r#"{"header":H(1),"ID":"2000","TTL":"9000000000"}"#,
    )
    .await;
    let too_large = "etcdserver: too large lease TTL";
    for body in [r#"{"TTL":9000000001}"#, r#"{"TTL":"9223372036854775807"}"#] {
        s.expect_err(GRANT, body, 400, 11, too_large).await;
    }
    // Grants never bump the revision.
    s.expect("/v3/kv/range", r#"{"key":`x`}"#, "{\"header\":H(1)}")
        .await;
}

async fn lease_revoke(s: &Server) {
    s.ok(GRANT, r#"{"TTL":100,"ID":1000}"#).await;
    s.ok("/v3/kv/put", r#"{"key":`l/a`,"value":`a`,"lease":1000}"#)
        .await;
    s.ok("/v3/kv/put", r#"{"key":`l/b`,"value":`b`,"lease":1000}"#)
        .await;
    let mut w = s
        .watch(&[r#"{"create_request":{"key":`l/`,"range_end":`l0`,"prev_kv":true}}"#])
        .await;
    w.expect(r#"{"result":{"header":H(3),"created":true}}"#)
        .await;
    // Every attached key is deleted in one revision, seen as one watch message.
    s.expect("/v3/lease/revoke", r#"{"ID":1000}"#, "{\"header\":H(4)}")
        .await;
    w.expect(&format!(
        r#"{{"result":{{"header":H(4),"events":[{{"type":"DELETE","kv":{},"prev_kv":{}}},{{"type":"DELETE","kv":{},"prev_kv":{}}}]}}}}"#,
        dkv("l/a", 4),
        kvl("l/a", 2, 2, 1, "a", 1000),
        dkv("l/b", 4),
        kvl("l/b", 3, 3, 1, "b", 1000)
    ))
    .await;
    let not_found = "etcdserver: requested lease not found";
    s.expect_err("/v3/lease/revoke", r#"{"ID":1000}"#, 404, 5, not_found)
        .await;
    s.expect_err("/v3/lease/revoke", "{}", 404, 5, not_found)
        .await;
    // Without attached keys the revision stays; the kv/lease alias works.
    s.ok(GRANT, r#"{"TTL":100,"ID":2000}"#).await;
    s.expect(
        "/v3/kv/lease/revoke",
        r#"{"ID":"2000"}"#,
        "{\"header\":H(4)}",
    )
    .await;
    s.expect_err("/v3/kv/lease/revoke", r#"{"ID":"2000"}"#, 404, 5, not_found)
        .await;
}

async fn lease_time_to_live_and_list(s: &Server) {
    s.ok(GRANT, r#"{"TTL":100,"ID":1000}"#).await;
    s.ok(GRANT, r#"{"TTL":100,"ID":-7}"#).await;
    s.ok("/v3/kv/put", r#"{"key":`k1`,"value":`a`,"lease":1000}"#)
        .await;
    s.ok("/v3/kv/put", r#"{"key":`k2`,"value":`b`,"lease":1000}"#)
        .await;
    for path in ["/v3/lease/timetolive", "/v3/kv/lease/timetolive"] {
        let body = s.ok(path, r#"{"ID":1000}"#).await;
        // The remaining TTL is truncated to whole seconds.
        let ttl = ttl_of(&body);
        assert!((98..=99).contains(&ttl), "{body}");
        assert_eq!(
            body,
            expand(&format!(
                r#"{{"header":H(3),"ID":"1000","TTL":"{ttl}","grantedTTL":"100"}}"#
            ))
        );
        let body = json(&s.ok(path, r#"{"ID":1000,"keys":true}"#).await);
        let keys: BTreeSet<String> = body["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, [b64(b"k1"), b64(b"k2")].into_iter().collect());
        s.expect(
            path,
            r#"{"ID":424242}"#,
            r#"{"header":H(3),"ID":"424242","TTL":"-1"}"#,
        )
        .await;
    }
    // A lease without keys has no `keys` field even when asked.
    let body = s
        .ok("/v3/lease/timetolive", r#"{"ID":-7,"keys":true}"#)
        .await;
    assert!(!body.contains("keys"), "{body}");
    for path in ["/v3/lease/leases", "/v3/kv/lease/leases"] {
        let body = s.ok(path, "{}").await;
        let v = json(&body);
        // Unordered, IDs only.
        let ids: BTreeSet<String> = v["leases"]
            .as_array()
            .expect("leases")
            .iter()
            .map(|l| {
                assert_eq!(l.as_object().unwrap().len(), 1, "{l}");
                l["ID"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(
            ids,
            ["1000".to_string(), "-7".to_string()].into_iter().collect()
        );
        assert!(
            body.starts_with(&expand(r#"{"header":H(3),"leases":["#)),
            "{body}"
        );
    }
    for path in ["/v3/kv/lease/grant", "/v3/kv/lease/keepalive"] {
        let (status, body) = s.post(path, "{}").await;
        assert_eq!((status, body.as_str()), (404, "Not Found\n"), "{path}");
    }
}

async fn lease_keepalive(s: &Server) {
    s.ok(GRANT, r#"{"TTL":60,"ID":5000}"#).await;
    let mut k = s
        .stream(
            "/v3/lease/keepalive",
            "{\"ID\":5000}\n{\"ID\":\"4242\"}\n{}\n",
        )
        .await;
    assert_eq!(k.status, 200);
    // One answer per request, in order; the stream ends with the request body.
    assert_eq!(
        k.rest().await,
        vec![
            expand(r#"{"result":{"header":H(1),"ID":"5000","TTL":"60"}}"#),
            expand(r#"{"result":{"header":H(1),"ID":"4242"}}"#),
            expand(r#"{"result":{"header":H(1)}}"#),
        ]
    );
    let (status, body) = s.post("/v3/lease/keepalive", "{bad").await;
    assert_eq!(
        (status, body),
        (
            500,
            crate::harness::error_body(
                "invalid character 'b' looking for beginning of object key string",
                2
            )
        )
    );
}

async fn lease_expiry(s: &Server) {
    s.ok(GRANT, r#"{"TTL":2,"ID":6000}"#).await;
    s.ok("/v3/kv/put", r#"{"key":`e/1`,"value":`a`,"lease":6000}"#)
        .await;
    s.ok("/v3/kv/put", r#"{"key":`e/2`,"value":`a`,"lease":6000}"#)
        .await;
    let mut w = s
        .watch(&[r#"{"create_request":{"key":`e/`,"range_end":`e0`,"prev_kv":true}}"#])
        .await;
    w.expect(r#"{"result":{"header":H(3),"created":true}}"#)
        .await;
    // Expiry deletes both keys in one revision; allow generously for the expiry loop.
    let line = w
        .next_within(Duration::from_secs(15))
        .await
        .expect("lease expiry event");
    assert_eq!(
        line,
        expand(&format!(
            r#"{{"result":{{"header":H(4),"events":[{{"type":"DELETE","kv":{},"prev_kv":{}}},{{"type":"DELETE","kv":{},"prev_kv":{}}}]}}}}"#,
            dkv("e/1", 4),
            kvl("e/1", 2, 2, 1, "a", 6000),
            dkv("e/2", 4),
            kvl("e/2", 3, 3, 1, "a", 6000)
        ))
    );
    s.expect(
        "/v3/lease/timetolive",
        r#"{"ID":6000}"#,
        r#"{"header":H(4),"ID":"6000","TTL":"-1"}"#,
    )
    .await;
}
