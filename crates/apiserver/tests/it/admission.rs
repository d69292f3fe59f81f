//! Admission against a real apiserver: LimitRanger defaults and bounds, ResourceQuota charging
//! and giving back (with upstream's message and the usage in the quota's status),
//! DefaultTolerationSeconds, AlwaysPullImages (opt-in), and unknown plugins refused at startup.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{Backend, Cluster};

fn pod(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent", "resources": resources}]}})
}

async fn namespace(c: &Cluster, name: &str) {
    let (code, v) = c
        .post("/api/v1/namespaces", &json!({"metadata": {"name": name}}))
        .await;
    assert_eq!(code, 201, "{v}");
}

/// Polls `path` until `check` holds (quota status is written in the background).
async fn until(c: &Cluster, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, v) = c.get(path).await;
        if check(&v) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_ranges_quotas_and_default_tolerations() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    // LimitRanger.
    namespace(&c, "limited").await;
    let range = json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu"},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}}]}});
    assert_eq!(
        c.post("/api/v1/namespaces/limited/limitranges", &range)
            .await
            .0,
        201
    );
    let ranged = "/api/v1/namespaces/limited/pods";
    let got = {
        // The LimitRange reaches the watch cache a moment after its create.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut n = 0;
        loop {
            n += 1;
            let (code, v) = c.post(ranged, &pod(&format!("plain{n}"), json!({}))).await;
            assert_eq!(code, 201, "{v}");
            if v["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "500m" {
                break v;
            }
            assert!(tokio::time::Instant::now() < deadline, "no defaults: {v}");
        }
    };
    assert_eq!(
        got["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "100m"
    );
    let (code, v) = c
        .post(ranged, &pod("big", json!({"limits": {"cpu": "2"}})))
        .await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
    );

    // DefaultTolerationSeconds.
    let tolerations = got["spec"]["tolerations"].as_array().unwrap();
    let keys: Vec<(&str, i64)> = tolerations
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap(),
                t["tolerationSeconds"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("node.kubernetes.io/not-ready", 300),
            ("node.kubernetes.io/unreachable", 300)
        ]
    );

    // ResourceQuota.
    namespace(&c, "quota").await;
    let q = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "2", "requests.cpu": "1"}}});
    assert_eq!(
        c.post("/api/v1/namespaces/quota/resourcequotas", &q)
            .await
            .0,
        201
    );
    let quota_path = "/api/v1/namespaces/quota/resourcequotas/q";
    until(&c, quota_path, "status written", |v| {
        v["status"]["used"]["pods"] == "0"
    })
    .await;
    let pods = "/api/v1/namespaces/quota/pods";
    let req = |cpu: &str| json!({"requests": {"cpu": cpu}});
    assert_eq!(c.post(pods, &pod("p1", req("300m"))).await.0, 201);
    // Dry runs are admitted (defaults applied, quota checked) without being charged: the
    // "fat" refusal below still sees 300m used.
    let dry = format!("{pods}?dryRun=All");
    let (code, v) = c.post(&dry, &pod("dry", req("300m"))).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        v["spec"]["tolerations"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
    let (code, v) = c.post(&dry, &pod("dry-fat", req("900m"))).await;
    assert_eq!(code, 403, "{v}");
    let (code, v) = c.post(pods, &pod("fat", req("800m"))).await;
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "pods \"fat\" is forbidden: exceeded quota: q, requested: requests.cpu=800m, used: requests.cpu=300m, limited: requests.cpu=1"
    );
    assert_eq!(c.post(pods, &pod("p2", req("300m"))).await.0, 201);
    let (code, v) = c.post(pods, &pod("p3", req("100m"))).await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );
    let st = until(&c, quota_path, "usage in status", |v| {
        v["status"]["used"]["requests.cpu"] == "600m"
    })
    .await;
    assert_eq!(st["status"]["used"]["pods"], "2");
    assert_eq!(st["status"]["hard"]["requests.cpu"], "1");
    // Deleting gives the usage back.
    let (code, _) = c
        .req(
            "DELETE",
            "/api/v1/namespaces/quota/pods/p1?gracePeriodSeconds=0",
            None,
            "",
        )
        .await;
    assert_eq!(code, 200);
    until(&c, quota_path, "usage given back", |v| {
        v["status"]["used"]["pods"] == "1"
    })
    .await;
    assert_eq!(c.post(pods, &pod("p3", req("100m"))).await.0, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_pull_images_is_opt_in_and_holds_on_updates() {
    let Some(c) = Cluster::start(Backend::Rkube, |cfg| {
        cfg.enable_admission_plugins = vec!["AlwaysPullImages".into()];
    })
    .await
    else {
        return;
    };
    let (code, v) = c
        .post("/api/v1/namespaces/default/pods", &pod("p", json!({})))
        .await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["containers"][0]["imagePullPolicy"], "Always");
    let patch = json!({"spec": {"containers": [{"name": "c", "imagePullPolicy": "IfNotPresent"}]}});
    let (code, v) = c
        .req(
            "PATCH",
            "/api/v1/namespaces/default/pods/p",
            Some(&patch),
            "application/strategic-merge-patch+json",
        )
        .await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["spec"]["containers"][0]["imagePullPolicy"], "Always");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_admission_plugins_stop_startup() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let mut cfg = rkube_apiserver::Config::new(vec![c.storage_url.clone()]);
    cfg.enable_admission_plugins = vec!["PodSecurityPolicy".into()];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = rkube_apiserver::run(cfg, listener, rkube_daemon::ShutdownToken::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown admission plugin \"PodSecurityPolicy\""),
        "{err}"
    );
}
