//! The pod as the components cache it: k8s-openapi's `Pod`, field for field and with the same
//! JSON both ways, but with the large, rarely set parts boxed (affinity, security contexts,
//! probes, lifecycle hooks, container states) and the status boxed. k8s-openapi lays every
//! optional struct out inline: its `Pod` is 2,144 bytes and each `Container` 2,120 however
//! little is set, which at 10,000 pods was half of what each component's pods informer held.
//! Everything not mirrored here (affinity terms, probes, volumes, ...) is k8s-openapi's own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// k8s-openapi's `Pod`, its spec and status as below.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: Option<PodSpec>,
    pub status: Option<Box<PodStatus>>,
}

impl Pod {
    /// A k8s-openapi pod in this form (through its JSON; for tests that build one).
    pub fn from_k8s(p: &v1::Pod) -> Pod {
        convert(p)
    }

    /// The PersistentVolumeClaims the pod uses (`rkube_api::claims::claims_of`).
    pub fn claims(&self) -> Vec<String> {
        let volumes = self.spec.as_ref().and_then(|s| s.volumes.as_deref());
        let name = self.metadata.name.as_deref().unwrap_or_default();
        rkube_api::claims::claims_of(name, volumes.unwrap_or_default())
    }
}

fn convert<A: Serialize, B: serde::de::DeserializeOwned + Default>(a: &A) -> B {
    // Both sides are the same JSON shape, so neither step can fail on a value the other made.
    serde_json::to_value(a)
        .and_then(serde_json::from_value)
        .unwrap_or_default()
}

/// k8s-openapi's `ResourceRequirements` with its quantities in a `Quantities` list instead of
/// a `BTreeMap` (whose one node is 544 bytes for the two entries a container has).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Resources {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<v1::ResourceClaim>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Quantities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<Quantities>,
}

/// A resource map (`cpu: 100m`, ...) as a list sorted by name, exactly sized; the same JSON
/// as `BTreeMap<String, Quantity>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantities(Box<[(String, Quantity)]>);

impl Quantities {
    pub fn get(&self, name: &str) -> Option<&Quantity> {
        let at = self
            .0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()?;
        Some(&self.0[at].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Quantity)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Quantities {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Quantities {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Read as the map it is: sorted, and a repeated name keeps its last value.
        let map = BTreeMap::<String, Quantity>::deserialize(d)?;
        Ok(Quantities(map.into_iter().collect()))
    }
}

/// A required field sent as `null` reads as its default, as k8s-openapi reads it: one pod
/// written that way must not stop a component's informer from decoding the list.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl Serialize for Pod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let fields = 3 + usize::from(self.spec.is_some()) + usize::from(self.status.is_some());
        let mut st = s.serialize_struct("Pod", fields)?;
        st.serialize_field("apiVersion", "v1")?;
        st.serialize_field("kind", "Pod")?;
        st.serialize_field("metadata", &self.metadata)?;
        if let Some(spec) = &self.spec {
            st.serialize_field("spec", spec)?;
        }
        if let Some(status) = &self.status {
            st.serialize_field("status", status)?;
        }
        st.end()
    }
}

impl_resource!(Pod, "", "v1", "Pod", "pods", NamespaceResourceScope);

/// k8s-openapi's `PodSpec`, field for field, the large rarely set parts boxed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<v1::Affinity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    #[serde(deserialize_with = "null_as_default")]
    pub containers: Vec<Container>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<Box<v1::PodDNSConfig>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral_containers: Option<Vec<v1::EphemeralContainer>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_aliases: Option<Vec<v1::HostAlias>>,
    #[serde(rename = "hostIPC", skip_serializing_if = "Option::is_none")]
    pub host_ipc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(rename = "hostPID", skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_users: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<v1::LocalObjectReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<Box<v1::PodOS>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Quantities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_gates: Option<Vec<v1::PodReadinessGate>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<v1::PodResourceClaim>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<Resources>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<v1::PodSchedulingGate>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<Box<v1::PodSecurityContext>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(rename = "setHostnameAsFQDN", skip_serializing_if = "Option::is_none")]
    pub set_hostname_as_fqdn: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<v1::Toleration>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<v1::TopologySpreadConstraint>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<v1::Volume>>,
}

