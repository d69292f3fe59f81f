//! Services and ServiceAccounts: a Service's defaults (type, session affinity, port protocol
//! and target port), its DNS-label name, generation, its `spec.ports` merging by `port`, and
//! both kinds' columns.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::meta;
use rkube_api::strategic::{ListStrategy, Lists};
use serde_json::{json, Value};

use super::print::{self, label_map, or_none, s, Column};
use super::{clear_status, set_default, NameRule, Strategy};

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
        clear_status(obj);
    }

    fn tracks_generation(&self) -> bool {
        true
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
            .and_then(|p| p.as_array())
            .map(|a| {
                a.iter()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            p.get("port").and_then(|x| x.as_i64()).unwrap_or(0),
                            p.get("protocol").and_then(|x| x.as_str()).unwrap_or("TCP")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/type")),
            json!(or_none(s(obj, "/spec/clusterIP"))),
            json!("<none>"),
            json!(or_none(ports)),
            json!(print::age(obj, now)),
            json!(or_none(label_map(obj.pointer("/spec/selector")))),
        ]
    }
}

impl Strategy for ServiceAccount {
    crate::typed_kind!(core::ServiceAccount);

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
