//! Admission webhooks against a real HTTPS webhook server started by the test: a mutating
//! webhook (by `url`) adds a label with a JSONPatch, a validating one (by `service`, resolved
//! through a selector-less Service's EndpointSlice to the host) refuses a key and warns;
//! `failurePolicy` Fail and Ignore with the server down; timeouts; dry runs;
//! `matchConditions`; object selectors.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Json;
use base64::Engine;
use serde_json::{json, Value};

use crate::cases;
use crate::harness::Cluster;

/// A CA and a server certificate for `hooks.default.svc` and 127.0.0.1: (CA PEM, dir with
/// tls.crt and tls.key).
fn certs() -> (String, tempfile::TempDir) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["hooks.default.svc".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    (ca.pem(), dir)
}

fn allow(review: &Value, patch: Option<Value>, warnings: &[&str]) -> Value {
    let mut resp = json!({"uid": review["request"]["uid"], "allowed": true, "warnings": warnings});
    if let Some(p) = patch {
        resp["patchType"] = json!("JSONPatch");
        resp["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p.to_string()));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
}

/// Starts the webhook server; its port and CA bundle (base64).
async fn webhook_server() -> (u16, String, tempfile::TempDir) {
    let (ca, dir) = certs();
    let tls = rkube_daemon::tls::server_config(&rkube_daemon::tls::TlsFiles {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        client_ca: None,
        require_client_cert: false,
    })
    .unwrap();
    let app = axum::Router::new()
        .route(
            "/mutate",
            post(|Json(r): Json<Value>| async move {
                let has_labels = r["request"]["object"]["metadata"]["labels"].is_object();
                let patch = if has_labels {
                    json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
                } else {
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
                };
                Json(allow(&r, Some(patch), &[]))
            }),
        )
        .route(
            "/validate",
            post(|Json(r): Json<Value>| async move {
                let obj = &r["request"]["object"];
                if obj["data"]["forbidden"].is_string() {
                    return Json(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": r["request"]["uid"], "allowed": false, "status": {"code": 403, "message": "the key \"forbidden\" is not allowed"}}}));
                }
                Json(allow(&r, None, &["validated by the test webhook"]))
            }),
        )
        .route(
            "/convert",
            post(|Json(r): Json<Value>| async move {
                // v1 stores spec.size; v2 calls it spec.count.
                let want = r["request"]["desiredAPIVersion"].as_str().unwrap_or("").to_string();
                let objects: Vec<Value> = r["request"]["objects"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|mut o| {
                        let spec = o["spec"].as_object().cloned().unwrap_or_default();
                        let n = spec.get("size").or(spec.get("count")).cloned().unwrap_or(json!(0));
                        o["spec"] = if want.ends_with("/v2") { json!({"count": n}) } else { json!({"size": n}) };
                        o["apiVersion"] = json!(want);
                        o
                    })
                    .collect();
                Json(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "response": {"uid": r["request"]["uid"], "convertedObjects": objects, "result": {"status": "Success"}}}))
            }),
        )
        .route(
            "/slow",
            post(|Json(r): Json<Value>| async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Json(allow(&r, None, &[]))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let identify: rkube_daemon::serve::Identify<()> = Arc::new(|_, _| ());
    tokio::spawn(rkube_daemon::serve::serve(
        listener,
        Some(tls),
        app,
        identify,
        Default::default(),
        rkube_daemon::ShutdownToken::new(),
    ));
    (
        port,
        base64::engine::general_purpose::STANDARD.encode(ca),
        dir,
    )
}

fn hook(name: &str, client: Value, extra: Value) -> Value {
    let mut h = json!({"name": name, "clientConfig": client, "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "objectSelector": {"matchLabels": {"hooked": "yes"}}});
    if let (Some(m), Some(e)) = (h.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    h
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"hooked": "yes"}}, "data": data})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

/// Polls until creating `obj` answers `code` (configurations reach the cache shortly).
async fn create_until(c: &Cluster, obj: &Value, code: u16) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut o = obj.clone();
        o["metadata"]["name"] = json!(format!(
            "{}-{}",
            obj["metadata"]["name"].as_str().unwrap(),
            rand::random::<u32>()
        ));
        let (got, v) = c.post(CMS, &o).await;
        if got == code {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "want {code}, got {got}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn admission_webhooks(c: &Cluster) {
    let (port, ca, _dir) = webhook_server().await;
    let url = |p: &str| json!({"url": format!("https://127.0.0.1:{port}{p}"), "caBundle": ca});

    // Mutating, by URL.
    let m = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "label"}, "webhooks": [hook("label.example.com", url("/mutate"), json!({}))]});
    assert_eq!(c.post(MUTATING, &m).await.0, 201);
    let created = create_until(c, &cm("m", json!({"a": "b"})), 201).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut created = created;
    while created["metadata"]["labels"]["mutated"] != "yes" {
        assert!(tokio::time::Instant::now() < deadline, "{created}");
        created = create_until(c, &cm("m", json!({"a": "b"})), 201).await;
    }
    // Not for objects the selector leaves out.
    let (_, plain) = c
        .post(
            CMS,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
        )
        .await;
    assert!(
        plain["metadata"]["labels"].get("mutated").is_none(),
        "{plain}"
    );

    // Validating, by Service: a selector-less Service and an EndpointSlice at the host.
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}});
    assert_eq!(
        c.post("/api/v1/namespaces/default/services", &svc).await.0,
        201
    );
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "hooks-1", "labels": {"kubernetes.io/service-name": "hooks"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}]});
    let (code, v) = c
        .post(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            &slice,
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let service = json!({"service": {"namespace": "default", "name": "hooks", "path": "/validate", "port": 443}, "caBundle": ca});
    let v = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "deny"}, "webhooks": [hook("deny.example.com", service, json!({}))]});
    assert_eq!(c.post(VALIDATING, &v).await.0, 201);
    let e = create_until(c, &cm("v", json!({"forbidden": "x"})), 403).await;
    let msg = e["message"].as_str().unwrap();
    assert!(msg.starts_with("configmaps \"v-"), "{msg}");
    assert!(msg.contains("is forbidden: admission webhook \"deny.example.com\" denied the request: the key \"forbidden\" is not allowed"), "{msg}");
    // Allowed requests carry the webhook's warnings.
    let resp = reqwest::Client::new()
        .post(format!("{}{CMS}", c.base))
        .json(&cm("warned", json!({"a": "b"})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warning = resp
        .headers()
        .get("warning")
        .map(|w| w.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(
        warning.contains("validated by the test webhook"),
        "{warning:?}"
    );
    assert_eq!(
        resp.json::<Value>().await.unwrap()["metadata"]["labels"]["mutated"],
        "yes",
        "mutating ran before validating"
    );

    // A dry run reaches webhooks (their sideEffects are None or NoneOnDryRun in v1) and
    // stores nothing.
    let (code, dry) = c
        .req(
            "POST",
            &format!("{CMS}?dryRun=All"),
            Some(&cm("dry", json!({}))),
            "application/json",
        )
        .await;
    assert_eq!(
        (code, dry["metadata"]["labels"]["mutated"].as_str()),
        (201, Some("yes")),
        "{dry}"
    );
    assert_eq!(c.get(&format!("{CMS}/dry")).await.0, 404);

    // The server down: Fail refuses, Ignore lets through; a slow one times out.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let down = json!({"url": format!("https://127.0.0.1:{closed}/validate"), "caBundle": ca});
    let fail = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "down"}, "webhooks": [
            hook("down-fail.example.com", down.clone(), json!({"failurePolicy": "Fail", "objectSelector": {"matchLabels": {"case": "fail"}}})),
            hook("down-ignore.example.com", down.clone(), json!({"failurePolicy": "Ignore", "objectSelector": {"matchLabels": {"case": "ignore"}}})),
            hook("slow.example.com", url("/slow"), json!({"timeoutSeconds": 1, "objectSelector": {"matchLabels": {"case": "slow"}}})),
            hook("conditional.example.com", down.clone(), json!({"objectSelector": {"matchLabels": {"case": "conditional"}},
                "matchConditions": [{"name": "not-exempt", "expression": "!object.metadata.name.startsWith('exempt')"}]}))]});
    assert_eq!(c.post(VALIDATING, &fail).await.0, 201);
    let with_case = |name: &str, case: &str| {
        let mut o = cm(name, json!({}));
        o["metadata"]["labels"]["case"] = json!(case);
        o
    };
    let e = create_until(c, &with_case("f", "fail"), 500).await;
    let msg = e["message"].as_str().unwrap();
    assert!(msg.starts_with("Internal error occurred: failed calling webhook \"down-fail.example.com\": failed to call webhook: Post"), "{msg}");
    create_until(c, &with_case("i", "ignore"), 201).await;
    let started = std::time::Instant::now();
    let e = create_until(c, &with_case("s", "slow"), 500).await;
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("context deadline exceeded"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the 1 s timeout held"
    );
    create_until(c, &with_case("exempt", "conditional"), 201).await;
    create_until(c, &with_case("other", "conditional"), 500).await;

    // Configurations are never sent to webhooks; deleting one stops it.
    let (code, _) = c.delete(&format!("{VALIDATING}/down"), None).await;
    assert_eq!(code, 200);
    create_until(c, &with_case("f2", "fail"), 201).await;
}

