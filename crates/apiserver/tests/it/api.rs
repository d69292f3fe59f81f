//! CRUD, metadata, strategies, optimistic concurrency, lists and deletion.

use std::time::Duration;

use serde_json::{json, Value};

use crate::cases;
use crate::harness::*;

async fn create_get_and_metadata(c: &Cluster) {
    let (code, p) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod("web", json!({"app": "web"})),
        )
        .await;
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["metadata"]["generation"], 1);
    assert_eq!(p["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(p["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert!(rv_of(&p) > 0);
    assert_eq!(p["spec"]["restartPolicy"], "Always");
    assert_eq!(p["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(
        p["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(p["status"]["phase"], "Pending");
    let (code, got) = c.get("/api/v1/namespaces/default/pods/web").await;
    assert_eq!(code, 200);
    assert_eq!(got, p, "GET returns what create returned");
    // The RV is never stored in the value.
    let raw = rkube_etcd_api::EtcdClient::new(std::slice::from_ref(&c.storage_url)).unwrap();
    let kv = raw
        .range(&rkube_etcd_api::RangeRequest {
            key: b"/registry/pods/default/web".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let stored: Value = serde_json::from_slice(&kv.kvs[0].value).unwrap();
    assert!(stored["metadata"].get("resourceVersion").is_none());
    assert_eq!(kv.kvs[0].mod_revision as u64, rv_of(&p));

    let (code, e) = c
        .post("/api/v1/namespaces/default/pods", &pod("web", json!({})))
        .await;
    assert_eq!((code, e["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(e["message"], "pods \"web\" already exists");
    assert_eq!(e["details"], json!({"name": "web", "kind": "pods"}));

    let mut g = pod("", json!({}));
    g["metadata"]["generateName"] = json!("web-");
    let (code, gen) = c.post("/api/v1/namespaces/default/pods", &g).await;
    assert_eq!(code, 201);
    let name = gen["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");
    assert!(name[4..]
        .bytes()
        .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));

    let (code, e) = c.get("/api/v1/namespaces/default/pods/missing").await;
    assert_eq!(
        (code, e["reason"].as_str(), e["message"].as_str()),
        (404, Some("NotFound"), Some("pods \"missing\" not found"))
    );
    let (code, _) = c.get("/api/v1/namespaces/default/widgets").await;
    assert_eq!(code, 404);
}

async fn bad_input_is_refused(c: &Cluster) {
    let mut bad = pod("Bad_Name", json!({}));
    let (code, e) = c.post("/api/v1/namespaces/default/pods", &bad).await;
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")), "{e}");
    assert_eq!(e["details"]["causes"][0]["field"], "metadata.name");
    bad["metadata"]["name"] = json!("ok");
    bad["spec"]["containers"] = json!([]);
    let (code, e) = c.post("/api/v1/namespaces/default/pods", &bad).await;
    assert_eq!(code, 422);
    assert_eq!(
        e["message"],
        "Pod \"ok\" is invalid: spec.containers: Required value"
    );
    let (code, e) = c
        .req("POST", "/api/v1/namespaces/default/pods", None, "")
        .await;
    assert_eq!(code, 400, "{e}");
    let resp = c
        .http
        .post(format!("{}/api/v1/namespaces/default/pods", c.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let mut other_ns = pod("x", json!({}));
    other_ns["metadata"]["namespace"] = json!("kube-system");
    let (code, e) = c.post("/api/v1/namespaces/default/pods", &other_ns).await;
    assert_eq!(code, 400);
    assert_eq!(
        e["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let (code, _) = c.post("/api/v1/namespaces/default/pods", &cm).await;
    assert_eq!(code, 400, "a ConfigMap posted to pods");
    let mut with_rv = pod("x", json!({}));
    with_rv["metadata"]["resourceVersion"] = json!("5");
    let (code, e) = c.post("/api/v1/namespaces/default/pods", &with_rv).await;
    assert_eq!(
        (code, e["message"].as_str()),
        (
            500,
            Some("resourceVersion should not be set on objects to be created")
        )
    );
    let (code, e) = c.get("/api/v1/pods?fieldSelector=spec.nope%3Dx").await;
    assert_eq!(
        (code, e["message"].as_str()),
        (400, Some("field label not supported: spec.nope"))
    );
    let (code, e) = c.get("/api/v1/pods?resourceVersionMatch=Exact").await;
    assert_eq!(code, 422, "{e}");
    let (code, _) = c.get("/api/v1/pods?labelSelector=a%20in%20(").await;
    assert_eq!(code, 400);
    // Kubernetes protobuf, for clients that prefer it (client-go's typed clients): the list
    // and an error's Status decode to what JSON would say; a type served in neither is 406.
    let get_as = |path: &str, accept: &str| {
        c.http
            .get(format!("{}{path}", c.base))
            .header("accept", accept.to_string())
            .send()
    };
    let pb = rkube_api::proto::CONTENT_TYPE;
    for accept in [pb.to_string(), format!("{pb}, application/json")] {
        let r = get_as("/api/v1/namespaces/default/pods", &accept)
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], pb);
        let list = rkube_api::proto::decode(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(
            (list["apiVersion"].as_str(), list["kind"].as_str()),
            (Some("v1"), Some("PodList"))
        );
        assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    }
    let r = get_as("/api/v1/namespaces/default/pods/nope", pb)
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], pb);
    let status = rkube_api::proto::decode(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(
        (
            status["kind"].as_str(),
            status["reason"].as_str(),
            status["code"].as_i64()
        ),
        (Some("Status"), Some("NotFound"), Some(404))
    );
    let r = get_as("/api/v1/namespaces/default/pods", "application/yaml")
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    // Nothing above was stored.
    let (_, list) = c.get("/api/v1/namespaces/default/pods").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 0);
}

async fn optimistic_concurrency(c: &Cluster) {
    let (_, p) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod("cas", json!({"v": "1"})),
        )
        .await;
    let stale = rv_of(&p);
    let mut upd = p.clone();
    upd["metadata"]["labels"]["v"] = json!("2");
    let (code, p2) = c.put("/api/v1/namespaces/default/pods/cas", &upd).await;
    assert_eq!(code, 200, "{p2}");
    assert!(rv_of(&p2) > stale);
    let (code, e) = c.put("/api/v1/namespaces/default/pods/cas", &upd).await;
    assert_eq!(code, 409);
    assert_eq!(
        e,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on pods \"cas\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"cas","kind":"pods"},"code":409})
    );
    // An empty RV is an unconditional update for pods.
    let mut unconditional = p2.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    unconditional["metadata"]["labels"]["v"] = json!("3");
    let (code, p3) = c
        .put("/api/v1/namespaces/default/pods/cas", &unconditional)
        .await;
    assert_eq!(code, 200, "{p3}");
    // A no-op update writes nothing.
    let (code, p4) = c.put("/api/v1/namespaces/default/pods/cas", &p3).await;
    assert_eq!(code, 200);
    assert_eq!(rv_of(&p4), rv_of(&p3), "no-op update must not bump the RV");
    // The main resource ignores status; /status ignores spec.
    let mut s = p3.clone();
    s["status"]["phase"] = json!("Running");
    let (_, after) = c.put("/api/v1/namespaces/default/pods/cas", &s).await;
    assert_eq!(after["status"]["phase"], "Pending");
    s["metadata"]["resourceVersion"] = after["metadata"]["resourceVersion"].clone();
    s["spec"]["containers"][0]["image"] = json!("nginx:9");
    let (code, st) = c
        .put("/api/v1/namespaces/default/pods/cas/status", &s)
        .await;
    assert_eq!(code, 200, "{st}");
    assert_eq!(st["status"]["phase"], "Running");
    assert_eq!(st["spec"]["containers"][0]["image"], "nginx:1.14.2");
    // UID precondition in the body.
    let mut wrong_uid = st.clone();
    wrong_uid["metadata"]["uid"] = json!("00000000-0000-4000-8000-000000000000");
    let (code, _) = c
        .put("/api/v1/namespaces/default/pods/cas", &wrong_uid)
        .await;
    assert_eq!(code, 409);
}

async fn deployments_and_scale(c: &Cluster) {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx-deployment"},
        "spec": {"selector": {"matchLabels": {"app": "nginx"}}, "template": {"metadata": {"labels": {"app": "nginx"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}]}}}});
    let (code, d) = c
        .post("/apis/apps/v1/namespaces/default/deployments", &d)
        .await;
    assert_eq!(code, 201, "{d}");
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        30
    );
    let (code, d2) = c.merge_patch("/apis/apps/v1/namespaces/default/deployments/nginx-deployment", &json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.16.1"}]}}}})).await;
    assert_eq!(code, 200, "{d2}");
    assert_eq!(
        d2["metadata"]["generation"], 2,
        "a spec change bumps generation"
    );
    let (code, d3) = c
        .merge_patch(
            "/apis/apps/v1/namespaces/default/deployments/nginx-deployment/status",
            &json!({"status": {"replicas": 1}}),
        )
        .await;
    assert_eq!(code, 200, "{d3}");
    assert_eq!(d3["metadata"]["generation"], 2, "a status change does not");
    let (code, scale) = c
        .get("/apis/apps/v1/namespaces/default/deployments/nginx-deployment/scale")
        .await;
    assert_eq!(code, 200);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=nginx");
    let (code, scaled) = c
        .merge_patch(
            "/apis/apps/v1/namespaces/default/deployments/nginx-deployment/scale",
            &json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(
        (code, scaled["spec"]["replicas"].as_i64()),
        (200, Some(5)),
        "{scaled}"
    );
    let (_, d4) = c
        .get("/apis/apps/v1/namespaces/default/deployments/nginx-deployment")
        .await;
    assert_eq!(d4["spec"]["replicas"], 5);
    let bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let (code, e) = c
        .post("/apis/apps/v1/namespaces/default/deployments", &bad)
        .await;
    assert_eq!(code, 422);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("`selector` does not match template `labels`"),
        "{e}"
    );
    // dryRun=All changes nothing.
    let dry = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry"}});
    let (code, _) = c
        .post("/api/v1/namespaces/default/configmaps?dryRun=All", &dry)
        .await;
    assert_eq!(code, 201);
    let (code, _) = c.get("/api/v1/namespaces/default/configmaps/dry").await;
    assert_eq!(code, 404);
}

async fn pagination_is_consistent(c: &Cluster) {
    for i in 0..25 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:02}")}});
        assert_eq!(
            c.post("/api/v1/namespaces/default/configmaps", &cm).await.0,
            201
        );
    }
    let (code, page1) = c
        .get("/api/v1/namespaces/default/configmaps?limit=10")
        .await;
    assert_eq!(code, 200);
    assert_eq!(page1["items"].as_array().unwrap().len(), 10);
    assert_eq!(page1["metadata"]["remainingItemCount"], 15);
    let list_rv = page1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Writes between pages do not show up in later pages.
    let late = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-99"}});
    let (_, late) = c.post("/api/v1/namespaces/default/configmaps", &late).await;
    let mut names: Vec<String> = page1["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut token = page1["metadata"]["continue"].as_str().unwrap().to_string();
    loop {
        let (code, page) = c
            .get(&format!(
                "/api/v1/namespaces/default/configmaps?limit=10&continue={token}"
            ))
            .await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(
            page["metadata"]["resourceVersion"].as_str().unwrap(),
            list_rv,
            "every page has the first page's RV"
        );
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => {
                assert!(page["metadata"].get("remainingItemCount").is_none());
                break;
            }
        }
    }
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, want);
    let (code, e) = c
        .get("/api/v1/namespaces/default/configmaps?limit=1&continue=!!!")
        .await;
    assert_eq!(code, 400, "{e}");
    // NotOlderThan the last write sees it.
    let (_, all) = c.get(&format!("/api/v1/namespaces/default/configmaps?resourceVersion={}&resourceVersionMatch=NotOlderThan", rv_of(&late))).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 26);
    // RV=0 ignores limit (served from the cache as it is; it has caught up by now).
    let (_, any) = c
        .get("/api/v1/namespaces/default/configmaps?limit=5&resourceVersion=0")
        .await;
    assert_eq!(any["items"].as_array().unwrap().len(), 26);
    // Label selector lists.
    c.merge_patch(
        "/api/v1/namespaces/default/configmaps/cm-03",
        &json!({"metadata": {"labels": {"pick": "me"}}}),
    )
    .await;
    let (_, sel) = c
        .get("/api/v1/namespaces/default/configmaps?labelSelector=pick%3Dme")
        .await;
    assert_eq!(sel["items"].as_array().unwrap().len(), 1);
    let (_, notsel) = c.get("/api/v1/configmaps?labelSelector=!pick").await;
    assert_eq!(notsel["items"].as_array().unwrap().len(), 25);
    // deletecollection with a selector.
    let (code, _) = c
        .delete(
            "/api/v1/namespaces/default/configmaps?labelSelector=pick%3Dme",
            None,
        )
        .await;
    assert_eq!(code, 200);
    let (code, _) = c.get("/api/v1/namespaces/default/configmaps/cm-03").await;
    assert_eq!(code, 404);
}

