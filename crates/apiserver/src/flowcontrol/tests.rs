use super::*;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::authenticated(name, "", groups.iter().map(|g| g.to_string()).collect())
}

fn attrs(verb: &str, group: &str, resource: &str, ns: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: true,
        api_group: group.into(),
        resource: resource.into(),
        namespace: ns.into(),
        ..Default::default()
    }
}

#[test]
fn hands_are_distinct_in_range_and_stable() {
    for hash in [0u64, 1, 42, u64::MAX, 0xdead_beef_cafe] {
        let hand = deal(hash, 64, 6);
        assert_eq!(hand.len(), 6);
        let mut sorted = hand.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "distinct: {hand:?}");
        assert!(hand.iter().all(|&q| q < 64));
        assert_eq!(hand, deal(hash, 64, 6));
    }
    assert_eq!(deal(7, 1, 6), vec![0]);
}

#[test]
fn requests_land_on_upstreams_levels() {
    let apf = Apf::new(600);
    let level = |u: &UserInfo, a: &Attributes| apf.classify(u, a).2.spec.name.clone();
    let admin = user("admin", &["system:masters"]);
    assert_eq!(level(&admin, &attrs("list", "", "pods", "")), "exempt");
    let node = user("system:node:n1", &["system:nodes"]);
    assert_eq!(
        level(
            &node,
            &attrs("update", "coordination.k8s.io", "leases", "kube-node-lease")
        ),
        "node-high"
    );
    assert_eq!(level(&node, &attrs("list", "", "pods", "")), "system");
    let cm = user("system:kube-controller-manager", &[]);
    assert_eq!(
        level(
            &cm,
            &attrs("update", "coordination.k8s.io", "leases", "kube-system")
        ),
        "leader-election"
    );
    assert_eq!(
        level(&cm, &attrs("create", "", "pods", "default")),
        "workload-high"
    );
    let alice = user("alice", &[]);
    assert_eq!(
        level(&alice, &attrs("list", "", "pods", "default")),
        "global-default"
    );
    assert_eq!(
        level(&UserInfo::anonymous(), &attrs("get", "", "pods", "x")),
        "global-default"
    );
    let probe = Attributes {
        verb: "get".into(),
        path: "/readyz".into(),
        ..Default::default()
    };
    assert_eq!(level(&UserInfo::anonymous(), &probe), "exempt");
    // Shares split the server's seats: global-default gets 20/245 of 600.
    assert!(apf.seats().contains(&("global-default".into(), 49)));
}

#[tokio::test]
async fn a_flooding_flow_cannot_starve_another() {
    // 3 seats for global-default; the flood's LISTs are 3 wide, the victim's GET 1.
    let apf =
        Arc::new(Apf::new(30).with_width(Box::new(|a: &Attributes| list_width(&a.verb, 300))));
    let flood = user("flood", &[]);
    let victim = user("victim", &[]);
    let a = attrs("list", "", "pods", "default");
    let get = attrs("get", "", "pods", "default");
    let (held, _) = apf.admit(&flood, &a).await.unwrap();
    // The flooder queues 20 requests behind the busy seat.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiting = Vec::new();
    for i in 0..20 {
        let (apf, flood, a, tx) = (apf.clone(), flood.clone(), a.clone(), done_tx.clone());
        waiting.push(tokio::spawn(async move {
            if let Ok((seat, _)) = apf.admit(&flood, &a).await {
                let _ = tx.send(format!("flood-{i}"));
                drop(seat);
            }
        }));
        tokio::task::yield_now().await;
    }
    // Then the victim asks once.
    let (apf2, v, a2, tx) = (apf.clone(), victim.clone(), get.clone(), done_tx.clone());
    let victim_task = tokio::spawn(async move {
        let (seat, _) = apf2.admit(&v, &a2).await.unwrap();
        let _ = tx.send("victim".to_string());
        drop(seat);
    });
    tokio::task::yield_now().await;
    drop(held);
    let mut order = Vec::new();
    while order.len() < 21 {
        order.push(done_rx.recv().await.unwrap());
    }
    victim_task.await.unwrap();
    let pos = order.iter().position(|s| s == "victim").unwrap();
    assert_eq!(
        pos, 0,
        "the victim's queue goes first, not behind the flood's 20: {order:?}"
    );
}

