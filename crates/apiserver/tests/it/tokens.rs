//! ServiceAccount tokens: `serviceaccounts/{name}/token` issues them, requests and
//! TokenReviews authenticate them as `system:serviceaccount:<ns>:<name>`, deleting the account
//! (or the pod a token is bound to) revokes them, the issuer publishes its keys.

use serde_json::{json, Value};

use crate::cases;
use crate::harness::Cluster;

async fn whoami(c: &Cluster, token: &str) -> (u16, Value) {
    let resp = c
        .http
        .post(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            c.base
        ))
        .bearer_auth(token)
        .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// The token is refused once the apiserver's cache has seen the change (within 10 s).
async fn refused_soon(c: &Cluster, token: &str, why: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while whoami(c, token).await.0 != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "still accepted: {why}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn pod_as(name: &str, account: &str) -> Value {
    let mut p = crate::harness::pod(name, json!({}));
    p["spec"]["serviceAccountName"] = json!(account);
    p
}

async fn tokens_are_issued_checked_and_revoked(c: &Cluster) {
    let (code, sa) = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
        )
        .await;
    assert_eq!(code, 201, "{sa}");
    let path = "/api/v1/namespaces/default/serviceaccounts/robot/token";
    let (code, tr) = c
        .post(
            path,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    assert_eq!(code, 201, "{tr}");
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    assert!(tr["status"]["expirationTimestamp"].is_string());
    assert_eq!(tr["spec"]["expirationSeconds"], 3600);
    let (code, me) = whoami(c, &token).await;
    assert_eq!(code, 201, "{me}");
    assert_eq!(
        me["status"]["userInfo"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(me["status"]["userInfo"]["uid"], sa["metadata"]["uid"]);
    let groups = me["status"]["userInfo"]["groups"].as_array().unwrap();
    assert!(
        groups.contains(&json!("system:serviceaccounts:default")),
        "{me}"
    );
    // TokenReview agrees, for the API's audience and not for another.
    let (_, review) = c.post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})).await;
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    let (_, other) = c.post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": ["vault"]}})).await;
    assert!(other["status"]["authenticated"].is_null(), "{other}");
    // Too short a lifetime is refused.
    let (code, st) = c.post(path, &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 60}})).await;
    assert_eq!(code, 422, "{st}");
    // A token bound to a pod dies with it.
    let (code, holder) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod_as("holder", "robot"),
        )
        .await;
    assert_eq!(code, 201, "{holder}");
    let (code, _) = c
        .post(
            "/api/v1/namespaces/default/pods",
            &pod_as("other", "someone-else"),
        )
        .await;
    assert_eq!(code, 201);
    let (code, st) = c
        .post(
            path,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "other"}}}),
        )
        .await;
    assert_eq!(
        code, 400,
        "a token binds only to a pod running as its account: {st}"
    );
    let (code, bound) = c
        .post(
            path,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "holder"}}}),
        )
        .await;
    assert_eq!(code, 201, "{bound}");
    let bound = bound["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(whoami(c, &bound).await.0, 201);
    let (code, _) = c
        .delete(
            "/api/v1/namespaces/default/pods/holder?gracePeriodSeconds=0",
            None,
        )
        .await;
    assert_eq!(code, 200);
    refused_soon(c, &bound, "the pod is gone").await;
    // Deleting the account revokes its tokens; a forged one never worked.
    let mut forged = token.clone();
    forged.truncate(token.len() - 4);
    forged.push_str("AAAA");
    assert_eq!(whoami(c, &forged).await.0, 401);
    let (code, _) = c
        .delete("/api/v1/namespaces/default/serviceaccounts/robot", None)
        .await;
    assert_eq!(code, 200);
    refused_soon(c, &token, "the account is gone").await;
    // The issuer's discovery documents.
    let (code, conf) = c.get("/.well-known/openid-configuration").await;
    assert_eq!(code, 200, "{conf}");
    assert_eq!(
        conf["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let (_, jwks) = c.get("/openid/v1/jwks").await;
    assert_eq!(jwks["keys"][0]["alg"], "ES256");
    // Another apiserver on the same store verifies the same tokens.
    let (code, sa2) = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot2"}}),
        )
        .await;
    assert_eq!(code, 201, "{sa2}");
    let (_, tr) = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts/robot2/token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    let token2 = tr["status"]["token"].as_str().unwrap().to_string();
    let (second, _stop) = c.second_apiserver().await;
    let resp = c
        .http
        .post(format!(
            "{second}/apis/authentication.k8s.io/v1/selfsubjectreviews"
        ))
        .bearer_auth(&token2)
        .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
}

cases! {
    tokens_are_issued_checked_and_revoked, tokens_are_issued_checked_and_revoked_rkube, tokens_are_issued_checked_and_revoked_etcd;
}

/// The ServiceAccount admission plugin (on by default; the harness turns it off for clusters
/// with no controller-manager): pods run as an existing account, with its token mounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_as_an_existing_account_with_its_token_mounted() {
    let Some(c) = Cluster::start(crate::harness::Backend::Rkube, |cfg| {
        cfg.disable_admission_plugins.clear();
    })
    .await
    else {
        return;
    };
    let pods = "/api/v1/namespaces/default/pods";
    // No controller-manager made `default`: refused, after upstream's retries.
    let (code, st) = c.post(pods, &crate::harness::pod("early", json!({}))).await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "pods \"early\" is forbidden: error looking up service account default/default: serviceaccount \"default\" not found"
    );
    let (code, st) = c.post(pods, &pod_as("ghostly", "ghost")).await;
    assert_eq!(code, 403, "{st}");
    for (name, automount) in [("default", None), ("quiet", Some(false))] {
        let mut sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name},
            "imagePullSecrets": [{"name": "registry"}]});
        if let Some(a) = automount {
            sa["automountServiceAccountToken"] = json!(a);
        }
        let (code, _) = c
            .post("/api/v1/namespaces/default/serviceaccounts", &sa)
            .await;
        assert_eq!(code, 201);
    }
    let (code, p) = c.post(pods, &crate::harness::pod("web", json!({}))).await;
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
    let vol = &p["spec"]["volumes"][0];
    let name = vol["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    let sources = vol["projected"]["sources"].as_array().unwrap();
    assert_eq!(sources[0]["serviceAccountToken"]["path"], "token");
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(
        sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": name, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
    // The account turns automounting off; the pod may turn it back on.
    let (_, p) = c.post(pods, &pod_as("calm", "quiet")).await;
    assert!(p["spec"].get("volumes").is_none(), "{p}");
    let mut loud = pod_as("loud", "quiet");
    loud["spec"]["automountServiceAccountToken"] = json!(true);
    let (_, p) = c.post(pods, &loud).await;
    assert_eq!(
        p["spec"]["volumes"].as_array().map(Vec::len),
        Some(1),
        "{p}"
    );
    // A kubelet's mirror pod may not name an account.
    let mut mirror = pod_as("static-web", "default");
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    let (code, st) = c.post(pods, &mirror).await;
    assert_eq!(code, 403, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .ends_with("a mirror pod may not reference service accounts"),
        "{st}"
    );
}