async fn graceful_deletion_and_finalizers(c: &Cluster) {
    c.post("/api/v1/namespaces/default/pods", &pod("g", json!({})))
        .await;
    let bind = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g"}, "target": {"kind": "Node", "name": "node-1"}});
    let (code, s) = c
        .post("/api/v1/namespaces/default/pods/g/binding", &bind)
        .await;
    assert_eq!(code, 201, "{s}");
    assert_eq!(s["status"], "Success");
    let (code, e) = c
        .post("/api/v1/namespaces/default/pods/g/binding", &bind)
        .await;
    assert_eq!(code, 409);
    assert_eq!(e["message"], "Operation cannot be fulfilled on pods/binding \"g\": pod g is already assigned to node \"node-1\"");
    let (_, bound) = c.get("/api/v1/namespaces/default/pods/g").await;
    assert_eq!(bound["spec"]["nodeName"], "node-1");
    assert_eq!(bound["status"]["conditions"][0]["type"], "PodScheduled");
    // A scheduled pod is deleted gracefully: it stays, with a deletion timestamp.
    let (code, d) = c.delete("/api/v1/namespaces/default/pods/g", None).await;
    assert_eq!(code, 200);
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(c.get("/api/v1/namespaces/default/pods/g").await.0, 200);
    // The kubelet's final delete: grace 0 with a UID precondition.
    let uid = d["metadata"]["uid"].as_str().unwrap();
    let (code, e) = c.delete("/api/v1/namespaces/default/pods/g", Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": "wrong"}}))).await;
    assert_eq!(code, 409, "{e}");
    let (code, _) = c
        .delete(
            "/api/v1/namespaces/default/pods/g",
            Some(&json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(c.get("/api/v1/namespaces/default/pods/g").await.0, 404);
    // Finalizers block removal until the update that clears the last one.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fin", "finalizers": ["example.com/hold"]}});
    c.post("/api/v1/namespaces/default/configmaps", &cm).await;
    let (code, held) = c
        .delete("/api/v1/namespaces/default/configmaps/fin", None)
        .await;
    assert_eq!(code, 200);
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    assert_eq!(
        c.get("/api/v1/namespaces/default/configmaps/fin").await.0,
        200
    );
    let (code, _) = c
        .merge_patch(
            "/api/v1/namespaces/default/configmaps/fin",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        c.get("/api/v1/namespaces/default/configmaps/fin").await.0,
        404
    );
    // Foreground deletion adds the foregroundDeletion finalizer; orphan adds orphan.
    let cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fg"}});
    c.post("/api/v1/namespaces/default/configmaps", &cm2).await;
    let (_, fg) = c
        .delete(
            "/api/v1/namespaces/default/configmaps/fg?propagationPolicy=Foreground",
            None,
        )
        .await;
    assert_eq!(
        fg["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{fg}"
    );
    // A plain delete of something without finalizers returns a Status.
    let cm3 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}});
    let (_, created) = c.post("/api/v1/namespaces/default/configmaps", &cm3).await;
    let (code, st) = c
        .delete("/api/v1/namespaces/default/configmaps/plain", None)
        .await;
    assert_eq!(code, 200);
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["details"]["uid"], created["metadata"]["uid"]);
}

