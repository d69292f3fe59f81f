//! Nodes (`pkg/registry/core/node`): `spec.unschedulable` is selectable, kubectl's columns,
//! and the addresses and kubelet endpoint the apiserver will connect to, which must be
//! addresses and ports and nothing else.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, or_none, s, Column};
use super::Strategy;

pub struct Node;

impl Strategy for Node {
    crate::typed_kind!(core::Node);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_addresses(obj, causes);
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "spec.unschedulable" => obj
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Status"),
            Column::text("Roles"),
            Column::AGE,
            Column::text("Version"),
            Column::wide("Internal-IP"),
            Column::wide("External-IP"),
            Column::wide("OS-Image"),
            Column::wide("Kernel-Version"),
            Column::wide("Container-Runtime"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let ready = obj
            .pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))
            })
            .and_then(|c| c.get("status"))
            .and_then(|s| s.as_str());
        // As upstream's printer: any Ready status but True (False or Unknown) is NotReady; no
        // Ready condition at all is Unknown.
        let mut status = match ready {
            Some("True") => "Ready".to_string(),
            Some(_) => "NotReady".to_string(),
            None => "Unknown".to_string(),
        };
        if obj
            .pointer("/spec/unschedulable")
            .and_then(|u| u.as_bool())
            .unwrap_or(false)
        {
            status.push_str(",SchedulingDisabled");
        }
        let roles: Vec<String> = meta::labels(obj)
            .keys()
            .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(String::from))
            .collect();
        vec![
            json!(meta::name(obj)),
            json!(status),
            json!(or_none(roles.join(","))),
            json!(print::age(obj, now)),
            json!(s(obj, "/status/nodeInfo/kubeletVersion")),
            json!(or_none(address(obj, "InternalIP").unwrap_or_default())),
            json!(or_none(address(obj, "ExternalIP").unwrap_or_default())),
            json!(or_none(s(obj, "/status/nodeInfo/osImage"))),
            json!(or_none(s(obj, "/status/nodeInfo/kernelVersion"))),
            json!(or_none(s(obj, "/status/nodeInfo/containerRuntimeVersion"))),
        ]
    }
}

/// The node's first address of type `kind` (`InternalIP`, `ExternalIP`, `Hostname`).
pub fn address(node: &Value, kind: &str) -> Option<String> {
    node.pointer("/status/addresses")
        .and_then(|a| a.as_array())?
        .iter()
        .find(|x| x.get("type").and_then(|y| y.as_str()) == Some(kind))
        .and_then(|x| x.get("address"))
        .and_then(|x| x.as_str())
        .map(String::from)
}

/// Whether an owner reference names the Node `name` (a mirror pod's owner).
pub fn is_owner_ref_to(owner: &Value, name: &str) -> bool {
    let s = |k: &str| owner.get(k).and_then(Value::as_str).unwrap_or("");
    s("apiVersion") == "v1" && s("kind") == "Node" && s("name") == name
}

/// The kubelet's port as the node reports it.
pub fn kubelet_port(node: &Value) -> Option<i64> {
    node.pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
}

/// `InternalIP`/`ExternalIP` addresses are IP addresses, `Hostname`/`InternalDNS`/
/// `ExternalDNS` DNS names, and the kubelet's port a port: the apiserver connects to them
/// (`pods/log`), so nothing else may hide there.
fn validate_addresses(obj: &Value, causes: &mut Vec<StatusCause>) {
    if let Some(list) = obj.pointer("/status/addresses").and_then(Value::as_array) {
        for (i, a) in list.iter().enumerate() {
            let kind = s(a, "/type");
            let addr = s(a, "/address");
            let field = format!("status.addresses[{i}].address");
            match kind.as_str() {
                "InternalIP" | "ExternalIP" => {
                    if addr.parse::<std::net::IpAddr>().is_err() {
                        causes.push(StatusCause::invalid(
                            &field,
                            &addr,
                            "must be a valid IP address",
                        ));
                    }
                }
                "Hostname" | "InternalDNS" | "ExternalDNS" => {
                    if let Err(e) = rkube_api::validation::dns1123_subdomain(&addr) {
                        causes.push(StatusCause::invalid(&field, &addr, &e));
                    }
                }
                other => causes.push(StatusCause::not_supported(
                    &format!("status.addresses[{i}].type"),
                    other,
                    &[
                        "Hostname",
                        "InternalIP",
                        "ExternalIP",
                        "InternalDNS",
                        "ExternalDNS",
                    ],
                )),
            }
        }
    }
    if let Some(port) = obj.pointer("/status/daemonEndpoints/kubeletEndpoint/Port") {
        if !port.as_i64().is_some_and(|p| (0..=65535).contains(&p)) {
            causes.push(StatusCause::invalid_raw(
                "status.daemonEndpoints.kubeletEndpoint.Port",
                &port.to_string(),
                "must be between 0 and 65535, inclusive",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: Value) -> Vec<StatusCause> {
        let mut causes = Vec::new();
        Node.validate(
            &json!({"metadata": {"name": "n"}, "status": status}),
            &mut causes,
        );
        causes
    }

    #[test]
    fn addresses_are_addresses() {
        assert!(check(json!({"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "node-1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}})).is_empty());
        let c = check(
            json!({"addresses": [{"type": "InternalIP", "address": "169.254.169.254/latest/meta-data?"}]}),
        );
        assert_eq!(c[0].field, "status.addresses[0].address");
        assert_eq!(
            check(json!({"addresses": [{"type": "InternalIP", "address": "evil.example:80@x"}]}))
                .len(),
            1
        );
        assert_eq!(
            check(json!({"daemonEndpoints": {"kubeletEndpoint": {"Port": 70000}}})).len(),
            1
        );
    }
}
