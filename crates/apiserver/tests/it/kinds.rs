//! Every built-in kind served: one sample object of each created, read, listed, printed as a
//! Table, updated and deleted; the defaults and validation messages users hit; subresources
//! (status, scale, approval); events.k8s.io as a view of core Events; the reviews.

use serde_json::{json, Value};
use std::time::Duration;

use crate::cases;
use crate::harness::Cluster;

fn pod_template(labels: Value, restart: &str) -> Value {
    json!({"metadata": {"labels": labels}, "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}})
}

/// (collection path, sample object) for every kind this suite covers.
fn samples() -> Vec<(&'static str, Value)> {
    let app = json!({"app": "s"});
    vec![
        (
            "/api/v1/namespaces/default/endpoints",
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "ep1"},
            "subsets": [{"addresses": [{"ip": "10.1.0.1"}, {"ip": "10.1.0.2"}], "ports": [{"port": 80}]}]}),
        ),
        (
            "/api/v1/namespaces/default/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            "/api/v1/persistentvolumes",
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv1"}}}),
        ),
        (
            "/api/v1/namespaces/default/podtemplates",
            json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "pt1"},
            "template": pod_template(app.clone(), "Always")}),
        ),
        (
            "/api/v1/namespaces/default/replicationcontrollers",
            json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc1"},
            "spec": {"replicas": 0, "template": pod_template(app.clone(), "Always")}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts1"},
            "spec": {"replicas": 0, "serviceName": "sts1", "selector": {"matchLabels": app}, "template": pod_template(app.clone(), "Always")}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds1"},
            "spec": {"selector": {"matchLabels": app}, "template": pod_template(app.clone(), "Always")}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/controllerrevisions",
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "cr1"},
            "revision": 1, "data": {"spec": {}}}),
        ),
        (
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job1"},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (
            "/apis/batch/v1/namespaces/default/cronjobs",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj1"},
            "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
        ),
        (
            "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers",
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "hpa1"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
        ),
        (
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb1"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": app}}}),
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "es1"},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"]}], "ports": [{"port": 80, "name": "http"}]}),
        ),
        (
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "ing1"},
            "spec": {"rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
        ),
        (
            "/apis/networking.k8s.io/v1/ingressclasses",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "ic1"},
            "spec": {"controller": "example.com/ingress"}}),
        ),
        (
            "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "np1"},
            "spec": {"podSelector": {"matchLabels": app}}}),
        ),
        (
            "/apis/networking.k8s.io/v1/servicecidrs",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "extra"},
            "spec": {"cidrs": ["10.200.0.0/24"]}}),
        ),
        (
            "/apis/networking.k8s.io/v1/ipaddresses",
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": {"name": "10.200.0.9"},
            "spec": {"parentRef": {"resource": "services", "namespace": "default", "name": "web"}}}),
        ),
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "sc1"},
            "provisioner": "example.com/disk"}),
        ),
        (
            "/apis/storage.k8s.io/v1/csidrivers",
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "disk.example.com"}, "spec": {}}),
        ),
        (
            "/apis/storage.k8s.io/v1/csinodes",
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-a"}, "spec": {"drivers": []}}),
        ),
        (
            "/apis/storage.k8s.io/v1/volumeattachments",
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va1"},
            "spec": {"attacher": "disk.example.com", "nodeName": "node-a", "source": {"persistentVolumeName": "pv1"}}}),
        ),
        (
            "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity", "metadata": {"name": "cap1"},
            "storageClassName": "sc1", "capacity": "10Gi"}),
        ),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}),
        ),
        (
            "/apis/node.k8s.io/v1/runtimeclasses",
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc"}),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "vw1"},
            "webhooks": [{"name": "check.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/check"}}]}),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": {"name": "mw1"},
            "webhooks": [{"name": "mutate.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"], "clientConfig": {"service": {"namespace": "default", "name": "hook"}}}]}),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "vap1"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
                     "validations": [{"expression": "object.spec.replicas <= 5"}]}}),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "vapb1"},
            "spec": {"policyName": "vap1", "validationActions": ["Deny"]}}),
        ),
    ]
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// The server-side Table of `path`, as kubectl asks for it.
async fn table_of(c: &Cluster, path: &str) -> (u16, Value) {
    let resp = c
        .http
        .get(format!("{}{path}", c.base))
        .header("accept", TABLE)
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

/// Each sample: created (201, defaults applied), read back, listed, printed as a Table with a
/// row whose cell count matches the columns, labelled by a merge patch, deleted.
/// Upstream's status right after create, for kinds whose status only controllers write: a
/// struct always serialized, with the counters clients require (the Python client refuses a
/// ReplicaSet or DaemonSet status without them).
fn status_after_create(path: &str) -> Option<Value> {
    let collection = path.rsplit('/').next()?;
    Some(match collection {
        "replicationcontrollers" => json!({"replicas": 0}),
        "statefulsets" => json!({"replicas": 0, "availableReplicas": 0}),
        "daemonsets" => json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
            "desiredNumberScheduled": 0, "numberReady": 0}),
        "jobs" | "cronjobs" | "servicecidrs" | "validatingadmissionpolicies" => json!({}),
        "ingresses" => json!({"loadBalancer": {}}),
        "poddisruptionbudgets" => json!({"disruptionsAllowed": 0, "currentHealthy": 0,
            "desiredHealthy": 0, "expectedPods": 0}),
        "horizontalpodautoscalers" if path.contains("/autoscaling/v1/") => {
            json!({"currentReplicas": 0, "desiredReplicas": 0})
        }
        "horizontalpodautoscalers" => json!({"desiredReplicas": 0}),
        "volumeattachments" => json!({"attached": false}),
        _ => return None,
    })
}

