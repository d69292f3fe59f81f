use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use rkube_client::{Api, DeleteParams, ListParams};
use serde_json::json;

use crate::harness::{agent_config, find_event, start_agent, wait_for, Env};

const T: Duration = Duration::from_secs(30);

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node,
        "containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}]}}))
    .unwrap()
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(&format!("{name} Running and Ready"), T, || async {
        let p = pods.get(name).await.ok()?;
        let s = p.status.as_ref()?;
        let ready = s
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (s.phase.as_deref() == Some("Running") && ready).then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_and_a_pod_runs_with_a_kubelets_status() {
    let env = Env::start().await;
    let (_agent, addr) = start_agent(agent_config(&env, "n1")).await;
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();

    let nodes: Api<Node> = Api::all(&env.client);
    let node = nodes.get("n1").await.unwrap();
    let st = node.status.clone().unwrap();
    let ready = st
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("True", Some("KubeletReady"))
    );
    for t in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .status,
            "False"
        );
    }
    assert_eq!(st.capacity.as_ref().unwrap()["cpu"].0, "4");
    assert_eq!(st.allocatable.as_ref().unwrap()["pods"].0, "110");
    let addrs = st.addresses.unwrap();
    assert_eq!(
        (addrs[0].type_.as_str(), addrs[0].address.as_str()),
        ("InternalIP", "127.0.0.1")
    );
    assert_eq!(
        st.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
        i32::from(port)
    );
    assert_eq!(st.node_info.unwrap().kubelet_version, "v1.33.0");
    assert_eq!(
        node.spec.unwrap().pod_cidr.as_deref(),
        Some("10.244.0.0/24")
    );
    assert_eq!(
        node.metadata.labels.unwrap()["kubernetes.io/hostname"],
        "n1"
    );
    let leases: Api<Lease> = Api::namespaced(&env.client, "kube-node-lease");
    let lease = wait_for("node lease", T, || async {
        leases.get_opt("n1").await.ok()?
    })
    .await;
    let spec = lease.spec.unwrap();
    assert_eq!(
        (spec.holder_identity.as_deref(), spec.lease_duration_seconds),
        (Some("n1"), Some(40))
    );
    assert!(spec.renew_time.is_some());

    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("web", "n1")).await.unwrap();
    let p = running(&pods, "web").await;
    let s = p.status.unwrap();
    assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(s.host_ips.unwrap()[0].ip, "127.0.0.1");
    let ip = s.pod_ip.clone().unwrap();
    assert!(ip.starts_with("10.244.0."), "{ip}");
    assert_eq!(s.pod_ips.unwrap()[0].ip, ip);
    assert!(s.start_time.is_some());
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    let conds: Vec<(String, String)> = s
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ] {
        assert!(
            conds.contains(&(t.to_string(), "True".to_string())),
            "{t}: {conds:?}"
        );
    }
    let cs = &s.container_statuses.unwrap()[0];
    assert_eq!(
        (
            cs.name.as_str(),
            cs.image.as_str(),
            cs.ready,
            cs.started,
            cs.restart_count
        ),
        ("nginx", "nginx:1.14.2", true, Some(true), 0)
    );
    assert!(
        cs.image_id.starts_with("docker.io/library/nginx@sha256:"),
        "{}",
        cs.image_id
    );
    assert!(cs
        .container_id
        .as_ref()
        .unwrap()
        .starts_with("containerd://"));
    assert!(cs
        .state
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap()
        .started_at
        .is_some());
    // The kubelet's events, from the kubelet on that host.
    for reason in ["Pulling", "Pulled", "Created", "Started"] {
        let e = find_event(&env.client, "default", reason, |e| {
            e.reason.as_deref() == Some(reason)
        })
        .await;
        let src = e.source.unwrap();
        assert_eq!(
            (src.component.as_deref(), src.host.as_deref()),
            (Some("kubelet"), Some("n1"))
        );
        assert_eq!(
            e.involved_object.field_path.as_deref(),
            Some("spec.containers{nginx}")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_is_graceful_and_the_kubelet_removes_the_pod() {
    let env = Env::start().await;
    let (_agent, _) = start_agent(agent_config(&env, "n1")).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("bye", "n1")).await.unwrap();
    running(&pods, "bye").await;
    pods.delete("bye", &DeleteParams::default()).await.unwrap();
    // Graceful: the object stays with a deletionTimestamp until the kubelet is done with it.
    wait_for("the kubelet deletes the pod", T, || async {
        pods.get_opt("bye").await.ok()?.is_none().then_some(())
    })
    .await;
    let e = find_event(&env.client, "default", "Killing", |e| {
        e.reason.as_deref() == Some("Killing")
    })
    .await;
    assert_eq!(e.message.as_deref(), Some("Stopping container nginx"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_come_through_the_apiserver_and_kubectl_follows_them() {
    let env = Env::start().await;
    let (_agent, _) = start_agent(agent_config(&env, "n1")).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("web", "n1")).await.unwrap();
    running(&pods, "web").await;
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces/default/pods/web/log", env.base);
    let text = http.get(&url).send().await.unwrap().text().await.unwrap();
    assert!(
        text.contains("/docker-entrypoint.sh: Configuration complete; ready for start up"),
        "{text}"
    );
    let tail = http
        .get(format!("{url}?tailLines=1&timestamps=true"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("20"), "timestamps prefix the line: {tail}");
    // An unknown container is a 400 Status.
    let r = http
        .get(format!("{url}?container=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let s: serde_json::Value = r.json().await.unwrap();
    assert_eq!(s["message"], "container nope is not valid for pod web");

    // kubectl logs -f streams: the start-up lines, then a new access line within 5 s.
    let mut child = tokio::process::Command::new("kubectl")
        .args(["--server", &env.base, "logs", "-f", "web"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl on PATH");
    let stdout = child.stdout.take().unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    while !seen.iter().any(|l: &String| l.contains("GET / HTTP/1.1")) {
        let next = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .expect("kubectl logs -f produced an access line in time");
        seen.push(next.unwrap().expect("stream open"));
    }
    assert!(
        seen.iter().any(|l| l.contains("Configuration complete")),
        "{seen:?}"
    );
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_keeps_a_hundred_nodes_ready_with_fresh_leases() {
    let env = Env::start().await;
    let mut cfg = agent_config(&env, "sim");
    cfg.nodes = 100;
    cfg.lease_duration = Duration::from_secs(2);
    let (_agent, _) = start_agent(cfg).await;
    let nodes: Api<Node> = Api::all(&env.client);
    let list = nodes.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), 100);
    assert!(list.iter().all(|n| n
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")));
    let leases: Api<Lease> = Api::namespaced(&env.client, "kube-node-lease");
    let renewed = |l: &Lease| {
        l.spec
            .as_ref()
            .and_then(|s| s.renew_time.clone())
            .map(|t| t.0)
    };
    let first: std::collections::HashMap<String, _> = wait_for("100 leases", T, || async {
        let l = leases.list(&ListParams::default()).await.ok()?.items;
        (l.len() == 100).then(|| {
            l.iter()
                .map(|l| (l.metadata.name.clone().unwrap(), renewed(l)))
                .collect()
        })
    })
    .await;
    // Every lease is renewed (every 0.5 s here) — all nodes heartbeat.
    wait_for("every lease renewed", T, || async {
        let l = leases.list(&ListParams::default()).await.ok()?.items;
        l.iter()
            .all(|l| renewed(l) > first[l.metadata.name.as_ref().unwrap()])
            .then_some(())
    })
    .await;
    // Over h2c the hundred nodes' watches and requests share a connection: HTTP/1.1 took one
    // per watch (a hundred and more). The test's own client and the apiserver's loopback
    // clients hold a few of the rest.
    #[cfg(target_os = "linux")]
    {
        let port: u16 = env.base.rsplit(':').next().unwrap().parse().unwrap();
        let open = established_to(port);
        assert!(open < 30, "{open} connections to the apiserver");
    }
    // Node names and pod CIDRs follow the index.
    let n42 = nodes.get("sim-42").await.unwrap();
    assert_eq!(
        n42.spec.unwrap().pod_cidr.as_deref(),
        Some("10.244.42.0/24")
    );
}

/// Established TCP connections to `port` on 127.0.0.1 (the server's side of each), from
/// `/proc/net/tcp`.
#[cfg(target_os = "linux")]
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local address `0100007F:PORT`, state 01 = ESTABLISHED
            f.len() > 3 && f[1].ends_with(&format!(":{port:04X}")) && f[3] == "01"
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_without_h2c_gets_http1_and_the_nodes_run_pods() {
    let env = Env::start_with(|c| c.limits.http2 = false).await;
    let mut cfg = agent_config(&env, "old");
    cfg.nodes = 20;
    let (_agent, _) = start_agent(cfg).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("p", "old-7")).await.unwrap();
    running(&pods, "p").await;
    // HTTP/1.1: a connection per node watch at least.
    #[cfg(target_os = "linux")]
    {
        let port: u16 = env.base.rsplit(':').next().unwrap().parse().unwrap();
        wait_for("a connection per node watch", T, || async {
            (established_to(port) >= 20).then_some(())
        })
        .await;
    }
}