async fn expire_events(c: &Cluster) {
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"}, "reason": "Test", "message": "m", "type": "Normal"});
    let (code, e) = c.post("/api/v1/namespaces/default/events", &ev).await;
    assert_eq!(code, 201, "{e}");
    let (_, listed) = c
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dx")
        .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if c.get("/api/v1/namespaces/default/events/e1").await.0 == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "event did not expire through its lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await; // polling interval
    }
}

async fn two_apiservers_share_storage(c: &Cluster) {
    // A second apiserver on the same storage serves consistent reads of the first one's writes.
    let (b, stop) = c.second_apiserver().await;
    let http = reqwest::Client::new();
    for i in 0..5 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("ha-{i}")}});
        let (code, created) = c.post("/api/v1/namespaces/default/configmaps", &cm).await;
        assert_eq!(code, 201);
        let list: Value = http
            .get(format!("{b}/api/v1/namespaces/default/configmaps"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|it| it["metadata"]["name"] == created["metadata"]["name"]),
            "B's consistent list misses A's write"
        );
        let got: Value = http
            .get(format!("{b}/api/v1/namespaces/default/configmaps/ha-{i}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            got["metadata"]["resourceVersion"],
            created["metadata"]["resourceVersion"]
        );
    }
    stop.cancel();
}

