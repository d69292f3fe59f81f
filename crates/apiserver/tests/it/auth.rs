//! The request chain's identity steps against a real apiserver: static tokens, anonymous
//! requests, RBAC with the bootstrap policy and bindings made at runtime, the Node authorizer,
//! SelfSubjectAccessReview, and bad configuration refused at startup.

use std::time::Duration;

use rkube_apiserver::auth::Mode;
use serde_json::{json, Value};

use crate::harness::{Backend, Cluster};

const TOKENS: &str = "admin-token,admin,1,\"system:masters\"\nalice-token,alice,2\nn1-token,system:node:n1,3,system:nodes\n";

/// A client of one apiserver speaking as one token (or none).
struct As<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    token: Option<&'a str>,
}

impl As<'_> {
    async fn req(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(m, format!("{}{path}", self.base));
        if let Some(t) = self.token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            let ct = if method == "PATCH" {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            r = r
                .header("content-type", ct)
                .body(serde_json::to_vec(b).unwrap());
        }
        let resp = r.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Retries until the answer has `code` (the RBAC and Node authorizers read the watch
    /// cache, which follows storage within moments).
    async fn eventually(&self, method: &str, path: &str, body: Option<&Value>, code: u16) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (got, v) = self.req(method, path, body).await;
            if got == code {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{method} {path}: {got} {v}, want {code}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
        }
    }
}

fn token_file(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("tokens.csv");
    std::fs::write(&path, text).unwrap();
    path
}

