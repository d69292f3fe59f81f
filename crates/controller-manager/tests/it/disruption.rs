//! PodDisruptionBudgets end to end: the controller keeps their status, and the apiserver's
//! eviction honours it (429 with upstream's message when no disruption is allowed; each
//! allowed eviction charges the budget).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rkube_client::{Api, Patch};
use serde_json::json;

use crate::harness::{deployment, live_pods, wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

async fn evict(pods: &Api<Pod>, name: &str) -> Result<(), rkube_client::Error> {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}});
    pods.create_subresource(name, "eviction", &body)
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_honour_the_budget() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let kubelet = env.fake_kubelet("default");
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("web", 2, "nginx", 1, 0))
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(&env.client, "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})).unwrap();
    pdbs.create(&pdb).await.unwrap();
    let status = |allowed: i32, healthy: i32| {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web")
                .await
                .ok()
                .and_then(|p| p.status)
                .filter(|s| {
                    s.disruptions_allowed == allowed
                        && s.current_healthy == healthy
                        && s.desired_healthy == 2
                })
        }
    };
    wait_for("two healthy, none allowed", T, || status(0, 2)).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let victim = live_pods(&env.client, "default", "app=web").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let refused = evict(&pods, &victim).await.unwrap_err();
    assert_eq!(refused.code(), Some(429), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{refused}"
    );
    // One more replica: one disruption allowed, and only one.
    deploys
        .patch("web", &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    wait_for("three healthy, one allowed", T, || status(1, 3)).await;
    // Replacements never turn Ready from here on: the budget stays spent.
    kubelet.cancel();
    evict(&pods, &victim).await.unwrap();
    // A healthy one: a replacement still Pending may always be evicted, as upstream.
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let others: Vec<String> = live_pods(&env.client, "default", "app=web")
        .await
        .into_iter()
        .filter(ready)
        .filter_map(|p| p.metadata.name)
        .filter(|n| *n != victim)
        .collect();
    let second = evict(&pods, &others[0]).await.unwrap_err();
    assert_eq!(second.code(), Some(429), "the budget was charged: {second}");
}