cases! {
    admission_webhooks, admission_webhooks_rkube, admission_webhooks_etcd;
}

const VAPS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}})
}

async fn admission_policies(c: &Cluster) {
    // A param (a ConfigMap), a policy reading it, a binding that denies.
    let limits = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits"}, "data": {"max": "3"}});
    assert_eq!(c.post(CMS, &limits).await.0, 201);
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "max-replicas"},
        "spec": {"failurePolicy": "Fail", "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "variables": [{"name": "limit", "expression": "int(params.data.max)"}],
            "validations": [
                {"expression": "object.spec.replicas <= variables.limit", "messageExpression": "'replicas must be at most ' + string(variables.limit)"},
                {"expression": "!object.metadata.name.startsWith('bad')", "reason": "Forbidden"}]}});
    let (code, v) = c.post(VAPS, &policy).await;
    assert_eq!(code, 201, "{v}");
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "max-replicas-binding"},
        "spec": {"policyName": "max-replicas", "validationActions": ["Deny"],
            "paramRef": {"name": "limits", "namespace": "default", "parameterNotFoundAction": "Deny"}}});
    assert_eq!(c.post(BINDINGS, &binding).await.0, 201);
    let deploys = "/apis/apps/v1/namespaces/default/deployments";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let e = loop {
        let (code, e) = c
            .post(
                deploys,
                &deployment(&format!("big-{}", rand::random::<u16>()), 5),
            )
            .await;
        if code == 422 {
            break e;
        }
        assert!(tokio::time::Instant::now() < deadline, "{code} {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(e["message"], "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: replicas must be at most 3");
    assert_eq!(c.post(deploys, &deployment("small", 2)).await.0, 201);
    let (code, e) = c.post(deploys, &deployment("bad-name", 1)).await;
    assert_eq!(code, 403, "{e}");
    assert_eq!(e["message"], "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: failed expression: !object.metadata.name.startsWith('bad')");
    // The param changes: so does the decision.
    assert_eq!(
        c.merge_patch(&format!("{CMS}/limits"), &json!({"data": {"max": "10"}}))
            .await
            .0,
        200
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while c
        .post(
            deploys,
            &deployment(&format!("mid-{}", rand::random::<u16>()), 5),
        )
        .await
        .0
        != 201
    {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A Warn binding: allowed, with a warning.
    let warn = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "labels"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "configmaps should say their team"}]}});
    assert_eq!(c.post(VAPS, &warn).await.0, 201);
    let wb = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "labels-warn"}, "spec": {"policyName": "labels", "validationActions": ["Warn"]}});
    assert_eq!(c.post(BINDINGS, &wb).await.0, 201);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let resp = reqwest::Client::new()
            .post(format!("{}{CMS}", c.base))
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{}", rand::random::<u32>())}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        let w = resp
            .headers()
            .get("warning")
            .map(|w| w.to_str().unwrap().to_string())
            .unwrap_or_default();
        if w.contains("Validation failed for ValidatingAdmissionPolicy 'labels' with binding 'labels-warn': configmaps should say their team") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{w:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // matchPolicy Equivalent (the default): a policy on autoscaling/v2 covers writes through
    // autoscaling/v1 too.
    let hpa_policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "hpa-max"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["autoscaling"], "apiVersions": ["v2"], "operations": ["CREATE"], "resources": ["horizontalpodautoscalers"]}]},
            "validations": [{"expression": "object.spec.maxReplicas <= 10", "message": "at most 10 replicas"}]}});
    assert_eq!(c.post(VAPS, &hpa_policy).await.0, 201);
    let hb = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "hpa-max"}, "spec": {"policyName": "hpa-max", "validationActions": ["Deny"]}});
    assert_eq!(c.post(BINDINGS, &hb).await.0, 201);
    let hpa_v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h1"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "small"}, "maxReplicas": 50}});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, e) = c
            .post(
                "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers",
                &hpa_v1,
            )
            .await;
        if code == 422 {
            assert!(
                e["message"]
                    .as_str()
                    .unwrap()
                    .ends_with("denied request: at most 10 replicas"),
                "{e}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{code} {e}");
        let _ = c
            .delete(
                "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/h1",
                None,
            )
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Expressions that do not compile are refused with the policy.
    let mut broken = warn.clone();
    broken["metadata"]["name"] = json!("broken");
    broken["spec"]["validations"][0]["expression"] = json!("object.metadata.(");
    let (code, e) = c.post(VAPS, &broken).await;
    assert_eq!(code, 422, "{e}");
    assert!(e["message"].as_str().unwrap().contains("spec.validations[0].expression: Invalid value: \"object.metadata.(\": compilation failed"), "{e}");
}