#[tokio::test]
async fn a_full_queue_is_429_with_retry_after() {
    let apf = Arc::new(Apf::new(1));
    let flood = user("flood", &[]);
    let a = attrs("list", "", "pods", "default");
    let (_held, _) = apf.admit(&flood, &a).await.unwrap();
    let mut tasks = Vec::new();
    // global-default queues hold 50 each; a flow spreads over its hand of 6 queues.
    for _ in 0..400 {
        let (apf, flood, a) = (apf.clone(), flood.clone(), a.clone());
        tasks.push(tokio::spawn(async move {
            apf.admit(&flood, &a).await.map(|_| ())
        }));
    }
    // Wait until every request is either queued or refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while apf.queued("global-default") + tasks.iter().filter(|t| t.is_finished()).count() < 400 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "requests neither queued nor refused"
        );
        tokio::task::yield_now().await;
    }
    let mut rejected = 0;
    for t in tasks {
        if t.is_finished() {
            if let Err(e) = t.await.unwrap() {
                assert_eq!((e.code(), e.reason()), (429, "TooManyRequests"));
                assert_eq!(e.status().details.as_ref().unwrap().retry_after_seconds, 1);
                rejected += 1;
            }
        } else {
            t.abort();
        }
    }
    assert_eq!(
        rejected,
        400 - 6 * 50,
        "everything past the hand's 6 queues × 50 is refused"
    );
}

#[test]
fn the_default_objects_parse_back_into_upstreams_configuration() {
    let (schemas, levels) = defaults::configuration();
    assert_eq!(schemas.len(), 10);
    assert_eq!(schemas[0].name, "exempt");
    assert_eq!(schemas.last().unwrap().name, "catch-all");
    let low = levels.iter().find(|l| l.name == "workload-low").unwrap();
    assert_eq!(
        (
            low.shares,
            low.queues,
            low.hand_size,
            low.queue_length_limit
        ),
        (100, 128, 6, 50)
    );
    let catch_all = levels.last().unwrap();
    assert_eq!(
        (catch_all.name.as_str(), catch_all.queue_length_limit),
        ("catch-all", 0)
    );
    assert!(levels.iter().find(|l| l.name == "exempt").unwrap().exempt);
    // A configuration without the mandatory objects gets them back.
    let (s, l) = defaults::from_objects(&[], &[]);
    let names: Vec<_> = s.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["exempt", "catch-all"]);
    // A schema naming a missing level is skipped.
    let mut dangling = defaults::schema_objects()[5].clone();
    dangling["spec"]["priorityLevelConfiguration"]["name"] = serde_json::json!("nowhere");
    let (s, _) = defaults::from_objects(&[dangling], &defaults::level_objects());
    assert_eq!(
        s.len(),
        2,
        "only the mandatory two: {:?}",
        s.iter().map(|x| &x.name).collect::<Vec<_>>()
    );
    assert_eq!(l.len(), 2);
}

#[test]
fn rules_match_by_scope_and_service_account() {
    let obj = serde_json::json!({"metadata": {"name": "s", "uid": "u1"}, "spec": {
        "matchingPrecedence": 10, "priorityLevelConfiguration": {"name": "workload-low"},
        "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "ci", "name": "*"}}],
            "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"], "namespaces": ["ci"]}]}]}});
    let s = defaults::parse_schema(&obj).unwrap();
    assert_eq!(s.uid, "u1");
    let sa = user(
        "system:serviceaccount:ci:builder",
        &["system:serviceaccounts"],
    );
    assert!(s.matches(&sa, &attrs("list", "", "pods", "ci")));
    assert!(
        !s.matches(&sa, &attrs("list", "", "pods", "")),
        "not at the cluster scope"
    );
    assert!(!s.matches(&sa, &attrs("list", "", "pods", "prod")));
    assert!(!s.matches(
        &user("system:serviceaccount:prod:x", &[]),
        &attrs("list", "", "pods", "ci")
    ));
    assert!(!s.matches(&sa, &attrs("get", "", "pods", "ci")));
}

#[test]
fn lists_are_as_wide_as_the_objects_they_may_return() {
    assert_eq!(list_width("get", 5_000), 1);
    assert_eq!(list_width("list", 0), 1);
    assert_eq!(list_width("list", 100), 1);
    assert_eq!(list_width("list", 101), 2);
    assert_eq!(list_width("list", 300), 3);
    assert_eq!(list_width("list", 50_000), 10);
}