async fn every_kind_round_trips(c: &Cluster) {
    for (path, mut obj) in samples() {
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let zero = status_after_create(path);
        if zero.is_some() {
            // A client's status is not taken on create.
            obj["status"] = json!({"observedGeneration": 9});
        }
        let (code, created) = c.post(path, &obj).await;
        assert_eq!(code, 201, "{path}: {created}");
        assert!(created["metadata"]["uid"].is_string(), "{path}");
        if let Some(zero) = zero {
            assert_eq!(created["status"], zero, "{path}");
        }
        let item = format!("{path}/{name}");
        let (code, got) = c.get(&item).await;
        assert_eq!(code, 200, "{item}: {got}");
        assert_eq!(got["kind"], obj["kind"]);
        let (code, list) = c.get(path).await;
        assert_eq!(code, 200, "{path}: {list}");
        assert_eq!(
            list["kind"],
            json!(format!("{}List", obj["kind"].as_str().unwrap()))
        );
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == json!(name)),
            "{path}"
        );
        let (code, table) = table_of(c, path).await;
        assert_eq!(code, 200, "{path}: {table}");
        let columns = table["columnDefinitions"].as_array().unwrap().len();
        let row = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["object"]["metadata"]["name"] == json!(name))
            .unwrap_or_else(|| panic!("{path}: {table}"))
            .clone();
        let cells = row["cells"].as_array().unwrap().len();
        // IPAddress carries one cell more than its columns, as upstream's printer.
        assert!(
            cells == columns || (path.ends_with("ipaddresses") && cells == columns + 1),
            "{path}: {columns} columns, {cells} cells"
        );
        let (code, patched) = c
            .merge_patch(&item, &json!({"metadata": {"labels": {"touched": "yes"}}}))
            .await;
        assert_eq!(code, 200, "{item}: {patched}");
        assert_eq!(patched["metadata"]["labels"]["touched"], "yes");
        let (code, deleted) = c.delete(&item, None).await;
        assert_eq!(code, 200, "{item}: {deleted}");
        if path.ends_with("persistentvolumeclaims") || path.ends_with("persistentvolumes") {
            // Protected until the controller-manager sees them unused (none runs here).
            let (_, held) = c.get(&item).await;
            assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
            let (code, _) = c
                .merge_patch(&item, &json!({"metadata": {"finalizers": null}}))
                .await;
            assert_eq!(code, 200);
        }
        let (code, _) = c.get(&item).await;
        assert_eq!(code, 404, "{item} is gone");
    }
}