async fn too_large_resource_version(c: &Cluster) {
    let resp = c
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/pods?resourceVersion=999999",
            c.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["reason"], "Timeout");
    assert_eq!(
        e["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("Timeout: Too large resource version: 999999, current: "),
        "{e}"
    );
}

cases! {
    create_get_and_metadata, create_get_and_metadata_rkube, create_get_and_metadata_etcd;
    bad_input_is_refused, bad_input_is_refused_rkube, bad_input_is_refused_etcd;
    optimistic_concurrency, optimistic_concurrency_rkube, optimistic_concurrency_etcd;
    deployments_and_scale, deployments_and_scale_rkube, deployments_and_scale_etcd;
    pagination_is_consistent, pagination_is_consistent_rkube, pagination_is_consistent_etcd;
    graceful_deletion_and_finalizers, graceful_deletion_and_finalizers_rkube, graceful_deletion_and_finalizers_etcd;
    two_apiservers_share_storage, two_apiservers_share_storage_rkube, two_apiservers_share_storage_etcd;
    too_large_resource_version, too_large_resource_version_rkube, too_large_resource_version_etcd;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_rkube() {
    let c = Cluster::start(Backend::Rkube, |cfg| cfg.event_ttl = Duration::from_secs(1))
        .await
        .unwrap();
    expire_events(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_expire_etcd() {
    if let Some(c) =
        Cluster::start(Backend::Etcd, |cfg| cfg.event_ttl = Duration::from_secs(1)).await
    {
        expire_events(&c).await;
    }
}

async fn namespace_lifecycle(c: &Cluster) {
    let (code, e) = c
        .post("/api/v1/namespaces/nope/pods", &pod("p", json!({})))
        .await;
    assert_eq!(
        (code, e["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    let (code, created) = c.post("/api/v1/namespaces", &ns).await;
    assert_eq!(code, 201);
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(created["status"]["phase"], "Active");
    assert_eq!(
        c.post("/api/v1/namespaces/team-a/pods", &pod("p", json!({})))
            .await
            .0,
        201
    );
    // Deleting it leaves it Terminating until its finalizers are cleared.
    let (code, term) = c.delete("/api/v1/namespaces/team-a", None).await;
    assert_eq!(code, 200, "{term}");
    let (_, got) = c.get("/api/v1/namespaces/team-a").await;
    assert_eq!(got["status"]["phase"], "Terminating");
    let (code, e) = c
        .post("/api/v1/namespaces/team-a/pods", &pod("q", json!({})))
        .await;
    assert_eq!(
        (code, e["reason"].as_str()),
        (403, Some("Forbidden")),
        "{e}"
    );
    // An ordinary update cannot clear them: only `finalize` does.
    let mut cleared = got.clone();
    cleared["spec"] = json!({"finalizers": []});
    let (code, kept) = c.put("/api/v1/namespaces/team-a", &cleared).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["finalizers"], json!(["kubernetes"]));
    let mut nulled = kept.clone();
    nulled["spec"] = Value::Null;
    let (code, kept) = c.put("/api/v1/namespaces/team-a", &nulled).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(c.get("/api/v1/namespaces/team-a").await.0, 200);
    // `spec: {}` (client-go's empty list, omitted) finalizes too: nothing adds the default
    // finalizer back on an update.
    let mut fin = kept.clone();
    fin["spec"] = json!({});
    let (code, _) = c.put("/api/v1/namespaces/team-a/finalize", &fin).await;
    assert_eq!(code, 200);
    assert_eq!(c.get("/api/v1/namespaces/team-a").await.0, 404);
    // The namespaces a cluster cannot do without are never deleted.
    let (code, e) = c.delete("/api/v1/namespaces/kube-system", None).await;
    assert_eq!(
        (code, e["reason"].as_str()),
        (403, Some("Forbidden")),
        "{e}"
    );
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("this namespace may not be deleted"));
    // The four namespaces every cluster starts with.
    let (_, list) = c.get("/api/v1/namespaces").await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    for want in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(&want), "{names:?}");
    }
}

cases! {
    namespace_lifecycle, namespace_lifecycle_rkube, namespace_lifecycle_etcd;
}

/// Changes the object at `key` in storage, past the apiserver; returns the new revision.
async fn write_straight(
    raw: &rkube_etcd_api::EtcdClient,
    key: &[u8],
    change: impl FnOnce(&mut Value),
) -> i64 {
    let kv = raw
        .range(&rkube_etcd_api::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut stored: Value = serde_json::from_slice(&kv.kvs[0].value).unwrap();
    change(&mut stored);
    let put = raw
        .put(&rkube_etcd_api::PutRequest {
            key: key.to_vec(),
            value: serde_json::to_vec(&stored).unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    put.header.unwrap().revision
}

/// Updates start from the watch cache's copy of the object. Writes made straight to storage
/// reach the cache a moment later: a PATCH right after one must still see it (no lost update)
/// and accept a resourceVersion precondition that storage, not yet the cache, satisfies.
async fn updates_from_a_stale_cache_copy(c: &Cluster) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "racy"},
                    "data": {"direct": "0"}});
    assert_eq!(
        c.post("/api/v1/namespaces/default/configmaps", &cm).await.0,
        201
    );
    let raw = rkube_etcd_api::EtcdClient::new(std::slice::from_ref(&c.storage_url)).unwrap();
    let key = b"/registry/configmaps/default/racy".to_vec();
    // Before each write, a burst of 100 other objects in one transaction: the cache takes
    // them in first, so the PATCH that follows at once finds its copy behind storage.
    let noise = |i: usize| rkube_etcd_api::TxnRequest {
        success: (0..100)
            .map(|j| {
                rkube_etcd_api::RequestOp::put(rkube_etcd_api::PutRequest {
                    key: format!("/registry/configmaps/default/noise-{j}").into_bytes(),
                    value: serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("noise-{j}"), "namespace": "default"},
                        "data": {"round": i.to_string()}}))
                    .unwrap(),
                    ..Default::default()
                })
            })
            .collect(),
        ..Default::default()
    };
    for i in 1..=30 {
        raw.txn(&noise(i)).await.unwrap();
        let rv = write_straight(&raw, &key, |o| o["data"]["direct"] = json!(i.to_string()))
            .await
            .to_string();
        let (code, got) = c
            .merge_patch(
                "/api/v1/namespaces/default/configmaps/racy",
                &json!({"metadata": {"resourceVersion": rv}, "data": {"patched": i.to_string()}}),
            )
            .await;
        assert_eq!(code, 200, "round {i}: {got}");
        assert_eq!(got["data"]["direct"], i.to_string(), "round {i}: {got}");
        assert_eq!(got["data"]["patched"], i.to_string());
        assert!(rv_of(&got) > rv.parse::<u64>().unwrap());
        // A change straight to storage, then a PATCH undoing it: against the cache's older
        // copy the PATCH looks like a no-op, but storage must end up as the PATCH says.
        raw.txn(&noise(i)).await.unwrap();
        write_straight(&raw, &key, |o| o["data"]["flip"] = json!("b")).await;
        let (code, got) = c
            .merge_patch(
                "/api/v1/namespaces/default/configmaps/racy",
                &json!({"data": {"flip": "a"}}),
            )
            .await;
        assert_eq!(
            (code, got["data"]["flip"].as_str()),
            (200, Some("a")),
            "{got}"
        );
        let (_, now) = c.get("/api/v1/namespaces/default/configmaps/racy").await;
        assert_eq!(
            now["data"]["flip"], "a",
            "round {i}: storage kept the undone change"
        );
    }
    // A precondition storage does not satisfy is still refused.
    let (code, e) = c
        .merge_patch(
            "/api/v1/namespaces/default/configmaps/racy",
            &json!({"metadata": {"resourceVersion": "1"}, "data": {"late": "x"}}),
        )
        .await;
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")), "{e}");
}

