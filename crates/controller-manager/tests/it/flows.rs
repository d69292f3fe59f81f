//! The controllers end to end on a real store and apiserver: Deployment → ReplicaSet → Pods,
//! scaling, rolling updates with their bounds checked on every pod event, rollback, cascading
//! deletion, restart without duplicates, namespace deletion, and the collector over kinds found
//! by discovery.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use rkube_client::{Api, DeleteParams, ListParams, Patch, WatchEvent};
use serde_json::json;

use crate::harness::{deployment, live_pods, wait_for, CmEnv, Env};

const T: Duration = Duration::from_secs(30);

fn image_of(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_creates_replicaset_and_pods_with_upstream_names_and_owners() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let _kubelet = env.fake_kubelet("default");
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    let rs_api: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    // Every ReplicaSet status written, in order.
    let from = rs_api.list(&ListParams::default()).await.unwrap();
    let lp = ListParams {
        resource_version: from.metadata.resource_version,
        timeout_seconds: Some(60),
        ..Default::default()
    };
    let mut rs_events = Box::pin(rs_api.watch(&lp).await.unwrap());
    let d = deploys
        .create(&deployment("web", 3, "nginx:1.14.2", 1, 0))
        .await
        .unwrap();
    let rs = wait_for("the ReplicaSet", T, || async {
        rs_api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    assert!(
        hash.len() >= 6
            && hash
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
        "{hash}"
    );
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );
    assert_eq!(Some(&owner.uid), d.metadata.uid.as_ref());
    assert_eq!(
        rs.spec
            .as_ref()
            .unwrap()
            .selector
            .match_labels
            .as_ref()
            .unwrap()["pod-template-hash"],
        hash
    );
    assert_eq!(
        rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );

    let pods = wait_for("3 pods", T, || async {
        let p = live_pods(&env.client, "default", "app=web").await;
        (p.len() == 3).then_some(p)
    })
    .await;
    for p in &pods {
        let name = p.metadata.name.as_deref().unwrap();
        let suffix = name
            .strip_prefix(&format!("web-{hash}-"))
            .unwrap_or_else(|| panic!("pod name {name}"));
        assert_eq!(suffix.len(), 5, "{name}");
        let r = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.controller, r.block_owner_deletion),
            ("ReplicaSet", Some(true), Some(true))
        );
        assert_eq!(Some(&r.uid), rs.metadata.uid.as_ref());
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["pod-template-hash"],
            hash
        );
    }
    // Status converges: all replicas updated, ready and available; Available and Progressing.
    let d = wait_for("deployment status", T, || async {
        let d = deploys.get("web").await.ok()?;
        let s = d.status.clone()?;
        (s.available_replicas == Some(3)
            && s.updated_replicas == Some(3)
            && s.observed_generation == d.metadata.generation)
            .then_some(d)
    })
    .await;
    let conds = d.status.unwrap().conditions.unwrap();
    let reason = |t: &str| {
        conds
            .iter()
            .find(|c| c.type_ == t)
            .and_then(|c| c.reason.clone())
    };
    assert_eq!(
        reason("Available").as_deref(),
        Some("MinimumReplicasAvailable")
    );
    assert_eq!(
        reason("Progressing").as_deref(),
        Some("NewReplicaSetAvailable")
    );
    assert_eq!(
        d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
        "1"
    );
    // The revision went with the status (as upstream's UpdateStatus): no new generation.
    assert_eq!(d.metadata.generation, Some(1));
    // The set's first status already counts pods: the one its creating sync would have
    // written (counted before the creations) is not written.
    let first = tokio::time::timeout(T, async {
        while let Some(Ok(ev)) = rs_events.next().await {
            if let WatchEvent::Modified(r) = ev {
                if let Some(s) = r.status {
                    return s;
                }
            }
        }
        panic!("the ReplicaSet watch ended before any status");
    })
    .await
    .expect("a ReplicaSet status");
    assert!(first.replicas >= 1, "{first:?}");
    // Events as upstream writes them.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(&env.client, "default");
    wait_for(
        "ScalingReplicaSet and SuccessfulCreate events",
        T,
        || async {
            let evs = events.list(&ListParams::default()).await.ok()?.items;
            let scaled = evs.iter().any(|e| {
                e.reason.as_deref() == Some("ScalingReplicaSet")
                    && e.message.as_deref()
                        == Some(&format!("Scaled up replica set web-{hash} from 0 to 3"))
                    && e.source.as_ref().and_then(|s| s.component.as_deref())
                        == Some("deployment-controller")
            });
            let created = evs
                .iter()
                .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
                .count();
            (scaled && created == 3).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_up_and_down() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("s", 3, "nginx", 1, 0))
        .await
        .unwrap();
    wait_for("3 pods", T, || async {
        (live_pods(&env.client, "default", "app=s").await.len() == 3).then_some(())
    })
    .await;
    for n in [10, 2] {
        deploys
            .patch("s", &Patch::Merge(json!({"spec": {"replicas": n}})))
            .await
            .unwrap();
        wait_for(&format!("{n} pods"), T, || async {
            let rs: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
            let settled = rs
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .all(|r| r.status.as_ref().map(|s| s.replicas) == Some(n));
            (live_pods(&env.client, "default", "app=s").await.len() == n as usize && settled)
                .then_some(())
        })
        .await;
    }
    // The replica count holds after the controllers settled (no over-creation).
    let rs: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    let sets = rs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 1);
    assert_eq!(live_pods(&env.client, "default", "app=s").await.len(), 2);
}

