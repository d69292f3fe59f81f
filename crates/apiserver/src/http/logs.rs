//! `GET pods/{name}/log`: finds the pod's node, and proxies the request to the kubelet serving
//! it (`http://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/...`),
//! streaming the answer (for `follow`).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use rkube_api::ApiError;
use serde_json::Value;

use super::ApiState;
use crate::registry::Registry;

/// Query parameters passed on to the kubelet.
const FORWARDED: [&str; 6] = [
    "follow",
    "tailLines",
    "sinceSeconds",
    "timestamps",
    "previous",
    "limitBytes",
];

fn container_of(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    if let Some(c) = asked.filter(|c| !c.is_empty()) {
        if names.contains(&c) {
            return Ok(c.to_string());
        }
        return Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        )));
    }
    if names.len() == 1 {
        return Ok(names[0].to_string());
    }
    if let Some(d) =
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str()
    {
        if names.contains(&d) {
            return Ok(d.to_string());
        }
    }
    Err(ApiError::bad_request(format!(
        "a container name must be specified for pod {name}, choose one of: [{}]",
        names.join(" ")
    )))
}

pub async fn pod_log(
    state: &ApiState,
    pods: &Registry,
    ns: &str,
    name: &str,
    query: &rkube_api::Query,
) -> Result<Response, ApiError> {
    let pod: Value =
        serde_json::from_slice(&pods.get(ns, name, None).await?).unwrap_or(Value::Null);
    let asked = query.get("container");
    let container = container_of(&pod, name, asked)?;
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let nodes = state
        .registries
        .get(&("", "nodes"))
        .ok_or_else(|| ApiError::internal("no node registry"))?;
    let node: Value =
        serde_json::from_slice(&nodes.get("", node_name, None).await?).unwrap_or(Value::Null);
    let ip = node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .ok_or_else(|| {
            ApiError::bad_request(format!("node {node_name} has no InternalIP address"))
        })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .unwrap_or(10250);
    let mut url = format!("http://{ip}:{port}/containerLogs/{ns}/{name}/{container}");
    let forwarded: Vec<String> = query
        .pairs()
        .iter()
        .filter(|(k, _)| FORWARDED.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !forwarded.is_empty() {
        url.push('?');
        url.push_str(&forwarded.join("&"));
    }
    let resp = reqwest::get(&url)
        .await
        .map_err(|e| ApiError::internal(format!("Get \"{url}\": {e}")))?;
    let code = resp.status().as_u16();
    if !(200..300).contains(&code) {
        let text = resp.text().await.unwrap_or_default();
        return Err(ApiError::bad_request(text.trim().to_string()));
    }
    let body = Body::from_stream(resp.bytes_stream().map_err(std::io::Error::other));
    Ok((StatusCode::OK, [("content-type", "text/plain")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_choice_follows_kubectl_rules() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(container_of(&one, "p", None).unwrap(), "a");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let e = container_of(&two, "p", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        assert_eq!(container_of(&two, "p", Some("b")).unwrap(), "b");
        assert!(container_of(&two, "p", Some("zz")).is_err());
        let annotated = json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "b"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(container_of(&annotated, "p", None).unwrap(), "b");
    }
}