cases! {
    updates_from_a_stale_cache_copy, updates_from_a_stale_cache_copy_rkube, updates_from_a_stale_cache_copy_etcd;
}

async fn compaction_and_expired_continue(c: &Cluster) {
    for i in 0..5 {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
        c.post("/api/v1/namespaces/default/configmaps", &cm).await;
    }
    let (_, page) = c.get("/api/v1/namespaces/default/configmaps?limit=2").await;
    let token = page["metadata"]["continue"].as_str().unwrap().to_string();
    // The compactor's rounds: the first only records the revision, the next compacts to it.
    let client = rkube_etcd_api::EtcdClient::new(std::slice::from_ref(&c.storage_url)).unwrap();
    let (v, rev) = rkube_apiserver::compactor::compact_once(&client, 0, 0)
        .await
        .unwrap();
    c.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}}),
    )
    .await;
    let (v2, _) = rkube_apiserver::compactor::compact_once(&client, v, rev)
        .await
        .unwrap();
    assert_eq!(v2, v + 1);
    let old = client
        .range(&rkube_etcd_api::RangeRequest {
            key: b"/registry/".to_vec(),
            revision: 2,
            ..Default::default()
        })
        .await;
    assert!(
        old.unwrap_err().is_compacted(),
        "storage was compacted to the recorded revision"
    );
    // A continue token from before the compaction: 410 with a token to finish inconsistently.
    let (code, e) = c
        .get(&format!(
            "/api/v1/namespaces/default/configmaps?limit=2&continue={token}"
        ))
        .await;
    assert_eq!((code, e["reason"].as_str()), (410, Some("Expired")), "{e}");
    let fresh = e["metadata"]["continue"]
        .as_str()
        .expect("a fresh continue token");
    let (code, rest) = c
        .get(&format!(
            "/api/v1/namespaces/default/configmaps?limit=10&continue={fresh}"
        ))
        .await;
    assert_eq!(code, 200, "{rest}");
    let names: Vec<&str> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c2", "c3", "c4", "later"]);
    // Bodies over 3 MiB are refused.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x".repeat(3 * 1024 * 1024 + 1)}});
    let (code, e) = c.post("/api/v1/namespaces/default/configmaps", &big).await;
    assert_eq!(
        (code, e["reason"].as_str()),
        (413, Some("RequestEntityTooLarge"))
    );
}

