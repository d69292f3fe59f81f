//! The seed's flow and what users do with it: kubectl creates the nginx Deployment and a pod
//! reaches `1/1 Running`; the scripted nginx end-to-end; node loss; apiserver restart.

use std::time::Duration;

use rkube_e2e::{wait_for, Cluster, Opts};

const T: Duration = Duration::from_secs(60);

/// `kubectl apply` of a Deployment `name` (label `app=<name>`) running nginx:1.14.2.
fn apply_deployment(c: &Cluster, name: &str, replicas: u32) {
    let path = c.dir.path().join(format!("{name}.yml"));
    std::fs::write(&path, format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: {name}, image: \"nginx:1.14.2\"}}]}}\n"
    )).unwrap();
    c.kubectl_ok(&["apply", "-f", path.to_str().unwrap()]);
}

fn opts(nodes: usize) -> Opts {
    Opts {
        nodes,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_nginx_and_the_pod_runs_through_every_component() {
    let c = Cluster::start(opts(3)).await;
    let before = c
        .metric("store", "rkube_store_txn_total", "shape=\"create\"")
        .await;
    seed_flow(&c).await;
    secure_by_default(&c).await;
    // Deployment, ReplicaSet, Pod (and events) were created as `Txn If mod_revision==0`.
    let creates = c
        .metric("store", "rkube_store_txn_total", "shape=\"create\"")
        .await;
    assert!(
        creates >= before + 3.0,
        "creates as txns: {before} -> {creates}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_nginx_and_the_pod_runs_on_etcd() {
    if !etcd_wanted(true) {
        return;
    }
    // Also the open configuration (plain HTTP, anonymous, AlwaysAllow), which the
    // apiserver's flags still default to.
    let c = Cluster::start(Opts {
        nodes: 3,
        etcd: true,
        insecure: true,
        ..Default::default()
    })
    .await;
    assert!(c.server.starts_with("http://") && c.pki.is_none());
    seed_flow(&c).await;
}

/// The flow above ran on the default, secure configuration: HTTPS, each component with its
/// own certificate, Node+RBAC. Anonymous users see only health; a node sees only its own pods
/// and no secrets; the components' identities are the upstream ones.
async fn secure_by_default(c: &Cluster) {
    assert!(c.server.starts_with("https://"), "{}", c.server);
    rkube_e2e::assert_anonymous_sees_only_health(&c.server, c.pki.as_ref().unwrap()).await;

    let pod_line = c
        .running_pods("app=nginx")
        .pop()
        .expect("a running nginx pod");
    let pod = pod_line.split_whitespace().next().unwrap().to_string();
    let node = c.kubectl_ok(&["get", "po", &pod, "-o", "jsonpath={.spec.nodeName}"]);
    let other = ["node-1", "node-2", "node-3"]
        .into_iter()
        .find(|n| *n != node)
        .unwrap();
    let own = c.kubectl_as(&format!("node-{node}"), &["get", "po", &pod, "-o", "name"]);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let theirs = c.kubectl_as(&format!("node-{other}"), &["get", "po", &pod]);
    let err = String::from_utf8_lossy(&theirs.stderr);
    assert!(
        err.contains(&format!(
            "User \"system:node:{other}\" cannot get resource \"pods\""
        )) && err.contains(&format!(
            "no relationship found between node '{other}' and this object"
        )),
        "{err}"
    );
    let secrets = c.kubectl_as(&format!("node-{node}"), &["get", "secrets", "-A"]);
    assert!(!secrets.status.success());
    // Priority and fairness runs on upstream's FlowSchemas and levels, served as objects.
    let fs = c.kubectl_ok(&["get", "flowschemas"]);
    let row = |text: &str, name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row(&fs, "global-default")[..4],
        ["global-default", "global-default", "9900", "ByUser"]
    );
    let pl = c.kubectl_ok(&["get", "prioritylevelconfigurations"]);
    assert_eq!(
        row(&pl, "workload-low")[..6],
        ["workload-low", "Limited", "100", "128", "6", "50"]
    );
    let sched = c.kubectl_as("scheduler", &["create", "namespace", "nope"]);
    let err = String::from_utf8_lossy(&sched.stderr);
    assert!(
        err.contains("User \"system:kube-scheduler\" cannot create resource \"namespaces\""),
        "{err}"
    );
}

/// One kubelet-agent simulating several nodes gives each its own identity: under the Node
/// authorizer a node may write only its own Node and Lease, so both becoming Ready (and
/// running pods) shows each spoke as itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_several_nodes_speaks_as_each_of_them() {
    let c = Cluster::start(Opts {
        nodes: 1,
        extra_nodes: vec![("multi".into(), vec!["--nodes".into(), "2".into()])],
        ..Default::default()
    })
    .await;
    wait_for("multi-0 and multi-1 Ready", T, || async {
        let out = c.kubectl_ok(&["get", "nodes", "--no-headers"]);
        let ready = |n: &str| {
            out.lines().any(|l| {
                l.starts_with(&format!("{n} ")) && l.split_whitespace().nth(1) == Some("Ready")
            })
        };
        (ready("multi-0") && ready("multi-1")).then_some(())
    })
    .await;
    let lease = c.kubectl_ok(&[
        "get",
        "lease",
        "-n",
        "kube-node-lease",
        "multi-1",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(lease, "multi-1");
    // The process's own kubeconfig (system:node:multi) may not touch them.
    let other = c.kubectl_as("node-multi", &["label", "node", "multi-0", "x=y"]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(
        err.contains("User \"system:node:multi\" cannot get resource \"nodes\"")
            && err.contains("node 'multi' cannot get node 'multi-0'"),
        "{err}"
    );
}

/// kubectl creates the seed's nginx Deployment; one pod shows `1/1 Running` on a node.
async fn seed_flow(c: &Cluster) {
    c.kubectl_ok(&["create", "-f", "e2e/nginx.yml"]);
    let pods = wait_for("nginx 1/1 Running", T, || async {
        let p = c.running_pods("app=nginx");
        (p.len() == 1).then_some(p)
    })
    .await;
    let cols: Vec<&str> = pods[0].split_whitespace().collect();
    assert!(cols[0].starts_with("nginx-deployment-"), "{}", pods[0]);
    assert_eq!(&cols[1..4], ["1/1", "Running", "0"]);
    let wide = c.kubectl_ok(&["get", "po", "-l", "app=nginx", "-o", "wide"]);
    assert!(wide.contains("node-"), "{wide}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_nginx_end_to_end_passes() {
    let c = Cluster::start(opts(3)).await;
    c.run_nginx_script(None);
}

/// False when the etcd variants are switched off (`RKUBE_SKIP_ETCD=1`).
fn etcd_wanted(etcd: bool) -> bool {
    if etcd && std::env::var("RKUBE_SKIP_ETCD").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: RKUBE_SKIP_ETCD=1");
        return false;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_is_tainted_its_pods_move_and_it_comes_back() {
    node_loss(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_is_tainted_its_pods_move_and_it_comes_back_on_etcd() {
    node_loss(true).await;
}

async fn node_loss(etcd: bool) {
    if !etcd_wanted(etcd) {
        return;
    }
    let fast = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut c = Cluster::start(Opts {
        nodes: 3,
        etcd,
        controller_manager: fast(&[
            "--node-monitor-grace-period",
            "2s",
            "--node-monitor-period",
            "200ms",
        ]),
        kubelet: fast(&["--node-lease-duration", "2s"]),
        ..Default::default()
    })
    .await;
    // Three replicas that tolerate an unreachable node for 1 s only.
    let manifest = c.dir.path().join("web.yml");
    std::fs::write(&manifest, r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 1}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 1}
      containers: [{name: web, image: nginx:1.14.2}]
"#).unwrap();
    c.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let pods = wait_for("3 running", T, || async {
        let p = c.running_pods("app=web");
        (p.len() == 3).then_some(p)
    })
    .await;
    let victim_pod = pods[0].split_whitespace().next().unwrap().to_string();
    let node = c.kubectl_ok(&["get", "po", &victim_pod, "-o", "jsonpath={.spec.nodeName}"]);
    // Freeze the node's kubelet, then kill it.
    c.signal(&node, "STOP");
    wait_for("the node NotReady", T, || async {
        let line = c.kubectl_ok(&["get", "node", &node, "--no-headers"]);
        line.contains("NotReady").then_some(())
    })
    .await;
    c.signal(&node, "KILL");
    let taints = c.kubectl_ok(&["get", "node", &node, "-o", "jsonpath={.spec.taints[*].key}"]);
    assert!(
        taints.contains("node.kubernetes.io/unreachable"),
        "{taints}"
    );
    // The pod there is evicted and replaced elsewhere: 3 Running on the other nodes.
    wait_for("3 running on other nodes", T, || async {
        let wide = c.kubectl_ok(&["get", "po", "-l", "app=web", "-o", "wide", "--no-headers"]);
        let running: Vec<&str> = wide
            .lines()
            .filter(|l| l.contains(" Running ") && l.contains("1/1"))
            .collect();
        (running.len() == 3 && running.iter().all(|l| !l.contains(&format!(" {node} "))))
            .then_some(())
    })
    .await;
    // The kubelet comes back: the node is Ready and untainted again.
    c.kill(&node).await;
    c.start_proc(&node).await;
    wait_for("the node Ready again", T, || async {
        let line = c.kubectl_ok(&["get", "node", &node, "--no-headers"]);
        let taints = c.kubectl_ok(&["get", "node", &node, "-o", "jsonpath={.spec.taints}"]);
        (line.split_whitespace().nth(1) == Some("Ready") && !taints.contains("unreachable"))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_resume_their_watches_after_an_apiserver_restart_without_relisting() {
    apiserver_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_resume_their_watches_after_an_apiserver_restart_without_relisting_on_etcd() {
    apiserver_restart(true).await;
}

async fn apiserver_restart(etcd: bool) {
    if !etcd_wanted(etcd) {
        return;
    }
    let mut c = Cluster::start(Opts {
        nodes: 2,
        etcd,
        ..Default::default()
    })
    .await;
    apply_deployment(&c, "before", 2);
    wait_for("2 running", T, || async {
        (c.running_pods("app=before").len() == 2).then_some(())
    })
    .await;
    let components = ["controller-manager", "scheduler", "node-1", "node-2"];
    let mut relists = 0.0;
    for n in components {
        relists += c.metric(n, "reflector_relists_total", "").await;
    }
    assert_eq!(relists, 0.0);
    c.stop("apiserver").await;
    c.start_proc("apiserver").await;
    // Everything still flows, through watches resumed from their last resourceVersions.
    apply_deployment(&c, "after", 2);
    wait_for("2 more running", T, || async {
        (c.running_pods("app=after").len() == 2).then_some(())
    })
    .await;
    let mut watches = 0.0;
    for n in components {
        assert_eq!(
            c.metric(n, "reflector_relists_total", "").await,
            0.0,
            "{n} re-listed"
        );
        watches += c.metric(n, "reflector_watches_total", "").await;
    }
    assert!(watches > 0.0);
}

/// The scripted nginx flow with every stock kubectl from 1.27 to 1.33 (those beside the one on
/// PATH), one after another on one cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_from_1_27_to_1_33_runs_the_scripted_flow() {
    let which = std::process::Command::new("sh")
        .args(["-c", "dirname \"$(readlink -f \"$(command -v kubectl)\")\""])
        .output()
        .unwrap();
    let dir = String::from_utf8_lossy(&which.stdout).trim().to_string();
    let versions: Vec<String> = (27..=33)
        .map(|m| format!("{dir}/kubectl.1.{m}"))
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    if versions.is_empty() {
        eprintln!("SKIPPED: no kubectl.1.27 … kubectl.1.33 beside kubectl in {dir}");
        return;
    }
    let c = Cluster::start(opts(3)).await;
    for kubectl in versions {
        c.run_nginx_script(Some(&kubectl));
    }
}
