use super::*;
use serde_json::json;

/// A minimal protobuf writer, enough to build request bodies as client-go marshals them.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn varint(mut self, mut v: u64) -> Self {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }
    fn key(self, field: u32, wire: u8) -> Self {
        self.varint(u64::from(field) << 3 | u64::from(wire))
    }
    fn int(self, field: u32, v: i64) -> Self {
        self.key(field, 0).varint(v as u64)
    }
    fn bytes(self, field: u32, b: &[u8]) -> Self {
        let mut w = self.key(field, 2).varint(b.len() as u64);
        w.0.extend_from_slice(b);
        w
    }
    fn str(self, field: u32, s: &str) -> Self {
        self.bytes(field, s.as_bytes())
    }
    fn msg(self, field: u32, m: W) -> Self {
        self.bytes(field, &m.0)
    }
    fn entry(self, field: u32, key: &str, value: W) -> Self {
        self.msg(field, W::default().str(1, key).bytes(2, &value.0))
    }
}

fn envelope(api_version: &str, kind: &str, raw: W) -> Vec<u8> {
    let unknown = W::default()
        .msg(1, W::default().str(1, api_version).str(2, kind))
        .msg(2, raw)
        .str(3, "")
        .str(4, "");
    [MAGIC, &unknown.0].concat()
}

/// ObjectMeta as Go marshals it: every non-pointer string, even empty ones.
fn meta(name: &str) -> W {
    W::default()
        .str(1, name)
        .str(2, "")
        .str(3, "")
        .str(4, "")
        .str(5, "")
        .str(6, "")
        .int(7, 0)
        .msg(8, W::default())
}

#[test]
fn a_namespace_as_kubectl_create_namespace_sends_it() {
    let raw = W::default()
        .msg(1, meta("demo"))
        .msg(2, W::default())
        .msg(3, W::default().str(1, ""));
    let got = decode(&envelope("v1", "Namespace", raw)).unwrap();
    assert_eq!(
        got,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}, "spec": {}, "status": {}})
    );
}

#[test]
fn secret_bytes_are_base64_and_a_false_pointer_is_kept() {
    let raw = W::default()
        .msg(1, meta("creds"))
        .entry(2, "password", W(b"s3cr\xffet".to_vec()))
        .str(3, "Opaque")
        .int(5, 0);
    let got = decode(&envelope("v1", "Secret", raw)).unwrap();
    assert_eq!(got["data"]["password"], "czNjcv9ldA==");
    assert_eq!(got["type"], "Opaque");
    assert_eq!(
        got["immutable"], false,
        "immutable is a *bool: false is a value"
    );
}