cases! {
    compaction_and_expired_continue, compaction_and_expired_continue_rkube, compaction_and_expired_continue_etcd;
}

fn dead_endpoint_first(cfg: &mut rkube_apiserver::Config) {
    // Nothing listens on a port we just released: connection refused, then failover.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    cfg.etcd_servers
        .insert(0, format!("http://127.0.0.1:{port}"));
}

async fn failover_and_metrics(c: &Cluster) {
    let (code, _) = c
        .post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fo"}}),
        )
        .await;
    assert_eq!(code, 201, "writes fail over past the dead endpoint");
    assert_eq!(
        c.get("/api/v1/namespaces/default/configmaps/fo").await.0,
        200
    );
    let text = c
        .http
        .get(format!("{}/metrics", c.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "apiserver_request_total{verb=\"create\",resource=\"configmaps\",code=\"201\"}",
        "etcd_request_duration_seconds_count{operation=\"txn\"}",
        "apiserver_watch_cache_objects{resource=\"namespaces\"}",
        "apiserver_longrunning_requests",
    ] {
        assert!(text.contains(want), "metrics lack {want}:\n{text}");
    }
    for probe in ["/healthz", "/livez", "/readyz", "/version"] {
        assert_eq!(
            c.http
                .get(format!("{}{probe}", c.base))
                .send()
                .await
                .unwrap()
                .status(),
            200,
            "{probe}"
        );
    }
    let v: Value = c
        .http
        .get(format!("{}/version", c.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("33"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_metrics_rkube() {
    let c = Cluster::start(Backend::Rkube, dead_endpoint_first)
        .await
        .unwrap();
    failover_and_metrics(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_metrics_etcd() {
    if let Some(c) = Cluster::start(Backend::Etcd, dead_endpoint_first).await {
        failover_and_metrics(&c).await;
    }
}

async fn tables_for_kubectl(c: &Cluster) {
    c.post("/api/v1/namespaces/default/pods", &pod("t1", json!({})))
        .await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let t: Value = c
        .http
        .get(format!("{}/api/v1/namespaces/default/pods", c.base))
        .header("accept", accept)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t["kind"], "Table");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"] == 0)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "t1");
    assert_eq!(t["rows"][0]["cells"][1], "0/1");
    assert_eq!(t["rows"][0]["cells"][2], "Pending");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let one: Value = c
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/pods/t1?includeObject=Object",
            c.base
        ))
        .header("accept", accept)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["rows"][0]["object"]["kind"], "Pod");
    let ns: Value = c
        .http
        .get(format!("{}/api/v1/namespaces", c.base))
        .header("accept", accept)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ns["rows"][0]["cells"][1], "Active");
    // Discovery lists the resource with its short name.
    let (_, core) = c.get("/api/v1").await;
    assert!(core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "pods" && r["shortNames"] == json!(["po"])));
    let (_, groups) = c.get("/apis").await;
    assert!(groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "apps"));
}

cases! {
    tables_for_kubectl, tables_for_kubectl_rkube, tables_for_kubectl_etcd;
}