/// Waits until global-default holds `n` queued requests.
async fn queued(apf: &Apf, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while apf.queued("global-default") != n {
        assert!(tokio::time::Instant::now() < deadline, "never {n} queued");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_wide_list_waits_until_its_seats_are_free() {
    // 30 server seats: global-default gets 3; a LIST is 3 wide, anything else 1.
    let apf =
        Arc::new(Apf::new(30).with_width(Box::new(|a: &Attributes| list_width(&a.verb, 300))));
    assert_eq!(
        apf.seats()
            .iter()
            .find(|(n, _)| n == "global-default")
            .unwrap()
            .1,
        3
    );
    let (alice, bob) = (user("alice", &[]), user("bob", &[]));
    let list = attrs("list", "", "pods", "default");
    let get = attrs("get", "", "pods", "default");
    let (wide, _) = apf.admit(&alice, &list).await.unwrap();
    // Every seat is taken: bob's GET queues.
    let (apf2, bob2, get2) = (apf.clone(), bob.clone(), get.clone());
    let bob_get = tokio::spawn(async move { apf2.admit(&bob2, &get2).await.map(|s| s.0) });
    queued(&apf, 1).await;
    assert!(
        !bob_get.is_finished(),
        "bob waits while the LIST holds all seats"
    );
    drop(wide);
    let narrow = bob_get.await.unwrap().unwrap();
    // One seat is taken: another LIST (3 wide) waits for it.
    let (apf3, alice3, list3) = (apf.clone(), alice.clone(), list.clone());
    let second = tokio::spawn(async move { apf3.admit(&alice3, &list3).await.map(|s| s.0) });
    queued(&apf, 1).await;
    assert!(
        !second.is_finished(),
        "a 3-wide LIST does not fit beside a GET in 3 seats"
    );
    drop(narrow);
    let _wide = second.await.unwrap().unwrap();
    assert_eq!(apf.queued("global-default"), 0);
}

#[tokio::test]
async fn a_request_that_goes_away_gives_its_seat_back() {
    // One seat for global-default.
    let apf = Arc::new(Apf::new(1));
    let (alice, bob) = (user("alice", &[]), user("bob", &[]));
    let get = attrs("get", "", "pods", "default");
    let admit_later = |who: &UserInfo| {
        let (apf, who, get) = (apf.clone(), who.clone(), get.clone());
        tokio::spawn(async move { apf.admit(&who, &get).await.map(|s| s.0) })
    };
    // Gone while queued: it leaves the queue.
    let (held, _) = apf.admit(&alice, &get).await.unwrap();
    let queued_bob = admit_later(&bob);
    queued(&apf, 1).await;
    queued_bob.abort();
    let _ = queued_bob.await;
    assert_eq!(apf.queued("global-default"), 0);
    // Gone after the seat was handed to it but before it ran: the seat comes back.
    let woken_bob = admit_later(&bob);
    queued(&apf, 1).await;
    drop(held); // dispatches to bob (this runtime has not run his task yet) ...
    woken_bob.abort(); // ... who goes away first.
    let _ = woken_bob.await;
    let next = tokio::time::timeout(Duration::from_secs(5), apf.admit(&alice, &get)).await;
    assert!(
        matches!(next, Ok(Ok(_))),
        "the seat handed to a request that went away must come back"
    );
}

#[test]
fn stored_levels_are_bounded() {
    let huge = serde_json::json!({"metadata": {"name": "x"}, "spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 4_000_000_000u64,
        "limitResponse": {"type": "Queue", "queuing": {"queues": 2_000_000_000u64, "handSize": 99, "queueLengthLimit": 0}}}}});
    let l = defaults::parse_level(&huge).unwrap();
    assert_eq!((l.shares, l.queues, l.hand_size), (1 << 20, 10_000, 64));
    // Three of them do not overflow the shares' sum.
    let (s, _) = defaults::configuration();
    let levels = vec![
        l.clone(),
        Level {
            name: "y".into(),
            ..l.clone()
        },
        Level {
            name: "z".into(),
            ..l
        },
    ];
    let cfg = build(30, [1, 1], (s, levels), None);
    assert!(cfg.levels.iter().all(|l| l.seats >= 1));
}
