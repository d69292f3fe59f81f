//! The documented example of testing a kube-rs operator with `TestCluster`: an operator
//! written with kube-rs — a `CustomResource` derive, `Api`, the runtime's `Controller` with a
//! finalizer, status updates and its event `Recorder` — runs against an in-process cluster: its CRD established, children owned by its custom resources created
//! and kept in step with spec changes, and on deletion its finalizer runs and the children
//! are collected by the garbage collector.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalize};
use kube::runtime::{conditions, wait::await_condition, watcher};
use kube::{Api, Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use rkube_testcluster::TestCluster;

use crate::eventually;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "rkube.example.com",
    version = "v1",
    kind = "Echo",
    namespaced,
    status = "EchoStatus",
    shortname = "ec",
    printcolumn = r#"{"name":"Message","type":"string","jsonPath":".spec.message"}"#
)]
pub struct EchoSpec {
    message: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct EchoStatus {
    echoed: String,
}

const FINALIZER: &str = "rkube.example.com/cleanup";

#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

fn failed(e: impl std::fmt::Display) -> Failed {
    Failed(e.to_string())
}

struct Ctx {
    client: Client,
    recorder: Recorder,
}

async fn reconcile(echo: Arc<Echo>, ctx: Arc<Ctx>) -> Result<Action, Failed> {
    let ns = echo.namespace().unwrap_or_default();
    let echoes: Api<Echo> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&echoes, FINALIZER, echo, |ev| async {
        match ev {
            Finalize::Apply(e) => apply(&e, &ctx).await,
            Finalize::Cleanup(e) => cleanup(&e, &ctx).await,
        }
    })
    .await
    .map_err(failed)
}

/// The child ConfigMap holds the message; the status says what was echoed.
async fn apply(echo: &Echo, ctx: &Ctx) -> Result<Action, Failed> {
    let ns = echo.namespace().unwrap_or_default();
    let name = echo.name_any();
    let owner = echo
        .controller_owner_ref(&())
        .ok_or_else(|| failed("no owner ref"))?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-echo"), "ownerReferences": [owner]},
        "data": {"message": echo.spec.message}});
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    cms.patch(
        &format!("{name}-echo"),
        &PatchParams::apply("echo-operator").force(),
        &Patch::Apply(cm),
    )
    .await
    .map_err(failed)?;
    let echoes: Api<Echo> = Api::namespaced(ctx.client.clone(), &ns);
    echoes
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"echoed": echo.spec.message}})),
        )
        .await
        .map_err(failed)?;
    ctx.recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "Echoed".into(),
                note: Some(format!("echoed {:?}", echo.spec.message)),
                action: "Reconcile".into(),
                secondary: None,
            },
            &echo.object_ref(&()),
        )
        .await
        .map_err(failed)?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// The finalizer's work: a marker the test can see.
async fn cleanup(echo: &Echo, ctx: &Ctx) -> Result<Action, Failed> {
    let ns = echo.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let marker: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": format!("{}-cleaned", echo.name_any())}}),
    )
    .map_err(failed)?;
    match cms.create(&PostParams::default(), &marker).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(failed(e)),
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Echo>, _: &Failed, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_operator_runs_against_the_cluster() {
    let cluster = TestCluster::builder().nodes(0).start().await.unwrap();
    let client = cluster.client();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Echo::crd())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(
            crds.clone(),
            "echos.rkube.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the CRD is established")
    .unwrap();

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), Reporter::from("echo-operator")),
    });
    let echoes_all: Api<Echo> = Api::all(client.clone());
    let cms_all: Api<ConfigMap> = Api::all(client.clone());
    let operator = tokio::spawn(
        Controller::new(echoes_all, watcher::Config::default())
            .owns(cms_all, watcher::Config::default())
            .run(reconcile, error_policy, ctx)
            .for_each(|r| async move {
                if let Err(e) = r {
                    eprintln!("operator: {e:?}");
                }
            }),
    );

    let echoes: Api<Echo> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    echoes
        .create(
            &PostParams::default(),
            &Echo::new(
                "e1",
                EchoSpec {
                    message: "hello".into(),
                },
            ),
        )
        .await
        .unwrap();
    eventually("the child ConfigMap and the status", || async {
        let child = cms.get_opt("e1-echo").await.unwrap();
        let echo = echoes.get("e1").await.unwrap();
        child.is_some_and(|c| {
            c.data
                .unwrap_or_default()
                .get("message")
                .map(String::as_str)
                == Some("hello")
        }) && echo.status.is_some_and(|s| s.echoed == "hello")
            && echo
                .metadata
                .finalizers
                .unwrap_or_default()
                .contains(&FINALIZER.to_string())
    })
    .await;
    let child = cms.get("e1-echo").await.unwrap();
    let owner = &child.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("Echo", Some(true))
    );

    // A spec change reaches the child.
    echoes
        .patch(
            "e1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": "again"}})),
        )
        .await
        .unwrap();
    eventually("the child follows the spec", || async {
        cms.get("e1-echo")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .get("message")
            .map(String::as_str)
            == Some("again")
    })
    .await;
    eventually("the operator's events", || async {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "default");
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Echoed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("e1")
            })
    })
    .await;

    // Deletion: the finalizer runs, the object goes, the child is collected.
    echoes.delete("e1", &DeleteParams::default()).await.unwrap();
    eventually("the finalizer's marker", || async {
        cms.get_opt("e1-cleaned").await.unwrap().is_some()
    })
    .await;
    eventually("the custom resource gone", || async {
        echoes.get_opt("e1").await.unwrap().is_none()
    })
    .await;
    eventually("the child collected", || async {
        cms.get_opt("e1-echo").await.unwrap().is_none()
    })
    .await;
    operator.abort();
    cluster.shutdown().await;
}
