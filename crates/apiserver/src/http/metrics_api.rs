//! `metrics.k8s.io/v1beta1` (NodeMetrics, PodMetrics), served as metrics-server would: each
//! node's kubelet is asked for its Summary API (`/stats/summary?node=`, through the one
//! hardened kubelet client, at most 16 at once) and the answers become `kubectl top`'s and the
//! HPA's usage. Read-only: get and list, label selectors on what is listed.

use std::collections::BTreeMap;

use futures_util::stream::{self, StreamExt};
use rkube_api::options::ListOptions;
use rkube_api::{meta, ApiError, GroupResource};
use serde_json::{json, Value};

use super::ApiState;
use crate::request::RequestInfo;

const GROUP: &str = "metrics.k8s.io";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";
/// The window metrics-server reports.
const WINDOW: &str = "10.5s";

async fn list_of(
    state: &ApiState,
    plural: &'static str,
    ns: Option<&str>,
) -> Result<Vec<Value>, ApiError> {
    let reg = state
        .registries
        .get(&("", plural))
        .ok_or_else(|| ApiError::internal(format!("no {plural} registry")))?;
    let res = reg.list(ns, &ListOptions::default()).await?;
    Ok(res
        .items
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect())
}

/// Each named node's summary, fetched concurrently; nodes whose kubelet does not answer are
/// left out, as metrics-server leaves out what it could not scrape.
async fn summaries(state: &ApiState, nodes: Vec<Value>) -> BTreeMap<String, Value> {
    let kubelet = &state.kubelet;
    stream::iter(nodes)
        .map(|n| async move {
            let name = meta::name(&n).to_string();
            let mut url = kubelet.url(&n, &["stats", "summary"]).ok()?;
            url.query_pairs_mut().append_pair("node", &name);
            match kubelet.get_json(url).await {
                Ok(v) => Some((name, v)),
                Err(e) => {
                    tracing::debug!(node = %name, error = %e, "no summary from the kubelet");
                    None
                }
            }
        })
        .buffer_unordered(16)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

fn cpu(stat: &Value) -> String {
    format!(
        "{}n",
        stat["cpu"]["usageNanoCores"].as_i64().unwrap_or(0).max(0)
    )
}

fn memory(stat: &Value) -> String {
    format!(
        "{}Ki",
        stat["memory"]["workingSetBytes"]
            .as_i64()
            .unwrap_or(0)
            .max(0)
            / 1024
    )
}

fn object_meta(obj: &Value, ts: &str) -> Value {
    let mut m = json!({"name": meta::name(obj), "creationTimestamp": ts});
    if let Some(ns) = obj.pointer("/metadata/namespace") {
        m["namespace"] = ns.clone();
    }
    if let Some(l) = obj.pointer("/metadata/labels") {
        m["labels"] = l.clone();
    }
    m
}

/// Serves a `metrics.k8s.io` request for `nodes` or `pods`.
pub async fn serve(state: &ApiState, info: &RequestInfo) -> Result<Value, ApiError> {
    let r = info.resource.as_ref().expect("a resource request");
    let plural: &'static str = if r.resource == "nodes" {
        "nodes"
    } else {
        "pods"
    };
    let gr = GroupResource::new(GROUP, plural);
    let opts = ListOptions::from_query(&info.query, false)?;
    let ts = meta::now_rfc3339();
    let ns = r.namespace.as_deref();
    let mut objects = list_of(state, plural, ns).await?;
    if let Some(name) = &r.name {
        objects.retain(|o| meta::name(o) == name);
    }
    objects.retain(|o| {
        let labels: BTreeMap<String, String> = o
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        opts.label_selector.matches(&labels)
    });
    let items: Vec<Value> = if plural == "nodes" {
        let sums = summaries(state, objects.clone()).await;
        objects
            .iter()
            .filter_map(|n| {
                let s = sums.get(meta::name(n))?;
                Some(
                    json!({"metadata": object_meta(n, &ts), "timestamp": ts, "window": WINDOW,
                    "usage": {"cpu": cpu(&s["node"]), "memory": memory(&s["node"])}}),
                )
            })
            .collect()
    } else {
        let running: Vec<&Value> = objects
            .iter()
            .filter(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Running"))
            .collect();
        let mut wanted: Vec<String> = running
            .iter()
            .filter_map(|p| p.pointer("/spec/nodeName").and_then(Value::as_str))
            .map(String::from)
            .collect();
        wanted.sort();
        wanted.dedup();
        let nodes: Vec<Value> = list_of(state, "nodes", None)
            .await?
            .into_iter()
            .filter(|n| wanted.binary_search(&meta::name(n).to_string()).is_ok())
            .collect();
        let sums = summaries(state, nodes).await;
        let mut by_uid: BTreeMap<String, &Value> = BTreeMap::new();
        for s in sums.values() {
            for p in s["pods"].as_array().into_iter().flatten() {
                if let Some(uid) = p["podRef"]["uid"].as_str() {
                    by_uid.insert(uid.to_string(), p);
                }
            }
        }
        running
            .iter()
            .filter_map(|p| {
                let s = by_uid.get(meta::uid(p))?;
                let containers: Vec<Value> = s["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| json!({"name": c["name"], "usage": {"cpu": cpu(c), "memory": memory(c)}}))
                    .collect();
                Some(json!({"metadata": object_meta(p, &ts), "timestamp": ts, "window": WINDOW,
                    "containers": containers}))
            })
            .collect()
    };
    let kind = if plural == "nodes" {
        "NodeMetrics"
    } else {
        "PodMetrics"
    };
    match (info.verb, &r.name) {
        ("get", Some(name)) => {
            let mut item = items
                .into_iter()
                .next()
                .ok_or_else(|| ApiError::not_found(&gr, name))?;
            item["kind"] = json!(kind);
            item["apiVersion"] = json!(API_VERSION);
            Ok(item)
        }
        ("list", None) => Ok(
            json!({"kind": format!("{kind}List"), "apiVersion": API_VERSION,
            "metadata": {}, "items": items}),
        ),
        (verb, _) => Err(ApiError::method_not_supported(&gr, verb)),
    }
}