/// Upstream's defaults and the validation messages users see first.
async fn defaults_and_validation(c: &Cluster) {
    // A Job gets a selector from its uid and both label spellings on its template.
    let (code, job) = c.post("/apis/batch/v1/namespaces/default/jobs", &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}}})).await;
    assert_eq!(code, 201, "{job}");
    let uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        json!(uid)
    );
    let labels = &job["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["job-name"], "pi");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
    assert_eq!(labels["controller-uid"], json!(uid));
    for (f, v) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
    ] {
        assert_eq!(job["spec"][f], v, "{f}");
    }
    // Its template is immutable.
    let (code, st) = c.merge_patch("/apis/batch/v1/namespaces/default/jobs/pi", &json!({"spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "other"}]}}}})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{st}"
    );
    // A Job whose pods would restart forever.
    let (code, st) = c
        .post(
            "/apis/batch/v1/namespaces/default/jobs",
            &json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(st["message"].as_str().unwrap().contains(r#"spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never""#), "{st}");
    // A CronJob's schedule is parsed; its history limits defaulted.
    let cj = |schedule: &str| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}})
    };
    let (code, st) = c
        .post(
            "/apis/batch/v1/namespaces/default/cronjobs",
            &cj("61 * * * *"),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains("spec.schedule"),
        "{st}"
    );
    let (code, got) = c
        .post("/apis/batch/v1/namespaces/default/cronjobs", &cj("@daily"))
        .await;
    assert_eq!(code, 201, "{got}");
    assert_eq!(got["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(got["spec"]["failedJobsHistoryLimit"], 1);
    assert_eq!(got["spec"]["concurrencyPolicy"], "Allow");
    // A PDB may not set both bounds.
    let (code, st) = c.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "both"},
        "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"a": "b"}}}})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("minAvailable and maxUnavailable cannot be both set"),
        "{st}"
    );
    // PriorityClass names with the system- prefix are reserved; values are immutable.
    let (code, st) = c.post("/apis/scheduling.k8s.io/v1/priorityclasses", &json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-mine"}, "value": 5})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("priority class names with 'system-' prefix are reserved"),
        "{st}"
    );
    // StatefulSet fields other than the mutable ones are forbidden to change.
    let (code, sts) = c.post("/apis/apps/v1/namespaces/default/statefulsets", &json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": pod_template(json!({"app": "db"}), "Always")}})).await;
    assert_eq!(code, 201, "{sts}");
    assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        0
    );
    let (code, st) = c
        .merge_patch(
            "/apis/apps/v1/namespaces/default/statefulsets/db",
            &json!({"spec": {"serviceName": "other"}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("updates to statefulset spec for fields other than"),
        "{st}"
    );
    let (code, scaled) = c.put("/apis/apps/v1/namespaces/default/statefulsets/db/scale", &json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "db", "namespace": "default"}, "spec": {"replicas": 3}})).await;
    assert_eq!(code, 200, "{scaled}");
    let (_, sts) = c
        .get("/apis/apps/v1/namespaces/default/statefulsets/db")
        .await;
    assert_eq!(sts["spec"]["replicas"], 3);
    // A PVC starts Pending; its spec is immutable except the requested size.
    let (code, pvc) = c.post("/api/v1/namespaces/default/persistentvolumeclaims", &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})).await;
    assert_eq!(code, 201, "{pvc}");
    assert_eq!(pvc["status"]["phase"], "Pending");
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    let (code, st) = c
        .merge_patch(
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            &json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    let (code, _) = c
        .merge_patch(
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            &json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
        )
        .await;
    assert_eq!(code, 200);
    // A webhook must declare its side effects.
    let (code, st) = c.post("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "x"},
        "webhooks": [{"name": "x.example.com", "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/"}}]})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains("sideEffects"),
        "{st}"
    );
}