async fn conversion_webhooks(c: &Cluster) {
    let (port, ca, _dir) = webhook_server().await;
    let schema = |field: &str| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {field: {"type": "integer"}}}}}});
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "boxes.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "boxes", "kind": "Box"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca}}},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("size")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("count")}]}});
    crate::crds::establish(c, &crd).await;
    let v1 = "/apis/example.com/v1/namespaces/default/boxes";
    let v2 = "/apis/example.com/v2/namespaces/default/boxes";
    let rv = c.get(v2).await.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let mut watch = c.watch(&format!("{v2}?watch=1&resourceVersion={rv}")).await;
    let (code, made) = c.post(v2, &json!({"apiVersion": "example.com/v2", "kind": "Box", "metadata": {"name": "b1"}, "spec": {"count": 3}})).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(
        (made["apiVersion"].as_str(), made["spec"]["count"].as_i64()),
        (Some("example.com/v2"), Some(3)),
        "{made}"
    );
    let (_, stored) = c.get(&format!("{v1}/b1")).await;
    assert_eq!(
        stored["spec"],
        json!({"size": 3}),
        "stored in the storage version"
    );
    let (_, listed) = c.get(v2).await;
    assert_eq!(listed["items"][0]["spec"], json!({"count": 3}), "{listed}");
    let ev = watch
        .until(Duration::from_secs(5), |e| e["type"] == "ADDED")
        .await;
    assert_eq!(ev["object"]["spec"], json!({"count": 3}));
    let (code, patched) = c
        .merge_patch(&format!("{v2}/b1"), &json!({"spec": {"count": 7}}))
        .await;
    assert_eq!(
        (code, patched["spec"]["count"].as_i64()),
        (200, Some(7)),
        "{patched}"
    );
    assert_eq!(
        c.get(&format!("{v1}/b1")).await.1["spec"],
        json!({"size": 7})
    );
    let (_, crd_now) = c
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/boxes.example.com")
        .await;
    assert_eq!(crd_now["status"]["storedVersions"], json!(["v1"]));
}

