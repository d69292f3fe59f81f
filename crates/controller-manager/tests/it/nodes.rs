//! Node lifecycle on a real apiserver: a node that stops heartbeating turns Unknown and is
//! tainted unreachable, its pods are evicted when their toleration runs out, and the taints
//! go when it reports Ready again.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use rkube_client::{Api, Patch};
use serde_json::json;

use crate::harness::{wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_node_is_tainted_its_pods_evicted_and_it_recovers() {
    let env = Env::start().await;
    let mut cfg = env.cm_config();
    cfg.node_monitor_grace_period = Duration::from_secs(1);
    let (_cm, _) = env.start_cm(cfg).await;
    let nodes: Api<Node> = Api::all(&env.client);
    let now = || rkube_client::now().to_rfc3339();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    nodes.create(&node).await.unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}});
    nodes
        .patch_status("n1", &Patch::Merge(ready.clone()))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let pod = |name: &str, secs: i64| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": "n1",
            "containers": [{"name": "c", "image": "nginx"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": secs}]}}))
        .unwrap()
    };
    pods.create(&pod("short", 1)).await.unwrap();
    pods.create(&pod("long", 3600)).await.unwrap();
    // "long" runs and is Ready, as its kubelet last said.
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("long", &Patch::Merge(ready))
        .await
        .unwrap();

    // No heartbeat: Unknown, then tainted.
    let n = wait_for("n1 Unknown and tainted", T, || async {
        let n = nodes.get("n1").await.ok()?;
        let ready = n
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        let taints = n.spec.as_ref()?.taints.clone().unwrap_or_default();
        (ready.status == "Unknown" && taints.len() == 2).then_some(n)
    })
    .await;
    let conds = n.status.unwrap().conditions.unwrap();
    assert_eq!(
        conds
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .reason
            .as_deref(),
        Some("NodeStatusUnknown")
    );
    let taints = n.spec.unwrap().taints.unwrap();
    assert!(taints
        .iter()
        .all(|t| t.key == "node.kubernetes.io/unreachable"));
    assert!(
        taints.iter().any(|t| t.effect == "NoExecute")
            && taints.iter().any(|t| t.effect == "NoSchedule")
    );

    // The pod tolerating 1 s is evicted (graceful: it is bound); the one tolerating an hour stays.
    wait_for("short evicted", T, || async {
        pods.get("short")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    assert!(pods
        .get("long")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
    // ... but no longer Ready: its node stopped reporting (upstream's MarkPodsNotReady).
    let long = pods.get("long").await.unwrap();
    let ready = long
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("NodeNotReady"))
    );

    // The kubelet is back: Ready again, taints removed.
    nodes
        .patch_status(
            "n1",
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}}),
            ),
        )
        .await
        .unwrap();
    wait_for("taints removed", T, || async {
        let n = nodes.get("n1").await.ok()?;
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_none_or(|t| t.is_empty())
            .then_some(())
    })
    .await;
}