#[test]
fn a_deployment_with_wrappers_maps_and_repeated_messages() {
    let container = W::default()
        .str(1, "nginx")
        .str(2, "nginx:1.14.2")
        .msg(6, W::default().str(1, "").int(3, 80).str(4, "TCP"))
        .msg(
            8,
            W::default().entry(2, "cpu", W::default().str(1, "100m")), // resources.requests
        )
        .int(16, 0) // stdin: false, dropped
        .str(14, ""); // imagePullPolicy: "", dropped
    let pod_spec = W::default().msg(2, container).str(3, "").int(4, 0);
    let template = W::default()
        .msg(1, W::default().entry(11, "app", W(b"nginx".to_vec())))
        .msg(2, pod_spec);
    let strategy = W::default().str(1, "RollingUpdate").msg(
        2,
        W::default()
            .msg(1, W::default().int(1, 1).str(3, "25%"))
            .msg(2, W::default().int(1, 0).int(2, 1)),
    );
    let spec = W::default()
        .int(1, 0) // replicas: 0 is kept
        .msg(2, W::default().entry(1, "app", W(b"nginx".to_vec())))
        .msg(3, template)
        .msg(4, strategy)
        .int(5, 0) // minReadySeconds: 0, dropped
        .int(7, 0); // paused: false, dropped
    let metadata = meta("web").msg(8, W::default().int(1, 1_700_000_000).int(2, 0));
    let raw = W::default()
        .msg(1, metadata)
        .msg(2, spec)
        .msg(3, W::default());
    let got = decode(&envelope("apps/v1", "Deployment", raw)).unwrap();
    assert_eq!(got["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(got["spec"]["replicas"], 0);
    assert!(got["spec"].get("minReadySeconds").is_none() && got["spec"].get("paused").is_none());
    assert_eq!(
        got["spec"]["selector"],
        json!({"matchLabels": {"app": "nginx"}})
    );
    assert_eq!(
        got["spec"]["template"]["metadata"]["labels"],
        json!({"app": "nginx"})
    );
    let c = &got["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        *c,
        json!({"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80, "protocol": "TCP"}],
               "resources": {"requests": {"cpu": "100m"}}})
    );
    assert_eq!(
        got["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}})
    );
}

#[test]
fn an_embedded_message_lands_in_its_parents_object() {
    // Volume{name, VolumeSource{configMap{LocalObjectReference{name}, defaultMode 0}}}.
    let cm = W::default()
        .msg(1, W::default().str(1, "settings"))
        .int(3, 0);
    let volume = W::default()
        .str(1, "config")
        .msg(2, W::default().msg(19, cm));
    let spec = W::default().msg(1, volume);
    let raw = W::default().msg(1, meta("p")).msg(2, spec);
    let got = decode(&envelope("v1", "Pod", raw)).unwrap();
    assert_eq!(
        got["spec"]["volumes"][0],
        json!({"name": "config", "configMap": {"name": "settings", "defaultMode": 0}})
    );
}

#[test]
fn bad_bodies_are_clear_errors() {
    assert_eq!(decode(b"{\"kind\":\"Pod\"}"), Err(ProtoError::NoMagic));
    let good = envelope("v1", "ConfigMap", W::default().msg(1, meta("x")));
    // Cut anywhere: an error or (at a field boundary) a shorter object, never a panic.
    for cut in 0..good.len() {
        let _ = decode(&good[..cut]);
    }
    // Cut inside the object's bytes: its length prefix promises more than there is.
    assert_eq!(
        decode(&good[..good.len() - 3]),
        Err(ProtoError::Malformed("runtime.Unknown".into()))
    );
    assert_eq!(
        decode(&envelope("v1", "ConfigMap", W::default().str(9, "?"))),
        Err(ProtoError::UnknownField {
            message: "api.core.v1.ConfigMap".into(),
            field: 9
        })
    );
    assert!(matches!(
        decode(&envelope("example.com/v1", "Widget", W::default())),
        Err(ProtoError::UnknownType(t)) if t == "example.com/v1, Kind=Widget"
    ));
    // A string field sent with a varint wire type.
    assert!(decode(&envelope("v1", "ConfigMap", W::default().int(1, 3))).is_err());
}

#[test]
fn every_schema_reference_resolves() {
    for (message, fields) in schema() {
        for field in fields.values() {
            let target = match &field.kind {
                Kind::Message(m) => m,
                Kind::Map(k) => match k.as_ref() {
                    Kind::Message(m) => m,
                    _ => continue,
                },
                Kind::Scalar(_) => continue,
            };
            let known = schema().contains_key(target) || special(target, &[]).unwrap().is_some();
            assert!(known, "{message}.{} refers to unknown {target}", field.json);
        }
    }
    for kind in [
        "Pod",
        "Namespace",
        "Node",
        "Event",
        "ConfigMap",
        "Secret",
        "Service",
        "ServiceAccount",
    ] {
        assert!(message_for("v1", kind).is_some(), "{kind}");
    }
    assert!(message_for("rbac.authorization.k8s.io/v1", "ClusterRoleBinding").is_some());
    assert!(message_for("coordination.k8s.io/v1", "Lease").is_some());
    assert!(message_for("v1", "DeleteOptions").is_some());
}

#[test]
fn durations_print_as_go_does() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1_500), "1.5µs");
    assert_eq!(go_duration(150_000_000), "150ms");
    assert_eq!(go_duration(3_723_500_000_000), "1h2m3.5s");
    assert_eq!(go_duration(-90_000_000_000), "-1m30s");
}

/// Bodies kubectl 1.32 sent for `create namespace demo`, `create configmap cm1
/// --from-literal=a=b -n demo`, `create secret generic s1 --from-literal=password=x -n demo` and
/// `create deployment web --image=nginx --replicas=0 -n demo`, captured on the wire.
#[test]
fn bodies_captured_from_kubectl_decode_to_what_its_json_would_say() {
    let ns = decode(include_bytes!("testdata/kubectl-create-namespace.pb")).unwrap();
    assert_eq!(
        ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}, "spec": {}, "status": {}})
    );
    let cm = decode(include_bytes!("testdata/kubectl-create-configmap.pb")).unwrap();
    assert_eq!(
        cm,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "namespace": "demo"}, "data": {"a": "b"}})
    );
    let secret = decode(include_bytes!("testdata/kubectl-create-secret.pb")).unwrap();
    assert_eq!(secret["data"], json!({"password": "eA=="}));
    assert_eq!(
        secret["metadata"],
        json!({"name": "s1", "namespace": "demo"})
    );
    let deploy = decode(include_bytes!("testdata/kubectl-create-deployment.pb")).unwrap();
    assert_eq!(
        deploy,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
}

