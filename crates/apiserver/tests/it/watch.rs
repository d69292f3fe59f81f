//! Watch semantics: start points, selector transitions, the in-stream 410, bookmarks that
//! advance with other resources' writes, streaming lists, and resuming after a restart.

use std::time::Duration;

use serde_json::json;

use crate::cases;
use crate::harness::*;

const T: Duration = Duration::from_secs(10);

async fn watch_from_rv_and_transitions(c: &Cluster) {
    let (_, a) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod("a", json!({"app": "x"})),
        )
        .await;
    let rv = rv_of(&a);
    let mut w = c
        .watch(&format!(
            "/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}&labelSelector=app%3Dy"
        ))
        .await;
    assert_eq!(w.status, 200);
    let mut all = c
        .watch(&format!(
            "/api/v1/watch/namespaces/default/pods?resourceVersion={rv}"
        ))
        .await;
    // Start at Exact: the first event is strictly after rv.
    c.merge_patch(
        "/api/v1/namespaces/default/pods/a",
        &json!({"metadata": {"labels": {"app": "y"}}}),
    )
    .await;
    let ev = w.next(T).await.expect("ADDED on entering the selector");
    assert_eq!(ev["type"], "ADDED");
    assert!(rv_of(&ev["object"]) > rv);
    let ev = all.next(T).await.unwrap();
    assert_eq!(ev["type"], "MODIFIED");
    c.merge_patch(
        "/api/v1/namespaces/default/pods/a",
        &json!({"metadata": {"labels": {"extra": "1"}}}),
    )
    .await;
    assert_eq!(w.next(T).await.unwrap()["type"], "MODIFIED");
    let (_, left) = c
        .merge_patch(
            "/api/v1/namespaces/default/pods/a",
            &json!({"metadata": {"labels": {"app": "z"}}}),
        )
        .await;
    let ev = w.next(T).await.unwrap();
    assert_eq!(ev["type"], "DELETED", "leaving the selector is a DELETED");
    assert_eq!(
        rv_of(&ev["object"]),
        rv_of(&left),
        "carrying the new event's RV"
    );
    assert_eq!(
        ev["object"]["metadata"]["labels"]["app"], "y",
        "and the old object"
    );
    let (_, gone) = c.delete("/api/v1/namespaces/default/pods/a", None).await;
    let ev = all.until(T, |e| e["type"] == "DELETED").await;
    assert_eq!(ev["object"]["metadata"]["name"], "a");
    assert!(rv_of(&ev["object"]) >= rv_of(&gone));
    // A watch with RV=0 starts with the current state as ADDED.
    c.post("/api/v1/namespaces/default/pods", &pod("b", json!({})))
        .await;
    let mut w0 = c
        .watch("/api/v1/namespaces/default/pods?watch=1&resourceVersion=0")
        .await;
    let ev = w0.next(T).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b"))
    );
    // A watch on one name.
    let mut one = c
        .watch("/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3Db")
        .await;
    assert_eq!(
        one.next(T).await.unwrap()["object"]["metadata"]["name"],
        "b"
    );
}

