//! Hostile input against the real binaries, each request with a timeout: bodies, patches,
//! parameters and paths built to take the apiserver down or past its checks; slow and idle
//! connections; a confused request chain; node status aimed at other hosts; etcd-API abuse
//! on the store. After each group: both servers answer health, everything stored still
//! decodes, and every refusal was a proper `Status` (or etcd's error JSON) — never a 5xx from a
//! panic, never a hang.

use std::time::Duration;

use rkube_e2e::{free_port, wait_for, Cluster, Opts};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every request of these tests must be answered within this.
const T: Duration = Duration::from_secs(30);

/// What a request got: its status code, the parsed body, and its headers.
struct Answer {
    code: u16,
    body: Value,
    headers: reqwest::header::HeaderMap,
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let resp = tokio::time::timeout(T, req.send())
        .await
        .expect("answered in time")
        .expect("a response");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = tokio::time::timeout(T, resp.bytes())
        .await
        .expect("body in time")
        .unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        code,
        body,
        headers,
    }
}

/// A refusal: the code, and a `kind: Status` body with it.
fn refused(a: &Answer, code: u16) -> String {
    assert_eq!(a.code, code, "{}", a.body);
    assert_eq!(a.body["kind"], "Status", "{}", a.body);
    assert_eq!(a.body["code"], code, "{}", a.body);
    a.body["message"].as_str().unwrap_or("").to_string()
}

/// Both servers healthy, and every object of the core and apps resources decodes.
async fn assert_healthy(c: &Cluster) {
    let http = c.http();
    let ready = send(http.get(format!("{}/readyz", c.server))).await;
    assert_eq!(ready.code, 200, "apiserver /readyz");
    let store = send(c.store_http().get(format!("{}/health", c.store_url))).await;
    assert_eq!(store.code, 200, "store /health");
    assert_eq!(store.body["health"], "true");
    for path in [
        "/api/v1/pods",
        "/api/v1/configmaps",
        "/api/v1/nodes",
        "/api/v1/namespaces",
        "/apis/apps/v1/deployments",
        "/apis/rbac.authorization.k8s.io/v1/roles",
    ] {
        let list = send(http.get(format!("{}{path}", c.server))).await;
        assert_eq!(list.code, 200, "{path}: {}", list.body);
        assert!(list.body["items"].is_array(), "{path} decodes");
    }
    // kubectl (Go's decoder) reads them too.
    c.kubectl_ok(&["get", "pods,configmaps,nodes", "-A"]);
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}})
}