/// Upstream's conformance case "ReplicationController should surface a failure condition on a
/// common issue like exceeded quota", and the same failure carried to a Deployment: a set that
/// cannot create its pods shows `ReplicaFailure` (FailedCreate, the quota's message), its
/// Deployment shows it too, and both lose it once the set manages without error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refusal_surfaces_as_replica_failure_until_it_clears() {
    use k8s_openapi::api::core::v1::{ReplicationController, ResourceQuota};
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(&env.client, "default");
    quotas
        .create(
            &serde_json::from_value(json!({"metadata": {"name": "condition-test"},
                "spec": {"hard": {"pods": "2"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let rcs: Api<ReplicationController> = Api::namespaced(&env.client, "default");
    rcs.create(
        &serde_json::from_value(json!({"metadata": {"name": "condition-test"}, "spec": {
            "replicas": 3, "selector": {"name": "condition-test"},
            "template": {"metadata": {"labels": {"name": "condition-test"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    type Cond = (String, String, String);
    /// A ReplicaFailure condition's status, reason and message, of either kind's conditions.
    fn failure<C: serde::Serialize>(conds: Option<Vec<C>>) -> Option<Cond> {
        let c = conds?
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .find(|c| c["type"] == "ReplicaFailure")?;
        let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        Some((field("status"), field("reason"), field("message")))
    }
    /// Waits for a ReplicaFailure, checks it is a failed creation, and gives its message.
    async fn failed_create<F: std::future::Future<Output = Option<Option<Cond>>>>(
        what: &str,
        get: impl Fn() -> F,
    ) -> String {
        let (status, reason, message) = wait_for(what, T, || async { get().await.flatten() }).await;
        assert_eq!((status.as_str(), reason.as_str()), ("True", "FailedCreate"));
        message
    }
    let rc_failure = || async {
        let rc = rcs.get("condition-test").await.ok()?;
        Some(failure(rc.status.and_then(|s| s.conditions)))
    };
    let message = failed_create("the RC's ReplicaFailure", rc_failure).await;
    assert!(
        message.contains("exceeded quota: condition-test"),
        "{message}"
    );
    assert_eq!(
        live_pods(&env.client, "default", "name=condition-test")
            .await
            .len(),
        2
    );

    // Scaled to what the quota allows, the RC manages without error: the condition goes.
    rcs.patch(
        "condition-test",
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .unwrap();
    wait_for("the RC's condition removed", T, || async {
        rc_failure().await?.is_none().then_some(())
    })
    .await;

    // A Deployment in the full namespace: its set fails the same way, and the Deployment says so.
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("blocked", 1, "nginx", 1, 0))
        .await
        .unwrap();
    let d_failure = || async {
        let d = deploys.get("blocked").await.ok()?;
        Some(failure(d.status.and_then(|s| s.conditions)))
    };
    let message = failed_create("the Deployment's ReplicaFailure", d_failure).await;
    assert!(message.contains("exceeded quota"), "{message}");

    // Room in the quota: the Deployment's pod is created and its condition goes too.
    rcs.patch(
        "condition-test",
        &Patch::Merge(json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    wait_for("the Deployment's pod and no condition", T, || async {
        let pods = live_pods(&env.client, "default", "app=blocked").await;
        (pods.len() == 1 && d_failure().await?.is_none()).then_some(())
    })
    .await;
}

/// Watches pods of `app` and checks the rollout bounds on every event.
fn check_bounds(
    env: &Env,
    app: &str,
    max_total: usize,
    min_ready: usize,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let violations = Arc::new(Mutex::new(Vec::new()));
    let v = violations.clone();
    let api: Api<Pod> = Api::namespaced(&env.client, "default");
    let labels = format!("app={app}");
    let task = tokio::spawn(async move {
        let list = api
            .list(&ListParams::default().labels(&labels))
            .await
            .unwrap();
        let rv = list.metadata.resource_version.clone().unwrap();
        let mut pods: HashMap<String, Pod> = list
            .items
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap(), p))
            .collect();
        let lp = ListParams {
            resource_version: Some(rv),
            timeout_seconds: Some(120),
            ..Default::default()
        }
        .labels(&labels);
        let mut stream = Box::pin(api.watch(&lp).await.unwrap());
        while let Some(Ok(ev)) = stream.next().await {
            match ev {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    pods.insert(p.metadata.name.clone().unwrap(), p);
                }
                WatchEvent::Deleted(p) => {
                    pods.remove(p.metadata.name.as_deref().unwrap());
                }
                _ => continue,
            }
            let live: Vec<&Pod> = pods
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let ready = live
                .iter()
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .count();
            if live.len() > max_total {
                v.lock()
                    .unwrap()
                    .push(format!("{} pods > {max_total}", live.len()));
            }
            if ready < min_ready {
                v.lock()
                    .unwrap()
                    .push(format!("{ready} ready < {min_ready}"));
            }
        }
    });
    (violations, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_holds_its_bounds_and_rollback_reuses_the_old_replicaset() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let _kubelet = env.fake_kubelet("default");
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("r", 4, "nginx:1.14.2", 1, 1))
        .await
        .unwrap();
    wait_for("4 ready pods", T, || async {
        let d = deploys.get("r").await.ok()?;
        (d.status?.available_replicas == Some(4)).then_some(())
    })
    .await;
    let rs_api: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    let first = rs_api.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();

    // maxSurge 1, maxUnavailable 1: never more than 5 pods, never fewer than 3 ready.
    let (violations, watcher) = check_bounds(&env, "r", 5, 3);
    let set_image = |img: &str| {
        Patch::Strategic(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": img}]}}}}),
        )
    };
    deploys
        .patch("r", &set_image("nginx:1.16.1"))
        .await
        .unwrap();
    let done = |img: &'static str| {
        let env = &env;
        let deploys = deploys.clone();
        move || {
            let deploys = deploys.clone();
            async move {
                let d = deploys.get("r").await.ok()?;
                let s = d.status.clone()?;
                let pods = live_pods(&env.client, "default", "app=r").await;
                let complete = s.updated_replicas == Some(4)
                    && s.replicas == Some(4)
                    && s.available_replicas == Some(4)
                    && s.observed_generation == d.metadata.generation;
                (complete && pods.len() == 4 && pods.iter().all(|p| image_of(p) == img))
                    .then_some(d)
            }
        }
    };
    let d = wait_for("rollout to 1.16.1", T, done("nginx:1.16.1")).await;
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    let sets = rs_api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2);
    let old = sets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&first))
        .unwrap();
    assert_eq!(old.spec.as_ref().unwrap().replicas, Some(0));

    // Rollback: the template goes back; the first ReplicaSet is reused as revision 3.
    deploys
        .patch("r", &set_image("nginx:1.14.2"))
        .await
        .unwrap();
    wait_for("rollback to 1.14.2", T, done("nginx:1.14.2")).await;
    let sets = rs_api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        sets.len(),
        2,
        "no third ReplicaSet: {:?}",
        sets.iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let reused = sets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&first))
        .unwrap();
    assert_eq!(reused.spec.as_ref().unwrap().replicas, Some(4));
    let ann = reused.metadata.annotations.clone().unwrap();
    assert_eq!(ann["deployment.kubernetes.io/revision"], "3");
    assert_eq!(ann["deployment.kubernetes.io/revision-history"], "1");

    // Paused, the template goes back again: nothing rolls out, but the set that matches it is
    // the new one at once, as revision 4 (upstream's paused sync), and the Deployment says so.
    deploys
        .patch("r", &Patch::Merge(json!({"spec": {"paused": true}})))
        .await
        .unwrap();
    deploys
        .patch("r", &set_image("nginx:1.16.1"))
        .await
        .unwrap();
    let second = sets
        .iter()
        .find(|s| s.metadata.name.as_deref() != Some(&first))
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    let (revised, d) = wait_for("revision 4 while paused", T, || async {
        let rs = rs_api.get(&second).await.ok()?;
        let d = deploys.get("r").await.ok()?;
        let rev = |a: &Option<std::collections::BTreeMap<String, String>>| {
            a.as_ref()?
                .get("deployment.kubernetes.io/revision")
                .cloned()
        };
        (rev(&rs.metadata.annotations).as_deref() == Some("4")
            && rev(&d.metadata.annotations).as_deref() == Some("4"))
        .then_some((rs, d))
    })
    .await;
    assert_eq!(
        revised.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision-history"],
        "2"
    );
    assert_eq!(
        revised.spec.as_ref().unwrap().replicas,
        Some(0),
        "paused: no rollout"
    );
    assert_eq!(
        d.metadata.generation,
        Some(5),
        "four spec changes; the controller's revision write is not one"
    );
    let kept = rs_api.get(&first).await.unwrap();
    assert_eq!(kept.spec.as_ref().unwrap().replicas, Some(4));
    watcher.abort();
    let v = violations.lock().unwrap();
    assert!(v.is_empty(), "rollout bounds violated: {v:?}");
}

/// Upstream's paused sync still deletes old sets beyond `revisionHistoryLimit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployment_still_trims_its_history() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let _kubelet = env.fake_kubelet("default");
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    let rs_api: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("h", 1, "nginx:1", 1, 0))
        .await
        .unwrap();
    // Three templates rolled out one after another: two old sets, scaled to zero.
    for (image, sets) in [("nginx:2", 2), ("nginx:3", 3)] {
        deploys
            .patch(
                "h",
                &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": image}]}}}})),
            )
            .await
            .unwrap();
        wait_for(&format!("{image} rolled out"), T, || async {
            let d = deploys.get("h").await.ok()?;
            let s = d.status?;
            let all = rs_api.list(&ListParams::default()).await.ok()?.items;
            let emptied = all
                .iter()
                .filter(|rs| rs.spec.as_ref().and_then(|s| s.replicas) == Some(0))
                .filter(|rs| rs.status.as_ref().is_some_and(|s| s.replicas == 0))
                .count();
            (s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(1)
                && s.replicas == Some(1)
                && s.available_replicas == Some(1)
                && all.len() == sets
                && emptied == sets - 1)
                .then_some(())
        })
        .await;
    }
    deploys
        .patch("h", &Patch::Merge(json!({"spec": {"paused": true}})))
        .await
        .unwrap();
    deploys
        .patch(
            "h",
            &Patch::Merge(json!({"spec": {"revisionHistoryLimit": 0}})),
        )
        .await
        .unwrap();
    let left = wait_for("the old sets deleted while paused", T, || async {
        let all = rs_api.list(&ListParams::default()).await.ok()?.items;
        let live: Vec<ReplicaSet> = all
            .into_iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        (live.len() == 1).then_some(live)
    })
    .await;
    let image = left[0].spec.as_ref().unwrap().template.as_ref().unwrap();
    assert_eq!(
        image.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("nginx:3"),
        "the current set stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascading_deletion_background_foreground_and_orphan() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    let rs_api: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    for name in ["bg", "fg", "or"] {
        deploys
            .create(&deployment(name, 2, "nginx", 1, 0))
            .await
            .unwrap();
    }
    for name in ["bg", "fg", "or"] {
        wait_for("2 pods", T, || async {
            (live_pods(&env.client, "default", &format!("app={name}"))
                .await
                .len()
                == 2)
                .then_some(())
        })
        .await;
    }
    let sets_of = |app: &'static str| {
        let rs_api = rs_api.clone();
        async move {
            rs_api
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .unwrap()
                .items
        }
    };

    // Background: the Deployment goes at once, the GC removes the ReplicaSet and the pods.
    deploys
        .delete("bg", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("bg dependents gone", T, || async {
        (sets_of("bg").await.is_empty()
            && live_pods(&env.client, "default", "app=bg").await.is_empty())
        .then_some(())
    })
    .await;

    // Foreground: the Deployment stays (finalizer) until its dependents are gone.
    deploys
        .delete("fg", &DeleteParams::default().propagation("Foreground"))
        .await
        .unwrap();
    let d = deploys.get_opt("fg").await.unwrap();
    if let Some(d) = d {
        assert!(d
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_string()));
    }
    wait_for("fg deployment gone after its dependents", T, || async {
        let gone = deploys.get_opt("fg").await.ok()?.is_none();
        if !gone {
            return None;
        }
        assert!(
            sets_of("fg").await.is_empty(),
            "owner went before its ReplicaSet"
        );
        Some(())
    })
    .await;
    assert!(live_pods(&env.client, "default", "app=fg").await.is_empty());

    // Orphan: the ReplicaSet and pods stay, without the owner reference.
    deploys
        .delete("or", &DeleteParams::default().propagation("Orphan"))
        .await
        .unwrap();
    wait_for("or deployment gone", T, || async {
        deploys.get_opt("or").await.ok()?.is_none().then_some(())
    })
    .await;
    let sets = wait_for("orphaned ReplicaSet", T, || async {
        let s = sets_of("or").await;
        (s.len() == 1
            && s[0]
                .metadata
                .owner_references
                .as_ref()
                .is_none_or(|r| r.is_empty()))
        .then_some(s)
    })
    .await;
    assert_eq!(sets[0].spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(live_pods(&env.client, "default", "app=or").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_controller_manager_creates_no_duplicates() {
    let env = Env::start().await;
    let (cm, _) = env.start_cm(env.cm_config()).await;
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "default");
    deploys
        .create(&deployment("k", 5, "nginx", 1, 0))
        .await
        .unwrap();
    wait_for("5 pods", T, || async {
        (live_pods(&env.client, "default", "app=k").await.len() == 5).then_some(())
    })
    .await;
    cm.cancel();
    let (_cm2, _) = env.start_cm(env.cm_config()).await;
    deploys
        .patch("k", &Patch::Merge(json!({"spec": {"replicas": 6}})))
        .await
        .unwrap();
    let rs_api: Api<ReplicaSet> = Api::namespaced(&env.client, "default");
    wait_for("6 pods, status settled", T, || async {
        let sets = rs_api.list(&ListParams::default()).await.ok()?.items;
        let settled = sets.len() == 1 && sets[0].status.as_ref().map(|s| s.replicas) == Some(6);
        (settled && live_pods(&env.client, "default", "app=k").await.len() == 6).then_some(())
    })
    .await;
    assert_eq!(live_pods(&env.client, "default", "app=k").await.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_empties_and_removes_it() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let ns_api: Api<Namespace> = Api::all(&env.client);
    ns_api
        .create(&serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap())
        .await
        .unwrap();
    let deploys: Api<Deployment> = Api::namespaced(&env.client, "doomed");
    deploys
        .create(&deployment("x", 2, "nginx", 1, 0))
        .await
        .unwrap();
    wait_for("2 pods", T, || async {
        (live_pods(&env.client, "doomed", "app=x").await.len() == 2).then_some(())
    })
    .await;
    ns_api
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("namespace gone", T, || async {
        ns_api.get_opt("doomed").await.ok()?.is_none().then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "doomed");
    assert!(pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

/// The collector and namespace deletion cover kinds no controller of ours watches, found by
/// discovery: a ConfigMap owned by a Job goes with the Job; a namespace holding CronJobs, Roles
/// and ConfigMaps empties and goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_and_namespace_deletion_cover_discovered_kinds() {
    let env = Env::start().await;
    let (_cm, _) = env.start_cm(env.cm_config()).await;
    let c = &env.client;
    let post = |path: &'static str, body: serde_json::Value| async move {
        let v: serde_json::Value = c
            .send_json(
                rkube_client::Method::POST,
                path,
                Some(("application/json", serde_json::to_vec(&body).unwrap())),
            )
            .await
            .unwrap();
        v
    };
    let job = post("/apis/batch/v1/namespaces/default/jobs", json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox"}]}}}})).await;
    let uid = job["metadata"]["uid"].as_str().unwrap();
    post(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "migrate-state", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "migrate", "uid": uid}]}}),
    )
    .await;
    let maps: Api<ConfigMap> = Api::namespaced(c, "default");
    c.send(
        rkube_client::Method::DELETE,
        "/apis/batch/v1/namespaces/default/jobs/migrate",
        Some((
            "application/json",
            br#"{"propagationPolicy":"Orphan"}"#.to_vec(),
        )),
    )
    .await
    .unwrap();
    // Orphaned: the reference is stripped, the ConfigMap stays.
    wait_for("the owner reference stripped", T, || async {
        let m = maps.get("migrate-state").await.ok()?;
        m.metadata
            .owner_references
            .as_ref()
            .is_none_or(|r| r.is_empty())
            .then_some(())
    })
    .await;
    // A dangling owner of a discovered kind: the dependent goes.
    post("/api/v1/namespaces/default/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "leftover", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": "9b1d7b5e-0000-4000-8000-000000000000"}]}})).await;
    wait_for("the dependent of a missing Job collected", T, || async {
        maps.get_opt("leftover").await.ok()?.is_none().then_some(())
    })
    .await;
    // Namespace deletion takes kinds of every group.
    let ns_api: Api<Namespace> = Api::all(c);
    ns_api
        .create(&serde_json::from_value(json!({"metadata": {"name": "attic"}})).unwrap())
        .await
        .unwrap();
    post("/apis/batch/v1/namespaces/attic/cronjobs", json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "nightly"}, "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}})).await;
    post(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/attic/roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role", "metadata": {"name": "reader"}, "rules": []}),
    )
    .await;
    ns_api
        .delete("attic", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("namespace gone", T, || async {
        ns_api.get_opt("attic").await.ok()?.is_none().then_some(())
    })
    .await;
    let left: serde_json::Value = c
        .send_json(
            rkube_client::Method::GET,
            "/apis/batch/v1/namespaces/attic/cronjobs",
            None,
        )
        .await
        .unwrap();
    assert_eq!(left["items"], json!([]));
}
