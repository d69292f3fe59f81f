//! Storage without storage: claims bound to fitting volumes or to volumes made for them (the
//! default class made when none exists; `WaitForFirstConsumer` once a node is selected, the
//! volume pinned to it), volumes released by their reclaim policy, claims in use protected.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use rkube_client::{Api, DeleteParams, Patch};
use serde_json::json;

use crate::harness::{wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

fn claim(name: &str, class: Option<&str>, size: &str) -> PersistentVolumeClaim {
    let mut spec =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}});
    if let Some(c) = class {
        spec["storageClassName"] = json!(c);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn bound(claims: &Api<PersistentVolumeClaim>, name: &str) -> PersistentVolumeClaim {
    wait_for(&format!("{name} bound"), T, || async {
        claims
            .get(name)
            .await
            .ok()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_bound_provisioned_released_and_protected() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let classes: Api<StorageClass> = Api::all(&env.client);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(&env.client, "default");
    let volumes: Api<PersistentVolume> = Api::all(&env.client);
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    wait_for("the default class", T, || async {
        classes.get_opt("standard").await.ok().flatten()
    })
    .await;
    // A claim with no class gets the default one and a volume of its size.
    claims.create(&claim("data", None, "3Gi")).await.unwrap();
    let c = bound(&claims, "data").await;
    assert_eq!(
        c.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("standard")
    );
    let pv_name = c.spec.as_ref().unwrap().volume_name.clone().unwrap();
    let pv = volumes.get(&pv_name).await.unwrap();
    assert_eq!(
        pv.spec.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "3Gi"
    );
    assert_eq!(pv.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    assert_eq!(
        c.status.as_ref().unwrap().capacity.as_ref().unwrap()["storage"].0,
        "3Gi"
    );
    // A static volume binds the claim that fits it.
    let static_pv: PersistentVolume = serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "static"}, "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
        "storageClassName": "manual", "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/tmp/static"}}})).unwrap();
    volumes.create(&static_pv).await.unwrap();
    claims
        .create(&claim("manual", Some("manual"), "1Gi"))
        .await
        .unwrap();
    let m = bound(&claims, "manual").await;
    assert_eq!(
        m.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("static")
    );
    // A claim in use by a running pod stays while the pod does.
    let pod: Pod = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    )
    .unwrap();
    pods.create(&pod).await.unwrap();
    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // give the controller its chance to be wrong
    let held = claims.get("data").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.metadata.finalizers.as_deref(),
        Some(&["kubernetes.io/pvc-protection".to_string()][..])
    );
    pods.delete("user", &DeleteParams::default().grace(0))
        .await
        .unwrap();
    wait_for("the claim gone", T, || async {
        claims.get_opt("data").await.ok()?.is_none().then_some(())
    })
    .await;
    // Its volume (reclaim policy Delete) goes with it; the Retain one is Released.
    wait_for("the provisioned volume deleted", T, || async {
        volumes
            .get_opt(&pv_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    claims
        .delete("manual", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the static volume released", T, || async {
        let v = volumes.get("static").await.ok()?;
        (v.status.as_ref()?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_binds_on_the_selected_node() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let classes: Api<StorageClass> = Api::all(&env.client);
    let class: StorageClass = serde_json::from_value(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local"}, "provisioner": "example.com/local", "volumeBindingMode": "WaitForFirstConsumer"})).unwrap();
    classes.create(&class).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(&env.client, "default");
    claims
        .create(&claim("wffc", Some("local"), "1Gi"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // it must wait for a consumer
    let c = claims.get("wffc").await.unwrap();
    assert_eq!(c.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    // The scheduler's choice.
    claims
        .patch("wffc", &Patch::Merge(json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "node-7"}}})))
        .await
        .unwrap();
    let c = bound(&claims, "wffc").await;
    let pv = Api::<PersistentVolume>::all(&env.client)
        .get(c.spec.as_ref().unwrap().volume_name.as_deref().unwrap())
        .await
        .unwrap();
    let affinity = serde_json::to_value(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!(["node-7"])
    );
    assert_eq!(
        pv.metadata.annotations.as_ref().unwrap()["pv.kubernetes.io/provisioned-by"],
        "example.com/local"
    );
}
