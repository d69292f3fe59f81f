//! The scheduler on top of rkube-testkit's in-process cluster, and node/pod fixtures.

use k8s_openapi::api::core::v1::{Node, Pod};
use rkube_client::{Api, Client, Patch};
use rkube_daemon::ShutdownToken;
pub use rkube_testkit::*;
use serde_json::{json, Value};

/// Runs a scheduler in-process until the token is cancelled (or dropped with the test).
pub fn start_scheduler(env: &Env) -> ShutdownToken {
    let cfg = rkube_scheduler::Config::new(rkube_client::Config::new(&env.base));
    let stop = ShutdownToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        rkube_scheduler::run(cfg, listener, s).await
    });
    stop
}

/// A Ready node with `cpu` cores, 8Gi and 110 pods, plus extra `spec`/labels.
pub async fn add_node(client: &Client, name: &str, cpu: &str, labels: Value, spec: Value) -> Node {
    let nodes: Api<Node> = Api::all(client);
    let mut l = json!({"kubernetes.io/hostname": name});
    for (k, v) in labels.as_object().into_iter().flatten() {
        l[k] = v.clone();
    }
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": l}, "spec": spec}))
            .unwrap();
    nodes.create(&n).await.unwrap();
    let now = rkube_client::now().to_rfc3339();
    let status = json!({"status": {
        "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    nodes
        .patch_status(name, &Patch::Merge(status))
        .await
        .unwrap()
}

/// A pod requesting `cpu`, with extra spec fields.
pub fn pod(name: &str, cpu: &str, extra: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The node the pod was bound to, once it is.
pub async fn bound_node(client: &Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    wait_for(
        &format!("{name} bound"),
        std::time::Duration::from_secs(30),
        || async { pods.get(name).await.ok()?.spec?.node_name },
    )
    .await
}

/// A cluster with a scheduler and Ready nodes of the given (name, cpu).
pub async fn cluster(nodes: &[(&str, &str)]) -> (Env, ShutdownToken) {
    let env = Env::start().await;
    let s = start_scheduler(&env);
    for (n, cpu) in nodes {
        add_node(&env.client, n, cpu, json!({}), json!({})).await;
    }
    (env, s)
}

/// The message of the pod's `PodScheduled=False` condition, once it has one.
pub async fn unschedulable_message(client: &Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client, "default");
    wait_for(
        &format!("{name} unschedulable"),
        std::time::Duration::from_secs(30),
        || async {
            let p = pods.get(name).await.ok()?;
            p.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message
        },
    )
    .await
}
