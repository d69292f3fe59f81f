//! CustomResourceDefinitions: a CRD validated and established; its resources in discovery and
//! OpenAPI; custom resources created, defaulted, pruned, validated with upstream's messages,
//! read in two versions, listed by label and selectable field, watched, printed with their
//! columns; the status and scale subresources and `generation`; and a deleted CRD emptied of
//! its objects (their finalizers honoured, creates refused meanwhile) before it goes.

use serde_json::{json, Value};
use std::time::Duration;

use crate::cases;
use crate::harness::Cluster;

pub fn widget_crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["color"], "properties": {
                        "replicas": {"type": "integer", "minimum": 0, "default": 1},
                        "color": {"type": "string", "enum": ["red", "blue"]},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "selector": {"type": "string"}, "phase": {"type": "string"}}}}}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]},
                {"name": "v1beta1", "served": true, "storage": false, "deprecated": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                 "subresources": {"status": {}}}]}})
}

/// Polls `path` until `f` holds (10 s).
async fn eventually(c: &Cluster, path: &str, f: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, v) = c.get(path).await;
        if f(code, &v) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path}: {code} {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn established(v: &Value) -> bool {
    v["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

/// Creates `crd` and waits until it is established.
pub async fn establish(c: &Cluster, crd: &Value) -> Value {
    let (code, v) = c
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(code, 201, "{v}");
    let name = crd["metadata"]["name"].as_str().unwrap();
    eventually(
        c,
        &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"),
        |_, v| established(v),
    )
    .await
}

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

async fn crd_serves_custom_resources(c: &Cluster) {
    let (code, _) = c.get(WIDGETS).await;
    assert_eq!(code, 404, "not served before its CRD");
    let crd = establish(c, &widget_crd()).await;
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");

    // Discovery and OpenAPI.
    let (_, list) = c.get("/apis/example.com/v1").await;
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["widgets", "widgets/status", "widgets/scale"],
        "{list}"
    );
    assert_eq!(list["resources"][0]["shortNames"], json!(["wd"]));
    let (_, group) = c.get("/apis/example.com").await;
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let (_, index) = c.get("/openapi/v3").await;
    assert!(
        index["paths"]["apis/example.com/v1beta1"].is_object(),
        "{index}"
    );
    let (_, doc) = c.get("/openapi/v3/apis/example.com/v1").await;
    let schema = &doc["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        schema["properties"]["spec"]["properties"]["color"]["enum"],
        json!(["red", "blue"])
    );
    assert_eq!(
        schema["x-kubernetes-group-version-kind"][0]["kind"],
        "Widget"
    );

    // Create: defaulted, pruned, status dropped (status subresource), generation 1.
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "labels": {"tier": "a"}},
        "spec": {"color": "red", "bogus": true, "extra": {"any": {"thing": 1}}}, "status": {"phase": "x"}});
    let (code, created) = c.post(WIDGETS, &w).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["replicas"], 1);
    assert!(created["spec"].get("bogus").is_none());
    assert_eq!(created["spec"]["extra"]["any"]["thing"], 1);
    assert!(created.get("status").is_none());
    assert_eq!(created["metadata"]["generation"], 1);

    // Validation with upstream's messages.
    let bad = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"},
        "spec": {"color": "green", "replicas": "many"}});
    let (code, e) = c.post(WIDGETS, &bad).await;
    assert_eq!(code, 422, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Widget.example.com \"w2\" is invalid: ["),
        "{msg}"
    );
    assert!(msg.contains("spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""), "{msg}");
    assert!(
        msg.contains(
            "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\""
        ),
        "{msg}"
    );
    let (code, e) = c.post(WIDGETS, &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w3"}, "spec": {}})).await;
    assert_eq!(
        (code, e["details"]["causes"][0]["field"].as_str()),
        (422, Some("spec.color")),
        "{e}"
    );

    // Another version reads the same object.
    let (code, beta) = c
        .get("/apis/example.com/v1beta1/namespaces/default/widgets/w1")
        .await;
    assert_eq!(
        (code, beta["apiVersion"].as_str()),
        (200, Some("example.com/v1beta1")),
        "{beta}"
    );
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/apis/example.com/v1beta1/namespaces/default/widgets/w1",
            c.base
        ))
        .send()
        .await
        .unwrap();
    let warning = resp
        .headers()
        .get("warning")
        .map(|w| w.to_str().unwrap().to_string());
    assert_eq!(
        warning.as_deref(),
        Some("299 - \"example.com/v1beta1 Widget is deprecated\"")
    );

    // Status and generation: spec changes move it, status writes do not.
    let mut upd = created.clone();
    upd["spec"]["replicas"] = json!(3);
    upd["status"] = json!({"phase": "ignored"});
    let (code, updated) = c.put(&format!("{WIDGETS}/w1"), &upd).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);
    assert!(
        updated.get("status").is_none(),
        "status is written through /status"
    );
    let mut st = updated.clone();
    st["status"] = json!({"phase": "Ready", "replicas": 3, "selector": "tier=a"});
    st["spec"]["replicas"] = json!(9);
    let (code, with_status) = c.put(&format!("{WIDGETS}/w1/status"), &st).await;
    assert_eq!(code, 200, "{with_status}");
    assert_eq!(with_status["status"]["phase"], "Ready");
    assert_eq!(
        with_status["spec"]["replicas"], 3,
        "spec is not written through /status"
    );
    assert_eq!(with_status["metadata"]["generation"], 2);

    // Scale.
    let (code, scale) = c.get(&format!("{WIDGETS}/w1/scale")).await;
    assert_eq!(code, 200, "{scale}");
    assert_eq!(
        (
            scale["spec"]["replicas"].as_i64(),
            scale["status"]["selector"].as_str()
        ),
        (Some(3), Some("tier=a"))
    );
    let mut s2 = scale.clone();
    s2["spec"]["replicas"] = json!(5);
    let (code, _) = c.put(&format!("{WIDGETS}/w1/scale"), &s2).await;
    assert_eq!(code, 200);
    let (_, got) = c.get(&format!("{WIDGETS}/w1")).await;
    assert_eq!(got["spec"]["replicas"], 5);

    // Lists by label and by selectable field; unknown fields are refused.
    let blue = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w4"}, "spec": {"color": "blue"}});
    assert_eq!(c.post(WIDGETS, &blue).await.0, 201);
    let (_, l) = c
        .get(&format!("{WIDGETS}?fieldSelector=spec.color%3Dblue"))
        .await;
    assert_eq!(l["items"].as_array().unwrap().len(), 1, "{l}");
    assert_eq!(l["items"][0]["metadata"]["name"], "w4");
    assert_eq!(l["kind"], "WidgetList");
    let (_, l) = c.get(&format!("{WIDGETS}?labelSelector=tier%3Da")).await;
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let (code, _) = c
        .get(&format!("{WIDGETS}?fieldSelector=spec.size%3D1"))
        .await;
    assert_eq!(code, 400);

    // kubectl's table.
    let resp = reqwest::Client::new()
        .get(format!("{}{WIDGETS}", c.base))
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let table: Value = resp.json().await.unwrap();
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Color", "Replicas", "Age"]);
    assert_eq!(table["rows"][0]["cells"][1], "red");
    assert_eq!(table["rows"][0]["cells"][2], 5);

    // Watch.
    let rv = l["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = c
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;
    assert_eq!(
        c.merge_patch(&format!("{WIDGETS}/w4"), &json!({"spec": {"replicas": 7}}))
            .await
            .0,
        200
    );
    let ev = watch
        .until(Duration::from_secs(5), |e| e["type"] == "MODIFIED")
        .await;
    assert_eq!(ev["object"]["spec"]["replicas"], 7);

    // Deletion: objects go first; a finalizer holds its object and so the CRD; no creates.
    assert_eq!(
        c.merge_patch(
            &format!("{WIDGETS}/w1"),
            &json!({"metadata": {"finalizers": ["example.com/hold"]}})
        )
        .await
        .0,
        200
    );
    let (code, _) = c
        .delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
            None,
        )
        .await;
    assert_eq!(code, 200);
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    eventually(c, &format!("{WIDGETS}/w4"), |code, _| code == 404).await;
    let held = eventually(c, crd_path, |_, v| {
        v["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Terminating" && c["status"] == "True")
        })
    })
    .await;
    assert!(held["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .contains(&json!("customresourcecleanup.apiextensions.k8s.io")));
    let (code, e) = c.post(WIDGETS, &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "late"}, "spec": {"color": "red"}})).await;
    assert_eq!(code, 405, "{e}");
    assert_eq!(
        e["message"],
        "create not allowed while custom resource definition is terminating"
    );
    let (_, w1) = c.get(&format!("{WIDGETS}/w1")).await;
    assert!(w1["metadata"]["deletionTimestamp"].is_string(), "{w1}");
    assert_eq!(
        c.merge_patch(
            &format!("{WIDGETS}/w1"),
            &json!({"metadata": {"finalizers": null}})
        )
        .await
        .0,
        200
    );
    eventually(c, crd_path, |code, _| code == 404).await;
    eventually(c, "/apis/example.com/v1", |code, _| code == 404).await;
    let (code, _) = c.get(WIDGETS).await;
    assert_eq!(code, 404);
}