/// A second apiserver on `c`'s storage with TOKENS, `anonymous` and `modes`; ready once
/// `/readyz` answers `ready_as`.
async fn secured(
    c: &Cluster,
    anonymous: bool,
    modes: Vec<Mode>,
    ready_as: Option<&str>,
) -> (String, rkube_daemon::ShutdownToken, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), TOKENS);
    let (base, stop) = c
        .apiserver_with(
            |cfg| {
                cfg.auth.token_file = Some(tokens);
                cfg.auth.anonymous = anonymous;
                cfg.auth.modes = modes;
            },
            ready_as,
        )
        .await;
    (base, stop, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rbac_and_the_node_authorizer() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let (base, _stop, _dir) = secured(&c, true, vec![Mode::Node, Mode::Rbac], None).await;
    let who = |token: Option<&'static str>| As {
        http: &c.http,
        base: &base,
        token,
    };
    let (admin, alice, n1, anon) = (
        who(Some("admin-token")),
        who(Some("alice-token")),
        who(Some("n1-token")),
        who(None),
    );

    // Authentication: a wrong token is 401 even with anonymous requests allowed.
    let (code, v) = who(Some("wrong")).req("GET", "/api/v1/pods", None).await;
    assert_eq!(
        (code, v["reason"].as_str()),
        (401, Some("Unauthorized")),
        "{v}"
    );
    // Anonymous: public info yes, resources no, with upstream's message.
    assert_eq!(anon.req("GET", "/version", None).await.0, 200);
    let (code, v) = anon
        .req("GET", "/api/v1/namespaces/default/pods", None)
        .await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(v["details"]["kind"], "pods");

    // The bootstrap policy: system:masters may do anything.
    let (code, v) = admin
        .req(
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
            None,
        )
        .await;
    assert_eq!(code, 200, "{v}");
    admin
        .req(
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"metadata": {"name": "team"}})),
        )
        .await;
    // alice: discovery and SelfSubjectAccessReview, nothing else.
    assert_eq!(alice.req("GET", "/apis", None).await.0, 200);
    let (code, v) = alice
        .req("GET", "/apis/apps/v1/namespaces/team/deployments/web", None)
        .await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "deployments.apps \"web\" is forbidden: User \"alice\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"team\""
    );
    let review = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}})
    };
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, v) = alice.req("POST", ssar, Some(&review("list", "team"))).await;
    assert_eq!(
        (code, v["status"]["allowed"].as_bool()),
        (201, Some(false)),
        "{v}"
    );

    // A RoleBinding to `view` in team: alice may read there, not write, not elsewhere.
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-view", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]});
    let (code, v) = admin
        .req(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
            Some(&binding),
        )
        .await;
    assert_eq!(code, 201, "{v}");
    alice
        .eventually("GET", "/api/v1/namespaces/team/pods", None, 200)
        .await;
    assert_eq!(
        alice
            .req("GET", "/api/v1/namespaces/default/pods", None)
            .await
            .0,
        403
    );
    let pod = |name: &str, node: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}})
    };
    assert_eq!(
        alice
            .req(
                "POST",
                "/api/v1/namespaces/team/pods",
                Some(&pod("x", "n1"))
            )
            .await
            .0,
        403
    );
    let (_, v) = alice.req("POST", ssar, Some(&review("list", "team"))).await;
    assert_eq!(v["status"]["allowed"], true, "{v}");
    let (_, v) = alice
        .req("POST", ssar, Some(&review("delete", "team")))
        .await;
    assert_eq!(v["status"]["allowed"], false, "{v}");

    // The Node authorizer: n1 registers itself and touches only its own pods.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    assert_eq!(n1.req("POST", "/api/v1/nodes", Some(&node)).await.0, 201);
    let (code, v) = n1
        .req(
            "PATCH",
            "/api/v1/nodes/n2/status",
            Some(&json!({"status": {}})),
        )
        .await;
    assert_eq!(code, 403);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .ends_with(": node 'n1' cannot patch node 'n2'"),
        "{v}"
    );
    for (name, node) in [("mine", "n1"), ("theirs", "n2")] {
        assert_eq!(
            admin
                .req(
                    "POST",
                    "/api/v1/namespaces/default/pods",
                    Some(&pod(name, node))
                )
                .await
                .0,
            201
        );
    }
    n1.eventually("GET", "/api/v1/namespaces/default/pods/mine", None, 200)
        .await;
    let (code, v) = n1
        .req("GET", "/api/v1/namespaces/default/pods/theirs", None)
        .await;
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        "pods \"theirs\" is forbidden: User \"system:node:n1\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    let status = json!({"status": {"phase": "Running"}});
    assert_eq!(
        n1.req(
            "PATCH",
            "/api/v1/namespaces/default/pods/mine/status",
            Some(&status)
        )
        .await
        .0,
        200
    );
    assert_eq!(
        n1.req(
            "PATCH",
            "/api/v1/namespaces/default/pods/theirs/status",
            Some(&status)
        )
        .await
        .0,
        403
    );
    assert_eq!(
        n1.req("GET", "/api/v1/secrets", None).await.0,
        403,
        "RBAC gives nodes no secrets"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_anonymous_requests_need_credentials() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let (base, _stop, _dir) = secured(&c, false, vec![Mode::Rbac], Some("admin-token")).await;
    let (code, v) = As {
        http: &c.http,
        base: &base,
        token: None,
    }
    .req("GET", "/version", None)
    .await;
    assert_eq!(
        (code, v["message"].as_str()),
        (401, Some("Unauthorized")),
        "{v}"
    );
    let (code, _) = As {
        http: &c.http,
        base: &base,
        token: Some("admin-token"),
    }
    .req("GET", "/api/v1/pods", None)
    .await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_token_file_stops_startup_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = rkube_apiserver::Config::new(vec!["http://127.0.0.1:1".into()]);
    cfg.auth.token_file = Some(token_file(dir.path(), "good,u,1\nbad-line\n"));
    cfg.storage_timeout = Duration::from_millis(1);
    // Storage is checked first; give it a reachable one so the token file is what fails.
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    cfg.etcd_servers = vec![c.storage_url.clone()];
    cfg.storage_timeout = Duration::from_secs(30);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = rkube_apiserver::run(cfg, listener, rkube_daemon::ShutdownToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
    assert!(Mode::parse_list("RBAC,Magic")
        .unwrap_err()
        .contains("Magic"));
}

/// An audit Policy file with `body` after its apiVersion and kind.
fn policy_file(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("policy.yaml");
    std::fs::write(
        &path,
        format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{body}"),
    )
    .unwrap();
    path
}

/// Audit events from a file, as JSON values.
fn audit_events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON event"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_holds_one_complete_event_per_request() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(
        dir.path(),
        "omitManagedFields: true\nrules:\n- level: None\n  nonResourceURLs: [\"/readyz\"]\n- level: RequestResponse\n  resources:\n  - group: \"\"\n    resources: [configmaps]\n- level: Metadata\n",
    );
    let log = dir.path().join("audit.log");
    let tokens = token_file(dir.path(), TOKENS);
    let (base, stop) = c
        .apiserver_with(
            |cfg| {
                cfg.auth.token_file = Some(tokens);
                cfg.auth.modes = vec![Mode::Rbac];
                cfg.audit.policy_file = Some(policy);
                cfg.audit.log_path = Some(log.clone());
            },
            None,
        )
        .await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "audited"}, "data": {"k": "v"}});
    // Four requests as admin, their Audit-Id headers collected.
    let mut ids = Vec::new();
    for (method, path, body) in [
        ("POST", "/api/v1/namespaces/default/configmaps", Some(&cm)),
        ("GET", "/api/v1/namespaces/default/configmaps/audited", None),
        ("GET", "/api/v1/namespaces/default/pods", None),
        (
            "DELETE",
            "/api/v1/namespaces/default/configmaps/audited",
            None,
        ),
    ] {
        let mut r = c.http.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{base}{path}"),
        );
        r = r.bearer_auth("admin-token");
        if let Some(b) = body {
            r = r.json(b);
        }
        let resp = r.send().await.unwrap();
        ids.push(resp.headers()["audit-id"].to_str().unwrap().to_string());
    }
    // A forbidden request is audited too, with the client's own Audit-ID.
    let resp = c
        .http
        .get(format!("{base}/api/v1/secrets"))
        .header("audit-id", "my-own-id")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.headers()["audit-id"], "my-own-id");
    ids.push("my-own-id".into());
    stop.cancel();
    // Wait for the apiserver to stop and flush.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let events = loop {
        let events = audit_events(&log);
        let complete = events
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete")
            .count();
        if complete >= ids.len() || tokio::time::Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    };
    for id in &ids {
        let complete: Vec<&Value> = events
            .iter()
            .filter(|e| e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete")
            .collect();
        assert_eq!(
            complete.len(),
            1,
            "one ResponseComplete for {id}: {events:?}"
        );
        let received = events
            .iter()
            .filter(|e| e["auditID"] == id.as_str() && e["stage"] == "RequestReceived")
            .count();
        assert_eq!(received, 1, "one RequestReceived for {id}");
    }
    let by_id = |id: &str| {
        events
            .iter()
            .find(|e| e["auditID"] == id && e["stage"] == "ResponseComplete")
            .unwrap()
    };
    let create = by_id(&ids[0]);
    assert_eq!(create["level"], "RequestResponse");
    assert_eq!(create["verb"], "create");
    assert_eq!(create["user"]["username"], "admin");
    assert_eq!(create["objectRef"]["resource"], "configmaps");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["requestObject"]["data"]["k"], "v");
    assert_eq!(create["responseObject"]["metadata"]["name"], "audited");
    assert!(
        create["responseObject"]["metadata"]
            .get("managedFields")
            .is_none(),
        "omitManagedFields"
    );
    let list = by_id(&ids[2]);
    assert_eq!(
        (list["level"].as_str(), list["verb"].as_str()),
        (Some("Metadata"), Some("list"))
    );
    assert!(list.get("responseObject").is_none());
    let forbidden = by_id("my-own-id");
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(forbidden["user"]["username"], "system:anonymous");
    // /readyz polls (level None) left no trace.
    assert!(events.iter().all(|e| e["requestURI"] != "/readyz"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_audit_policy_stops_startup() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), "rules:\n- level: Loud\n");
    let mut cfg = rkube_apiserver::Config::new(vec![c.storage_url.clone()]);
    cfg.audit.policy_file = Some(policy);
    cfg.audit.log_path = Some(dir.path().join("audit.log"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = rkube_apiserver::run(cfg, listener, rkube_daemon::ShutdownToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("--audit-policy-file"), "{err}");
    assert!(err.to_string().contains("Loud"), "{err}");
}

/// The raw bytes storage holds at `key`.
async fn stored(c: &Cluster, key: &str) -> Vec<u8> {
    let client = rkube_etcd_api::EtcdClient::new(std::slice::from_ref(&c.storage_url)).unwrap();
    let resp = client
        .range(&rkube_etcd_api::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    resp.kvs
        .into_iter()
        .next()
        .map(|kv| kv.value)
        .unwrap_or_default()
}

fn encryption_file(dir: &std::path::Path, name: &str, providers: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_encrypted_at_rest_and_keys_rotate() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let k1 = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let k2 = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
    let first = encryption_file(
        dir.path(),
        "enc1.yaml",
        &format!("  - aesgcm: {{keys: [{{name: key1, secret: {k1}}}]}}\n  - identity: {{}}\n"),
    );
    let (base, stop) = c
        .apiserver_with(|cfg| cfg.encryption_config = Some(first), None)
        .await;
    let api = As {
        http: &c.http,
        base: &base,
        token: None,
    };
    let secret = |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"password": "hunter2-plaintext"}});
    assert_eq!(
        api.req(
            "POST",
            "/api/v1/namespaces/default/secrets",
            Some(&secret("s1"))
        )
        .await
        .0,
        201
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"k": "visible"}});
    assert_eq!(
        api.req("POST", "/api/v1/namespaces/default/configmaps", Some(&cm))
            .await
            .0,
        201
    );
    // Storage holds no plaintext of the secret; the configmap is not encrypted.
    let raw = stored(&c, "/registry/secrets/default/s1").await;
    assert!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:key1:"),
        "{:?}",
        String::from_utf8_lossy(&raw[..30.min(raw.len())])
    );
    let b64 = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        "hunter2-plaintext",
    );
    for needle in ["hunter2", b64.as_str(), "password"] {
        assert!(
            !raw.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "{needle} stored in the clear"
        );
    }
    assert!(
        String::from_utf8_lossy(&stored(&c, "/registry/configmaps/default/c1").await)
            .contains("visible")
    );
    // Clients see the secret decrypted, from storage and from the watch cache.
    let (_, v) = api
        .req("GET", "/api/v1/namespaces/default/secrets/s1", None)
        .await;
    assert_eq!(v["data"]["password"], b64.as_str());
    let list = api
        .eventually(
            "GET",
            "/api/v1/namespaces/default/secrets?resourceVersion=0",
            None,
            200,
        )
        .await;
    assert_eq!(list["items"][0]["data"]["password"], b64.as_str());
    stop.cancel();

    // Rotation: key2 writes, key1 still reads.
    let second = encryption_file(
        dir.path(),
        "enc2.yaml",
        &format!(
            "  - aesgcm: {{keys: [{{name: key2, secret: {k2}}}, {{name: key1, secret: {k1}}}]}}\n"
        ),
    );
    let (base, _stop) = c
        .apiserver_with(|cfg| cfg.encryption_config = Some(second), None)
        .await;
    let api = As {
        http: &c.http,
        base: &base,
        token: None,
    };
    let (code, v) = api
        .req("GET", "/api/v1/namespaces/default/secrets/s1", None)
        .await;
    assert_eq!(
        (code, v["data"]["password"].as_str()),
        (200, Some(b64.as_str())),
        "{v}"
    );
    assert_eq!(
        api.req(
            "POST",
            "/api/v1/namespaces/default/secrets",
            Some(&secret("s2"))
        )
        .await
        .0,
        201
    );
    assert!(stored(&c, "/registry/secrets/default/s2")
        .await
        .starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    // Rewriting an old secret re-encrypts it with the new key.
    let (code, _) = api
        .req(
            "PATCH",
            "/api/v1/namespaces/default/secrets/s1",
            Some(&json!({"metadata": {"labels": {"rotated": "yes"}}})),
        )
        .await;
    assert_eq!(code, 200);
    assert!(stored(&c, "/registry/secrets/default/s1")
        .await
        .starts_with(b"k8s:enc:aesgcm:v1:key2:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_encryption_config_stops_startup() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bad = encryption_file(
        dir.path(),
        "bad.yaml",
        "  - aesgcm: {keys: [{name: k, secret: c2hvcnQ=}]}\n",
    );
    let mut cfg = rkube_apiserver::Config::new(vec![c.storage_url.clone()]);
    cfg.encryption_config = Some(bad);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = rkube_apiserver::run(cfg, listener, rkube_daemon::ShutdownToken::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("--encryption-provider-config"),
        "{err}"
    );
    assert!(err.to_string().contains("not a valid key size"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_and_fairness_classifies_and_labels_requests() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), TOKENS);
    let (base, _stop) = c
        .apiserver_with(
            |cfg| {
                cfg.auth.token_file = Some(tokens);
                cfg.priority_and_fairness = true;
            },
            None,
        )
        .await;
    let headers = |token: Option<&'static str>, path: &'static str| {
        let http = c.http.clone();
        let url = format!("{base}{path}");
        async move {
            let mut r = http.get(url);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            let resp = r.send().await.unwrap();
            let h = |n: &str| {
                resp.headers()
                    .get(n)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            (
                resp.status().as_u16(),
                h("x-kubernetes-pf-flowschema-uid"),
                h("x-kubernetes-pf-prioritylevel-uid"),
            )
        }
    };
    let (code, schema_admin, level_admin) = headers(Some("admin-token"), "/api/v1/pods").await;
    assert_eq!(code, 200);
    let (_, schema_node, level_node) = headers(
        Some("n1-token"),
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
    )
    .await;
    let (_, schema_alice, level_alice) = headers(Some("alice-token"), "/api/v1/pods").await;
    let (_, schema_anon, level_anon) = headers(None, "/api/v1/pods").await;
    for v in [
        &schema_admin,
        &level_admin,
        &schema_node,
        &level_node,
        &schema_alice,
        &level_alice,
    ] {
        assert!(
            v.as_ref().is_some_and(|s| s.len() == 36),
            "a UID header: {v:?}"
        );
    }
    // masters are exempt, node leases go to node-high, users and anonymous to global-default.
    assert_ne!(level_admin, level_node);
    assert_ne!(level_node, level_alice);
    assert_eq!(level_alice, level_anon);
    assert_eq!(schema_alice, schema_anon);
    assert_ne!(schema_admin, schema_alice);

    // The configuration is served as flowcontrol.apiserver.k8s.io/v1 objects (upstream's
    // defaults, created at startup) and read back from them: a new FlowSchema moves alice.
    let admin = As {
        http: &c.http,
        base: &base,
        token: Some("admin-token"),
    };
    let fc = "/apis/flowcontrol.apiserver.k8s.io/v1";
    let list = admin
        .eventually("GET", &format!("{fc}/flowschemas"), None, 200)
        .await;
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "catch-all",
            "exempt",
            "global-default",
            "kube-controller-manager",
            "kube-scheduler",
            "probes",
            "service-accounts",
            "system-leader-election",
            "system-node-high",
            "system-nodes"
        ]
    );
    let low = admin
        .eventually(
            "GET",
            &format!("{fc}/prioritylevelconfigurations/workload-low"),
            None,
            200,
        )
        .await;
    assert_eq!(low["spec"]["limited"]["nominalConcurrencyShares"], 100);
    let low_uid = low["metadata"]["uid"].as_str().unwrap().to_string();
    let schema = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": "alice-low"},
        "spec": {"matchingPrecedence": 50, "priorityLevelConfiguration": {"name": "workload-low"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "alice"}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "clusterScope": true, "namespaces": ["*"]}]}]}});
    let created = admin
        .eventually("POST", &format!("{fc}/flowschemas"), Some(&schema), 201)
        .await;
    let schema_uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, s, l) = headers(Some("alice-token"), "/api/v1/pods").await;
        if s.as_deref() == Some(&schema_uid) {
            assert_eq!(l.as_deref(), Some(low_uid.as_str()));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "alice still on {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // polling interval
    }
    // Anonymous requests are not covered by it.
    let (_, schema_anon2, _) = headers(None, "/api/v1/pods").await;
    assert_ne!(schema_anon2.as_deref(), Some(schema_uid.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_roles_are_reconciled_when_an_apiserver_starts() {
    let Some(c) = Cluster::start(Backend::Rkube, |_| {}).await else {
        return;
    };
    let (base, _stop, _dir) = secured(&c, true, vec![Mode::Rbac], None).await;
    let admin = As {
        http: &c.http,
        base: &base,
        token: Some("admin-token"),
    };
    let path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:basic-user";
    let role = admin.eventually("GET", path, None, 200).await;
    let full = role["rules"].clone();
    assert_eq!(full.as_array().unwrap().len(), 2);
    // As an older version left it: one rule, plus one an administrator added.
    let mine = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]});
    let older = json!({"rules": [full[0].clone(), mine.clone()]});
    admin.eventually("PATCH", path, Some(&older), 200).await;
    // The next apiserver to start brings it up to date and keeps the addition.
    let (base2, _stop2, _dir2) = secured(&c, true, vec![Mode::Rbac], None).await;
    let admin2 = As {
        http: &c.http,
        base: &base2,
        token: Some("admin-token"),
    };
    let role = admin2.eventually("GET", path, None, 200).await;
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert!(
        rules.contains(&full[1]) && rules.contains(&mine),
        "{rules:?}"
    );
}
