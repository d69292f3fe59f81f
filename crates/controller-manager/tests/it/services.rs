//! The Service-side controllers on a real store and apiserver: Endpoints and EndpointSlices
//! follow pods (readiness, named target ports, deletion, 100 per slice), a Service's deletion
//! takes them along; every namespace gets a `default` ServiceAccount and the
//! `kube-root-ca.crt` ConfigMap, put back when deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rkube_client::{Api, DeleteParams, ListParams, Patch};
use serde_json::json;

use crate::harness::{wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

fn pod(name: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}]}
    }))
    .unwrap()
}

/// Gives a pod an IP and the readiness wanted, as a kubelet reports them.
async fn report(pods: &Api<Pod>, name: &str, ip: &str, ready: bool) {
    let st = if ready { "True" } else { "False" };
    pods.patch_status(
        name,
        &Patch::Merge(
            json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": st}]}}),
        ),
    )
    .await
    .unwrap();
}

fn ready_ips(ep: &Endpoints) -> Vec<String> {
    ep.subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.ip.clone())
        .collect()
}

fn not_ready_ips(ep: &Endpoints) -> Vec<String> {
    ep.subsets
        .iter()
        .flatten()
        .flat_map(|s| s.not_ready_addresses.iter().flatten())
        .map(|a| a.ip.clone())
        .collect()
}

