//! Services for real: the `kubernetes` Service and its endpoints, cluster IPs recorded as
//! IPAddresses (requested, refused, released, distinct across apiservers under concurrency),
//! node ports from their range, headless and ExternalName Services, updates that keep what was
//! allocated.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cases;
use crate::harness::Cluster;

fn svc(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn ports() -> Value {
    json!([{"port": 80}])
}

const SVCS: &str = "/api/v1/namespaces/default/services";
const IPS: &str = "/apis/networking.k8s.io/v1/ipaddresses";

/// Waits for `f` to see what it wants (polling the API), up to 20 s.
async fn eventually(c: &Cluster, path: &str, f: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, v) = c.get(path).await;
        if f(code, &v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never got there: {code} {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn the_kubernetes_service(c: &Cluster) {
    let (code, k) = c
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await;
    assert_eq!(code, 200, "{k}");
    assert_eq!(k["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(k["spec"]["clusterIPs"], json!(["10.96.0.1"]));
    assert_eq!(k["spec"]["ports"][0]["port"], 443);
    assert_eq!(k["metadata"]["labels"]["component"], "apiserver");
    let port: u64 = c.base.rsplit(':').next().unwrap().parse().unwrap();
    let ep = eventually(
        c,
        "/api/v1/namespaces/default/endpoints/kubernetes",
        |code, v| code == 200 && v["subsets"][0]["addresses"][0]["ip"] == "127.0.0.1",
    )
    .await;
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], port, "{ep}");
    let slice = eventually(
        c,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
        |code, _| code == 200,
    )
    .await;
    assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.1");
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    let (code, ip) = c.get(&format!("{IPS}/10.96.0.1")).await;
    assert_eq!(code, 200, "{ip}");
    assert_eq!(
        ip["spec"]["parentRef"],
        json!({"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"})
    );
    let (_, cidr) = c
        .get("/apis/networking.k8s.io/v1/servicecidrs/kubernetes")
        .await;
    assert_eq!(cidr["spec"]["cidrs"], json!(["10.96.0.0/12"]));
    assert_eq!(cidr["status"]["conditions"][0]["type"], "Ready");
    // A second apiserver joins the endpoints; when it stops, it leaves them.
    let (_second, stop) = c.second_apiserver().await;
    eventually(
        c,
        "/api/v1/namespaces/default/endpoints/kubernetes",
        |_, v| v["subsets"].as_array().map_or(0, Vec::len) == 2,
    )
    .await;
    stop.cancel();
    eventually(
        c,
        "/api/v1/namespaces/default/endpoints/kubernetes",
        |_, v| v["subsets"].as_array().map_or(0, Vec::len) == 1,
    )
    .await;
}

async fn cluster_ips_are_allocated_and_released(c: &Cluster) {
    let (code, a) = c
        .post(
            SVCS,
            &svc("a", json!({"selector": {"app": "a"}, "ports": ports()})),
        )
        .await;
    assert_eq!(code, 201, "{a}");
    let ip = a["spec"]["clusterIP"].as_str().unwrap().to_string();
    let parsed: std::net::Ipv4Addr = ip.parse().unwrap();
    assert_eq!(parsed.octets()[0], 10);
    assert!(
        (96..112).contains(&parsed.octets()[1]),
        "{ip} is in 10.96.0.0/12"
    );
    assert_eq!(a["spec"]["clusterIPs"], json!([ip]));
    assert_eq!(a["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(a["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(a["spec"]["internalTrafficPolicy"], "Cluster");
    let (code, rec) = c.get(&format!("{IPS}/{ip}")).await;
    assert_eq!(code, 200, "{rec}");
    assert_eq!(rec["spec"]["parentRef"]["name"], "a");
    // A requested IP is honoured once, refused twice, refused outside the range.
    let (code, b) = c
        .post(
            SVCS,
            &svc("b", json!({"clusterIP": "10.96.0.10", "ports": ports()})),
        )
        .await;
    assert_eq!(code, 201, "{b}");
    assert_eq!(b["spec"]["clusterIP"], "10.96.0.10");
    let (code, st) = c
        .post(
            SVCS,
            &svc("b2", json!({"clusterIP": "10.96.0.10", "ports": ports()})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(st["message"].as_str().unwrap().contains(r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.0.10"}: failed to allocate IP 10.96.0.10: provided IP is already allocated"#), "{st}");
    let (code, st) = c
        .post(
            SVCS,
            &svc("b3", json!({"clusterIP": "192.168.0.1", "ports": ports()})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("failed to allocate IP 192.168.0.1"),
        "{st}"
    );
    // A refused create keeps nothing.
    let (code, st) = c
        .post(
            SVCS,
            &svc(
                "Bad_Name",
                json!({"clusterIP": "10.96.0.11", "ports": ports()}),
            ),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(
        c.get(&format!("{IPS}/10.96.0.11")).await.0,
        404,
        "released after the refused create"
    );
    // Dry runs show an IP and keep none.
    let (code, dry) = c
        .post(
            &format!("{SVCS}?dryRun=All"),
            &svc("dry", json!({"ports": ports()})),
        )
        .await;
    assert_eq!(code, 201, "{dry}");
    let dry_ip = dry["spec"]["clusterIP"].as_str().unwrap();
    assert_eq!(c.get(&format!("{IPS}/{dry_ip}")).await.0, 404);
    // An update without the allocated values keeps them; changing the IP is refused.
    let mut put = svc("b", json!({"ports": ports(), "selector": {"app": "b"}}));
    put["metadata"]["resourceVersion"] = b["metadata"]["resourceVersion"].clone();
    let (code, kept) = c.put(&format!("{SVCS}/b"), &put).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["spec"]["clusterIP"], "10.96.0.10");
    let (code, st) = c
        .merge_patch(
            &format!("{SVCS}/b"),
            &json!({"spec": {"clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.12"]}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("may not change once set"),
        "{st}"
    );
    // Deleting releases the IP for the next Service.
    let (code, _) = c.delete(&format!("{SVCS}/b"), None).await;
    assert_eq!(code, 200);
    assert_eq!(c.get(&format!("{IPS}/10.96.0.10")).await.0, 404);
    let (code, again) = c
        .post(
            SVCS,
            &svc("b4", json!({"clusterIP": "10.96.0.10", "ports": ports()})),
        )
        .await;
    assert_eq!(code, 201, "{again}");
    // Headless and ExternalName Services take no IP.
    let (code, h) = c
        .post(
            SVCS,
            &svc(
                "h",
                json!({"clusterIP": "None", "selector": {"app": "h"}, "ports": ports()}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{h}");
    assert_eq!(h["spec"]["clusterIPs"], json!(["None"]));
    let (code, e) = c
        .post(
            SVCS,
            &svc(
                "e",
                json!({"type": "ExternalName", "externalName": "db.example.com"}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{e}");
    assert!(e["spec"]["clusterIP"].is_null(), "{e}");
}

async fn node_ports_are_allocated_and_released(c: &Cluster) {
    let (code, n) = c.post(SVCS, &svc("n", json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30080}]}))).await;
    assert_eq!(code, 201, "{n}");
    let first = n["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&first), "{first}");
    assert_eq!(n["spec"]["ports"][1]["nodePort"], 30080);
    assert_eq!(n["spec"]["externalTrafficPolicy"], "Cluster");
    let (code, st) = c
        .post(
            SVCS,
            &svc(
                "n2",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
            ),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains(
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        ),
        "{st}"
    );
    let (code, st) = c
        .post(
            SVCS,
            &svc(
                "n3",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}),
            ),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains(
            "provided port is not in the valid range. The range of valid ports is 30000-32767"
        ),
        "{st}"
    );
    let (code, st) = c
        .post(
            SVCS,
            &svc(
                "n4",
                json!({"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30081}]}),
            ),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("may not be used when `type` is 'ClusterIP'"),
        "{st}"
    );
    // Back to ClusterIP gives the ports back; another Service takes one at once.
    let (code, back) = c.merge_patch(&format!("{SVCS}/n"), &json!({"spec": {"type": "ClusterIP", "ports": [{"name": "a", "port": 80, "nodePort": null}, {"name": "b", "port": 81, "nodePort": null}]}})).await;
    assert_eq!(code, 200, "{back}");
    let (code, n5) = c
        .post(
            SVCS,
            &svc(
                "n5",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{n5}");
    // ClusterIP to NodePort allocates.
    let (code, up) = c
        .merge_patch(&format!("{SVCS}/n"), &json!({"spec": {"type": "NodePort"}}))
        .await;
    assert_eq!(code, 200, "{up}");
    assert!(
        up["spec"]["ports"][0]["nodePort"].as_u64().is_some(),
        "{up}"
    );
    let (code, _) = c.delete(&format!("{SVCS}/n5"), None).await;
    assert_eq!(code, 200);
    let (code, n6) = c
        .post(
            SVCS,
            &svc(
                "n6",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
            ),
        )
        .await;
    assert_eq!(code, 201, "released on delete: {n6}");
}

/// 200 Services created at once through two apiservers: every IP distinct, every IP recorded
/// once, all released when the Services go.
async fn allocation_is_exclusive_across_apiservers(c: &Cluster) {
    let (second, _stop) = c.second_apiserver().await;
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let base = if i % 2 == 0 {
            c.base.clone()
        } else {
            second.clone()
        };
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let body = svc(&format!("s{i}"), json!({"ports": [{"port": 80}], "type": if i % 4 == 0 { "NodePort" } else { "ClusterIP" }}));
            let resp = http.post(format!("{base}{SVCS}")).json(&body).send().await.unwrap();
            let code = resp.status().as_u16();
            let v = resp.json::<Value>().await.unwrap();
            assert_eq!(code, 201, "{v}");
            v
        }));
    }
    let mut ips = BTreeSet::new();
    let mut node_ports = BTreeSet::new();
    for t in tasks {
        let s = t.await.unwrap();
        assert!(
            ips.insert(s["spec"]["clusterIP"].as_str().unwrap().to_string()),
            "duplicate IP {}",
            s["spec"]["clusterIP"]
        );
        if let Some(p) = s["spec"]["ports"][0]["nodePort"].as_u64() {
            assert!(node_ports.insert(p), "duplicate node port {p}");
        }
    }
    assert_eq!(ips.len(), 200);
    assert_eq!(node_ports.len(), 50);
    let (_, recorded) = c.get(IPS).await;
    let names: BTreeSet<String> = recorded["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(ips.is_subset(&names), "every IP has its IPAddress");
    let (code, _) = c.delete(&format!("{SVCS}?labelSelector="), None).await;
    assert_eq!(code, 200);
    let (_, left) = c.get(IPS).await;
    let left: Vec<&str> = left["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        left.iter().all(|ip| !ips.contains(*ip)),
        "released: {left:?}"
    );
}

cases! {
    the_kubernetes_service, the_kubernetes_service_rkube, the_kubernetes_service_etcd;
    cluster_ips_are_allocated_and_released, cluster_ips_are_allocated_and_released_rkube, cluster_ips_are_allocated_and_released_etcd;
    node_ports_are_allocated_and_released, node_ports_are_allocated_and_released_rkube, node_ports_are_allocated_and_released_etcd;
    allocation_is_exclusive_across_apiservers, allocation_is_exclusive_across_apiservers_rkube, allocation_is_exclusive_across_apiservers_etcd;
}
