//! Debian's `etcdctl` (3.4, package `etcd-client`) against rkube-store and a real etcd side
//! by side: each case runs the same commands on both and asserts what the user sees.
//! `etcdctl` missing fails the test (`scripts/test.sh` installs it), as a missing etcd does.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::conformance::cases;
use crate::harness::Server;

cases! {
    kv_and_txn => etcdctl_kv_and_txn_rkube, etcdctl_kv_and_txn_etcd;
    watch => etcdctl_watch_rkube, etcdctl_watch_etcd;
    lease_and_compaction => etcdctl_lease_and_compaction_rkube, etcdctl_lease_and_compaction_etcd;
    endpoint_member_snapshot => etcdctl_endpoint_member_snapshot_rkube, etcdctl_endpoint_member_snapshot_etcd;
}

fn etcdctl_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RKUBE_ETCDCTL_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("etcdctl"))
                .find(|p| p.is_file())
        })
        .expect("etcdctl not found on PATH (apt-get install etcd-client, or set RKUBE_ETCDCTL_BIN)")
}

fn command(s: &Server, args: &[&str]) -> Command {
    let mut c = Command::new(etcdctl_binary());
    // Endpoints as host:port: etcdctl 3.4 sends a scheme-prefixed endpoint as HTTP/2's
    // `:authority` for its per-endpoint commands, which no HTTP/2 server but grpc-go's takes.
    c.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", s.host_port()))
        .arg("--command-timeout=10s")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// Runs etcdctl to completion (30 s at most): (success, stdout, stderr).
async fn run(s: &Server, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = command(s, args).spawn().expect("spawn etcdctl");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.as_bytes())
        .await
        .expect("write stdin");
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("etcdctl {args:?} did not finish in 30 s"))
        .expect("etcdctl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs etcdctl, which must succeed; returns its stdout.
async fn ok(s: &Server, args: &[&str]) -> String {
    let (good, out, err) = run(s, args, "").await;
    assert!(good, "etcdctl {args:?} failed: {err}");
    out
}

async fn kv_and_txn(s: &Server) {
    assert_eq!(ok(s, &["put", "/a", "1"]).await, "OK\n");
    assert_eq!(ok(s, &["put", "/a/b", "2"]).await, "OK\n");
    assert_eq!(ok(s, &["put", "/b", "3"]).await, "OK\n");
    assert_eq!(ok(s, &["get", "--prefix", "/a"]).await, "/a\n1\n/a/b\n2\n");
    assert_eq!(ok(s, &["get", "/a", "--keys-only"]).await, "/a\n\n");
    let json: serde_json::Value =
        serde_json::from_str(&ok(s, &["get", "--prefix", "/", "-w", "json"]).await).unwrap();
    assert_eq!(json["count"], 3);
    assert_eq!(json["header"]["revision"], 4);
    assert_eq!(
        ok(s, &["get", "/a", "--rev=2", "--print-value-only"]).await,
        "1\n"
    );
    assert_eq!(ok(s, &["del", "--prefix", "/a"]).await, "2\n");
    assert_eq!(ok(s, &["get", "--prefix", "/a"]).await, "");
    // A transaction read from stdin: compares, blank line, success ops, blank line, failure.
    let txn = "create(\"/t\") = \"0\"\n\nput /t first\n\nget /t\n\n";
    let (good, out, err) = run(s, &["txn"], txn).await;
    assert!(good, "{err}");
    assert_eq!(out, "SUCCESS\n\nOK\n");
    let (good, out, _) = run(s, &["txn"], txn).await;
    assert!(good);
    assert_eq!(out, "FAILURE\n\n/t\nfirst\n");
    // etcd's error, worded by etcdctl.
    let (good, _, err) = run(s, &["put", "/c", "--ignore-value"], "").await;
    assert!(!good);
    assert!(err.contains("etcdserver: key not found"), "{err}");
}

async fn watch(s: &Server) {
    ok(s, &["put", "/w/1", "x"]).await;
    ok(s, &["del", "/w/1"]).await;
    let mut child = command(s, &["watch", "--prefix", "/w", "--rev", "1", "--prev-kv"])
        .spawn()
        .expect("spawn etcdctl watch");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let mut want = vec!["PUT", "/w/1", "x", "DELETE", "/w/1", "x", "/w/1", ""];
    let read = async {
        // The replay from revision 1, then a live event once the replay is in.
        while seen.len() < want.len() {
            seen.push(lines.next_line().await.unwrap().expect("a line"));
            if seen.len() == 8 {
                ok(s, &["put", "/w/2", "y"]).await;
                want.extend(["PUT", "/w/2", "y"]);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .unwrap_or_else(|_| panic!("watch output so far: {seen:?}"));
    assert_eq!(seen, want);
    let _ = child.kill().await;
}

async fn lease_and_compaction(s: &Server) {
    let out = ok(s, &["lease", "grant", "60"]).await;
    // "lease 694d77aa9e3a5c28 granted with TTL(60s)"
    let id = out
        .split_whitespace()
        .nth(1)
        .expect("a lease ID")
        .to_string();
    assert_eq!(out, format!("lease {id} granted with TTL(60s)\n"));
    ok(s, &["put", "--lease", &id, "/l", "v"]).await;
    assert_eq!(
        ok(s, &["lease", "keep-alive", "--once", &id]).await,
        format!("lease {id} keepalived with TTL(60)\n")
    );
    let ttl = ok(s, &["lease", "timetolive", &id, "--keys"]).await;
    assert!(
        ttl.starts_with(&format!("lease {id} granted with TTL(60s), remaining("))
            && ttl.ends_with("attached keys([/l])\n"),
        "{ttl}"
    );
    let list = ok(s, &["lease", "list"]).await;
    assert_eq!(list, format!("found 1 leases\n{id}\n"));
    assert_eq!(
        ok(s, &["lease", "revoke", &id]).await,
        format!("lease {id} revoked\n")
    );
    assert_eq!(ok(s, &["get", "/l"]).await, "");

    for v in ["1", "2", "3"] {
        ok(s, &["put", "k", v]).await;
    }
    let rev: serde_json::Value =
        serde_json::from_str(&ok(s, &["get", "k", "-w", "json"]).await).unwrap();
    let current = rev["header"]["revision"].as_i64().unwrap();
    let target = (current - 1).to_string();
    assert_eq!(
        ok(s, &["compaction", &target]).await,
        format!("compacted revision {target}\n")
    );
    let older = (current - 2).to_string();
    let (good, _, err) = run(s, &["get", "k", "--rev", &older], "").await;
    assert!(!good);
    assert!(
        err.contains("required revision has been compacted"),
        "{err}"
    );
    assert_eq!(ok(s, &["get", "k", "--print-value-only"]).await, "3\n");
}

async fn endpoint_member_snapshot(s: &Server) {
    ok(s, &["put", "/s", "v"]).await;
    let status: serde_json::Value =
        serde_json::from_str(&ok(s, &["endpoint", "status", "-w", "json"]).await).unwrap();
    let st = &status[0]["Status"];
    assert_eq!(st["header"]["revision"], 2, "{status}");
    assert_eq!(st["leader"], st["header"]["member_id"], "{status}");
    assert!(
        st["version"].as_str().unwrap().starts_with("3."),
        "{status}"
    );
    let health = run(s, &["endpoint", "health"], "").await;
    assert!(health.0, "{health:?}");
    assert!(
        format!("{}{}", health.1, health.2).contains("is healthy"),
        "{health:?}"
    );
    let members = ok(s, &["member", "list"]).await;
    assert_eq!(members.lines().count(), 1, "{members}");
    assert!(members.contains(&s.url), "{members}");
    assert!(ok(s, &["alarm", "list"]).await.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snap.db");
    let (good, out, err) = run(s, &["snapshot", "save", file.to_str().unwrap()], "").await;
    assert!(good, "{err}");
    assert!(out.contains("Snapshot saved at"), "{out}");
    let len = std::fs::metadata(&file).unwrap().len();
    assert_eq!(len % 512, 32, "whole pages and a SHA-256");
}