cases! {
    conversion_webhooks, conversion_webhooks_rkube, conversion_webhooks_etcd;
    admission_policies, admission_policies_rkube, admission_policies_etcd;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_type_check_and_annotate_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(
        &policy_file,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = dir.path().join("audit.log");
    let (pf, lg) = (policy_file.clone(), log.clone());
    let Some(c) = Cluster::start(crate::harness::Backend::Rkube, move |cfg| {
        cfg.audit.policy_file = Some(pf);
        cfg.audit.log_path = Some(lg);
    })
    .await
    else {
        return;
    };
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "audited"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 1", "message": "more than one replica"},
                            {"expression": "object.spec.replicass > 0"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]}});
    assert_eq!(c.post(VAPS, &policy).await.0, 201);
    // The status says which fields do not exist.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let (_, p) = c.get(&format!("{VAPS}/audited")).await;
        if p["status"]["observedGeneration"] == 1 {
            break p["status"].clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "{p}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let warnings = status["typeChecking"]["expressionWarnings"]
        .as_array()
        .unwrap();
    assert_eq!(warnings.len(), 1, "{status}");
    assert_eq!(warnings[0]["fieldRef"], "spec.validations[1].expression");
    assert!(warnings[0]["warning"]
        .as_str()
        .unwrap()
        .contains("undefined field 'replicass'"));
    // An Audit binding: allowed, and the audit event says why it would not be.
    let mut fixed = c.get(&format!("{VAPS}/audited")).await.1;
    fixed["spec"]["validations"] =
        json!([{"expression": "object.spec.replicas <= 1", "message": "more than one replica"}]);
    assert_eq!(c.put(&format!("{VAPS}/audited"), &fixed).await.0, 200);
    let b = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "audited"}, "spec": {"policyName": "audited", "validationActions": ["Audit"]}});
    assert_eq!(c.post(BINDINGS, &b).await.0, 201);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let name = format!("a{}", rand::random::<u32>());
        let (code, _) = c
            .post(
                "/apis/apps/v1/namespaces/default/deployments",
                &deployment(&name, 3),
            )
            .await;
        assert_eq!(code, 201);
        let events: Vec<Value> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let hit = events.iter().find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "deployments"
                && e["stage"] == "ResponseComplete"
                && e["annotations"].is_object()
        });
        if let Some(e) = hit {
            let failure = e["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
                .as_str()
                .unwrap();
            assert!(
                failure.contains("more than one replica") && failure.contains("\"Audit\""),
                "{failure}"
            );
            assert_eq!(e["annotations"]["audited/replicas"], "3");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no annotated audit event for {name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