#[test]
fn encoded_objects_decode_to_the_same_json() {
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "1f0c", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-29T09:08:03Z",
            "labels": {"app": "web", "tier": "front"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-29T09:08:03Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u", "controller": true}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5}}],
                    "terminationGracePeriodSeconds": 30}}},
        "status": {"replicas": 2, "conditions": [{"type": "Available", "status": "True",
            "lastUpdateTime": "2026-11-29T09:08:04Z", "lastTransitionTime": "2026-11-29T09:08:04Z"}]}});
    let body = encode(&deploy).unwrap();
    assert!(body.starts_with(MAGIC));
    assert_eq!(decode(&body).unwrap(), deploy);

    let list = json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "99", "continue": "abc", "remainingItemCount": 5},
        "items": [{"metadata": {"name": "a", "deletionTimestamp": "2026-11-29T09:08:03Z"},
                   "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": "n-1"},
                   "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]}},
                  {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}]});
    assert_eq!(decode(&encode(&list).unwrap()).unwrap(), list);
    // From JSON bytes, item by item: the same body.
    let bytes = serde_json::to_vec(&list).unwrap();
    assert_eq!(encode_json(&bytes).unwrap(), encode(&list).unwrap());
    let bytes = serde_json::to_vec(&deploy).unwrap();
    assert_eq!(encode_json(&bytes).unwrap(), encode(&deploy).unwrap());
    assert!(encode_json(b"[1]").is_err());

    let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"}, "code": 404});
    assert_eq!(decode(&encode(&status).unwrap()).unwrap(), status);

    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"k": "czNjcv9ldA=="}, "type": "Opaque", "immutable": false});
    assert_eq!(decode(&encode(&secret).unwrap()).unwrap(), secret);
}

#[test]
fn bodies_captured_from_kubectl_survive_a_round_trip() {
    for body in [
        &include_bytes!("testdata/kubectl-create-namespace.pb")[..],
        include_bytes!("testdata/kubectl-create-configmap.pb"),
        include_bytes!("testdata/kubectl-create-secret.pb"),
        include_bytes!("testdata/kubectl-create-deployment.pb"),
    ] {
        let json = decode(body).unwrap();
        assert_eq!(decode(&encode(&json).unwrap()).unwrap(), json);
    }
}

#[test]
fn what_has_no_protobuf_form_is_said_so() {
    assert!(encodable("apps/v1", "Deployment"));
    assert!(encodable("v1", "PodList"));
    assert!(!encodable("example.com/v1", "Widget"));
    // A custom resource named as a built-in kind is not one.
    assert!(!encodable("apps.example.com/v1", "Deployment"));
    assert!(!encodable("example.com/v1", "Status"));
    assert!(encodable("rbac.authorization.k8s.io/v1", "ClusterRole"));
    assert!(encodable("networking.k8s.io/v1", "IngressList"));
    assert!(encodable("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"));
    let e = encode(&json!({"apiVersion": "example.com/v1", "kind": "Widget"})).unwrap_err();
    assert!(matches!(e, ProtoError::UnknownType(_)), "{e}");
    let e =
        encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": 1}})).unwrap_err();
    assert!(e.to_string().contains("ConfigMap.data"), "{e}");
}

#[test]
fn go_durations_parse_back() {
    for (text, nanos) in [
        ("0s", 0),
        ("0", 0),
        ("150ms", 150_000_000),
        ("1h2m3.5s", 3_723_500_000_000),
        ("-2s", -2_000_000_000),
        ("1.5µs", 1_500),
    ] {
        assert_eq!(encode::parse_go_duration(text), Ok(nanos), "{text}");
        if nanos != 0 {
            assert_eq!(go_duration(nanos), text.trim_start_matches('+'));
        }
    }
    assert!(encode::parse_go_duration("5 s").is_err());
    assert!(encode::parse_go_duration("").is_err());
}