/// events.k8s.io/v1 and core/v1 Events are one store under two names.
async fn events_in_both_groups(c: &Cluster) {
    let (code, ev) = c.post("/apis/events.k8s.io/v1/namespaces/default/events", &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1"}, "eventTime": "2026-11-24T10:00:00.000000Z", "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
        "action": "Scaled", "reason": "Scaling", "type": "Normal", "note": "scaled to 3", "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"}})).await;
    assert_eq!(code, 201, "{ev}");
    assert_eq!(ev["note"], "scaled to 3");
    let (code, core) = c.get("/api/v1/namespaces/default/events/e1").await;
    assert_eq!(code, 200, "{core}");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "scaled to 3");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["reportingComponent"], "example.com/ctl");
    // A core event shows in the newer group with the newer names.
    let (code, _) = c.post("/api/v1/namespaces/default/events", &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
        "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Pulled", "message": "pulled", "type": "Normal", "count": 2})).await;
    assert_eq!(code, 201);
    let (code, list) = c
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .await;
    assert_eq!(code, 200, "{list}");
    let e2 = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metadata"]["name"] == "e2")
        .expect("e2 listed")
        .clone();
    assert_eq!(e2["apiVersion"], "events.k8s.io/v1");
    assert_eq!(e2["note"], "pulled");
    assert_eq!(e2["deprecatedCount"], 2);
    assert_eq!(e2["regarding"]["kind"], "Pod");
    // Field selectors by each group's names.
    let (code, picked) = c
        .get("/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Dweb")
        .await;
    assert_eq!(code, 200, "{picked}");
    assert_eq!(picked["items"].as_array().unwrap().len(), 1, "{picked}");
    let (code, picked) = c
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DPod")
        .await;
    assert_eq!(code, 200, "{picked}");
    assert_eq!(picked["items"][0]["metadata"]["name"], "e2");
    // The newer API requires what the older one did not.
    let (code, st) = c.post("/apis/events.k8s.io/v1/namespaces/default/events", &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e3"}, "reason": "R", "type": "Normal"})).await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("eventTime: Required value"),
        "{st}"
    );
}

/// A CSR's conditions change through `approval` only; the reviews answer for other users and
/// tokens.
async fn csr_approval_and_reviews(c: &Cluster) {
    use base64::Engine as _;
    let request = base64::engine::general_purpose::STANDARD
        .encode("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n");
    let (code, csr) = c.post("/apis/certificates.k8s.io/v1/certificatesigningrequests", &json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "alice"}, "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})).await;
    assert_eq!(code, 201, "{csr}");
    assert_eq!(
        csr["spec"]["username"], "system:anonymous",
        "the requester, as the apiserver saw it: {csr}"
    );
    let approved = json!({"type": "Approved", "status": "True", "reason": "KubectlApprove", "message": "ok", "lastUpdateTime": "2026-11-24T10:00:00Z"});
    // The main resource cannot approve.
    let mut via_main = csr.clone();
    via_main["status"] = json!({"conditions": [approved]});
    let (code, put) = c
        .put(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/alice",
            &via_main,
        )
        .await;
    assert_eq!(code, 200, "{put}");
    assert!(put["status"]["conditions"].is_null(), "{put}");
    let mut via_approval = put.clone();
    via_approval["status"] = json!({"conditions": [approved]});
    let (code, put) = c
        .put(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/alice/approval",
            &via_approval,
        )
        .await;
    assert_eq!(code, 200, "{put}");
    assert_eq!(put["status"]["conditions"][0]["type"], "Approved");
    let (_, table) = table_of(c, "/apis/certificates.k8s.io/v1/certificatesigningrequests").await;
    assert_eq!(table["rows"][0]["cells"][5], "Approved", "{table}");
    let (code, sar) = c.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}})).await;
    assert_eq!(code, 201, "{sar}");
    assert_eq!(
        sar["status"]["allowed"], true,
        "the default AlwaysAllow authorizer: {sar}"
    );
    let (code, st) = c.post("/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews", &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
        "spec": {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "other"}}})).await;
    assert_eq!(code, 422, "{st}");
    let (code, tr) = c.post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "nope"}})).await;
    assert_eq!(code, 201, "{tr}");
    assert_eq!(tr["status"]["authenticated"], Value::Null, "{tr}");
}