async fn slices_of(api: &Api<EndpointSlice>, svc: &str) -> Vec<EndpointSlice> {
    api.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_slices_follow_pods() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let services: Api<Service> = Api::namespaced(&env.client, "default");
    let endpoints: Api<Endpoints> = Api::namespaced(&env.client, "default");
    let slices: Api<EndpointSlice> = Api::namespaced(&env.client, "default");
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}))
    .unwrap();
    services.create(&svc).await.unwrap();
    // An empty Service: empty Endpoints and one placeholder slice.
    wait_for("empty endpoints", T, || async {
        endpoints
            .get_opt("web")
            .await
            .ok()
            .flatten()
            .filter(|e| e.subsets.is_none())
    })
    .await;
    wait_for("a placeholder slice", T, || async {
        let s = slices_of(&slices, "web").await;
        (s.len() == 1 && s[0].endpoints.is_empty()).then_some(())
    })
    .await;
    for (name, ip, ready) in [("a", "10.1.0.1", true), ("b", "10.1.0.2", false)] {
        pods.create(&pod(name, "web")).await.unwrap();
        report(&pods, name, ip, ready).await;
    }
    pods.create(&pod("other", "db")).await.unwrap();
    report(&pods, "other", "10.1.0.9", true).await;
    let ep = wait_for("the ready pod listed", T, || async {
        let e = endpoints.get("web").await.ok()?;
        (ready_ips(&e) == ["10.1.0.1"] && not_ready_ips(&e) == ["10.1.0.2"]).then_some(e)
    })
    .await;
    let subset = &ep.subsets.as_ref().unwrap()[0];
    assert_eq!(
        subset.ports.as_ref().unwrap()[0].port,
        8080,
        "the named target port resolved"
    );
    assert_eq!(ep.metadata.labels.as_ref().unwrap()["tier"], "front");
    let target = subset.addresses.as_ref().unwrap()[0]
        .target_ref
        .as_ref()
        .unwrap();
    assert_eq!(target.name.as_deref(), Some("a"));
    let s = wait_for("the slice lists both pods", T, || async {
        let s = slices_of(&slices, "web").await;
        (s.len() == 1 && s[0].endpoints.len() == 2).then(|| s[0].clone())
    })
    .await;
    assert_eq!(s.address_type, "IPv4");
    assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
    let b = s
        .endpoints
        .iter()
        .find(|e| e.addresses == ["10.1.0.2"])
        .unwrap();
    assert_eq!(b.conditions.as_ref().unwrap().ready, Some(false));
    assert_eq!(
        s.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Service"
    );
    assert_eq!(
        s.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    // b turns ready; a goes away.
    report(&pods, "b", "10.1.0.2", true).await;
    pods.delete("a", &DeleteParams::default().grace(0))
        .await
        .unwrap();
    wait_for("endpoints follow", T, || async {
        let e = endpoints.get("web").await.ok()?;
        (ready_ips(&e) == ["10.1.0.2"] && not_ready_ips(&e).is_empty()).then_some(())
    })
    .await;
    wait_for("the slice follows", T, || async {
        let s = slices_of(&slices, "web").await;
        (s.len() == 1
            && s[0].endpoints.len() == 1
            && s[0].endpoints[0].conditions.as_ref()?.ready == Some(true))
        .then_some(())
    })
    .await;
    // The Service's deletion takes its Endpoints and (through the garbage collector) its slices.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("endpoints deleted", T, || async {
        endpoints.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for("slices deleted", T, || async {
        slices_of(&slices, "web").await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_endpoints_per_slice() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let services: Api<Service> = Api::namespaced(&env.client, "default");
    let slices: Api<EndpointSlice> = Api::namespaced(&env.client, "default");
    for i in 0..130 {
        let name = format!("p{i}");
        pods.create(&pod(&name, "many")).await.unwrap();
        report(
            &pods,
            &name,
            &format!("10.2.{}.{}", i / 200, i % 200 + 1),
            true,
        )
        .await;
    }
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "many"}, "spec": {"selector": {"app": "many"}, "ports": [{"port": 80}]}}))
    .unwrap();
    services.create(&svc).await.unwrap();
    wait_for("130 endpoints in two slices", T, || async {
        let mut sizes: Vec<usize> = slices_of(&slices, "many")
            .await
            .iter()
            .map(|s| s.endpoints.len())
            .collect();
        sizes.sort();
        (sizes == [30, 100]).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_get_a_default_service_account_and_the_root_ca() {
    let env = Env::start().await;
    let mut cfg = env.cm_config();
    cfg.root_ca = Some("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n".into());
    let (_cm, _) = env.start_cm(cfg).await;
    let namespaces: Api<Namespace> = Api::all(&env.client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    namespaces.create(&ns).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(&env.client, "team-a");
    let maps: Api<ConfigMap> = Api::namespaced(&env.client, "team-a");
    wait_for("the default ServiceAccount", T, || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await;
    let cm = wait_for("kube-root-ca.crt", T, || async {
        maps.get_opt("kube-root-ca.crt").await.ok().flatten()
    })
    .await;
    assert!(cm.data.as_ref().unwrap()["ca.crt"].contains("TEST"));
    // Deleted, they come back.
    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    maps.delete("kube-root-ca.crt", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the ServiceAccount back", T, || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await;
    wait_for("the ConfigMap back", T, || async {
        maps.get_opt("kube-root-ca.crt").await.ok().flatten()
    })
    .await;
    // The built-in namespaces have them too.
    let system: Api<ServiceAccount> = Api::namespaced(&env.client, "kube-system");
    wait_for("kube-system's default", T, || async {
        system.get_opt("default").await.ok().flatten()
    })
    .await;
}

/// Endpoints written by hand for a Service without a selector are mirrored into
/// EndpointSlices (owned by the Endpoints), follow its changes, and go when the Service gains
/// a selector; the `kubernetes` Service's Endpoints are not mirrored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectorless_endpoints_are_mirrored_into_slices() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let services: Api<Service> = Api::namespaced(&env.client, "default");
    let endpoints: Api<Endpoints> = Api::namespaced(&env.client, "default");
    let slices: Api<EndpointSlice> = Api::namespaced(&env.client, "default");
    let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db"}, "spec": {"ports": [{"port": 5432}]}}))
    .unwrap();
    services.create(&svc).await.unwrap();
    let ep: Endpoints = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "db", "labels": {"team": "data"}, "annotations": {"note": "external"}},
        "subsets": [{"addresses": [{"ip": "192.0.2.10"}], "notReadyAddresses": [{"ip": "192.0.2.11"}],
                     "ports": [{"name": "pg", "port": 5432}]}]}))
    .unwrap();
    let created = endpoints.create(&ep).await.unwrap();
    let mirrored = "endpointslicemirroring-controller.k8s.io";
    let slice = wait_for("a mirrored slice", T, || async {
        let s = slices_of(&slices, "db").await;
        (s.len() == 1 && s[0].endpoints.len() == 2).then(|| s[0].clone())
    })
    .await;
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], mirrored);
    assert_eq!(labels["team"], "data");
    assert_eq!(slice.metadata.annotations.unwrap()["note"], "external");
    let owner = &slice.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Endpoints", created.metadata.uid.as_deref().unwrap())
    );
    assert_eq!(slice.ports.unwrap()[0].port, Some(5432));
    let ready: Vec<Option<bool>> = slice
        .endpoints
        .iter()
        .map(|e| e.conditions.as_ref().unwrap().ready)
        .collect();
    assert_eq!(ready, [Some(true), Some(false)]);
    // The Endpoints change: so does the slice.
    endpoints
        .patch("db", &Patch::Merge(json!({"subsets": [{"addresses": [{"ip": "192.0.2.12"}], "ports": [{"name": "pg", "port": 5432}]}]})))
        .await
        .unwrap();
    wait_for("the slice follows", T, || async {
        let s = slices_of(&slices, "db").await;
        (s.len() == 1 && s[0].endpoints.len() == 1 && s[0].endpoints[0].addresses == ["192.0.2.12"])
            .then_some(())
    })
    .await;
    // The Service gains a selector: the mirrored slice goes (the EndpointSlice controller
    // takes over with its own).
    services
        .patch(
            "db",
            &Patch::Merge(json!({"spec": {"selector": {"app": "db"}}})),
        )
        .await
        .unwrap();
    wait_for("the mirrored slice gone", T, || async {
        let s = slices_of(&slices, "db").await;
        s.iter()
            .all(|s| {
                s.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/managed-by"]
                    != mirrored
            })
            .then_some(())
    })
    .await;
    // The kubernetes Service's Endpoints carry skip-mirror: only the apiserver's own slice.
    let k = slices_of(&slices, "kubernetes").await;
    assert!(k.iter().all(|s| s
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .get("endpointslice.kubernetes.io/managed-by")
        .map(String::as_str)
        != Some(mirrored)));
}
