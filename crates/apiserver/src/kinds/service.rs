//! Services and ServiceAccounts: a Service's defaults (type, session affinity, port protocol
//! and target port), its DNS-label name, generation, its `spec.ports` merging by `port`, and
//! both kinds' columns.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::strategic::{ListStrategy, Lists};
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, label_map, or_none, s, Column};
use super::{reset_status, set_default, NameRule, Strategy};

pub struct Service;
pub struct ServiceAccount;

impl Strategy for Service {
    crate::typed_kind!(core::Service);

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/type", json!("ClusterIP"));
        set_default(obj, "/spec/sessionAffinity", json!("None"));
        let ty = s(obj, "/spec/type");
        if ty != "ExternalName" {
            set_default(obj, "/spec/internalTrafficPolicy", json!("Cluster"));
        }
        if ty == "NodePort" || ty == "LoadBalancer" {
            set_default(obj, "/spec/externalTrafficPolicy", json!("Cluster"));
        }
        if ty == "LoadBalancer" {
            set_default(obj, "/spec/allocateLoadBalancerNodePorts", json!(true));
        }
        if s(obj, "/spec/sessionAffinity") == "ClientIP" {
            set_default(
                obj,
                "/spec/sessionAffinityConfig/clientIP/timeoutSeconds",
                json!(10800),
            );
        }
        if let Some(ports) = obj
            .pointer_mut("/spec/ports")
            .and_then(|p| p.as_array_mut())
        {
            for p in ports {
                set_default(p, "/protocol", json!("TCP"));
                if p.get("targetPort").is_none() {
                    if let Some(port) = p.get("port").cloned() {
                        p["targetPort"] = port;
                    }
                }
            }
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"loadBalancer": {}}));
    }

    /// Upstream's `patchAllocatedValues`: an update that leaves out what was allocated (a
    /// client-side apply of the original manifest) keeps it.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        let external = |v: &Value| s(v, "/spec/type") == "ExternalName";
        if external(new) || external(old) {
            return;
        }
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let p = format!("/spec/{f}");
            let missing = match new.pointer(&p) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if missing {
                if let Some(v) = old.pointer(&p).cloned() {
                    super::set_at(new, &p, v);
                }
            }
        }
        let wants_ports = matches!(s(new, "/spec/type").as_str(), "NodePort" | "LoadBalancer");
        let old_ports = old
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if !wants_ports {
            return;
        }
        if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ports {
                if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    continue;
                }
                let same = |o: &&Value| {
                    o.get("port") == p.get("port")
                        && o.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                            == p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                };
                if let Some(n) = old_ports
                    .iter()
                    .find(same)
                    .and_then(|o| o.get("nodePort"))
                    .cloned()
                {
                    p["nodePort"] = n;
                }
            }
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let ty = s(obj, "/spec/type");
        const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
        if !TYPES.contains(&ty.as_str()) {
            causes.push(StatusCause::not_supported("spec.type", &ty, &TYPES));
        }
        let ports = obj.pointer("/spec/ports").and_then(Value::as_array);
        let headless = s(obj, "/spec/clusterIP") == "None";
        if ty != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
            causes.push(StatusCause::required("spec.ports"));
        }
        if ty == "ExternalName" {
            let name = s(obj, "/spec/externalName");
            if name.is_empty() {
                causes.push(StatusCause::required("spec.externalName"));
            } else if let Err(e) =
                rkube_api::validation::dns1123_subdomain(name.trim_end_matches('.'))
            {
                causes.push(StatusCause::invalid("spec.externalName", &name, &e));
            }
        }
        let mut names = std::collections::HashSet::new();
        let many = ports.is_some_and(|p| p.len() > 1);
        for (i, p) in ports.into_iter().flatten().enumerate() {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=65535).contains(&port) {
                causes.push(StatusCause::invalid_raw(
                    &format!("spec.ports[{i}].port"),
                    &port.to_string(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            let name = p.get("name").and_then(Value::as_str).unwrap_or("");
            if many && name.is_empty() {
                causes.push(StatusCause::required(&format!("spec.ports[{i}].name")));
            } else if !name.is_empty() && !names.insert(name) {
                causes.push(StatusCause::duplicate(
                    &format!("spec.ports[{i}].name"),
                    name,
                ));
            }
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            if !["TCP", "UDP", "SCTP"].contains(&protocol) {
                causes.push(StatusCause::not_supported(
                    &format!("spec.ports[{i}].protocol"),
                    protocol,
                    &["SCTP", "TCP", "UDP"],
                ));
            }
            let node_port = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
            if node_port != 0 && (ty == "ClusterIP" || ty == "ExternalName") {
                causes.push(StatusCause::forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    &format!("may not be used when `type` is '{ty}'"),
                ));
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        let external = |v: &Value| s(v, "/spec/type") == "ExternalName";
        if external(new) || external(old) {
            return;
        }
        let ips = |v: &Value| {
            v.pointer("/spec/clusterIPs")
                .cloned()
                .unwrap_or(Value::Null)
        };
        let (a, b) = (ips(new), ips(old));
        let first = |v: &Value| v.get(0).cloned();
        if first(&a) != first(&b) {
            let shown: Vec<String> = a
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| format!("{s:?}"))
                .collect();
            causes.push(StatusCause::invalid_raw(
                "spec.clusterIPs[0]",
                &format!("[]string{{{}}}", shown.join(", ")),
                "may not change once set",
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.clusterIP", "spec.type"]
    }

    fn lists(&self) -> Lists {
        Lists(&[("spec", "ports", ListStrategy::MergeByKey("port"))])
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Type"),
            Column::text("Cluster-IP"),
            Column::text("External-IP"),
            Column::text("Port(s)"),
            Column::AGE,
            Column::wide("Selector"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let ports = obj
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|p| {
                        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                        match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                            Some(n) => format!("{port}:{n}/{protocol}"),
                            None => format!("{port}/{protocol}"),
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let cluster_ip = obj
            .pointer("/spec/clusterIPs/0")
            .and_then(Value::as_str)
            .unwrap_or("<none>");
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/type")),
            json!(cluster_ip),
            json!(external_ip(obj)),
            json!(or_none(ports)),
            json!(print::age(obj, now)),
            json!(or_none(label_map(obj.pointer("/spec/selector")))),
        ]
    }
}

/// kubectl's External-IP cell.
fn external_ip(obj: &Value) -> String {
    let external = meta::string_list(obj.pointer("/spec/externalIPs"));
    match s(obj, "/spec/type").as_str() {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb: std::collections::BTreeSet<String> = obj
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| {
                    let ip = i.get("ip").and_then(Value::as_str).unwrap_or("");
                    let host = i.get("hostname").and_then(Value::as_str).unwrap_or("");
                    let v = if ip.is_empty() { host } else { ip };
                    (!v.is_empty()).then(|| v.to_string())
                })
                .collect();
            let mut all: Vec<String> = lb.into_iter().collect();
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(obj, "/spec/externalName"),
        _ => "<unknown>".into(),
    }
}

/// The resource a token's `boundObjectRef.kind` names, for the kinds a ServiceAccount token
/// may be bound to (upstream's TokenRequest: Pod, Secret).
pub fn token_binding_resource(kind: &str) -> Option<&'static str> {
    match kind {
        "Pod" => Some("pods"),
        "Secret" => Some("secrets"),
        _ => None,
    }
}

impl Strategy for ServiceAccount {
    crate::typed_kind!(core::ServiceAccount);

    fn lists(&self) -> Lists {
        Lists(&[
            ("", "secrets", ListStrategy::MergeByKey("name")),
            ("", "imagePullSecrets", ListStrategy::MergeByKey("name")),
        ])
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::integer("Secrets"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(obj
                .get("secrets")
                .and_then(|x| x.as_array())
                .map(|a| a.len())
                .unwrap_or(0)),
            json!(print::age(obj, now)),
        ]
    }
}