/// `{"a":{"a":…}}` nested `levels` deep.
fn nested(levels: usize) -> String {
    let mut s = String::new();
    for _ in 0..levels {
        s.push_str("{\"a\":");
    }
    s.push('1');
    for _ in 0..levels {
        s.push('}');
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_patches_parameters_and_paths_are_refused_cleanly() {
    let c = Cluster::start(Opts::default()).await;
    let http = c.http();
    let cms = format!("{}/api/v1/namespaces/default/configmaps", c.server);
    let post = |body: String, query: &str| {
        http.post(format!("{cms}{query}"))
            .header("content-type", "application/json")
            .body(body)
    };

    // Duplicate-key bombs: a huge key with 200k duplicate children (object and array). A 1 MB
    // key is refused outright; one just under the key limit is decoded and reported on.
    let mut huge_key = format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"dup\"}},\"{}\":{{", "k".repeat(1 << 20));
    for i in 0..200_000 {
        huge_key.push_str(if i == 0 { "\"d\":1" } else { ",\"d\":1" });
    }
    huge_key.push_str("}}");
    let m = refused(&send(post(huge_key, "")).await, 400);
    assert!(m.contains("a key is 1048576 bytes long"), "{m}");
    let big = "k".repeat(60 * 1024);
    let mut dup = format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"dup\"}},\"{big}\":{{");
    for i in 0..200_000 {
        dup.push_str(if i == 0 { "\"d\":1" } else { ",\"d\":1" });
    }
    dup.push_str("}}");
    let strict = send(post(dup.clone(), "?fieldValidation=Strict")).await;
    let m = refused(&strict, 400);
    assert!(m.starts_with("strict decoding error"), "{m}");
    assert!(m.len() < 200_000, "reports are bounded: {} bytes", m.len());
    let warn = send(post(dup, "")).await;
    assert_eq!(warn.code, 201, "{}", warn.body);
    let warnings: Vec<_> = warn.headers.get_all("warning").iter().collect();
    assert!(
        !warnings.is_empty() && warnings.len() <= 100,
        "{}",
        warnings.len()
    );
    assert!(
        warnings.iter().all(|w| w.len() < 1024),
        "warnings are bounded"
    );
    let mut arr = format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"dup-array\"}},\"{big}\":[");
    for i in 0..100_000 {
        arr.push_str(if i == 0 {
            "{\"a\":1,\"a\":2}"
        } else {
            ",{\"a\":1,\"a\":2}"
        });
    }
    arr.push_str("]}");
    refused(&send(post(arr, "?fieldValidation=Strict")).await, 400);

    // Too deep, too big, not JSON, not protobuf.
    refused(&send(post(nested(150), "")).await, 400);
    let m = refused(
        &send(post(
            format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"x\":{}}}", nested(100)),
            "",
        ))
        .await,
        400,
    );
    assert!(m.contains("nested"), "{m}");
    refused(&send(post("x".repeat(4 << 20), "")).await, 413);
    refused(&send(post("{\"apiVersion\":".into(), "")).await, 400);
    let pb = http
        .post(&cms)
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(b"k8s\x00\x0a\xff\xff\xff\xff\x0f garbage".to_vec());
    refused(&send(pb).await, 400);

    // JSON patch bombs.
    assert_eq!(
        send(post(configmap("target").to_string(), "")).await.code,
        201
    );
    let target = format!("{cms}/target");
    let json_patch = |ops: Value, query: &str| {
        http.patch(format!("{target}{query}"))
            .header("content-type", "application/json-patch+json")
            .body(ops.to_string())
    };
    let into_itself = json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "x"}},
        {"op": "copy", "from": "/metadata", "path": "/metadata/annotations/m"}]);
    let m = refused(&send(json_patch(into_itself.clone(), "")).await, 422);
    assert!(m.contains("inside"), "{m}");
    refused(&send(json_patch(into_itself, "?dryRun=All")).await, 422);
    let mut path = String::from("/data");
    let mut chain = Vec::new();
    for _ in 0..150 {
        path.push_str("/n");
        chain.push(json!({"op": "add", "path": path, "value": {}}));
    }
    // (`data` must stay a map of strings; what matters is that nothing deep is built.)
    let a = send(json_patch(Value::Array(chain), "")).await;
    assert!(matches!(a.code, 400 | 422), "{}", a.body);
    let many: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "ConfigMap"}))
        .collect();
    refused(&send(json_patch(Value::Array(many), "")).await, 413);
    let merge = http
        .patch(&target)
        .header("content-type", "application/merge-patch+json")
        .body(format!(
            "{{\"metadata\":{{\"annotations\":null}},\"x\":{}}}",
            nested(110)
        ));
    let a = send(merge).await;
    assert!(matches!(a.code, 400 | 422), "{}", a.body);

    // Quantities that do not fit, or are not quantities.
    let pod = |name: &str, cpu: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}})
    };
    let pods = format!("{}/api/v1/namespaces/default/pods", c.server);
    for bad in ["99999999999999999999999Ei", "lots", "-1"] {
        let a = send(http.post(&pods).json(&pod("q", bad))).await;
        let m = refused(&a, 422);
        assert!(m.contains("resources.requests"), "{m}");
    }

    // Numeric parameters out of range.
    for q in [
        "limit=1e30",
        "limit=99999999999999999999",
        "timeoutSeconds=99999999999999999999",
        "resourceVersion=-5",
        "resourceVersion=99999999999999999999",
    ] {
        refused(&send(http.get(format!("{cms}?{q}"))).await, 400);
    }
    // A grace period of ten thousand years is clamped; the pod stays decodable.
    let scheduled = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "grace"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]}});
    assert_eq!(send(http.post(&pods).json(&scheduled)).await.code, 201);
    let del = send(http.delete(format!("{pods}/grace?gracePeriodSeconds=300000000000"))).await;
    assert_eq!(del.code, 200, "{}", del.body);
    let ts = del.body["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let year: i64 = ts[..4].parse().unwrap();
    assert!(ts.len() == 20 && (2026..=9999).contains(&year), "{ts}");
    refused(
        &send(http.delete(format!(
            "{pods}/grace?gracePeriodSeconds=99999999999999999999"
        )))
        .await,
        400,
    );

    // One meaning per request.
    refused(&send(http.get(format!("{cms}?watch=1&watch=0"))).await, 400);
    refused(
        &send(http.get(format!("{cms}?watch=true&watch=true"))).await,
        400,
    );
    refused(
        &send(post(
            configmap("twice").to_string(),
            "?dryRun=All&dryRun=All",
        ))
        .await,
        400,
    );

    // Subresources serve only their own verbs.
    refused(
        &send(http.delete(format!("{pods}/grace/status"))).await,
        405,
    );
    refused(
        &send(http.post(format!("{pods}/grace")).json(&scheduled)).await,
        405,
    );
    refused(&send(http.put(&pods).json(&scheduled)).await, 405);
    refused(&send(http.get(format!("{pods}/grace/binding"))).await, 405);
    refused(&send(http.get(format!("{pods}/grace/bogus"))).await, 404);
    refused(
        &send(
            http.post(format!("{cms}/target/status"))
                .json(&configmap("x")),
        )
        .await,
        404,
    );

    // Odd paths and encodings.
    refused(&send(http.get(format!("{pods}/a%2Fb"))).await, 400);
    refused(
        &send(http.get(format!("{}/api//v1/widgets", c.server))).await,
        404,
    );
    let long = send(http.get(format!("{pods}/{}", "a".repeat(60_000)))).await;
    assert!(matches!(long.code, 400 | 404 | 414 | 431), "{}", long.code);
    // Selectors: a huge one is refused, a large one works.
    let huge: Vec<String> = (0..5_000).map(|i| format!("k{i}=v")).collect();
    refused(
        &send(http.get(format!("{pods}?labelSelector={}", huge.join(",")))).await,
        400,
    );
    let large: Vec<String> = (0..2_000).map(|i| format!("k{i}=v")).collect();
    let a = send(http.get(format!("{pods}?labelSelector={}", large.join(",")))).await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.body["items"].as_array().unwrap().len(), 0);

    assert_healthy(&c).await;
}