async fn field_validation(c: &Cluster) {
    let bogus = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fv"}, "data": {"k": "v"}, "dta": {"x": "y"}});
    let (code, e) = c
        .post(
            "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
            &bogus,
        )
        .await;
    assert_eq!(code, 400);
    assert_eq!(e["message"], "strict decoding error: unknown field \"dta\"");
    let resp = c
        .http
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps?fieldValidation=Warn",
            c.base
        ))
        .json(&bogus)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(
        resp.headers().get("warning").and_then(|w| w.to_str().ok()),
        Some("299 - \"unknown field \\\"dta\\\"\"")
    );
    let created: Value = resp.json().await.unwrap();
    assert!(created.get("dta").is_none(), "unknown fields are dropped");
    // Duplicate keys: refused under Strict, a warning under Warn (the last one wins).
    let dup = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},"data":{"k":"1","k":"2"}}"#;
    let post = |mode: &'static str| {
        c.http
            .post(format!(
                "{}/api/v1/namespaces/default/configmaps?fieldValidation={mode}",
                c.base
            ))
            .header("content-type", "application/json")
            .body(dup)
            .send()
    };
    let r = post("Strict").await.unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["message"],
        "strict decoding error: duplicate field \"data.k\""
    );
    let r = post("Warn").await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        r.headers().get("warning").and_then(|w| w.to_str().ok()),
        Some("299 - \"duplicate field \\\"data.k\\\"\"")
    );
    let created: Value = r.json().await.unwrap();
    assert_eq!(created["data"]["k"], "2");
    let (code, _) = c
        .req(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/fv?fieldValidation=Strict",
            Some(&json!({"nope": 1})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(code, 400);
    // kubectl finds the fieldValidation parameter in the OpenAPI v3 document.
    let (_, index) = c.get("/openapi/v3").await;
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, doc) = c.get(&url).await;
    assert_eq!(code, 200);
    let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
    assert!(patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "fieldValidation"));
}

cases! {
    field_validation, field_validation_rkube, field_validation_etcd;
}

async fn strategic_merge_patch(c: &Cluster) {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "smp"},
        "spec": {"selector": {"matchLabels": {"app": "smp"}}, "template": {"metadata": {"labels": {"app": "smp"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}, {"name": "side", "image": "busybox"}]}}}});
    assert_eq!(
        c.post("/apis/apps/v1/namespaces/default/deployments", &d)
            .await
            .0,
        201
    );
    // What `kubectl set image deploy/smp nginx=nginx:1.16.1` sends.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.16.1"}]}}}});
    let (code, got) = c
        .req(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/smp",
            Some(&patch),
            "application/strategic-merge-patch+json",
        )
        .await;
    assert_eq!(code, 200, "{got}");
    let cs = got["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(
        (cs.len(), cs[0]["image"].as_str(), cs[1]["image"].as_str()),
        (2, Some("nginx:1.16.1"), Some("busybox"))
    );
    assert_eq!(cs[0]["ports"][0]["containerPort"], 80);
    assert_eq!(got["metadata"]["generation"], 2);
    let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}});
    let (code, _) = c
        .req(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/smp",
            Some(&bad),
            "application/strategic-merge-patch+json",
        )
        .await;
    assert_eq!(code, 422);
    let (code, _) = c
        .req(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/smp",
            Some(&patch),
            "application/yaml",
        )
        .await;
    assert_eq!(code, 415);
}

cases! {
    strategic_merge_patch, strategic_merge_patch_rkube, strategic_merge_patch_etcd;
}

