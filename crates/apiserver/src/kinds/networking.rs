//! `networking.k8s.io` kinds (`pkg/registry/networking`): Ingresses (their backends must name
//! a port; status), IngressClasses, NetworkPolicies (`policyTypes` defaulted from the rules),
//! and the ServiceCIDRs and IPAddresses that Service IP allocation records, with columns.

use rkube_api::k8s::api::networking::v1 as net;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::print::{self, label_map, or_none, s, Column};
use super::{reset_status, Strategy};

pub struct Ingress;
pub struct IngressClass;
pub struct NetworkPolicy;
pub struct ServiceCidr;
pub struct IpAddress;

impl Strategy for Ingress {
    crate::typed_kind!(net::Ingress);

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({"loadBalancer": {}}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let rules = obj.pointer("/spec/rules").and_then(Value::as_array);
        if obj.pointer("/spec/defaultBackend").is_none() && rules.is_none_or(|r| r.is_empty()) {
            causes.push(StatusCause::invalid_raw(
                "spec",
                "[]networking.IngressRule(nil)",
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        for (ri, rule) in rules.into_iter().flatten().enumerate() {
            let paths = rule.pointer("/http/paths").and_then(Value::as_array);
            for (pi, p) in paths.into_iter().flatten().enumerate() {
                let at = format!("spec.rules[{ri}].http.paths[{pi}]");
                let ty = p.get("pathType").and_then(Value::as_str).unwrap_or("");
                if ty.is_empty() {
                    causes.push(StatusCause::required(&format!("{at}.pathType")));
                } else if !["Exact", "Prefix", "ImplementationSpecific"].contains(&ty) {
                    causes.push(StatusCause::not_supported(
                        &format!("{at}.pathType"),
                        ty,
                        &["Exact", "ImplementationSpecific", "Prefix"],
                    ));
                }
                let path = p.get("path").and_then(Value::as_str).unwrap_or("");
                if ty != "ImplementationSpecific" && !path.starts_with('/') {
                    causes.push(StatusCause::invalid(
                        &format!("{at}.path"),
                        path,
                        "must be an absolute path",
                    ));
                }
                if let Some(svc) = p.pointer("/backend/service") {
                    let port = svc.get("port");
                    let named = port.and_then(|p| p.get("name")).is_some();
                    let numbered = port.and_then(|p| p.get("number")).is_some();
                    if named == numbered {
                        causes.push(StatusCause::invalid_raw(
                            &format!("{at}.backend.service.port"),
                            "\"\"",
                            "port name or number is required",
                        ));
                    }
                }
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Class"),
            Column::text("Hosts"),
            Column::text("Address"),
            Column::text("Ports"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let mut class = s(obj, "/spec/ingressClassName");
        if class.is_empty() {
            class = "<none>".into();
        }
        let hosts: Vec<String> = obj
            .pointer("/spec/rules")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|x| x.get("host").and_then(Value::as_str))
                    .filter(|h| !h.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let hosts = if hosts.is_empty() {
            "*".to_string()
        } else {
            shorten(&hosts)
        };
        let addresses: std::collections::BTreeSet<String> = obj
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| {
                        x.get("ip")
                            .or_else(|| x.get("hostname"))
                            .and_then(Value::as_str)
                            .map(String::from)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let tls = obj
            .pointer("/spec/tls")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty());
        vec![
            json!(meta::name(obj)),
            json!(class),
            json!(hosts),
            json!(addresses.into_iter().collect::<Vec<_>>().join(",")),
            json!(if tls { "80, 443" } else { "80" }),
            json!(print::age(obj, now)),
        ]
    }
}

/// The first three items, then `+ N more...`, as kubectl shortens lists.
pub fn shorten(items: &[String]) -> String {
    if items.len() <= 3 {
        items.join(",")
    } else {
        format!("{} + {} more...", items[..3].join(","), items.len() - 3)
    }
}

impl Strategy for IngressClass {
    crate::typed_kind!(net::IngressClass);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let c = s(obj, "/spec/controller");
        if c.is_empty() {
            causes.push(StatusCause::required("spec.controller"));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.pointer("/spec/controller") != old.pointer("/spec/controller") {
            causes.push(StatusCause::invalid(
                "spec.controller",
                &s(new, "/spec/controller"),
                "field is immutable",
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Controller"),
            Column::text("Parameters"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let params = match obj.pointer("/spec/parameters") {
            Some(p) => {
                let g = p.get("apiGroup").and_then(Value::as_str).unwrap_or("");
                let k = p.get("kind").and_then(Value::as_str).unwrap_or("");
                let n = p.get("name").and_then(Value::as_str).unwrap_or("");
                if g.is_empty() {
                    format!("{k}/{n}")
                } else {
                    format!("{k}.{g}/{n}")
                }
            }
            None => "<none>".into(),
        };
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/controller")),
            json!(params),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for NetworkPolicy {
    crate::typed_kind!(net::NetworkPolicy);

    fn defaults(&self, obj: &mut Value) {
        if obj.pointer("/spec/policyTypes").is_none()
            && obj.get("spec").is_some_and(Value::is_object)
        {
            let mut types = vec!["Ingress"];
            if obj
                .pointer("/spec/egress")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty())
            {
                types.push("Egress");
            }
            obj["spec"]["policyTypes"] = json!(types);
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        if obj.pointer("/spec/podSelector").is_none() {
            causes.push(StatusCause::required("spec.podSelector"));
        }
        for t in obj
            .pointer("/spec/policyTypes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !["Ingress", "Egress"].contains(&t) {
                causes.push(StatusCause::not_supported(
                    "spec.policyTypes",
                    t,
                    &["Ingress", "Egress"],
                ));
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("Pod-Selector"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(or_none(label_map(
                obj.pointer("/spec/podSelector/matchLabels")
            ))),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for ServiceCidr {
    crate::typed_kind!(net::ServiceCIDR);

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let cidrs: Vec<&str> = obj
            .pointer("/spec/cidrs")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if cidrs.is_empty() {
            causes.push(StatusCause::required("spec.cidrs"));
        }
        if cidrs.len() > 2 {
            causes.push(StatusCause::invalid_raw(
                "spec",
                &format!("{cidrs:?}"),
                "may only hold up to 2 values",
            ));
        }
        for (n, c) in cidrs.iter().enumerate() {
            if rkube_api::cidr::Cidr::parse(c).is_err() {
                causes.push(StatusCause::invalid(
                    &format!("spec.cidrs[{n}]"),
                    c,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.pointer("/spec/cidrs") != old.pointer("/spec/cidrs") {
            causes.push(StatusCause::invalid_raw(
                "spec.cidrs",
                &new.pointer("/spec/cidrs")
                    .map_or("null".into(), Value::to_string),
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("CIDRs"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let cidrs = obj
            .pointer("/spec/cidrs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        vec![
            json!(meta::name(obj)),
            json!(cidrs),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for IpAddress {
    crate::typed_kind!(net::IPAddress);

    fn name_rule(&self) -> super::NameRule {
        super::NameRule::PathSegment
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let name = meta::name(obj);
        match name.parse::<std::net::IpAddr>() {
            Err(_) => causes.push(StatusCause::invalid(
                "metadata.name",
                name,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )),
            Ok(ip) if ip.to_string() != name => causes.push(StatusCause::invalid(
                "metadata.name",
                name,
                &format!("must be in canonical form (\"{ip}\")"),
            )),
            Ok(_) => {}
        }
        match obj.pointer("/spec/parentRef") {
            None => causes.push(StatusCause::required("spec.parentRef")),
            Some(r) => {
                for f in ["resource", "name"] {
                    if r.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
                        causes.push(StatusCause::required(&format!("spec.parentRef.{f}")));
                    }
                }
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.pointer("/spec/parentRef") != old.pointer("/spec/parentRef") {
            causes.push(StatusCause::invalid_raw(
                "spec.parentRef",
                "networking.ParentReference{...}",
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("ParentRef")]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let parent = match obj.pointer("/spec/parentRef") {
            None => "<none>".to_string(),
            Some(r) => {
                let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
                let mut out = if f("group").is_empty() {
                    f("resource").to_lowercase()
                } else {
                    format!("{}.{}", f("resource"), f("group")).to_lowercase()
                };
                if !f("namespace").is_empty() {
                    out = format!("{out}/{}", f("namespace"));
                }
                format!("{out}/{}", f("name"))
            }
        };
        // Upstream emits an age cell with no column; kubectl drops it.
        vec![
            json!(meta::name(obj)),
            json!(parent),
            json!(print::age(obj, now)),
        ]
    }
}