/// k8s-openapi's `Container`, field for field, the large rarely set parts boxed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<v1::EnvVar>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<v1::EnvFromSource>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Box<v1::Lifecycle>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Box<v1::Probe>>,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<v1::ContainerPort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Box<v1::Probe>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize_policy: Option<Vec<v1::ContainerResizePolicy>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_context: Option<Box<v1::SecurityContext>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Box<v1::Probe>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin_once: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_message_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_devices: Option<Vec<v1::VolumeDevice>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<v1::VolumeMount>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

/// k8s-openapi's `PodStatus`, field for field.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<v1::PodCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    #[serde(rename = "hostIPs", skip_serializing_if = "Option::is_none")]
    pub host_ips: Option<Vec<v1::HostIP>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(rename = "podIPs", skip_serializing_if = "Option::is_none")]
    pub pod_ips: Option<Vec<v1::PodIP>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<v1::PodResourceClaimStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// k8s-openapi's `ContainerStatus`, field for field, the large rarely set parts boxed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_resources: Option<Quantities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_resources_status: Option<Vec<v1::ResourceStatus>>,
    #[serde(rename = "containerID", skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(deserialize_with = "null_as_default")]
    pub image: String,
    #[serde(rename = "imageID", deserialize_with = "null_as_default")]
    pub image_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_state: Option<Box<v1::ContainerState>>,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<Resources>>,
    #[serde(deserialize_with = "null_as_default")]
    pub restart_count: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<Box<v1::ContainerState>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<Box<v1::ContainerUser>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<v1::VolumeMountStatus>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod with every mirrored field's JSON name set (and the boxed parts filled).
    fn rich() -> serde_json::Value {
        let container = json!({
            "name": "c", "image": "nginx", "imagePullPolicy": "Always", "args": ["a"],
            "command": ["sh"], "env": [{"name": "E", "value": "1"}],
            "envFrom": [{"configMapRef": {"name": "cm"}}], "workingDir": "/w",
            "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
            "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"},
                "claims": [{"name": "rc"}]},
            "restartPolicy": "Always",
            "securityContext": {"privileged": false, "runAsUser": 1000},
            "livenessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 3},
            "readinessProbe": {"exec": {"command": ["true"]}},
            "startupProbe": {"tcpSocket": {"port": 80}},
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
            "stdin": true, "stdinOnce": true, "tty": true,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeDevices": [{"name": "d", "devicePath": "/dev/x"}],
            "volumeMounts": [{"name": "v", "mountPath": "/v"}]
        });
        let status = json!({
            "name": "c", "image": "nginx", "imageID": "sha256:1", "containerID": "rkube://1",
            "ready": true, "restartCount": 2, "started": true,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            "allocatedResources": {"cpu": "100m"},
            "resources": {"requests": {"cpu": "100m"}},
            "user": {"linux": {"uid": 0, "gid": 0}},
            "volumeMounts": [{"name": "v", "mountPath": "/v"}], "stopSignal": "SIGTERM",
            "allocatedResourcesStatus": [{"name": "claim:rc",
                "resources": [{"resourceID": "r1", "health": "Healthy"}]}]
        });
        let mut spec = json!({
                "activeDeadlineSeconds": 5, "automountServiceAccountToken": false,
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions":
                        [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
                "containers": [container.clone()], "initContainers": [container],

                "dnsConfig": {"nameservers": ["1.1.1.1"]}, "dnsPolicy": "None",
                "enableServiceLinks": true, "hostAliases": [{"ip": "1.2.3.4", "hostnames": ["h"]}],
                "hostIPC": true, "hostNetwork": true, "hostPID": true, "hostUsers": false,
                "hostname": "h", "imagePullSecrets": [{"name": "s"}], "nodeName": "n",
                "nodeSelector": {"a": "b"}, "os": {"name": "linux"}, "overhead": {"cpu": "1"},
                "preemptionPolicy": "Never", "priority": 7, "priorityClassName": "high",
                "readinessGates": [{"conditionType": "x"}],
                "resources": {"limits": {"cpu": "2"}}, "restartPolicy": "Never",
                "runtimeClassName": "rc", "schedulerName": "s",
                "schedulingGates": [{"name": "g"}],
                "securityContext": {"runAsNonRoot": true, "fsGroup": 2},
                "serviceAccount": "sa", "serviceAccountName": "sa", "setHostnameAsFQDN": true,
                "shareProcessNamespace": true, "subdomain": "sub",
                "terminationGracePeriodSeconds": 3,
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [{"maxSkew": 1,
                    "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
                "volumes": [{"name": "v", "emptyDir": {}}]
        });
        spec["ephemeralContainers"] =
            json!([{"name": "e", "image": "busybox", "targetContainerName": "c"}]);
        spec["resourceClaims"] = json!([{"name": "rc", "resourceClaimName": "claim"}]);
        let pod_status = json!({
                "phase": "Running", "message": "m", "reason": "r", "qosClass": "Burstable",
                "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
                "podIP": "10.1.0.2", "podIPs": [{"ip": "10.1.0.2"}],
                "nominatedNodeName": "n2", "observedGeneration": 3, "resize": "InProgress",
                "resourceClaimStatuses": [{"name": "rc", "resourceClaimName": "claim"}],
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [status.clone()], "initContainerStatuses": [status.clone()],
                "ephemeralContainerStatuses": [status]
        });
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "labels": {"app": "x"}},
            "spec": spec, "status": pod_status
        })
    }

    #[test]
    fn a_cached_pod_reads_and_writes_the_same_json_as_k8s_openapis() {
        let full: v1::Pod = serde_json::from_value(rich()).unwrap();
        let cached: Pod = serde_json::from_value(rich()).unwrap();
        let (a, b) = (
            serde_json::to_value(&full).unwrap(),
            serde_json::to_value(&cached).unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(a, rich(), "no field of the test pod is lost or renamed");
        assert_eq!(convert::<_, v1::Pod>(&cached), full);
        assert_eq!(Pod::from_k8s(&full), cached);
    }

    #[test]
    fn a_cached_pod_is_listed_and_watched_where_k8s_openapis_is() {
        use k8s_openapi::{ListableResource, Resource};
        assert_eq!(
            (
                Pod::API_VERSION,
                Pod::GROUP,
                Pod::KIND,
                Pod::VERSION,
                Pod::URL_PATH_SEGMENT
            ),
            (
                v1::Pod::API_VERSION,
                v1::Pod::GROUP,
                v1::Pod::KIND,
                v1::Pod::VERSION,
                v1::Pod::URL_PATH_SEGMENT
            )
        );
        assert_eq!(Pod::LIST_KIND, v1::Pod::LIST_KIND);
        let dynamic = crate::dynamic::PartialObjectMeta::API_VERSION;
        assert_eq!(dynamic, "meta.k8s.io/v1");
    }

    #[test]
    fn required_fields_sent_as_null_read_as_empty_as_k8s_openapi_reads_them() {
        let with_nulls = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": null},
            "status": {"containerStatuses": [{"name": null, "image": null, "imageID": null,
                "ready": null, "restartCount": null}]}
        });
        let full: v1::Pod = serde_json::from_value(with_nulls.clone()).unwrap();
        let cached: Pod = serde_json::from_value(with_nulls).unwrap();
        assert_eq!(cached, Pod::from_k8s(&full));
        let mut with_container = json!({"spec": {"containers": [{"name": null}]}});
        let cached: Pod = serde_json::from_value(with_container.take()).unwrap();
        assert_eq!(cached.spec.unwrap().containers[0].name, "");
    }

    #[test]
    fn quantities_read_and_write_as_a_map_does() {
        let q: Quantities =
            serde_json::from_str(r#"{"memory": "1Gi", "cpu": "1", "cpu": "250m"}"#).unwrap();
        assert_eq!(
            q.get("cpu").map(|q| q.0.as_str()),
            Some("250m"),
            "the last value counts"
        );
        assert_eq!(q.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
        assert_eq!(q.get("pods"), None);
        let names: Vec<&String> = q.iter().map(|(k, _)| k).collect();
        assert_eq!(names, ["cpu", "memory"]);
        let as_map: BTreeMap<String, Quantity> =
            serde_json::from_str(r#"{"memory": "1Gi", "cpu": "250m"}"#).unwrap();
        assert_eq!(
            serde_json::to_value(&q).unwrap(),
            serde_json::to_value(as_map).unwrap()
        );
        assert!(serde_json::from_str::<Quantities>("[]").is_err());
        assert!(serde_json::from_str::<Quantities>("{}").unwrap().is_empty());
    }

    #[test]
    fn a_cached_pod_is_a_fraction_of_k8s_openapis_size() {
        use std::mem::size_of;
        assert!(
            size_of::<Pod>() * 2 < size_of::<v1::Pod>(),
            "{}",
            size_of::<Pod>()
        );
        assert!(size_of::<Container>() * 3 < size_of::<v1::Container>());
        assert!(size_of::<ContainerStatus>() * 3 / 2 < size_of::<v1::ContainerStatus>());
    }
}
