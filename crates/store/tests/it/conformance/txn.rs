//! Txn: the apiserver's shapes, compare semantics, nesting, validation and limits.

use super::{cases, kv};
use crate::harness::{b64, Server};

const TXN: &str = "/v3/kv/txn";
const PUT: &str = "/v3/kv/put";

cases! {
    txn_kube_shapes => txn_kube_shapes_rkube, txn_kube_shapes_etcd;
    txn_empty_and_readonly => txn_empty_and_readonly_rkube, txn_empty_and_readonly_etcd;
    txn_compare_matrix => txn_compare_matrix_rkube, txn_compare_matrix_etcd;
    txn_compare_missing_and_ranges => txn_compare_missing_and_ranges_rkube, txn_compare_missing_and_ranges_etcd;
    txn_reads_own_writes => txn_reads_own_writes_rkube, txn_reads_own_writes_etcd;
    txn_nested => txn_nested_rkube, txn_nested_etcd;
    txn_duplicate_keys => txn_duplicate_keys_rkube, txn_duplicate_keys_etcd;
    txn_op_errors => txn_op_errors_rkube, txn_op_errors_etcd;
    txn_op_limits => txn_op_limits_rkube, txn_op_limits_etcd;
}

fn put_op(key: &str, value: &str) -> String {
    format!(
        r#"{{"request_put":{{"key":"{}","value":"{}"}}}}"#,
        b64(key.as_bytes()),
        b64(value.as_bytes())
    )
}

