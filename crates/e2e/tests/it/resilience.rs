//! The seed's bookmark scenario on real processes, a store killed with SIGKILL under load, and
//! the seed flow with a real etcd 3.4 in place of rkube-store.

use std::time::Duration;

use rkube_e2e::{wait_for, Cluster, Opts};

const T: Duration = Duration::from_secs(60);

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A quiet node's kubelet watches only its own pods while another node churns; its watch ends
/// every few seconds (short timeouts) after the apiserver's history (3 s) no longer holds the
/// resourceVersion it started from. With bookmarks it resumes without a list; without, it gets
/// 410 and re-lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_spare_a_quiet_nodes_watch_from_relisting() {
    let quiet = |bookmarks: bool| {
        strings(&[
            "--watch-timeout",
            "3s",
            "--watch-bookmarks",
            if bookmarks { "true" } else { "false" },
        ])
    };
    let c = Cluster::start(Opts {
        nodes: 1,
        apiserver: strings(&[
            "--watch-cache-history-window",
            "3s",
            "--watch-bookmark-interval",
            "1s",
        ]),
        extra_nodes: vec![
            ("quiet-bookmarks".into(), quiet(true)),
            ("quiet-plain".into(), quiet(false)),
        ],
        ..Default::default()
    })
    .await;
    // Churn on node-1 only: pods bound there directly, created and deleted.
    let relists = |node: &'static str| {
        let c = &c;
        async move { c.metric(node, "reflector_relists_total", "").await }
    };
    let mut i = 0u32;
    let watches_at_start = c
        .metric("quiet-bookmarks", "reflector_watches_total", "")
        .await;
    wait_for("the plain watch re-lists and the bookmarked one reconnects three times", T, || {
        i += 1;
        let manifest = c.dir.path().join(format!("churn-{i}.yml"));
        std::fs::write(&manifest, format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: churn-{i}}}\nspec: {{nodeName: node-1, containers: [{{name: c, image: nginx}}]}}\n"
        )).unwrap();
        c.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
        if i > 5 {
            c.kubectl(&["delete", "pod", &format!("churn-{}", i - 5), "--wait=false"]);
        }
        async {
            let plain = relists("quiet-plain").await;
            let watches = c.metric("quiet-bookmarks", "reflector_watches_total", "").await;
            (plain >= 1.0 && watches >= watches_at_start + 3.0).then_some(())
        }
    })
    .await;
    assert_eq!(
        relists("quiet-bookmarks").await,
        0.0,
        "the bookmarked watch re-listed"
    );
    assert!(
        c.metric("quiet-bookmarks", "reflector_bookmarks_total", "")
            .await
            >= 1.0
    );
    assert!(relists("quiet-plain").await >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_killed_under_load_loses_no_acknowledged_write_and_the_cluster_recovers() {
    let mut c = Cluster::start(Opts {
        nodes: 2,
        ..Default::default()
    })
    .await;
    c.kubectl_ok(&["apply", "-f", "e2e/nginx.yml"]);
    wait_for("nginx running", T, || async {
        (c.running_pods("app=nginx").len() == 1).then_some(())
    })
    .await;
    // Writes through the apiserver; every 201 is an acknowledged write.
    let http = c.http();
    let url = format!("{}/api/v1/namespaces/default/configmaps", c.server);
    let mut acked = Vec::new();
    for i in 0..120 {
        if i == 40 {
            c.kill("store").await; // SIGKILL in the middle of the load
        }
        if i == 60 {
            c.start_proc("store").await;
        }
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w-{i}")}, "data": {"i": i.to_string()}});
        if let Ok(r) = http.post(&url).json(&body).send().await {
            if r.status().as_u16() == 201 {
                acked.push(format!("w-{i}"));
            }
        }
    }
    assert!(
        acked.len() >= 60,
        "only {} writes acknowledged",
        acked.len()
    );
    // Every acknowledged write is there.
    let list: serde_json::Value = wait_for("the apiserver serves lists again", T, || async {
        let r = http.get(&url).send().await.ok()?;
        (r.status() == 200).then_some(())?;
        r.json().await.ok()
    })
    .await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    for a in &acked {
        assert!(names.contains(&a.as_str()), "acknowledged {a} lost");
    }
    // The components recover: a scale-up converges.
    c.kubectl_ok(&["scale", "deployment", "nginx-deployment", "--replicas=3"]);
    wait_for("3 nginx running after the store restart", T, || async {
        (c.running_pods("app=nginx").len() == 3).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_and_scripted_nginx_run_on_a_real_etcd() {
    if std::env::var("RKUBE_SKIP_ETCD").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: RKUBE_SKIP_ETCD=1");
        return;
    }
    let c = Cluster::start(Opts {
        nodes: 3,
        etcd: true,
        ..Default::default()
    })
    .await;
    c.run_nginx_script(None);
}
