//! Server-side printing: `meta.k8s.io/v1` Tables with kubectl's columns per kind, for
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` on lists, gets and watches.

use rkube_api::meta;
use serde_json::{json, Value};

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

struct Col(&'static str, &'static str, u8, &'static str);

fn columns(kind: &str) -> Vec<Col> {
    let name = Col("Name", "string", 0, "name");
    let age = Col("Age", "string", 0, "");
    match kind {
        "Pod" => vec![
            name,
            Col("Ready", "string", 0, ""),
            Col("Status", "string", 0, ""),
            Col("Restarts", "string", 0, ""),
            age,
            Col("IP", "string", 1, ""),
            Col("Node", "string", 1, ""),
            Col("Nominated Node", "string", 1, ""),
            Col("Readiness Gates", "string", 1, ""),
        ],
        "Deployment" => vec![
            name,
            Col("Ready", "string", 0, ""),
            Col("Up-to-date", "integer", 0, ""),
            Col("Available", "integer", 0, ""),
            age,
            Col("Containers", "string", 1, ""),
            Col("Images", "string", 1, ""),
            Col("Selector", "string", 1, ""),
        ],
        "ReplicaSet" => vec![
            name,
            Col("Desired", "integer", 0, ""),
            Col("Current", "integer", 0, ""),
            Col("Ready", "integer", 0, ""),
            age,
            Col("Containers", "string", 1, ""),
            Col("Images", "string", 1, ""),
            Col("Selector", "string", 1, ""),
        ],
        "Node" => vec![
            name,
            Col("Status", "string", 0, ""),
            Col("Roles", "string", 0, ""),
            age,
            Col("Version", "string", 0, ""),
            Col("Internal-IP", "string", 1, ""),
            Col("External-IP", "string", 1, ""),
            Col("OS-Image", "string", 1, ""),
            Col("Kernel-Version", "string", 1, ""),
            Col("Container-Runtime", "string", 1, ""),
        ],
        "Namespace" => vec![name, Col("Status", "string", 0, ""), age],
        "Event" => vec![
            Col("Last Seen", "string", 0, ""),
            Col("Type", "string", 0, ""),
            Col("Reason", "string", 0, ""),
            Col("Object", "string", 0, ""),
            Col("Message", "string", 0, ""),
        ],
        "Lease" => vec![name, Col("Holder", "string", 0, ""), age],
        "FlowSchema" => vec![
            name,
            Col("PriorityLevel", "string", 0, ""),
            Col("MatchingPrecedence", "string", 0, ""),
            Col("DistinguisherMethod", "string", 0, ""),
            age,
        ],
        "PriorityLevelConfiguration" => vec![
            name,
            Col("Type", "string", 0, ""),
            Col("NominalConcurrencyShares", "string", 0, ""),
            Col("Queues", "string", 0, ""),
            Col("HandSize", "string", 0, ""),
            Col("QueueLengthLimit", "string", 0, ""),
            age,
        ],
        "Service" => vec![
            name,
            Col("Type", "string", 0, ""),
            Col("Cluster-IP", "string", 0, ""),
            Col("External-IP", "string", 0, ""),
            Col("Port(s)", "string", 0, ""),
            age,
            Col("Selector", "string", 1, ""),
        ],
        "ConfigMap" => vec![name, Col("Data", "integer", 0, ""), age],
        "Secret" => vec![
            name,
            Col("Type", "string", 0, ""),
            Col("Data", "integer", 0, ""),
            age,
        ],
        "ServiceAccount" => vec![name, Col("Secrets", "integer", 0, ""), age],
        _ => vec![name, age],
    }
}

/// `HumanDuration` as kubectl prints ages.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        return if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        return if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        let dy = (h / 24) % 365;
        return if dy == 0 {
            format!("{}y", h / 24 / 365)
        } else {
            format!("{}y{dy}d", h / 24 / 365)
        };
    }
    format!("{}y", h / 24 / 365)
}

fn age(obj: &Value, now: i64, field: &str) -> String {
    let ts = if field == "creationTimestamp" {
        meta::meta_str(obj, "creationTimestamp").to_string()
    } else {
        obj.pointer(field)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    match meta::parse_rfc3339(&ts) {
        Some(t) => human_duration(now - t),
        None => "<unknown>".into(),
    }
}

fn s(obj: &Value, ptr: &str) -> String {
    obj.pointer(ptr)
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string()
}

fn i(obj: &Value, ptr: &str) -> i64 {
    obj.pointer(ptr).and_then(|v| v.as_i64()).unwrap_or(0)
}

/// A number as kubectl prints it, `<none>` when absent.
fn number(obj: &Value, ptr: &str) -> String {
    obj.pointer(ptr)
        .map_or_else(|| "<none>".to_string(), |v| v.to_string())
}

fn or_none(v: String) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v
    }
}

fn list_of(obj: &Value, ptr: &str, field: &str) -> String {
    obj.pointer(ptr)
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get(field).and_then(|n| n.as_str()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn selector_string(obj: &Value) -> String {
    obj.pointer("/spec/selector/matchLabels")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// The STATUS column kubectl shows for a pod (`printPod`).
pub fn pod_status(pod: &Value) -> String {
    let mut reason = s(pod, "/status/reason");
    if reason.is_empty() {
        reason = s(pod, "/status/phase");
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default();
    let mut has_running = false;
    for c in statuses.iter().rev() {
        if let Some(w) = c
            .pointer("/state/waiting/reason")
            .and_then(|r| r.as_str())
            .filter(|r| !r.is_empty())
        {
            reason = w.to_string();
        } else if let Some(t) = c.pointer("/state/terminated") {
            let r = t.get("reason").and_then(|r| r.as_str()).unwrap_or("");
            reason = if !r.is_empty() {
                r.to_string()
            } else if let Some(sig) = t.get("signal").and_then(|x| x.as_i64()).filter(|x| *x != 0) {
                format!("Signal:{sig}")
            } else {
                format!(
                    "ExitCode:{}",
                    t.get("exitCode").and_then(|x| x.as_i64()).unwrap_or(0)
                )
            };
        } else if c.get("ready").and_then(|r| r.as_bool()).unwrap_or(false)
            && c.pointer("/state/running").is_some()
        {
            has_running = true;
        }
    }
    if reason == "Completed" && has_running {
        reason = "Running".into();
    }
    if meta::deletion_timestamp(pod).is_some() {
        reason = if s(pod, "/status/reason") == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn cells(kind: &str, obj: &Value, now: i64) -> Vec<Value> {
    let name = json!(meta::name(obj));
    match kind {
        "Pod" => {
            let total = obj
                .pointer("/spec/containers")
                .and_then(|c| c.as_array())
                .map(|a| a.len())
                .unwrap_or(0);
            let statuses = obj
                .pointer("/status/containerStatuses")
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            let ready = statuses
                .iter()
                .filter(|c| c.get("ready").and_then(|r| r.as_bool()).unwrap_or(false))
                .count();
            let restarts: i64 = statuses
                .iter()
                .map(|c| c.get("restartCount").and_then(|r| r.as_i64()).unwrap_or(0))
                .sum();
            let ip = or_none(s(obj, "/status/podIP"));
            let node = or_none(s(obj, "/spec/nodeName"));
            let nominated = or_none(s(obj, "/status/nominatedNodeName"));
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(obj)),
                json!(restarts.to_string()),
                json!(age(obj, now, "creationTimestamp")),
                json!(ip),
                json!(node),
                json!(nominated),
                json!("<none>"),
            ]
        }
        "Deployment" => vec![
            name,
            json!(format!(
                "{}/{}",
                i(obj, "/status/readyReplicas"),
                i(obj, "/spec/replicas")
            )),
            json!(i(obj, "/status/updatedReplicas")),
            json!(i(obj, "/status/availableReplicas")),
            json!(age(obj, now, "creationTimestamp")),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(selector_string(obj)),
        ],
        "ReplicaSet" => vec![
            name,
            json!(i(obj, "/spec/replicas")),
            json!(i(obj, "/status/replicas")),
            json!(i(obj, "/status/readyReplicas")),
            json!(age(obj, now, "creationTimestamp")),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(selector_string(obj)),
        ],
        "Node" => {
            let conds = obj
                .pointer("/status/conditions")
                .and_then(|c| c.as_array())
                .cloned()
                .unwrap_or_default();
            let ready = conds
                .iter()
                .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"));
            let mut status = match ready.and_then(|c| c.get("status")).and_then(|s| s.as_str()) {
                // As upstream's printer: any Ready status but True (False or Unknown) is
                // NotReady; no Ready condition at all is Unknown.
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
            let addr = |t: &str| {
                obj.pointer("/status/addresses")
                    .and_then(|a| a.as_array())
                    .and_then(|a| {
                        a.iter()
                            .find(|x| x.get("type").and_then(|y| y.as_str()) == Some(t))
                    })
                    .and_then(|x| x.get("address"))
                    .and_then(|x| x.as_str())
                    .unwrap_or("<none>")
                    .to_string()
            };
            vec![
                name,
                json!(status),
                json!(if roles.is_empty() {
                    "<none>".to_string()
                } else {
                    roles.join(",")
                }),
                json!(age(obj, now, "creationTimestamp")),
                json!(s(obj, "/status/nodeInfo/kubeletVersion")),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(or_none(s(obj, "/status/nodeInfo/osImage"))),
                json!(or_none(s(obj, "/status/nodeInfo/kernelVersion"))),
                json!(or_none(s(obj, "/status/nodeInfo/containerRuntimeVersion"))),
            ]
        }
        "Namespace" => vec![
            name,
            json!(s(obj, "/status/phase")),
            json!(age(obj, now, "creationTimestamp")),
        ],
        "Event" => {
            let last = if !s(obj, "/lastTimestamp").is_empty() {
                age(obj, now, "/lastTimestamp")
            } else if !s(obj, "/eventTime").is_empty() {
                age(obj, now, "/eventTime")
            } else {
                age(obj, now, "creationTimestamp")
            };
            let object = format!(
                "{}/{}",
                s(obj, "/involvedObject/kind").to_lowercase(),
                s(obj, "/involvedObject/name")
            );
            vec![
                json!(last),
                json!(s(obj, "/type")),
                json!(s(obj, "/reason")),
                json!(object),
                json!(s(obj, "/message")),
            ]
        }
        "Lease" => vec![
            name,
            json!(s(obj, "/spec/holderIdentity")),
            json!(age(obj, now, "creationTimestamp")),
        ],
        "FlowSchema" => vec![
            name,
            json!(s(obj, "/spec/priorityLevelConfiguration/name")),
            json!(number(obj, "/spec/matchingPrecedence")),
            json!(or_none(s(obj, "/spec/distinguisherMethod/type"))),
            json!(age(obj, now, "creationTimestamp")),
        ],
        "PriorityLevelConfiguration" => {
            let q = "/spec/limited/limitResponse/queuing";
            vec![
                name,
                json!(s(obj, "/spec/type")),
                json!(number(obj, "/spec/limited/nominalConcurrencyShares")),
                json!(number(obj, &format!("{q}/queues"))),
                json!(number(obj, &format!("{q}/handSize"))),
                json!(number(obj, &format!("{q}/queueLengthLimit"))),
                json!(age(obj, now, "creationTimestamp")),
            ]
        }
        "Service" => {
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
                name,
                json!(s(obj, "/spec/type")),
                json!(or_none(s(obj, "/spec/clusterIP"))),
                json!("<none>"),
                json!(or_none(ports)),
                json!(age(obj, now, "creationTimestamp")),
                json!(or_none(selector_string(
                    &json!({"spec": {"selector": {"matchLabels": obj.pointer("/spec/selector").cloned().unwrap_or(Value::Null)}}})
                ))),
            ]
        }
        "ConfigMap" => {
            let n = ["data", "binaryData"]
                .iter()
                .filter_map(|f| obj.get(*f).and_then(|d| d.as_object()))
                .map(|m| m.len())
                .sum::<usize>();
            vec![name, json!(n), json!(age(obj, now, "creationTimestamp"))]
        }
        "Secret" => {
            let n = obj
                .get("data")
                .and_then(|d| d.as_object())
                .map(|m| m.len())
                .unwrap_or(0);
            vec![
                name,
                json!(s(obj, "/type")),
                json!(n),
                json!(age(obj, now, "creationTimestamp")),
            ]
        }
        "ServiceAccount" => vec![
            name,
            json!(obj
                .get("secrets")
                .and_then(|x| x.as_array())
                .map(|a| a.len())
                .unwrap_or(0)),
            json!(age(obj, now, "creationTimestamp")),
        ],
        _ => vec![name, json!(age(obj, now, "creationTimestamp"))],
    }
}

fn row(kind: &str, obj: &Value, now: i64, include_object: bool) -> Value {
    let object = if include_object {
        obj.clone()
    } else {
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
    };
    json!({"cells": cells(kind, obj, now), "object": object})
}

/// A Table of `objects`; `include_object` is `includeObject=Object` (default: metadata only).
pub fn table(
    kind: &str,
    objects: &[Value],
    rv: &str,
    continue_token: Option<&str>,
    include_object: bool,
) -> Value {
    let now = meta::unix_now();
    let cols: Vec<Value> = columns(kind)
        .into_iter()
        .map(|Col(name, ty, priority, format)| json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority}))
        .collect();
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": cols,
        "rows": objects.iter().map(|o| row(kind, o, now, include_object)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        assert_eq!(human_duration(8), "8s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn pod_rows() {
        let pod = json!({"metadata": {"name": "nginx-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "nginx"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.0.0.2", "containerStatuses": [{"name": "nginx", "ready": true, "restartCount": 0, "state": {"running": {}}}]}});
        let t = table("Pod", std::slice::from_ref(&pod), "5", None, false);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "nginx-1");
        assert_eq!(cells[1], "1/1");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[6], "node-1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let mut waiting = pod.clone();
        waiting["status"]["phase"] = json!("Pending");
        waiting["status"]["containerStatuses"][0] = json!({"name": "nginx", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}});
        assert_eq!(pod_status(&waiting), "ContainerCreating");
        waiting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(pod_status(&waiting), "Terminating");
        let mut done = pod.clone();
        done["status"]["containerStatuses"][0] = json!({"name": "nginx", "ready": false, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}});
        assert_eq!(pod_status(&done), "Completed");
    }
}