/// A token file for users the tests act as.
fn token_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("tokens.csv");
    std::fs::write(
        &p,
        "lister-token,lister,1001\npatcher-token,patcher,1002\nleaser-token,leaser,1003\n",
    )
    .unwrap();
    p
}

const POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: pod-lister}
rules:
- {apiGroups: [""], resources: ["pods"], verbs: ["list"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lister-lists-pods}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: pod-lister}
subjects: [{kind: User, name: lister, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-writer, namespace: team}
rules:
- {apiGroups: [rbac.authorization.k8s.io], resources: ["roles", "rolebindings"], verbs: ["create", "get"]}
- {apiGroups: [""], resources: ["configmaps"], verbs: ["get", "patch"]}
- {apiGroups: [coordination.k8s.io], resources: ["leases"], verbs: ["get", "update"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-writers, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-writer}
subjects:
- {kind: User, name: lister, apiGroup: rbac.authorization.k8s.io}
- {kind: User, name: patcher, apiGroup: rbac.authorization.k8s.io}
- {kind: User, name: leaser, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: one-pod, namespace: team}
spec: {hard: {pods: "1"}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_chain_cannot_be_confused_or_escalated() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path());
    let c = Cluster::start(Opts {
        apiserver: vec!["--token-auth-file".into(), tokens.to_str().unwrap().into()],
        ..Default::default()
    })
    .await;
    let policy = c.dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    c.kubectl_ok(&["apply", "-f", policy.to_str().unwrap()]);
    let pki = c.pki.clone().unwrap();
    let anon = rkube_e2e::https_client(&pki, false);
    let as_user = |who: &str, req: reqwest::RequestBuilder| req.bearer_auth(format!("{who}-token"));
    let _ = &anon;
    let server = c.server.clone();

    // `?watch` is a watch for RBAC as for the handler: a user who may only list is refused.
    wait_for("RBAC sees the binding", T, || async {
        let a = send(as_user("lister", anon.get(format!("{server}/api/v1/pods")))).await;
        (a.code == 200).then_some(())
    })
    .await;
    let a = send(as_user(
        "lister",
        anon.get(format!("{server}/api/v1/pods?watch")),
    ))
    .await;
    let m = refused(&a, 403);
    assert!(m.contains("cannot watch resource \"pods\""), "{m}");
    let a = send(as_user(
        "lister",
        anon.get(format!("{server}/api/v1/pods?watch=1&watch=0")),
    ))
    .await;
    refused(&a, 400);

    // Server-side apply and PUT that create need `create`.
    let cm = format!("{server}/api/v1/namespaces/team/configmaps/applied?fieldManager=patcher");
    let apply = as_user(
        "patcher",
        anon.patch(&cm)
            .header("content-type", "application/apply-patch+yaml")
            .body("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {a: \"1\"}\n"),
    );
    let m = refused(&send(apply).await, 403);
    assert!(m.contains("cannot create resource \"configmaps\""), "{m}");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l1"}, "spec": {}});
    let put = as_user(
        "leaser",
        anon.put(format!(
            "{server}/apis/coordination.k8s.io/v1/namespaces/team/leases/l1"
        ))
        .json(&lease),
    );
    let m = refused(&send(put).await, 403);
    assert!(m.contains("cannot create resource \"leases\""), "{m}");

    // Apply-create is admitted like any create: quota counts it.
    let http = c.http();
    let pod = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: [{{name: c, image: nginx}}]}}\n")
    };
    let apply_pod = |name: &str| {
        http.patch(format!(
            "{server}/api/v1/namespaces/team/pods/{name}?fieldManager=admin"
        ))
        .header("content-type", "application/apply-patch+yaml")
        .body(pod(name))
    };
    wait_for("the quota is counted", T, || async {
        let q = send(http.get(format!(
            "{server}/api/v1/namespaces/team/resourcequotas/one-pod"
        )))
        .await;
        q.body["status"]["used"]["pods"].is_string().then_some(())
    })
    .await;
    let first = send(apply_pod("first")).await;
    assert_eq!(first.code, 201, "{}", first.body);
    let m = refused(&send(apply_pod("second")).await, 403);
    assert!(m.contains("exceeded quota: one-pod"), "{m}");
    // Defaults and tolerations from admission on the applied pod.
    assert!(first.body["spec"]["tolerations"]
        .as_array()
        .is_some_and(|t| t.len() == 2));

    // Only the apiserver gets into storage: another certificate from the same CA does not.
    let as_node = rkube_e2e::https_client_as(&pki, Some("node-node-1"));
    let a = send(
        as_node
            .post(format!("{}/v3/kv/range", c.store_url))
            .json(&json!({"key": "AA==", "range_end": "AA=="})),
    )
    .await;
    assert_eq!(a.code, 401, "{}", a.body);
    assert_eq!(a.body["code"], 16);
    let a = send(
        c.store_http()
            .post(format!("{}/v3/kv/range", c.store_url))
            .json(&json!({"key": "AA==", "count_only": true})),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);

    // RBAC escalation: rules held may be granted, others not; bindings likewise.
    let roles = format!("{server}/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles");
    let role = |name: &str, verbs: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})
    };
    let ok = send(as_user(
        "lister",
        anon.post(&roles).json(&role("may-list", json!(["list"]))),
    ))
    .await;
    assert_eq!(ok.code, 201, "{}", ok.body);
    let a = send(as_user(
        "lister",
        anon.post(&roles)
            .json(&role("may-delete", json!(["list", "delete"]))),
    ))
    .await;
    let m = refused(&a, 403);
    assert!(
        m.contains("is attempting to grant RBAC permissions not currently held")
            && m.contains("{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"),
        "{m}"
    );
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "admin-me"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "lister", "apiGroup": "rbac.authorization.k8s.io"}]});
    let a = send(as_user(
        "lister",
        anon.post(format!(
            "{server}/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings"
        ))
        .json(&binding),
    ))
    .await;
    refused(&a, 403);

    // NodeRestriction: a node changes only itself, and not its role labels; its addresses
    // must be addresses.
    let as_node = |args: &[&str]| c.kubectl_as("node-node-1", args);
    let out = as_node(&[
        "label",
        "node",
        "node-1",
        "node-role.kubernetes.io/control-plane=",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not allowed to modify labels: node-role.kubernetes.io/control-plane"),
        "{err}"
    );
    // A node binds no pods (binding is the scheduler's), and evicts only its own.
    let http_node = rkube_e2e::https_client_as(&pki, Some("node-node-1"));
    let unbound = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unbound"},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "nginx"}]}});
    let pods = format!("{server}/api/v1/namespaces/default/pods");
    assert_eq!(send(http.post(&pods).json(&unbound)).await.code, 201);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "unbound"},
        "target": {"kind": "Node", "name": "node-1"}});
    let a = send(
        http_node
            .post(format!("{pods}/unbound/binding"))
            .json(&binding),
    )
    .await;
    refused(&a, 403);
    let out = as_node(&["label", "node", "node-1", "example.com/rack=r1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_node(&[
        "patch",
        "node",
        "node-1",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"169.254.169.254/latest"}]}}"#,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be a valid IP address"));

    assert_healthy(&c).await;
}

