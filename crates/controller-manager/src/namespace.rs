//! The namespace controller: when a namespace is deleted (and so turned Terminating with the
//! `kubernetes` spec finalizer), delete everything in it — every namespaced resource the
//! apiserver's discovery lists, custom ones included, by `deletecollection` where served —
//! then clear the finalizer through `namespaces/{name}/finalize` so the apiserver can remove it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkube_client::dynamic::{self, ApiResource};
use rkube_client::informer::Change;
use rkube_client::{Error, Method, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// How long one discovery answers for before the next namespace deletion asks again.
const DISCOVERY_TTL: Duration = Duration::from_secs(5);

pub struct NamespaceController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    discovered: Mutex<Option<(Instant, Arc<Vec<ApiResource>>)>>,
}

impl NamespaceController {
    pub fn new(ctx: Arc<Ctx>) -> Arc<Self> {
        let c = Arc::new(NamespaceController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("namespace"),
            discovered: Mutex::default(),
        });
        let me = c.clone();
        ctx.namespaces.on_change(move |ch| {
            if let Change::Added(n) | Change::Updated { new: n, .. } = ch {
                if n.metadata.deletion_timestamp.is_some() {
                    me.queue.add(n.metadata.name.clone().unwrap_or_default());
                }
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "namespace", workers, shutdown);
    }

    async fn sync(&self, name: &str) -> Reconciled {
        let Some(ns) = self.ctx.namespaces.get(name) else {
            return Ok(None);
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(None);
        }
        let finalizers: Vec<String> = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == "kubernetes") {
            return Ok(None);
        }
        let mut remaining = 0usize;
        let resources = self.resources().await?;
        for r in resources
            .iter()
            .filter(|r| r.namespaced && r.has_verbs(&["list", "delete"]))
        {
            let path = r.collection_path(name);
            if r.has_verbs(&["deletecollection"]) {
                let body =
                    serde_json::to_vec(&json!({"propagationPolicy": "Background"})).expect("JSON");
                match self
                    .ctx
                    .client
                    .send(Method::DELETE, &path, Some(("application/json", body)))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.code() == Some(405) => {}
                    Err(e) => return Err(e),
                }
            }
            let list: Value = match self.ctx.client.send_json(Method::GET, &path, None).await {
                Ok(v) => v,
                Err(e) if e.is_not_found() || e.code() == Some(405) => continue,
                Err(e) => return Err(e),
            };
            for item in list["items"].as_array().into_iter().flatten() {
                remaining += 1;
                if item["metadata"]["deletionTimestamp"].is_string() {
                    continue;
                }
                let n = item["metadata"]["name"].as_str().unwrap_or_default();
                let body =
                    serde_json::to_vec(&json!({"propagationPolicy": "Background"})).expect("JSON");
                match self
                    .ctx
                    .client
                    .send(
                        Method::DELETE,
                        &format!("{path}/{n}"),
                        Some(("application/json", body)),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if remaining > 0 {
            tracing::debug!(namespace = name, remaining, "namespace not yet empty");
            return Ok(Some(Duration::from_secs(1)));
        }
        let mut body = serde_json::to_value(&*ns).expect("namespace");
        body["spec"]["finalizers"] = json!(finalizers
            .iter()
            .filter(|f| *f != "kubernetes")
            .collect::<Vec<_>>());
        let bytes = serde_json::to_vec(&body).expect("JSON");
        match self
            .ctx
            .client
            .send(
                Method::PUT,
                &format!("/api/v1/namespaces/{name}/finalize"),
                Some(("application/json", bytes)),
            )
            .await
        {
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The served resources, discovered at most `DISCOVERY_TTL` ago.
    async fn resources(&self) -> Result<Arc<Vec<ApiResource>>, Error> {
        if let Some((at, r)) = &*self.discovered.lock().unwrap() {
            if at.elapsed() < DISCOVERY_TTL {
                return Ok(r.clone());
            }
        }
        let found = Arc::new(dynamic::discover(&self.ctx.client).await?);
        *self.discovered.lock().unwrap() = Some((Instant::now(), found.clone()));
        Ok(found)
    }
}
