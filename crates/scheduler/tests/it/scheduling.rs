//! Pods land only where they fit; unschedulable pods say why and schedule once a node that
//! fits appears; taints, tolerations and nodeSelector are honoured; a controller's pods spread.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use rkube_client::{Api, Patch};
use serde_json::json;

use crate::harness::{
    add_node, bound_node, cluster, find_event, pod, start_scheduler, unschedulable_message,
    wait_for, Env,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_land_only_where_they_fit() {
    let (env, _s) = cluster(&[("small", "1"), ("medium", "2"), ("large", "4")]).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("needs-3", "3", json!({}))).await.unwrap();
    assert_eq!(bound_node(&env.client, "needs-3").await, "large");
    pods.create(&pod("needs-1500m", "1500m", json!({})))
        .await
        .unwrap();
    assert_eq!(
        bound_node(&env.client, "needs-1500m").await,
        "medium",
        "large has only 1 cpu left"
    );
    pods.create(&pod("needs-1", "1", json!({}))).await.unwrap();
    let n = bound_node(&env.client, "needs-1").await;
    assert!(n == "small" || n == "large", "{n}");
    // A Scheduled event as upstream words it.
    find_event(&env.client, "default", "Scheduled event", |e| {
        e.reason.as_deref() == Some("Scheduled")
            && e.message.as_deref() == Some("Successfully assigned default/needs-3 to large")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_reports_why_then_schedules_when_a_node_fits() {
    let (env, _s) = cluster(&[("a", "2"), ("b", "2"), ("c", "2")]).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    pods.create(&pod("huge", "8", json!({}))).await.unwrap();
    let msg = "0/3 nodes are available: 3 Insufficient cpu.";
    // The pod may be tried before the scheduler has seen every node ("0/2 …"); a node
    // arriving tries it again.
    wait_for(
        "huge unschedulable on 3 nodes",
        Duration::from_secs(30),
        || async { (unschedulable_message(&env.client, "huge").await == msg).then_some(()) },
    )
    .await;
    let reason = pods
        .get("huge")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap()[0]
        .reason
        .clone();
    assert_eq!(reason.as_deref(), Some("Unschedulable"));
    // The one for the attempt above: an earlier attempt may have seen fewer nodes.
    let ev = find_event(&env.client, "default", "FailedScheduling event", |e| {
        e.reason.as_deref() == Some("FailedScheduling") && e.message.as_deref() == Some(msg)
    })
    .await;
    assert_eq!(
        (ev.type_.as_deref(), ev.message.as_deref()),
        (Some("Warning"), Some(msg))
    );
    assert_eq!(
        ev.source.and_then(|s| s.component).as_deref(),
        Some("default-scheduler")
    );
    // A node that fits arrives: the parked pod is retried at once (a cluster event), not in 5 min.
    add_node(&env.client, "big", "16", json!({}), json!({})).await;
    assert_eq!(bound_node(&env.client, "huge").await, "big");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_tolerations_and_node_selectors() {
    let env = Env::start().await;
    let _s = start_scheduler(&env);
    add_node(
        &env.client,
        "gpu",
        "8",
        json!({"accel": "gpu"}),
        json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
    )
    .await;
    add_node(&env.client, "plain", "8", json!({}), json!({})).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    for i in 0..4 {
        pods.create(&pod(&format!("any-{i}"), "100m", json!({})))
            .await
            .unwrap();
    }
    for i in 0..4 {
        assert_eq!(
            bound_node(&env.client, &format!("any-{i}")).await,
            "plain",
            "untolerated taint"
        );
    }
    let tol = json!({"nodeSelector": {"accel": "gpu"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]});
    pods.create(&pod("trainer", "1", tol)).await.unwrap();
    assert_eq!(bound_node(&env.client, "trainer").await, "gpu");
    // A selector no node matches: unschedulable with the affinity reason.
    pods.create(&pod(
        "nowhere",
        "1",
        json!({"nodeSelector": {"zone": "mars"}}),
    ))
    .await
    .unwrap();
    let msg = unschedulable_message(&env.client, "nowhere").await;
    assert_eq!(
        msg,
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controllers_pods_spread_across_equal_nodes() {
    let (env, _s) = cluster(&[("n1", "8"), ("n2", "8"), ("n3", "8")]).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let owner = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid-1", "controller": true}]);
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut p = pod(&format!("r-{i}"), "100m", json!({}));
        p.metadata.owner_references = serde_json::from_value(owner.clone()).unwrap();
        pods.create(&p).await.unwrap();
        nodes.push(bound_node(&env.client, &format!("r-{i}")).await);
    }
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3"]);
}

/// A claim bound to a volume pinned to some nodes (by any label of its node affinity) keeps
/// the pod to those nodes while filtering; a pod whose claim is missing says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_follow_their_volumes_node_affinity() {
    let env = Env::start().await;
    let _s = start_scheduler(&env);
    for (n, zone) in [("a", "east"), ("b", "west"), ("c", "east")] {
        add_node(
            &env.client,
            n,
            "2",
            json!({"topology.kubernetes.io/zone": zone}),
            json!({}),
        )
        .await;
    }
    let post = |path: String, body: serde_json::Value| {
        let c = env.client.clone();
        async move {
            let _: serde_json::Value = c
                .send_json(
                    rkube_client::Method::POST,
                    &path,
                    Some(("application/json", serde_json::to_vec(&body).unwrap())),
                )
                .await
                .unwrap();
        }
    };
    for (pv, zone) in [("west-disk", "west"), ("moon-disk", "moon")] {
        post("/api/v1/persistentvolumes".into(), json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/x"}, "storageClassName": "",
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}}})).await;
        let claim = format!("{pv}-claim");
        post(
            "/api/v1/namespaces/default/persistentvolumeclaims".into(),
            json!({"apiVersion": "v1",
            "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(&env.client, "default");
        claims
            .patch_status(
                &claim,
                &rkube_client::Patch::Merge(json!({"status": {"phase": "Bound"}})),
            )
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let with_claim = |name: &str, claim: &str| {
        pod(
            name,
            "100m",
            json!({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}),
        )
    };
    pods.create(&with_claim("db", "west-disk-claim"))
        .await
        .unwrap();
    assert_eq!(bound_node(&env.client, "db").await, "b");
    pods.create(&with_claim("lost", "moon-disk-claim"))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "lost").await,
        "0/3 nodes are available: 3 node(s) had volume node affinity conflict."
    );
    pods.create(&with_claim("early", "nope")).await.unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "early").await,
        "0/3 nodes are available: persistentvolumeclaim \"nope\" not found."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_spread_over_zones_and_keep_apart() {
    let env = Env::start().await;
    let _s = start_scheduler(&env);
    for (n, zone) in [("a", "east"), ("b", "west"), ("c", "east")] {
        add_node(
            &env.client,
            n,
            "4",
            json!({"topology.kubernetes.io/zone": zone}),
            json!({}),
        )
        .await;
    }
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let labelled = |name: &str, app: &str, extra: serde_json::Value| {
        let mut p = pod(name, "100m", extra);
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    };
    let zone_of = |node: &str| if node == "b" { "west" } else { "east" };

    // Required anti-affinity by hostname: one per node, the fourth waits.
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let mut nodes = Vec::new();
    for i in 0..3 {
        let name = format!("db-{i}");
        pods.create(&labelled(&name, "db", apart.clone()))
            .await
            .unwrap();
        nodes.push(bound_node(&env.client, &name).await);
    }
    nodes.sort();
    assert_eq!(nodes, ["a", "b", "c"]);
    pods.create(&labelled("db-3", "db", apart.clone()))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "db-3").await,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    );
    // A pod without the rule, matched by the others' anti-affinity, is kept off them too.
    pods.create(&labelled("db-x", "db", json!({})))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "db-x").await,
        "0/3 nodes are available: 3 node(s) didn't satisfy existing pods anti-affinity rules."
    );

    // A hard spread over zones (maxSkew 1): two and two.
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let mut zones = std::collections::BTreeMap::new();
    for i in 0..4 {
        let name = format!("web-{i}");
        pods.create(&labelled(&name, "web", spread.clone()))
            .await
            .unwrap();
        *zones
            .entry(zone_of(&bound_node(&env.client, &name).await))
            .or_insert(0) += 1;
    }
    assert_eq!(zones, [("east", 2), ("west", 2)].into());
    let nowhere = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "rack",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "rackless"}}}]});
    pods.create(&labelled("rackless", "rackless", nowhere))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "rackless").await,
        "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints (missing required label)."
    );

    // Required affinity to pods that do not exist yet: it waits, and follows the first one.
    let near = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "leader"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    pods.create(&labelled("follower", "follower", near))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "follower").await,
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."
    );
    pods.create(&labelled("leader", "leader", json!({})))
        .await
        .unwrap();
    let leader = bound_node(&env.client, "leader").await;
    assert_eq!(bound_node(&env.client, "follower").await, leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_pods_wait_for_their_gates_to_go() {
    let (env, _s) = cluster(&[("a", "2")]).await;
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let gated = pod(
        "gated",
        "100m",
        json!({"schedulingGates": [{"name": "example.com/wait"}]}),
    );
    let created = pods.create(&gated).await.unwrap();
    let cond = created.status.unwrap().conditions.unwrap();
    assert_eq!(
        (cond[0].type_.as_str(), cond[0].reason.as_deref()),
        ("PodScheduled", Some("SchedulingGated"))
    );
    // A pod behind it is scheduled; the gated one is not.
    pods.create(&pod("free", "100m", json!({}))).await.unwrap();
    bound_node(&env.client, "free").await;
    let p = pods.get("gated").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name, None);
    // Gates may not be added, only removed; removed, the pod is scheduled.
    let err = pods
        .patch(
            "gated",
            &Patch::Merge(json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}, {"name": "more"}]}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("only deletion is allowed, but found new scheduling gate 'more'"),
        "{err}"
    );
    pods.patch(
        "gated",
        &Patch::Merge(json!({"spec": {"schedulingGates": null}})),
    )
    .await
    .unwrap();
    assert_eq!(bound_node(&env.client, "gated").await, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_pod_preempts_a_lower_one() {
    let (env, _s) = cluster(&[("a", "2")]).await;
    for (class, value, policy) in [
        ("high", 1000, "PreemptLowerPriority"),
        ("polite", 2000, "Never"),
    ] {
        let _: serde_json::Value = env
            .client
            .send_json(
                rkube_client::Method::POST,
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                Some((
                    "application/json",
                    serde_json::to_vec(
                        &json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                        "metadata": {"name": class}, "value": value, "preemptionPolicy": policy}),
                    )
                    .unwrap(),
                )),
            )
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let with = |name: &str, cpu: &str, class: Option<&str>| {
        let mut p = pod(name, cpu, json!({}));
        let spec = p.spec.as_mut().unwrap();
        spec.priority_class_name = class.map(String::from);
        spec.termination_grace_period_seconds = Some(0);
        p
    };
    pods.create(&with("low", "2", None)).await.unwrap();
    assert_eq!(bound_node(&env.client, "low").await, "a");
    // No room: the higher-priority pod has the low one evicted and takes its place.
    pods.create(&with("high", "1", Some("high"))).await.unwrap();
    assert_eq!(bound_node(&env.client, "high").await, "a");
    crate::harness::wait_for(
        "the victim gone",
        std::time::Duration::from_secs(30),
        || async { pods.get("low").await.is_err().then_some(()) },
    )
    .await;
    // A pod that may not preempt waits, and the pod in its way stays.
    pods.create(&with("polite", "2", Some("polite")))
        .await
        .unwrap();
    assert_eq!(
        unschedulable_message(&env.client, "polite").await,
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    assert!(pods
        .get("high")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_spares_pods_their_disruption_budget_protects() {
    let (env, _s) = cluster(&[("a", "2"), ("b", "2")]).await;
    let _: serde_json::Value = env
        .client
        .send_json(
            rkube_client::Method::POST,
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            Some((
                "application/json",
                serde_json::to_vec(&json!({"apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}))
                .unwrap(),
            )),
        )
        .await
        .unwrap();
    // No disruption allowed for the database (no controller computes the budget's status
    // here, so it allows none).
    let _: serde_json::Value = env
        .client
        .send_json(
            rkube_client::Method::POST,
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            Some((
                "application/json",
                serde_json::to_vec(&json!({"apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
                .unwrap(),
            )),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(&env.client, "default");
    let placed = |name: &str, node: &str, app: &str| {
        let mut p = pod(
            name,
            "2",
            json!({"nodeName": node, "terminationGracePeriodSeconds": 0}),
        );
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p
    };
    // Node a (first by name) holds the protected pod, b the other: b's is the victim.
    pods.create(&placed("db", "a", "db")).await.unwrap();
    pods.create(&placed("web", "b", "web")).await.unwrap();
    let mut high = pod("high", "1", json!({}));
    high.spec.as_mut().unwrap().priority_class_name = Some("high".into());
    pods.create(&high).await.unwrap();
    assert_eq!(bound_node(&env.client, "high").await, "b");
    crate::harness::wait_for(
        "the victim gone",
        std::time::Duration::from_secs(30),
        || async { pods.get("web").await.is_err().then_some(()) },
    )
    .await;
    assert!(pods
        .get("db")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());
}