fn range_op(key: &str) -> String {
    format!(r#"{{"request_range":{{"key":"{}"}}}}"#, b64(key.as_bytes()))
}

fn del_op(key: &str) -> String {
    format!(
        r#"{{"request_delete_range":{{"key":"{}"}}}}"#,
        b64(key.as_bytes())
    )
}

fn txn(compare: &[String], success: &[String], failure: &[String]) -> String {
    format!(
        r#"{{"compare":[{}],"success":[{}],"failure":[{}]}}"#,
        compare.join(","),
        success.join(","),
        failure.join(",")
    )
}

fn mod_eq(key: &str, rev: i64) -> String {
    format!(
        r#"{{"key":"{}","target":"MOD","result":"EQUAL","mod_revision":"{rev}"}}"#,
        b64(key.as_bytes())
    )
}

async fn txn_kube_shapes(s: &Server) {
    // Create: If mod_revision == 0 Then put Else range.
    let create = txn(
        &[mod_eq("t/x", 0)],
        &[put_op("t/x", "1")],
        &[range_op("t/x")],
    );
    s.expect(
        TXN,
        &create,
        r#"{"header":H(2),"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]}"#,
    )
    .await;
    let want = format!(
        r#"{{"header":H(2),"responses":[{{"response_range":{{"header":{{"revision":"2"}},"kvs":[{}],"count":"1"}}}}]}}"#,
        kv("t/x", 2, 2, 1, "1")
    );
    s.expect(TXN, &create, &want).await;
    // Update: If mod_revision == X Then put(prev_kv) Else range.
    let update = format!(
        r#"{{"compare":[{}],"success":[{{"request_put":{{"key":`t/x`,"value":`2`,"prev_kv":true}}}}],"failure":[{}]}}"#,
        mod_eq("t/x", 2),
        range_op("t/x")
    );
    let want = format!(
        r#"{{"header":H(3),"succeeded":true,"responses":[{{"response_put":{{"header":{{"revision":"3"}},"prev_kv":{}}}}}]}}"#,
        kv("t/x", 2, 2, 1, "1")
    );
    s.expect(TXN, &update, &want).await;
    let want = format!(
        r#"{{"header":H(3),"responses":[{{"response_range":{{"header":{{"revision":"3"}},"kvs":[{}],"count":"1"}}}}]}}"#,
        kv("t/x", 2, 3, 2, "2")
    );
    s.expect(TXN, &update, &want).await;
    // Delete: If mod_revision == X Then delete Else range.
    let delete = format!(
        r#"{{"compare":[{}],"success":[{{"request_delete_range":{{"key":`t/x`,"prev_kv":true}}}}],"failure":[{}]}}"#,
        mod_eq("t/x", 3),
        range_op("t/x")
    );
    let want = format!(
        r#"{{"header":H(4),"succeeded":true,"responses":[{{"response_delete_range":{{"header":{{"revision":"4"}},"deleted":"1","prev_kvs":[{}]}}}}]}}"#,
        kv("t/x", 2, 3, 2, "2")
    );
    s.expect(TXN, &delete, &want).await;
    s.expect(
        TXN,
        &delete,
        r#"{"header":H(4),"responses":[{"response_range":{"header":{"revision":"4"}}}]}"#,
    )
    .await;
    // Several writes share one revision.
    s.expect(
        TXN,
        &txn(&[], &[put_op("t/a", "a"), put_op("t/b", "b"), del_op("t/none")], &[]),
        r#"{"header":H(5),"succeeded":true,"responses":[{"response_put":{"header":{"revision":"5"}}},{"response_put":{"header":{"revision":"5"}}},{"response_delete_range":{"header":{"revision":"5"}}}]}"#,
    )
    .await;
    // lowerCamelCase names.
    s.expect(
        TXN,
        r#"{"compare":[{"key":`t/a`,"target":"MOD","modRevision":"5"}],"success":[{"requestRange":{"key":`t/b`,"keysOnly":true}}]}"#,
        &format!(
            r#"{{"header":H(5),"succeeded":true,"responses":[{{"response_range":{{"header":{{"revision":"5"}},"kvs":[{}],"count":"1"}}}}]}}"#,
            kv("t/b", 5, 5, 1, "")
        ),
    )
    .await;
}

async fn txn_empty_and_readonly(s: &Server) {
    s.ok(PUT, r#"{"key":`k`,"value":`v`}"#).await;
    let empty = r#"{"header":H(2),"succeeded":true}"#;
    for body in [
        "{}",
        r#"{"compare":[],"success":[],"failure":[]}"#,
        "",
        "null",
    ] {
        s.expect(TXN, body, empty).await;
    }
    // Ranges and deletes of nothing do not bump the revision.
    s.expect(
        TXN,
        &txn(&[], &[range_op("nope"), del_op("nope")], &[]),
        r#"{"header":H(2),"succeeded":true,"responses":[{"response_range":{"header":{"revision":"2"}}},{"response_delete_range":{"header":{"revision":"2"}}}]}"#,
    )
    .await;
}

/// k: create 2, mod 3, version 2, value "m", lease 1000.
async fn txn_compare_matrix(s: &Server) {
    s.ok("/v3/lease/grant", r#"{"TTL":100,"ID":1000}"#).await;
    s.ok(PUT, r#"{"key":`k`,"value":`a`}"#).await;
    s.ok(PUT, r#"{"key":`k`,"value":`m`,"lease":1000}"#).await;
    let actual = [
        ("VERSION", "version", 2),
        ("CREATE", "create_revision", 2),
        ("MOD", "mod_revision", 3),
        ("LEASE", "lease", 1000),
    ];
    let results = ["EQUAL", "GREATER", "LESS", "NOT_EQUAL"];
    let holds = |result: &str, ord: std::cmp::Ordering| match result {
        "EQUAL" => ord.is_eq(),
        "GREATER" => ord.is_gt(),
        "LESS" => ord.is_lt(),
        _ => !ord.is_eq(),
    };
    let check = |compare: String, ok: bool| async move {
        let want = if ok {
            r#"{"header":H(3),"succeeded":true}"#
        } else {
            r#"{"header":H(3)}"#
        };
        s.expect(TXN, &format!(r#"{{"compare":[{compare}]}}"#), want)
            .await;
    };
    for (target, field, value) in actual {
        for given in [value - 1, value, value + 1] {
            for result in results {
                let c = format!(
                    r#"{{"key":`k`,"target":"{target}","result":"{result}","{field}":"{given}"}}"#
                );
                check(c, holds(result, value.cmp(&given))).await;
            }
        }
    }
    for given in ["l", "m", "mm", "n", ""] {
        for result in results {
            let c = format!(
                r#"{{"key":`k`,"target":"VALUE","result":"{result}","value":"{}"}}"#,
                b64(given.as_bytes())
            );
            check(c, holds(result, b"m".as_slice().cmp(given.as_bytes()))).await;
        }
    }
    // Enums by number: target 2 = MOD, result 0 = EQUAL.
    check(
        r#"{"key":`k`,"target":2,"result":0,"mod_revision":3}"#.into(),
        true,
    )
    .await;
    // No target or result: VERSION EQUAL 0.
    check(r#"{"key":`k`}"#.into(), false).await;
    check(r#"{"key":`absent`}"#.into(), true).await;
    // target MOD with only `version` given compares mod_revision against 0.
    check(r#"{"key":`k`,"target":"MOD","version":"2"}"#.into(), false).await;
    s.expect_err(
        TXN,
        r#"{"compare":[{"target":"VERSION","version":0}]}"#,
        400,
        3,
        "etcdserver: key is not provided",
    )
    .await;
}

async fn txn_compare_missing_and_ranges(s: &Server) {
    s.ok(PUT, r#"{"key":`c/a`,"value":`x`}"#).await;
    s.ok(PUT, r#"{"key":`c/b`,"value":`x`}"#).await;
    s.ok(PUT, r#"{"key":`c/e`}"#).await;
    let check = |compare: &'static str, ok: bool| async move {
        let want = if ok {
            r#"{"header":H(4),"succeeded":true}"#
        } else {
            r#"{"header":H(4)}"#
        };
        s.expect(TXN, &format!(r#"{{"compare":[{compare}]}}"#), want)
            .await;
    };
    // A missing key compares as a zero KV, except that VALUE compares are always false.
    check(
        r#"{"key":`m`,"target":"VERSION","result":"EQUAL","version":0}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`m`,"target":"CREATE","result":"EQUAL","create_revision":0}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`m`,"target":"MOD","result":"LESS","mod_revision":5}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`m`,"target":"LEASE","result":"EQUAL","lease":0}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`m`,"target":"VALUE","result":"EQUAL","value":""}"#,
        false,
    )
    .await;
    check(r#"{"key":`m`,"target":"VALUE","result":"EQUAL"}"#, false).await;
    check(
        r#"{"key":`m`,"target":"VALUE","result":"NOT_EQUAL","value":`x`}"#,
        false,
    )
    .await;
    // An existing key with an empty value equals "", and no lease equals lease 0.
    check(
        r#"{"key":`c/e`,"target":"VALUE","result":"EQUAL","value":""}"#,
        true,
    )
    .await;
    check(r#"{"key":`c/e`,"target":"VALUE","result":"EQUAL"}"#, true).await;
    check(
        r#"{"key":`c/e`,"target":"LEASE","result":"EQUAL","lease":0}"#,
        true,
    )
    .await;
    // With range_end every key in the range must satisfy the compare.
    check(
        r#"{"key":`c/a`,"range_end":`c/c`,"target":"VALUE","result":"EQUAL","value":`x`}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`c/`,"range_end":`c0`,"target":"VALUE","result":"EQUAL","value":`x`}"#,
        false,
    )
    .await;
    check(
        r#"{"key":`c/`,"range_end":`c0`,"target":"VERSION","result":"EQUAL","version":1}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`c/`,"range_end":`c0`,"target":"MOD","result":"GREATER","mod_revision":1}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`c/`,"range_end":`c0`,"target":"MOD","result":"GREATER","mod_revision":2}"#,
        false,
    )
    .await;
    check(r#"{"key":`c/b`,"range_end":"AA==","target":"CREATE","result":"GREATER","create_revision":2}"#, true).await;
    check(r#"{"key":`c/a`,"range_end":"AA==","target":"CREATE","result":"GREATER","create_revision":2}"#, false).await;
    // An empty range behaves like a missing key.
    check(
        r#"{"key":`x/`,"range_end":`x0`,"target":"VERSION","result":"EQUAL","version":0}"#,
        true,
    )
    .await;
    check(
        r#"{"key":`x/`,"range_end":`x0`,"target":"VALUE","result":"NOT_EQUAL","value":`x`}"#,
        false,
    )
    .await;
}

async fn txn_reads_own_writes(s: &Server) {
    s.ok(PUT, r#"{"key":`o/d`,"value":`old`}"#).await;
    let body = txn(
        &[],
        &[
            put_op("o/a", "new"),
            range_op("o/a"),
            del_op("o/d"),
            range_op("o/d"),
        ],
        &[],
    );
    let want = format!(
        r#"{{"header":H(3),"succeeded":true,"responses":[{{"response_put":{{"header":{{"revision":"3"}}}}}},{{"response_range":{{"header":{{"revision":"3"}},"kvs":[{}],"count":"1"}}}},{{"response_delete_range":{{"header":{{"revision":"3"}},"deleted":"1"}}}},{{"response_range":{{"header":{{"revision":"3"}}}}}}]}}"#,
        kv("o/a", 3, 3, 1, "new")
    );
    s.expect(TXN, &body, &want).await;
}

async fn txn_nested(s: &Server) {
    s.ok(PUT, r#"{"key":`n/a`,"value":`1`}"#).await;
    let inner_ok = txn(
        &[mod_eq("n/a", 2)],
        &[put_op("n/b", "2")],
        &[range_op("n/a")],
    );
    let body = format!(
        r#"{{"success":[{{"request_txn":{inner_ok}}},{}]}}"#,
        put_op("n/c", "3")
    );
    s.expect(
        TXN,
        &body,
        r#"{"header":H(3),"succeeded":true,"responses":[{"response_txn":{"header":{},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"3"}}}]}},{"response_put":{"header":{"revision":"3"}}}]}"#,
    )
    .await;
    let inner_fail = txn(
        &[mod_eq("n/a", 99)],
        &[put_op("n/b", "2")],
        &[range_op("n/a")],
    );
    let body = format!(r#"{{"success":[{{"requestTxn":{inner_fail}}}]}}"#);
    let want = format!(
        r#"{{"header":H(3),"succeeded":true,"responses":[{{"response_txn":{{"header":{{}},"responses":[{{"response_range":{{"header":{{"revision":"3"}},"kvs":[{}],"count":"1"}}}}]}}}}]}}"#,
        kv("n/a", 2, 2, 1, "1")
    );
    s.expect(TXN, &body, &want).await;
}

async fn txn_duplicate_keys(s: &Server) {
    let dup = "etcdserver: duplicate key given in txn request";
    let prefix_del = r#"{"request_delete_range":{"key":`p/`,"range_end":`p0`}}"#.to_string();
    let nested = |ops: &[String]| format!(r#"{{"request_txn":{}}}"#, txn(&[], ops, &[]));
    let bad: Vec<String> = vec![
        txn(&[], &[put_op("a", "1"), put_op("a", "2")], &[]),
        txn(&[], &[put_op("a", "1"), del_op("a")], &[]),
        txn(&[], &[del_op("a"), put_op("a", "1")], &[]),
        // Validation is static: the failure branch is checked although the compare succeeds.
        txn(&[], &[], &[prefix_del.clone(), put_op("p/x", "1")]),
        txn(&[], &[put_op("a", "1"), nested(&[put_op("a", "2")])], &[]),
        txn(
            &[],
            &[nested(&[put_op("a", "1")]), nested(&[put_op("a", "2")])],
            &[],
        ),
    ];
    for body in bad {
        s.expect_err(TXN, &body, 400, 3, dup).await;
    }
    // Allowed: the same key in both branches, two deletes, and a delete repeated in a nested
    // txn.
    s.expect(
        TXN,
        &txn(&[], &[put_op("a", "1")], &[put_op("a", "2")]),
        r#"{"header":H(2),"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]}"#,
    )
    .await;
    s.expect(
        TXN,
        &txn(&[], &[del_op("a"), del_op("a")], &[]),
        r#"{"header":H(3),"succeeded":true,"responses":[{"response_delete_range":{"header":{"revision":"3"},"deleted":"1"}},{"response_delete_range":{"header":{"revision":"3"}}}]}"#,
    )
    .await;
    s.expect(
        TXN,
        &txn(&[], &[prefix_del.clone(), nested(&[prefix_del])], &[]),
        r#"{"header":H(3),"succeeded":true,"responses":[{"response_delete_range":{"header":{"revision":"3"}}},{"response_txn":{"header":{},"succeeded":true,"responses":[{"response_delete_range":{"header":{"revision":"3"}}}]}}]}"#,
    )
    .await;
}

async fn txn_op_errors(s: &Server) {
    s.ok(PUT, r#"{"key":`k`,"value":`v`}"#).await;
    let not_found = "etcdserver: key not found";
    s.expect_err(TXN, r#"{"success":[{}]}"#, 400, 3, not_found)
        .await;
    s.expect_err(
        TXN,
        r#"{"compare":[{"key":`k`,"version":5}],"failure":[{}]}"#,
        400,
        3,
        not_found,
    )
    .await;
    let cases: Vec<(&str, u16, i32, &str)> = vec![
        (
            r#"{"request_put":{"key":`k`,"value":`v`,"lease":4242}}"#,
            404,
            5,
            "etcdserver: requested lease not found",
        ),
        (
            r#"{"request_range":{"key":`k`,"revision":100}}"#,
            400,
            11,
            "etcdserver: mvcc: required revision is a future revision",
        ),
        (
            r#"{"request_put":{"value":`v`}}"#,
            400,
            3,
            "etcdserver: key is not provided",
        ),
        (
            r#"{"request_range":{"range_end":"AA=="}}"#,
            400,
            3,
            "etcdserver: key is not provided",
        ),
        (
            r#"{"request_put":{"key":`k`,"value":`v`,"ignore_value":true}}"#,
            400,
            3,
            "etcdserver: value is provided",
        ),
        (
            r#"{"request_put":{"key":`absent`,"ignore_value":true}}"#,
            400,
            3,
            not_found,
        ),
    ];
    for (op, status, code, msg) in cases {
        // The failing op comes after a valid put: nothing of the txn is applied.
        let body = format!(r#"{{"success":[{},{op}]}}"#, put_op("other", "x"));
        s.expect_err(TXN, &body, status, code, msg).await;
    }
    s.expect(
        "/v3/kv/range",
        r#"{"key":"AA==","range_end":"AA==","count_only":true}"#,
        r#"{"header":H(2),"count":"1"}"#,
    )
    .await;
}

async fn txn_op_limits(s: &Server) {
    let too_many = "etcdserver: too many operations in txn request";
    let puts = |n: usize, tag: &str| -> Vec<String> {
        (0..n).map(|i| put_op(&format!("{tag}{i}"), "v")).collect()
    };
    let h = |rev: i64| format!(r#"{{"header":H({rev}),"succeeded":true,"responses":["#);
    let body = s.ok(TXN, &txn(&[], &puts(128, "k"), &[])).await;
    assert!(body.starts_with(&crate::harness::expand(&h(2))), "{body}");
    s.expect_err(TXN, &txn(&[], &puts(129, "k"), &[]), 400, 3, too_many)
        .await;
    let ranges: Vec<String> = (0..129).map(|i| range_op(&format!("k{i}"))).collect();
    s.expect_err(TXN, &txn(&[], &[], &ranges), 400, 3, too_many)
        .await;
    let compares: Vec<String> = (0..129).map(|i| mod_eq(&format!("k{i}"), 0)).collect();
    s.expect_err(TXN, &txn(&compares, &[], &[]), 400, 3, too_many)
        .await;

    // Nested txns share the budget: inner limit = 128 - outer op count.
    let nested = |outer_puts: usize, inner: usize, compares: usize| {
        let mut ops = puts(outer_puts, "o");
        ops.push(format!(
            r#"{{"request_txn":{}}}"#,
            txn(&[], &puts(inner, "i"), &[])
        ));
        let cmps: Vec<String> = (0..compares).map(|i| mod_eq(&format!("c{i}"), 0)).collect();
        txn(&cmps, &ops, &[])
    };
    s.ok(TXN, &nested(63, 64, 0)).await;
    s.expect_err(TXN, &nested(63, 65, 0), 400, 3, too_many)
        .await;
    s.ok(TXN, &nested(127, 0, 0)).await;
    s.expect_err(TXN, &nested(127, 1, 0), 400, 3, too_many)
        .await;
    s.ok(TXN, &nested(0, 28, 100)).await;
    s.expect_err(TXN, &nested(0, 29, 100), 400, 3, too_many)
        .await;
}