async fn crd_validation_and_naming(c: &Cluster) {
    let mut bad = widget_crd();
    bad["metadata"]["name"] = json!("gadgets.example.com");
    bad["spec"]["versions"][1]["storage"] = json!(true);
    let (code, e) = c
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!(code, 422, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group"), "{msg}");
    assert!(
        msg.contains("must have exactly one version marked as storage version"),
        "{msg}"
    );

    // A cluster-scoped CRD, and a second one whose kind is taken.
    let mut cluster = widget_crd();
    cluster["metadata"]["name"] = json!("tenants.example.com");
    cluster["spec"]["scope"] = json!("Cluster");
    cluster["spec"]["names"] = json!({"plural": "tenants", "kind": "Tenant"});
    establish(c, &cluster).await;
    let t = json!({"apiVersion": "example.com/v1", "kind": "Tenant", "metadata": {"name": "t1"}, "spec": {"color": "blue"}});
    let (code, v) = c.post("/apis/example.com/v1/tenants", &t).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(
        c.get("/apis/example.com/v1/namespaces/default/tenants/t1")
            .await
            .0,
        404
    );
    let mut clash = cluster.clone();
    clash["metadata"]["name"] = json!("renters.example.com");
    clash["spec"]["names"] = json!({"plural": "renters", "singular": "renter", "kind": "Tenant"});
    let (code, _) = c
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &clash,
        )
        .await;
    assert_eq!(code, 201);
    let v = eventually(
        c,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/renters.example.com",
        |_, v| {
            v["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "NamesAccepted"))
        },
    )
    .await;
    let cond = v["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "NamesAccepted")
        .unwrap()
        .clone();
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("KindConflict")),
        "{v}"
    );
    assert!(!established(&v));
    assert_eq!(c.get("/apis/example.com/v1/renters").await.0, 404);

    // A CRD named like a built-in resource is never served, and deleting it deletes
    // nothing of the built-in's.
    let (_, before) = c
        .get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")
        .await;
    let count = before["items"].as_array().unwrap().len();
    let mut fake = widget_crd();
    fake["metadata"]["name"] = json!("clusterrolebindings.rbac.authorization.k8s.io");
    fake["spec"]["group"] = json!("rbac.authorization.k8s.io");
    fake["spec"]["scope"] = json!("Cluster");
    fake["spec"]["names"] = json!({"plural": "clusterrolebindings", "kind": "Fake"});
    let fake_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterrolebindings.rbac.authorization.k8s.io";
    assert_eq!(
        c.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &fake
        )
        .await
        .0,
        201
    );
    eventually(c, fake_path, |_, v| {
        v["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "NamesAccepted" && c["status"] == "False")
        })
    })
    .await;
    assert_eq!(c.delete(fake_path, None).await.0, 200);
    eventually(c, fake_path, |code, _| code == 404).await;
    let (_, after) = c
        .get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")
        .await;
    assert_eq!(after["items"].as_array().unwrap().len(), count);

    // Quota counts custom resources as count/<plural>.<group>.
    let (code, q) = c
        .post(
            "/api/v1/namespaces/default/resourcequotas",
            &json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "crs"}, "spec": {"hard": {"count/widgets.example.com": "1"}}}),
        )
        .await;
    assert_eq!(code, 201, "{q}");
    establish(c, &widget_crd()).await;
    let w = |n: &str| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": n}, "spec": {"color": "red"}});
    assert_eq!(c.post(WIDGETS, &w("q1")).await.0, 201);
    let (code, e) = c.post(WIDGETS, &w("q2")).await;
    assert_eq!(code, 403, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("exceeded quota: crs"),
        "{e}"
    );
}

