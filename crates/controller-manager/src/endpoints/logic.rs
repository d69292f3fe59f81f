//! What a Service's endpoints should be (pure, shared by the Endpoints and EndpointSlice
//! controllers): the pods its selector picks in its namespace that have an IP and are not
//! finished, each with its readiness (ready / serving / terminating, as upstream's
//! `podEndpointsChanged` reads pod conditions) and the Service's ports resolved against the
//! pod's containers (a named `targetPort` is a container port's name).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rkube_client::pod::Pod;

/// One pod as an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodEndpoint {
    pub ip: String,
    pub name: String,
    pub uid: String,
    pub node: Option<String>,
    pub hostname: Option<String>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// A Service port resolved for some pods: (name, port on the pod, protocol, app protocol).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolvedPort {
    pub name: String,
    pub port: i32,
    pub protocol: String,
    pub app_protocol: Option<String>,
}

/// The pods of one port set: every pod in a group serves the same resolved ports.
pub type Groups = BTreeMap<Vec<ResolvedPort>, Vec<PodEndpoint>>;

/// Whether the Service is managed by these controllers (it has a selector).
pub fn managed(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty())
        && svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("ExternalName")
}

/// Whether `pod` carries every label of the Service's selector.
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    !sel.is_empty()
        && sel
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn condition(pod: &Pod, kind: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// A pod as an endpoint, if it is one: it has an IP and has not finished.
pub fn endpoint_of(svc: &Service, pod: &Pod) -> Option<PodEndpoint> {
    let status = pod.status.as_ref()?;
    let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
    if matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let ready = condition(pod, "Ready");
    let svc_name = svc.metadata.name.as_deref().unwrap_or("");
    let hostname = match (&spec.hostname, &spec.subdomain) {
        (Some(h), Some(sub)) if sub == svc_name && !h.is_empty() => Some(h.clone()),
        _ => None,
    };
    Some(PodEndpoint {
        ip,
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        node: spec.node_name.clone(),
        hostname,
        ready: publish || (ready && !terminating),
        serving: publish || ready,
        terminating,
    })
}

/// The Service's ports as this pod serves them; a named target port the pod lacks is left out.
pub fn resolve_ports(svc: &Service, pod: &Pod) -> Vec<ResolvedPort> {
    let ports: &[ServicePort] = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or(&[]);
    let mut out: Vec<ResolvedPort> = ports
        .iter()
        .filter_map(|p| {
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let port = match &p.target_port {
                None => p.port,
                Some(IntOrString::Int(n)) => *n,
                Some(IntOrString::String(name)) => match name.parse::<i32>() {
                    Ok(n) => n,
                    Err(_) => container_port(pod, name, &protocol)?,
                },
            };
            Some(ResolvedPort {
                name: p.name.clone().unwrap_or_default(),
                port,
                protocol,
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect();
    out.sort();
    out
}

fn container_port(pod: &Pod, name: &str, protocol: &str) -> Option<i32> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| {
            p.name.as_deref() == Some(name) && p.protocol.as_deref().unwrap_or("TCP") == protocol
        })
        .map(|p| p.container_port)
}

/// The Service's endpoints grouped by port set, pods sorted by IP then name.
pub fn groups<'a>(svc: &Service, pods: impl IntoIterator<Item = &'a Pod>) -> Groups {
    let mut out = Groups::new();
    let has_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|p| !p.is_empty());
    for pod in pods {
        if !selects(svc, pod) {
            continue;
        }
        let Some(ep) = endpoint_of(svc, pod) else {
            continue;
        };
        let ports = resolve_ports(svc, pod);
        if has_ports && ports.is_empty() {
            continue;
        }
        out.entry(ports).or_default().push(ep);
    }
    for eps in out.values_mut() {
        eps.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool, port_name: &str, port: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"), "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": port_name, "containerPort": port}]}]},
            "status": {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn pods_group_by_resolved_ports_with_readiness() {
        let s = svc(json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}));
        let pods = [
            pod("a", "10.0.0.2", true, "http", 8080),
            pod("b", "10.0.0.1", false, "http", 8080),
            pod("c", "10.0.0.3", true, "http", 9090),
            pod("d", "10.0.0.4", true, "other", 1),
        ];
        let g = groups(&s, pods.iter());
        assert_eq!(g.len(), 2, "{g:?}");
        let p8080 = &g[&vec![ResolvedPort {
            name: "http".into(),
            port: 8080,
            protocol: "TCP".into(),
            app_protocol: None,
        }]];
        assert_eq!(
            p8080
                .iter()
                .map(|e| (e.ip.as_str(), e.ready))
                .collect::<Vec<_>>(),
            vec![("10.0.0.1", false), ("10.0.0.2", true)]
        );
        let mut gone = pods[0].clone();
        gone.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(endpoint_of(&s, &gone).is_none());
    }
}