async fn server_side_apply(c: &Cluster) {
    let path = "/apis/apps/v1/namespaces/default/deployments/ssa";
    let apply = |replicas: i64, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa", "labels": {"app": "ssa"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "ssa"}}, "template": {"metadata": {"labels": {"app": "ssa"}},
            "spec": {"containers": [{"name": "nginx", "image": image}]}}}})
    };
    let ssa = "application/apply-patch+yaml";
    let apply_as = |manager: &str, body: &Value| {
        let url = format!("{path}?fieldManager={manager}");
        let body = body.clone();
        async move {
            c.req("PATCH", &url, Some(&body), "application/apply-patch+yaml")
                .await
        }
    };
    // Apply needs a field manager.
    let (code, got) = c.req("PATCH", path, Some(&apply(2, "nginx:1")), ssa).await;
    assert_eq!(code, 422, "{got}");
    assert!(
        got["message"]
            .as_str()
            .unwrap()
            .contains("fieldManager: Required value"),
        "{got}"
    );
    // The first apply creates, owned by its manager.
    let (code, got) = c
        .req(
            "PATCH",
            &format!("{path}?fieldManager=alice"),
            Some(&apply(2, "nginx:1")),
            ssa,
        )
        .await;
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["spec"]["replicas"], 2);
    let mf = &got["metadata"]["managedFields"][0];
    assert_eq!(
        (mf["manager"].as_str(), mf["operation"].as_str()),
        (Some("alice"), Some("Apply"))
    );
    assert!(mf["fieldsV1"]["f:spec"]["f:replicas"].is_object(), "{mf}");
    // Another manager setting replicas differently conflicts, with the field named.
    let scale_to_5 = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa"}, "spec": {"replicas": 5}});
    let (code, got) = c
        .req(
            "PATCH",
            &format!("{path}?fieldManager=bob"),
            Some(&scale_to_5),
            ssa,
        )
        .await;
    assert_eq!(code, 409, "{got}");
    assert_eq!(got["reason"], "Conflict");
    assert_eq!(
        got["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    assert_eq!(
        got["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    assert_eq!(got["details"]["causes"][0]["field"], ".spec.replicas");
    // Forced, bob takes the field; alice's next apply without replicas leaves bob's value.
    let (code, got) = c
        .req(
            "PATCH",
            &format!("{path}?fieldManager=bob&force=true"),
            Some(&scale_to_5),
            ssa,
        )
        .await;
    assert_eq!(
        (code, got["spec"]["replicas"].as_i64()),
        (200, Some(5)),
        "{got}"
    );
    let mut without_replicas = apply(0, "nginx:2");
    without_replicas["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let (code, got) = apply_as("alice", &without_replicas).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["spec"]["replicas"], 5);
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    // An ordinary update is recorded under its fieldManager and takes what it changes.
    let mut edited = got.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:3");
    let (code, got) = c
        .req(
            "PUT",
            &format!("{path}?fieldManager=kubectl-edit"),
            Some(&edited),
            "application/json",
        )
        .await;
    assert_eq!(code, 200, "{got}");
    let managers: Vec<(String, String)> = got["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().into(),
                e["operation"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kubectl-edit".into(), "Update".into())),
        "{managers:?}"
    );
    let (code, got) = apply_as("alice", &without_replicas).await;
    assert_eq!(
        code, 409,
        "alice's image now conflicts with kubectl-edit's: {got}"
    );
    assert!(
        got["message"]
            .as_str()
            .unwrap()
            .contains("\"kubectl-edit\" using apps/v1"),
        "{got}"
    );
    // force is only for apply.
    let (code, _) = c
        .req(
            "PATCH",
            &format!("{path}?force=true"),
            Some(&json!({})),
            "application/merge-patch+json",
        )
        .await;
    assert_eq!(code, 422);
}

cases! {
    server_side_apply, server_side_apply_rkube, server_side_apply_etcd;
}

/// A storage endpoint that refuses connections is skipped for the next one (gRPC transport),
/// for writes, reads and the watch cache alike.
async fn endpoint_failover(backend: Backend) {
    let Some(c) = Cluster::start(backend, |cfg| {
        cfg.etcd_servers.insert(0, "http://127.0.0.1:1".into());
    })
    .await
    else {
        return;
    };
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}, "data": {"k": "v"}});
    let (code, _) = c.post("/api/v1/namespaces/default/configmaps", &cm).await;
    assert_eq!(code, 201);
    let (code, got) = c.get("/api/v1/namespaces/default/configmaps/f").await;
    assert_eq!((code, got["data"]["k"].as_str()), (200, Some("v")));
    let (code, list) = c.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 200);
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["metadata"]["name"] == "f"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_endpoint_failover_rkube() {
    endpoint_failover(Backend::Rkube).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_endpoint_failover_etcd() {
    endpoint_failover(Backend::Etcd).await;
}

/// `--etcd-servers-overrides=/events#…`: Events (core and events.k8s.io) live on their own
/// storage, everything else on the main one; both are served, listed and watched as usual.
async fn events_on_their_own_storage(backend: Backend) {
    let (_events_store, events_url) = start_storage(Backend::Rkube).await.unwrap();
    let overrides =
        rkube_apiserver::overrides::parse(&format!("/events#{events_url}"), rkube_api::RESOURCES)
            .unwrap();
    let Some(c) = Cluster::start(backend, |cfg| cfg.etcd_servers_overrides = overrides).await
    else {
        return;
    };
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Tested", "message": "on its own storage", "type": "Normal"});
    let (code, body) = c.post("/api/v1/namespaces/default/events", &ev).await;
    assert_eq!(code, 201, "{body}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "main"}});
    assert_eq!(
        c.post("/api/v1/namespaces/default/configmaps", &cm).await.0,
        201
    );
    let keys = |url: String| async move {
        let client = rkube_etcd_api::EtcdClient::grpc(&[url], None).unwrap();
        let r = client
            .range(&rkube_etcd_api::RangeRequest {
                key: b"/registry/".to_vec(),
                range_end: b"/registry0".to_vec(),
                keys_only: true,
                ..Default::default()
            })
            .await
            .unwrap();
        r.kvs
            .into_iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect::<Vec<_>>()
    };
    let on_events = keys(events_url.clone()).await;
    let on_main = keys(c.storage_url.clone()).await;
    assert!(
        on_events.contains(&"/registry/events/default/e1".to_string()),
        "{on_events:?}"
    );
    assert!(
        on_events.iter().all(|k| k.starts_with("/registry/events/")),
        "{on_events:?}"
    );
    assert!(
        !on_main.iter().any(|k| k.starts_with("/registry/events/")),
        "{on_main:?}"
    );
    assert!(on_main.contains(&"/registry/configmaps/default/main".to_string()));
    // Both API groups' Events read the overridden storage, through their caches.
    let (_, list) = c.get("/api/v1/namespaces/default/events").await;
    assert_eq!(list["items"][0]["metadata"]["name"], "e1", "{list}");
    let (_, list) = c
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .await;
    assert_eq!(list["items"][0]["note"], "on its own storage", "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_on_their_own_storage_rkube() {
    events_on_their_own_storage(Backend::Rkube).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_on_their_own_storage_etcd() {
    events_on_their_own_storage(Backend::Etcd).await;
}