/// A raw HTTP/1.1 connection to `addr`.
async fn raw(addr: &str) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

/// Reads until the server closes the connection; Err when still open after `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Result<(), ()> {
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .map_err(|_| ())
}

/// Answers every request with a redirect to `to`, counting them.
async fn redirector(to: String) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    serve_fixed(format!(
        "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    ))
    .await
}

/// Answers every request with `response`, counting them.
async fn serve_fixed(response: String) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(response.as_bytes()).await;
            });
        }
    });
    (port, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_idle_and_curious_clients_are_bounded() {
    let c = Cluster::start(Opts {
        insecure: true,
        apiserver: vec![
            "--http-header-read-timeout".into(),
            "1s".into(),
            "--http-idle-timeout".into(),
            "2s".into(),
        ],
        ..Default::default()
    })
    .await;
    let http = reqwest::Client::new();
    let addr = c.server.trim_start_matches("http://").to_string();

    // Slow-loris headers: cut off after the header timeout.
    let mut loris = raw(&addr).await;
    loris
        .write_all(b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nX-1: ")
        .await
        .unwrap();
    closed_within(&mut loris, Duration::from_secs(10))
        .await
        .expect("closed");

    // Hundreds of idle connections: others are still served, and the idle ones are closed.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(raw(&addr).await);
    }
    let a = send(http.get(format!("{}/api/v1/namespaces", c.server))).await;
    assert_eq!(a.code, 200);
    for s in idle.iter_mut().take(5) {
        closed_within(s, Duration::from_secs(10))
            .await
            .expect("idle closed");
    }
    drop(idle);

    // Slow uploads hold no seat: 50 bodies that never finish, then a read goes through.
    let mut uploads = Vec::new();
    for i in 0..50 {
        let mut s = raw(&addr).await;
        let head = format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"metadata\":{{\"name\":\"slow-{i}\"}}"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        uploads.push(s);
    }
    let a = send(http.get(format!("{}/api/v1/namespaces/default/configmaps", c.server))).await;
    assert_eq!(a.code, 200, "{}", a.body);
    // The stalled uploads are answered 408 and closed.
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), uploads[0].read(&mut buf))
        .await
        .expect("the stalled upload is answered")
        .unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("408"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    drop(uploads);

    // A watch nobody reads still ends at its deadline.
    let before = c
        .metric("apiserver", "apiserver_longrunning_requests", "")
        .await;
    let mut unread = raw(&addr).await;
    unread
        .write_all(b"GET /api/v1/pods?watch=1&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    wait_for("the watch is open", T, || async {
        (c.metric("apiserver", "apiserver_longrunning_requests", "")
            .await
            > before)
            .then_some(())
    })
    .await;
    wait_for("the unread watch ended", T, || async {
        (c.metric("apiserver", "apiserver_longrunning_requests", "")
            .await
            <= before)
            .then_some(())
    })
    .await;
    drop(unread);

    // pods/log goes where the node says, but follows no redirect and passes no body on.
    let (secret_port, secret_hits) =
        serve_fixed("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nTOPSECRET".into()).await;
    let (redirect_port, redirect_hits) =
        redirector(format!("http://127.0.0.1:{secret_port}/")).await;
    let pods = format!("{}/api/v1/namespaces/default/pods", c.server);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "logme"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]}});
    assert_eq!(send(http.post(&pods).json(&pod)).await.code, 201);
    // The agent keeps writing its own status; point the node elsewhere until a log request
    // has gone there.
    let aim = json!({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": redirect_port}}}});
    wait_for("a log request reaches the redirector", T, || async {
        let _ = send(
            http.patch(format!("{}/api/v1/nodes/node-1/status", c.server))
                .header("content-type", "application/merge-patch+json")
                .body(aim.to_string()),
        )
        .await;
        let a = send(http.get(format!("{pods}/logme/log"))).await;
        assert!(!a.body.to_string().contains("TOPSECRET"));
        (redirect_hits.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(a)
    })
    .await;
    assert_eq!(
        secret_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no redirect followed"
    );
    // Not an address: refused when written.
    let bad =
        json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1:9/x?"}]}});
    let a = send(
        http.patch(format!("{}/api/v1/nodes/node-1/status", c.server))
            .header("content-type", "application/merge-patch+json")
            .body(bad.to_string()),
    )
    .await;
    refused(&a, 422);

    // etcd-API abuse on the store: garbage, op floods, huge ranges; it keeps answering.
    let store = &c.store_url;
    let a = send(
        http.post(format!("{store}/v3/kv/put"))
            .body(r#"{"key":"!!!not base64","value":"eA=="}"#),
    )
    .await;
    assert_eq!(a.code, 400, "{}", a.body);
    assert!(a.body["error"].is_string() && a.body["code"].is_number());
    let ops: Vec<Value> = (0..500)
        .map(|i| json!({"request_put": {"key": base64_of(&format!("k{i}")), "value": "eA=="}}))
        .collect();
    let a = send(
        http.post(format!("{store}/v3/kv/txn"))
            .json(&json!({"success": ops})),
    )
    .await;
    assert_eq!(a.code, 400, "{}", a.body);
    assert_eq!(
        a.body["error"],
        "etcdserver: too many operations in txn request"
    );
    let a = send(
        http.post(format!("{store}/v3/kv/range"))
            .json(&json!({"key": "AA==", "range_end": "AA=="})),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert!(a.body["count"].as_str().unwrap().parse::<u64>().unwrap() > 10);
    let a = send(
        http.post(format!("{store}/v3/lease/grant"))
            .json(&json!({"TTL": "99999999999999"})),
    )
    .await;
    assert!(a.code >= 400 && a.code < 500, "{}", a.body);

    let ready = send(http.get(format!("{}/readyz", c.server))).await;
    assert_eq!(ready.code, 200);
    let health = send(http.get(format!("{store}/health"))).await;
    assert_eq!(health.code, 200);
    c.kubectl_ok(&["get", "pods,configmaps,nodes", "-A"]);
    let _ = free_port();
}

fn base64_of(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.iter().fold(0u32, |a, x| (a << 8) | *x as u32) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
