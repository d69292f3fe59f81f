//! The ServiceAccount admission plugin (`plugin/pkg/admission/serviceaccount`): a new pod runs
//! as `default` unless it names an account; the account must exist (a pod naming a missing one
//! is refused, after upstream's retries for `default`, which the ServiceAccount controller
//! creates); unless automounting is off (the pod's `automountServiceAccountToken`, else the
//! account's), a projected `kube-api-access-xxxxx` volume — a bound token, the cluster CA and the
//! namespace — is mounted read-only in every init and app container at
//! `/var/run/secrets/kubernetes.io/serviceaccount`; the account's image pull secrets are copied
//! in. Mirror pods (static pods a kubelet reports) may not reference accounts, secrets or tokens.
//! The enforce-mountable-secrets annotation is not enforced.

use serde_json::{json, Value};

pub const DEFAULT: &str = "default";
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
pub const VOLUME_PREFIX: &str = "kube-api-access-";
const MIRROR: &str = "kubernetes.io/config.mirror";

/// Is this a kubelet's mirror pod?
pub fn is_mirror(pod: &Value) -> bool {
    pod.pointer(&format!(
        "/metadata/annotations/{}",
        MIRROR.replace('/', "~1")
    ))
    .is_some()
}

/// The account a new pod runs as, written into it: its `serviceAccountName`, else its
/// deprecated `serviceAccount`, else `default`.
pub fn name_account(pod: &mut Value) -> String {
    let spec_str = |k: &str| {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    let name = spec_str("serviceAccountName")
        .or_else(|| spec_str("serviceAccount"))
        .unwrap_or_else(|| DEFAULT.to_string());
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("serviceAccountName".into(), json!(name));
    }
    name
}

/// Why a mirror pod is refused, if it is.
pub fn mirror_refusal(pod: &Value) -> Option<&'static str> {
    let spec = pod.get("spec")?;
    let named = |k: &str| {
        spec.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if named("serviceAccountName") || named("serviceAccount") {
        return Some("a mirror pod may not reference service accounts");
    }
    let pull_secrets = spec.get("imagePullSecrets").and_then(Value::as_array);
    if pull_secrets.is_some_and(|p| !p.is_empty()) {
        return Some("a mirror pod may not reference secrets");
    }
    let volumes = spec.get("volumes").and_then(Value::as_array);
    for v in volumes.into_iter().flatten() {
        // A secret volume, or any volume source naming a secret (`secretRef`, as csi, rbd,
        // cephfs, iscsi, flexVolume … do).
        let names_secret = v.get("secret").is_some()
            || v.as_object().into_iter().flatten().any(|(_, src)| {
                src.get("secretRef").is_some() || src.get("nodePublishSecretRef").is_some()
            });
        if names_secret {
            return Some("a mirror pod may not reference secrets");
        }
        let sources = v.pointer("/projected/sources").and_then(Value::as_array);
        for s in sources.into_iter().flatten() {
            if s.get("secret").is_some() {
                return Some("a mirror pod may not reference secrets");
            }
            if s.get("serviceAccountToken").is_some() {
                return Some("a mirror pod may not use ServiceAccountToken volume projections");
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let env_secret = c
                .get("env")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|e| e.pointer("/valueFrom/secretKeyRef").is_some());
            let env_from_secret = c
                .get("envFrom")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|e| e.get("secretRef").is_some());
            if env_secret || env_from_secret {
                return Some("a mirror pod may not reference secrets");
            }
        }
    }
    None
}

/// Does the pod get a token: its own `automountServiceAccountToken`, else the account's,
/// else yes.
pub fn should_automount(pod: &Value, account: &Value) -> bool {
    pod.pointer("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true)
}

/// Upstream's `TokenVolumeSource`: a bound token, the cluster CA and the namespace.
fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]}})
}

/// Mounts the token volume in every init and app container that has nothing at the mount
/// path (an existing `kube-api-access-*` volume is reused); `suffix` names a new volume.
pub fn mount_token(pod: &mut Value, suffix: &str) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(str::to_string);
    let name = existing
        .clone()
        .unwrap_or_else(|| format!("{VOLUME_PREFIX}{suffix}"));
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter(|c| c.is_object()) {
            let taken = c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH));
            if taken {
                continue;
            }
            let mounts = c
                .as_object_mut()
                .expect("object")
                .entry("volumeMounts")
                .or_insert_with(|| json!([]));
            if let Some(m) = mounts.as_array_mut() {
                m.push(json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH}));
                mounted = true;
            }
        }
    }
    if mounted && existing.is_none() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(token_volume(&name));
        }
    }
}

/// The account's image pull secrets, for a pod that names none.
pub fn copy_pull_secrets(pod: &mut Value, account: &Value) {
    let has = pod
        .pointer("/spec/imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let theirs: Vec<Value> = account
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name"))
        .map(|n| json!({"name": n}))
        .collect();
    if has || theirs.is_empty() {
        return;
    }
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("imagePullSecrets".into(), json!(theirs));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "n"}, "spec": {
            "initContainers": [{"name": "init", "image": "i"}],
            "containers": [
                {"name": "a", "image": "i"},
                {"name": "b", "image": "i", "volumeMounts": [{"name": "mine", "mountPath": MOUNT_PATH}]}
            ],
            "ephemeralContainers": [{"name": "e", "image": "i"}]}})
    }

    #[test]
    fn token_volume_mounted_where_nothing_else_is() {
        let mut p = pod();
        assert_eq!(name_account(&mut p), "default");
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        mount_token(&mut p, "x2b4z");
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(vols[0]["name"], "kube-api-access-x2b4z");
        assert_eq!(vols[0]["projected"]["defaultMode"], 420);
        assert_eq!(
            vols[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        let mount =
            json!([{"name": "kube-api-access-x2b4z", "readOnly": true, "mountPath": MOUNT_PATH}]);
        assert_eq!(p["spec"]["initContainers"][0]["volumeMounts"], mount);
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"], mount);
        assert_eq!(
            p["spec"]["containers"][1]["volumeMounts"][0]["name"],
            "mine"
        );
        assert!(p["spec"]["ephemeralContainers"][0]
            .get("volumeMounts")
            .is_none());
        // Again: the existing volume is reused, nothing doubled.
        let before = p.clone();
        mount_token(&mut p, "other");
        assert_eq!(p, before);
    }

    #[test]
    fn automount_pod_over_account_and_mirror_pods_refused() {
        let mut p = pod();
        let off = json!({"automountServiceAccountToken": false});
        assert!(!should_automount(&p, &off));
        p["spec"]["automountServiceAccountToken"] = json!(true);
        assert!(should_automount(&p, &off));
        assert!(should_automount(&pod(), &json!({})));
        let mut m = pod();
        m["metadata"]["annotations"] = json!({MIRROR: "x"});
        assert!(is_mirror(&m));
        assert_eq!(mirror_refusal(&m), None);
        m["spec"]["serviceAccountName"] = json!("default");
        assert_eq!(
            mirror_refusal(&m),
            Some("a mirror pod may not reference service accounts")
        );
    }

    #[test]
    fn pull_secrets_copied_only_when_the_pod_names_none() {
        let sa = json!({"imagePullSecrets": [{"name": "reg"}]});
        let mut p = pod();
        copy_pull_secrets(&mut p, &sa);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "reg"}]));
        p["spec"]["imagePullSecrets"] = json!([{"name": "own"}]);
        copy_pull_secrets(&mut p, &sa);
        assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "own"}]));
    }
}