/// HorizontalPodAutoscalers in both versions of their group: one storage, each version
/// converted (v1's single CPU target; everything else in upstream's annotations), in
/// discovery with v2 preferred, watched in either version. ReplicaSets refuse the
/// `status.replicas` field selector, as 1.33 does.
async fn autoscalers_in_two_versions(c: &Cluster) {
    let v1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
    let v2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";
    let (code, group) = c.get("/apis/autoscaling").await;
    assert_eq!(code, 200);
    assert_eq!(group["preferredVersion"]["version"], "v2");
    assert_eq!(
        group["versions"],
        json!([{"groupVersion": "autoscaling/v2", "version": "v2"}, {"groupVersion": "autoscaling/v1", "version": "v1"}])
    );
    let (code, list) = c.get("/apis/autoscaling/v1").await;
    assert_eq!(code, 200);
    assert_eq!(list["resources"][0]["name"], "horizontalpodautoscalers");
    let mut watch = c.watch(&format!("{v1}?watch=true")).await;
    let (code, made) = c
        .post(
            v1,
            &json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 5, "targetCPUUtilizationPercentage": 50}}),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["apiVersion"], "autoscaling/v1");
    assert_eq!(made["spec"]["minReplicas"], 1);
    assert_eq!(made["spec"]["targetCPUUtilizationPercentage"], 50);
    let (code, as_v2) = c.get(&format!("{v2}/web")).await;
    assert_eq!(code, 200);
    assert_eq!(
        as_v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}])
    );
    assert!(as_v2["metadata"].get("annotations").is_none(), "{as_v2}");
    let seen = watch
        .until(Duration::from_secs(10), |e| {
            e["object"]["metadata"]["name"] == "web"
        })
        .await;
    assert_eq!(seen["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(seen["object"]["spec"]["targetCPUUtilizationPercentage"], 50);
    // A v2 metric v1 cannot express rides in an annotation, and survives a v1 update.
    let (code, _) = c.merge_patch(&format!("{v2}/web"), &json!({"spec": {"metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}}]}})).await;
    assert_eq!(code, 200);
    let (_, through_v1) = c.get(&format!("{v1}/web")).await;
    let carried = through_v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]
        .as_str()
        .expect("the memory metric in an annotation");
    assert!(
        carried.contains("\"targetAverageValue\":\"500Mi\""),
        "{carried}"
    );
    let mut edited = through_v1.clone();
    edited["spec"]["maxReplicas"] = json!(7);
    let (code, st) = c.put(&format!("{v1}/web"), &edited).await;
    assert_eq!(code, 200, "{st}");
    let (_, after) = c.get(&format!("{v2}/web")).await;
    assert_eq!(after["spec"]["maxReplicas"], 7);
    assert_eq!(
        after["spec"]["metrics"].as_array().unwrap().len(),
        2,
        "{after}"
    );
    // Listed once per version, validated through either.
    let (_, listed) = c.get(v1).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    // One made through v2 reads through v1 with both counts v1 always serializes (the
    // Python client requires them).
    let (code, _) = c.post(v2, &json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "via-v2"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3}})).await;
    assert_eq!(code, 201);
    let (_, read) = c.get(&format!("{v1}/via-v2")).await;
    assert_eq!(
        read["status"],
        json!({"currentReplicas": 0, "desiredReplicas": 0}),
        "{read}"
    );
    let (code, _) = c.delete(&format!("{v2}/via-v2"), None).await;
    assert_eq!(code, 200);
    assert_eq!(listed["kind"], "HorizontalPodAutoscalerList");
    let (code, st) = c.post(v1, &json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 0}})).await;
    assert_eq!(code, 422, "{st}");
    let (code, st) = c
        .get("/apis/apps/v1/namespaces/default/replicasets?fieldSelector=status.replicas%3D0")
        .await;
    assert_eq!(code, 400, "{st}");
}

cases! {
    every_kind_round_trips, every_kind_round_trips_rkube, every_kind_round_trips_etcd;
    defaults_and_validation, defaults_and_validation_rkube, defaults_and_validation_etcd;
    events_in_both_groups, events_in_both_groups_rkube, events_in_both_groups_etcd;
    csr_approval_and_reviews, csr_approval_and_reviews_rkube, csr_approval_and_reviews_etcd;
    autoscalers_in_two_versions, autoscalers_in_two_versions_rkube, autoscalers_in_two_versions_etcd;
}