async fn crd_cel_rules(c: &Cluster) {
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("ranges.example.com");
    crd["spec"]["names"] = json!({"plural": "ranges", "kind": "Range"});
    crd["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' exceeds max ' + string(self.max)"},
                {"rule": "self.owner == oldSelf.owner", "reason": "FieldValueForbidden", "message": "owner is immutable", "fieldPath": ".owner"},
                {"rule": "!has(self.limit) || quantity(self.limit).isLessThan(quantity('10Gi'))", "message": "limit must be under 10Gi"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "owner": {"type": "string"}, "limit": {"type": "string"}}}}}}}]);
    establish(c, &crd).await;
    let path = "/apis/example.com/v1/namespaces/default/ranges";
    let r = |min: i64, max: i64, owner: &str| json!({"apiVersion": "example.com/v1", "kind": "Range", "metadata": {"name": "r1"}, "spec": {"min": min, "max": max, "owner": owner}});
    let (code, e) = c.post(path, &r(5, 1, "a")).await;
    assert_eq!(code, 422, "{e}");
    assert_eq!(
        e["message"],
        "Range.example.com \"r1\" is invalid: spec: Invalid value: \"object\": min 5 exceeds max 1"
    );
    let (code, created) = c.post(path, &r(1, 5, "a")).await;
    assert_eq!(code, 201, "{created}");
    let mut upd = created.clone();
    upd["spec"]["owner"] = json!("b");
    upd["spec"]["limit"] = json!("20Gi");
    let (code, e) = c.put(&format!("{path}/r1"), &upd).await;
    assert_eq!(code, 422, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.owner: Forbidden: owner is immutable"),
        "{msg}"
    );
    assert!(msg.contains("limit must be under 10Gi"), "{msg}");
    upd["spec"]["owner"] = json!("a");
    upd["spec"]["limit"] = json!("1Gi");
    assert_eq!(c.put(&format!("{path}/r1"), &upd).await.0, 200);

    // A rule that does not compile is refused with the CRD.
    let mut bad = crd.clone();
    bad["metadata"]["name"] = json!("broken.example.com");
    bad["spec"]["names"] = json!({"plural": "broken", "kind": "Broken"});
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["x-kubernetes-validations"] = json!([{"rule": "self.min <="}]);
    let (code, e) = c
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!(code, 422, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"), "{msg}");
    assert!(msg.contains("compilation failed"), "{msg}");
}

cases! {
    crd_cel_rules, crd_cel_rules_rkube, crd_cel_rules_etcd;
    crd_serves_custom_resources, crd_serves_custom_resources_rkube, crd_serves_custom_resources_etcd;
    crd_validation_and_naming, crd_validation_and_naming_rkube, crd_validation_and_naming_etcd;
}