/// A watch from an old resourceVersion replays versions the watch cache no longer holds as
/// current: kept compressed, each against the version after it, in runs. The replay must be
/// byte for byte what watchers saw live.
async fn a_watch_replays_old_versions_as_they_were_sent_live(c: &Cluster) {
    // Over the size worth compressing, changed often enough for several runs.
    let annotations: serde_json::Map<String, serde_json::Value> = (0..30)
        .map(|i| (format!("example.com/note-{i}"), json!(format!("value {i}"))))
        .collect();
    let mut p = pod("replayed", json!({"app": "r"}));
    p["metadata"]["annotations"] = json!(annotations);
    let (status, created) = c.post("/api/v1/namespaces/default/pods", &p).await;
    assert_eq!(status, 201, "{created}");
    let from = rv_of(&created);
    let watch = format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={from}");
    let mut live = c.watch(&watch).await;
    let mut rvs = Vec::new();
    for i in 0..20 {
        let (status, v) = c
            .merge_patch(
                "/api/v1/namespaces/default/pods/replayed",
                &json!({"metadata": {"labels": {"step": i.to_string()}}}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        rvs.push(rv_of(&v));
    }
    let mut seen = Vec::new();
    for _ in 0..20 {
        seen.push(live.next(T).await.expect("each change, live"));
    }
    // Every version but the last is now the history's alone.
    let mut replayed = c.watch(&watch).await;
    for (i, sent) in seen.iter().enumerate() {
        let again = replayed.next(T).await.expect("each change, replayed");
        assert_eq!(rv_of(&again["object"]), rvs[i]);
        assert_eq!(again["object"]["metadata"]["labels"]["step"], i.to_string());
        assert_eq!(&again, sent, "version {i} replayed as sent live");
    }
}

async fn node_watch_sees_binding_as_added(c: &Cluster) {
    let mut kubelet = c
        .watch("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-7")
        .await;
    c.post("/api/v1/namespaces/default/pods", &pod("p", json!({})))
        .await;
    c.post("/api/v1/namespaces/default/pods", &pod("q", json!({})))
        .await;
    let bind = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node-7"}});
    assert_eq!(
        c.post("/api/v1/namespaces/default/pods/p/binding", &bind)
            .await
            .0,
        201
    );
    let ev = kubelet.next(T).await.unwrap();
    assert_eq!(
        (
            ev["type"].as_str(),
            ev["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("p"))
    );
    assert_eq!(ev["object"]["spec"]["nodeName"], "node-7");
    // Node-filtered lists (served through the node index) see exactly that pod.
    let (_, rv) = c.get("/api/v1/namespaces/default/pods/p").await;
    let (_, list) = c.get(&format!("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-7&resourceVersion={}&resourceVersionMatch=NotOlderThan", rv_of(&rv))).await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p"]);
    let (_, unbound) = c.get("/api/v1/pods?fieldSelector=spec.nodeName%3D").await;
    let names: Vec<&str> = unbound["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["q"]);
}

async fn bookmarks_follow_other_resources(c: &Cluster) {
    let (_, p) = c
        .post("/api/v1/namespaces/default/pods", &pod("idle", json!({})))
        .await;
    let rv = rv_of(&p);
    let mut w = c.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnowhere")).await;
    // Only other resources change.
    let mut last = 0;
    for i in 0..3 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("other-{i}")}});
        let (_, created) = c.post("/api/v1/namespaces/default/configmaps", &cm).await;
        last = rv_of(&created);
    }
    let bm = w
        .until(Duration::from_secs(15), |e| {
            e["type"] == "BOOKMARK" && rv_of(&e["object"]) >= last
        })
        .await;
    assert_eq!(bm["object"]["kind"], "Pod");
    assert_eq!(bm["object"]["apiVersion"], "v1");
    assert_eq!(
        bm["object"]["metadata"].as_object().unwrap().len(),
        1,
        "only resourceVersion: {bm}"
    );
    // Resuming from the bookmark gets no repeats and misses nothing.
    let bm_rv = rv_of(&bm["object"]);
    let mut resumed = c
        .watch(&format!("/api/v1/pods?watch=1&resourceVersion={bm_rv}"))
        .await;
    c.post("/api/v1/namespaces/default/pods", &pod("after", json!({})))
        .await;
    let ev = resumed.next(T).await.unwrap();
    assert_eq!(ev["object"]["metadata"]["name"], "after");
}

async fn streaming_list(c: &Cluster) {
    for n in ["s1", "s2", "s3"] {
        c.post("/api/v1/namespaces/default/pods", &pod(n, json!({})))
            .await;
    }
    let mut w = c.watch("/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").await;
    let mut names = Vec::new();
    loop {
        let ev = w
            .next(T)
            .await
            .expect("initial events then the end bookmark");
        if ev["type"] == "BOOKMARK" {
            assert_eq!(
                ev["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
                "true"
            );
            break;
        }
        assert_eq!(ev["type"], "ADDED");
        names.push(
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    names.sort();
    assert_eq!(names, ["s1", "s2", "s3"]);
    c.post("/api/v1/namespaces/default/pods", &pod("s4", json!({})))
        .await;
    assert_eq!(w.next(T).await.unwrap()["object"]["metadata"]["name"], "s4");
    let (code, _) = c.get("/api/v1/pods?watch=1&sendInitialEvents=true").await;
    assert_eq!(code, 422, "sendInitialEvents without resourceVersionMatch");
}

async fn expired_watch_is_an_in_stream_error(c: &Cluster) {
    let (_, first) = c
        .post("/api/v1/namespaces/default/pods", &pod("old", json!({})))
        .await;
    let old_rv = rv_of(&first);
    for i in 0..10 {
        c.merge_patch(
            "/api/v1/namespaces/default/pods/old",
            &json!({"metadata": {"labels": {"i": i.to_string()}}}),
        )
        .await;
    }
    // Once the cache has seen the last change, the old RV has left its short history.
    let (_, cur) = c.get("/api/v1/namespaces/default/pods/old").await;
    let last = rv_of(&cur);
    let (code, _) = c.get(&format!("/api/v1/namespaces/default/pods?resourceVersion={last}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(code, 200);
    let mut w = c
        .watch(&format!(
            "/api/v1/namespaces/default/pods?watch=1&resourceVersion={old_rv}"
        ))
        .await;
    assert_eq!(w.status, 200, "a too-old watch is HTTP 200");
    let ev = w.next(T).await.unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert!(
        ev["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too old resource version: {old_rv} (")),
        "{ev}"
    );
    assert!(
        w.next(Duration::from_secs(2)).await.is_none(),
        "the stream ends after the ERROR event"
    );
}

async fn watch_resumes_across_apiserver_restart(c: &Cluster) {
    let (_, p) = c
        .post("/api/v1/namespaces/default/pods", &pod("r", json!({})))
        .await;
    let seen = rv_of(&p);
    for i in 0..3 {
        c.merge_patch(
            "/api/v1/namespaces/default/pods/r",
            &json!({"metadata": {"labels": {"i": i.to_string()}}}),
        )
        .await;
    }
    // A fresh apiserver (empty cache) on the same storage.
    let (b, stop) = c.second_apiserver().await;
    let http = reqwest::Client::new();
    // Resuming from an RV the old apiserver handed out: the three changes, not 410.
    let resp = http
        .get(format!(
            "{b}/api/v1/namespaces/default/pods?watch=1&resourceVersion={seen}"
        ))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut labels = Vec::new();
    while labels.len() < 3 {
        use futures_util::StreamExt;
        let chunk = tokio::time::timeout(T, body.next())
            .await
            .expect("events after restart")
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let ev: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(ev["type"], "MODIFIED", "{ev}");
            labels.push(
                ev["object"]["metadata"]["labels"]["i"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    assert_eq!(labels, ["0", "1", "2"]);
    stop.cancel();
}

cases! {
    watch_from_rv_and_transitions, watch_from_rv_and_transitions_rkube, watch_from_rv_and_transitions_etcd;
    a_watch_replays_old_versions_as_they_were_sent_live, a_watch_replays_old_versions_as_they_were_sent_live_rkube, a_watch_replays_old_versions_as_they_were_sent_live_etcd;
    node_watch_sees_binding_as_added, node_watch_sees_binding_as_added_rkube, node_watch_sees_binding_as_added_etcd;
    bookmarks_follow_other_resources, bookmarks_follow_other_resources_rkube, bookmarks_follow_other_resources_etcd;
    streaming_list, streaming_list_rkube, streaming_list_etcd;
    watch_resumes_across_apiserver_restart, watch_resumes_across_apiserver_restart_rkube, watch_resumes_across_apiserver_restart_etcd;
}

/// A tiny history so that an old resourceVersion falls out of it.
fn short_history(cfg: &mut rkube_apiserver::Config) {
    cfg.cache.history_window = Duration::ZERO;
    cfg.cache.min_history = 2;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_watch_rkube() {
    let c = Cluster::start(Backend::Rkube, short_history).await.unwrap();
    expired_watch_is_an_in_stream_error(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_watch_etcd() {
    if let Some(c) = Cluster::start(Backend::Etcd, short_history).await {
        expired_watch_is_an_in_stream_error(&c).await;
    }
}

async fn events_can_be_watched(c: &Cluster) {
    let mut w = c
        .watch("/api/v1/namespaces/default/events?watch=1&fieldSelector=involvedObject.name%3Dweb")
        .await;
    assert_eq!(w.status, 200);
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.1"}, "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}, "reason": "Scheduled", "message": "m", "type": "Normal"});
    assert_eq!(
        c.post("/api/v1/namespaces/default/events", &ev).await.0,
        201
    );
    let got = w.next(T).await.expect("event watch delivers");
    assert_eq!(
        (got["type"].as_str(), got["object"]["reason"].as_str()),
        (Some("ADDED"), Some("Scheduled"))
    );
}

async fn guards_against_hostile_input(c: &Cluster) {
    // Namespaced collections cannot be deleted across all namespaces.
    let (code, _) = c.delete("/api/v1/pods", None).await;
    assert_eq!(code, 405);
    // Absurd numbers are refused or clamped, never a crash.
    let (code, _) = c
        .get("/api/v1/pods?resourceVersion=18446744073709551615")
        .await;
    assert_eq!(code, 400);
    let mut w = c
        .watch("/api/v1/pods?watch=1&timeoutSeconds=9223372036854775807")
        .await;
    assert_eq!(w.status, 200);
    assert!(w.next(Duration::from_millis(300)).await.is_none()); // nothing to say, still open
    let mut g = pod("", json!({}));
    g["metadata"]["generateName"] = json!("€".repeat(40));
    let (code, _) = c.post("/api/v1/namespaces/default/pods", &g).await;
    assert_eq!(code, 422, "an invalid generated name is a validation error");
    // The server is still fine.
    assert_eq!(c.get("/api/v1/namespaces/default/pods").await.0, 200);
    // sendInitialEvents=false with RV=0 skips the synthetic ADDED events.
    c.post(
        "/api/v1/namespaces/default/pods",
        &pod("existing", json!({})),
    )
    .await;
    // RV=0 starts from the cache as it is: wait until it has seen "existing".
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (_, list) = c
            .get("/api/v1/namespaces/default/pods?resourceVersion=0")
            .await;
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        if names.contains(&"existing") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cache never saw the pod"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // polling interval
    }
    let mut w = c.watch("/api/v1/namespaces/default/pods?watch=1&resourceVersion=0&sendInitialEvents=false&resourceVersionMatch=NotOlderThan").await;
    c.post("/api/v1/namespaces/default/pods", &pod("fresh", json!({})))
        .await;
    let ev = w.until(T, |_| true).await;
    assert_eq!(ev["object"]["metadata"]["name"], "fresh");
}

/// `/debug/watches` lists an open watch with its selector, the events and bookmarks sent and
/// the resourceVersion it reached; the entry goes with the stream.
async fn open_watches_are_listed(c: &Cluster) {
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "start"}});
    let (_, start) = c
        .post("/api/v1/namespaces/default/configmaps", &first)
        .await;
    let from = rv_of(&start);
    let mut w = c
        .watch(&format!("/api/v1/namespaces/default/pods?watch=true&labelSelector=app%3Dwl&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=4"))
        .await;
    let (_, p) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod("listed", json!({"app": "wl"})),
        )
        .await;
    let added = w.next(T).await.expect("the pod as ADDED");
    assert_eq!(added["type"], "ADDED");
    // A write elsewhere moves the resourceVersion a bookmark carries.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "moves-rv"}});
    c.post("/api/v1/namespaces/default/configmaps", &cm).await;
    let bm = w
        .until(Duration::from_secs(4), |e| e["type"] == "BOOKMARK")
        .await;
    let (code, list) = c.get("/debug/watches").await;
    assert_eq!(code, 200, "{list}");
    let items = list["items"].as_array().expect("items");
    let item = items
        .iter()
        .find(|i| i["labelSelector"] == "app=wl")
        .unwrap_or_else(|| panic!("the watch is listed: {list}"));
    assert_eq!(item["resource"], "pods");
    assert_eq!(item["namespace"], "default");
    assert_eq!(item["startResourceVersion"], from.to_string());
    assert!(item["events"].as_u64() >= Some(1), "{item}");
    assert!(item["bookmarks"].as_u64() >= Some(1), "{item}");
    assert!(item["bytes"].as_u64() > Some(0), "{item}");
    assert_eq!(
        item["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        rv_of(&bm["object"]).max(rv_of(&p))
    );
    assert!(
        w.next(Duration::from_secs(6)).await.is_none(),
        "the watch ends at its timeout"
    );
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let (_, list) = c.get("/debug/watches").await;
        let listed = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["labelSelector"] == "app=wl");
        if !listed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ended watch still listed: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A watch over WebSocket, as a browser opens one: the same chain and options, one event per
/// text message (bookmarks too); another site's page (a foreign `Origin`) is refused.
async fn watch_over_websocket(c: &Cluster) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let host = c.base.trim_start_matches("http://").to_string();
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ws-start"}});
    let (_, start) = c
        .post("/api/v1/namespaces/default/configmaps", &first)
        .await;
    let from = rv_of(&start);
    let url = format!(
        "ws://{host}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=5"
    );
    let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(url.as_str(), tcp)
        .await
        .expect("the upgrade is answered");
    assert_eq!(resp.status(), 101);
    let next = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ws-next"}});
    c.post("/api/v1/namespaces/default/configmaps", &next).await;
    // A write elsewhere moves the resourceVersion the bookmark before the deadline carries.
    let other = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ws-moves-rv"}});
    c.post("/api/v1/namespaces/default/secrets", &other).await;
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    while seen
        .iter()
        .all(|e: &serde_json::Value| e["type"] != "BOOKMARK")
    {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("messages in time")
            .expect("the stream is open")
            .unwrap();
        let Message::Text(text) = msg else {
            panic!("a text message: {msg:?}")
        };
        seen.push(serde_json::from_str(text.as_str()).expect("one event per message"));
    }
    assert_eq!(seen[0]["type"], "ADDED", "{seen:?}");
    assert_eq!(seen[0]["object"]["metadata"]["name"], "ws-next");
    // The stream ends at its timeout with a close.
    let end = tokio::time::timeout(T, async {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_close() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(end, Ok(true), "the watch closes at timeoutSeconds");

    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 403),
        other => panic!(
            "a cross-site upgrade is refused: {:?}",
            other.map(|(_, r)| r)
        ),
    }
}

cases! {
    watch_over_websocket, watch_over_websocket_rkube, watch_over_websocket_etcd;
    open_watches_are_listed, open_watches_are_listed_rkube, open_watches_are_listed_etcd;
    events_can_be_watched, events_can_be_watched_rkube, events_can_be_watched_etcd;
    guards_against_hostile_input, guards_against_hostile_input_rkube, guards_against_hostile_input_etcd;
}

async fn bookmark_before_deadline_then_silent_end(c: &Cluster) {
    // A long bookmark interval: only the "2 s before the deadline" bookmark can arrive.
    let (_, p) = c
        .post("/api/v1/namespaces/default/pods", &pod("dl", json!({})))
        .await;
    let mut w = c.watch(&format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds=4", rv_of(&p))).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere"}});
    let (_, other) = c.post("/api/v1/namespaces/default/configmaps", &cm).await;
    let bm = w
        .until(Duration::from_secs(4), |e| e["type"] == "BOOKMARK")
        .await;
    assert!(rv_of(&bm["object"]) >= rv_of(&other));
    let started = tokio::time::Instant::now();
    assert!(
        w.next(Duration::from_secs(6)).await.is_none(),
        "the stream ends at its deadline without an error event"
    );
    assert!(started.elapsed() < Duration::from_secs(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmark_before_deadline_rkube() {
    let c = Cluster::start(Backend::Rkube, |cfg| {
        cfg.cache.bookmark_interval = Duration::from_secs(600)
    })
    .await
    .unwrap();
    bookmark_before_deadline_then_silent_end(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmark_before_deadline_etcd() {
    if let Some(c) = Cluster::start(Backend::Etcd, |cfg| {
        cfg.cache.bookmark_interval = Duration::from_secs(600)
    })
    .await
    {
        bookmark_before_deadline_then_silent_end(&c).await;
    }
}

/// The JSON gateway transport (`--etcd-transport json`) still serves the list-watch paths on
/// both backends (gRPC runs every other case here; `auto` picks the gateway for rkube-store).
async fn over_the_json_gateway(backend: Backend) {
    // Each case on a cluster of its own: they assert on the pods they see.
    for case in 0..3 {
        let Some(c) = Cluster::start(backend, |cfg| {
            cfg.etcd_transport = rkube_apiserver::Transport::Json
        })
        .await
        else {
            return;
        };
        match case {
            0 => streaming_list(&c).await,
            1 => watch_from_rv_and_transitions(&c).await,
            _ => bookmarks_follow_other_resources(&c).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_gateway_transport_rkube() {
    over_the_json_gateway(Backend::Rkube).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_gateway_transport_etcd() {
    over_the_json_gateway(Backend::Etcd).await;
}
