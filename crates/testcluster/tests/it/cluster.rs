//! In-process clusters: ready with nodes and controllers, many at once and independent,
//! API-only, secure with RBAC, usable by kubectl through the kubeconfig file, gone on drop.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::Api;
use rkube_testcluster::TestCluster;

use crate::eventually;
use serde_json::json;

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_on_the_nodes_and_kubectl_reads_the_kubeconfig() {
    let cluster = TestCluster::builder().nodes(2).start().await.unwrap();
    let nodes: Api<Node> = Api::all(cluster.client());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let deploys: Api<Deployment> = Api::default_namespaced(cluster.client());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    eventually("two Running pods", || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap();
        list.items.len() == 2
            && list
                .items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    eventually("the Deployment's two ready replicas", || async {
        deploys
            .get("web")
            .await
            .unwrap()
            .status
            .and_then(|s| s.ready_replicas)
            == Some(2)
    })
    .await;
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(["get", "deploy", "web", "--no-headers"])
        .output()
        .expect("kubectl on PATH");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("web   2/2"), "{text}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_started_side_by_side_are_independent() {
    let starts = (0..4).map(|_| TestCluster::builder().nodes(1).start());
    let clusters: Vec<TestCluster> = futures_util::future::join_all(starts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut servers: Vec<&str> = clusters.iter().map(|c| c.server()).collect();
    servers.sort();
    servers.dedup();
    assert_eq!(servers.len(), 4, "each cluster has its own apiserver");
    for (i, c) in clusters.iter().enumerate() {
        let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
        cms.create(&PostParams::default(), &configmap(&format!("mine-{i}")))
            .await
            .unwrap();
    }
    for (i, c) in clusters.iter().enumerate() {
        let cms: Api<ConfigMap> = Api::default_namespaced(c.client());
        let names: Vec<String> = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|cm| cm.metadata.name)
            .filter(|n| n.starts_with("mine-"))
            .collect();
        assert_eq!(names, vec![format!("mine-{i}")]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_only_cluster_stores_and_serves_but_runs_nothing() {
    let cluster = TestCluster::builder().api_only().start().await.unwrap();
    let nodes: Api<Node> = Api::all(cluster.client());
    assert!(nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    // No controller made a `default` ServiceAccount, and pods are admitted anyway (the
    // ServiceAccount admission plugin is off, as in envtest).
    let sas: Api<ServiceAccount> = Api::default_namespaced(cluster.client());
    assert!(sas
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(created.spec.unwrap().node_name, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_cluster_serves_https_and_authorizes_with_rbac() {
    let cluster = TestCluster::builder()
        .secure(true)
        .nodes(1)
        .start()
        .await
        .unwrap();
    assert!(cluster.server().starts_with("https://127.0.0.1:"));
    let secrets: Api<Secret> = Api::default_namespaced(cluster.client());
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    // The scheduler's identity may not read Secrets.
    let pki = cluster.cluster().pki.clone().unwrap();
    let kc = kube::config::Kubeconfig::read_from(pki.join("scheduler.kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let as_scheduler: Api<Secret> =
        Api::default_namespaced(kube::Client::try_from(config).unwrap());
    match as_scheduler.get("s").await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403);
            assert!(e.message.contains("system:kube-scheduler"), "{}", e.message);
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_cluster_stops_it() {
    let cluster = TestCluster::builder().nodes(1).start().await.unwrap();
    let addr = cluster.server().trim_start_matches("http://").to_string();
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    assert!(kubeconfig.exists());
    drop(cluster);
    eventually("the apiserver's port closed", || async {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    assert!(
        !kubeconfig.exists(),
        "the kubeconfig file goes with the cluster"
    );
}
