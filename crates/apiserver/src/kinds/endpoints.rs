//! Endpoints and EndpointSlices (`pkg/registry/core/endpoint`, `pkg/registry/discovery`): the
//! addresses behind a Service, as kubectl lists them (`ip:port`, the first three, then
//! `+ N more...`).

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::k8s::api::discovery::v1 as discovery;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::networking::shorten;
use super::print::{self, s, Column};
use super::Strategy;

pub struct Endpoints;
pub struct EndpointSlice;

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";

impl Strategy for Endpoints {
    crate::typed_kind!(core::Endpoints);

    fn defaults(&self, obj: &mut Value) {
        for subset in obj
            .get_mut("subsets")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for p in subset
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                super::set_default(p, "/protocol", json!("TCP"));
            }
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        for (si, subset) in obj
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            for field in ["addresses", "notReadyAddresses"] {
                for (ai, a) in subset
                    .get(field)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                    if ip.parse::<std::net::IpAddr>().is_err() {
                        causes.push(StatusCause::invalid(
                            &format!("subsets[{si}].{field}[{ai}].ip"),
                            ip,
                            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                        ));
                    }
                }
            }
            for (pi, p) in subset
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                if !(1..=65535).contains(&port) {
                    causes.push(StatusCause::invalid_raw(
                        &format!("subsets[{si}].ports[{pi}].port"),
                        &port.to_string(),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::text("Endpoints"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let mut items = Vec::new();
        let mut total = 0usize;
        for subset in obj
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let addrs = subset.get("addresses").and_then(Value::as_array);
            let ports = subset.get("ports").and_then(Value::as_array);
            for a in addrs.into_iter().flatten() {
                let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                match ports.filter(|p| !p.is_empty()) {
                    None => {
                        total += 1;
                        if items.len() < 3 {
                            items.push(ip.to_string());
                        }
                    }
                    Some(ps) => {
                        for p in ps {
                            total += 1;
                            if items.len() < 3 {
                                let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                                items.push(format!("{ip}:{port}"));
                            }
                        }
                    }
                }
            }
        }
        let no_subsets = obj
            .get("subsets")
            .and_then(Value::as_array)
            .is_none_or(|s| s.is_empty());
        let text = if no_subsets {
            "<none>".to_string()
        } else if total > 3 {
            format!("{} + {} more...", items.join(","), total - 3)
        } else {
            items.join(",")
        };
        vec![
            json!(meta::name(obj)),
            json!(text),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for EndpointSlice {
    crate::typed_kind!(discovery::EndpointSlice);

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let ty = s(obj, "/addressType");
        if !["IPv4", "IPv6", "FQDN"].contains(&ty.as_str()) {
            causes.push(StatusCause::not_supported(
                "addressType",
                &ty,
                &["FQDN", "IPv4", "IPv6"],
            ));
        }
        let endpoints = obj.get("endpoints").and_then(Value::as_array);
        if endpoints.is_some_and(|e| e.len() > 1000) {
            causes.push(StatusCause {
                reason: "FieldValueTooMany".into(),
                message: "Too many: must have at most 1000 items".into(),
                field: "endpoints".into(),
            });
        }
        for (n, e) in endpoints.into_iter().flatten().enumerate() {
            let addrs = e.get("addresses").and_then(Value::as_array);
            match addrs.map(Vec::len) {
                Some(1..=100) => {}
                _ => causes.push(StatusCause::required(&format!("endpoints[{n}].addresses"))),
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if new.get("addressType") != old.get("addressType") {
            causes.push(StatusCause::invalid(
                "addressType",
                &s(new, "/addressType"),
                "field is immutable",
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("AddressType"),
            Column::text("Ports"),
            Column::text("Endpoints"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let ports: Vec<String> = obj
            .get("ports")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|p| {
                        match (
                            p.get("port").and_then(Value::as_i64),
                            p.get("name").and_then(Value::as_str),
                        ) {
                            (Some(n), _) => n.to_string(),
                            (None, Some(name)) => name.to_string(),
                            (None, None) => "*".into(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let ports = if ports.is_empty() {
            "<unset>".to_string()
        } else {
            shorten(&ports)
        };
        let addrs: Vec<String> = obj
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|e| {
                e.get("addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        let addrs = if addrs.is_empty() {
            "<unset>".to_string()
        } else {
            shorten(&addrs)
        };
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/addressType")),
            json!(ports),
            json!(addrs),
            json!(print::age(obj, now)),
        ]
    }
}
