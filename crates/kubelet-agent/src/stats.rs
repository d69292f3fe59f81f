//! `GET /stats/summary?node=<name>`: the kubelet's Summary API for one of the agent's nodes
//! (the first when none is named), from the node's running pods and `usage`'s model. Only the
//! apiserver may read it when client certificates are checked (`server::guard_logs`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rkube_client::pod::Pod;
use rkube_client::Store;

/// Each node's pod cache, by node name, as the nodes register.
pub type NodePods = Arc<RwLock<HashMap<String, Arc<Store<Pod>>>>>;

#[derive(serde::Deserialize)]
struct Params {
    node: Option<String>,
}

async fn summary(State(nodes): State<NodePods>, Query(q): Query<Params>) -> Response {
    let store = {
        let nodes = nodes.read().unwrap();
        let name = match q.node {
            Some(n) => n,
            None => match nodes.keys().min() {
                Some(n) => n.clone(),
                None => return (StatusCode::NOT_FOUND, "no node registered yet\n").into_response(),
            },
        };
        match nodes.get(&name) {
            Some(s) => (name, s.clone()),
            None => {
                return (StatusCode::NOT_FOUND, format!("no node {name:?} here\n")).into_response()
            }
        }
    };
    let (name, store) = store;
    let pods = store.list();
    let running: Vec<&Pod> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect();
    Json(crate::usage::summary(&name, &running, rkube_client::now())).into_response()
}

pub fn router(nodes: NodePods) -> Router {
    Router::new()
        .route("/stats/summary", get(summary))
        .with_state(nodes)
}
