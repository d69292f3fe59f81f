use super::*;

fn deployment(image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]},
            },
        },
    })
}

fn who<'a>(manager: &'a str) -> Writer<'a> {
    Writer {
        manager,
        api_version: "apps/v1",
        time: "2026-11-22T00:00:00Z",
        scope: Scope::Main,
    }
}

fn owners(obj: &Value, path: &str) -> Vec<String> {
    let mut owners: Vec<String> = entries(obj)
        .into_iter()
        .filter(|e| {
            e.fields
                .iter()
                .any(|p| path_string(p) == path && p.last().is_some_and(|s| s != "."))
        })
        .map(|e| format!("{}/{}", e.manager, e.operation))
        .collect();
    owners.sort();
    owners
}

#[test]
fn field_sets_are_written_as_upstreams_fields_v1() {
    let set = fields_of(Lists::GENERIC, &deployment("nginx:1", 1), Scope::Main);
    let v1 = to_fields_v1(&set);
    assert_eq!(
        v1,
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {"f:matchLabels": {".": {}, "f:app": {}}},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}},
                    }}},
                },
            },
        })
    );
    assert_eq!(from_fields_v1(&v1), set, "FieldsV1 round-trips");
    let finalizers = json!({"metadata": {"finalizers": ["a", "b"]}});
    assert_eq!(
        to_fields_v1(&fields_of(Lists::GENERIC, &finalizers, Scope::Main)),
        json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}, "v:\"b\"": {}}}})
    );
}

#[test]
fn an_update_takes_the_fields_it_changes_from_their_owners() {
    let mut created = deployment("nginx:1", 1);
    record_update(Lists::GENERIC, None, &mut created, who("kubectl-create"));
    assert_eq!(
        owners(&created, ".spec.replicas"),
        ["kubectl-create/Update"]
    );
    let mut edited = created.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    record_update(
        Lists::GENERIC,
        Some(&created),
        &mut edited,
        who("kubectl-edit"),
    );
    let image = ".spec.template.spec.containers[name=\"nginx\"].image";
    assert_eq!(owners(&edited, image), ["kubectl-edit/Update"]);
    assert_eq!(owners(&edited, ".spec.replicas"), ["kubectl-create/Update"]);
    // An update that changes nothing leaves managedFields as they were.
    let mut same = edited.clone();
    record_update(Lists::GENERIC, Some(&edited), &mut same, who("someone"));
    assert_eq!(same, edited);
}

#[test]
fn apply_creates_updates_and_removes_what_it_no_longer_applies() {
    let mut config = deployment("nginx:1", 2);
    config["metadata"]["labels"]["tier"] = json!("front");
    let created = apply(Lists::GENERIC, None, &config, who("a"), false).unwrap();
    assert_eq!(created["spec"]["replicas"], 2);
    assert_eq!(owners(&created, ".metadata.labels.tier"), ["a/Apply"]);
    // Applying again without the label removes it; other fields stay.
    let config2 = deployment("nginx:2", 2);
    let updated = apply(Lists::GENERIC, Some(&created), &config2, who("a"), false).unwrap();
    assert!(updated["metadata"]["labels"].get("tier").is_none());
    assert_eq!(
        updated["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    assert_eq!(updated["metadata"]["labels"]["app"], "web");
}

#[test]
fn conflicting_managers_get_upstreams_message_and_force_takes_the_field() {
    let live = apply(
        Lists::GENERIC,
        None,
        &deployment("nginx:1", 2),
        who("a"),
        false,
    )
    .unwrap();
    // Same value: shared, no conflict.
    let shared = apply(
        Lists::GENERIC,
        Some(&live),
        &deployment("nginx:1", 2),
        who("b"),
        false,
    )
    .unwrap();
    assert_eq!(owners(&shared, ".spec.replicas"), ["a/Apply", "b/Apply"]);
    // Different value: conflict with the owner.
    let err = apply(
        Lists::GENERIC,
        Some(&shared),
        &deployment("nginx:1", 3),
        who("c"),
        false,
    )
    .unwrap_err();
    assert_eq!(
        conflict_message(&err),
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.replicas\nconflicts with \"b\":\n- .spec.replicas"
    );
    let one = apply(
        Lists::GENERIC,
        Some(&live),
        &deployment("nginx:1", 3),
        who("c"),
        false,
    )
    .unwrap_err();
    assert_eq!(
        conflict_message(&one),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
    );
    // Forced: c takes replicas; a keeps the rest.
    let forced = apply(
        Lists::GENERIC,
        Some(&live),
        &deployment("nginx:1", 3),
        who("c"),
        true,
    )
    .unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    assert_eq!(owners(&forced, ".spec.replicas"), ["c/Apply"]);
    assert_eq!(
        owners(&forced, ".metadata.labels.app"),
        ["a/Apply", "c/Apply"]
    );
    // a field a stopped applying but c still owns survives a's next apply.
    let mut without = deployment("nginx:1", 3);
    without["metadata"]["labels"] = json!({"other": "x"});
    let after = apply(Lists::GENERIC, Some(&forced), &without, who("a"), false).unwrap();
    assert_eq!(after["metadata"]["labels"]["app"], "web");
}

#[test]
fn an_update_managers_field_conflicts_with_an_apply() {
    let mut created = deployment("nginx:1", 1);
    record_update(Lists::GENERIC, None, &mut created, who("kubectl-create"));
    let err = apply(
        Lists::GENERIC,
        Some(&created),
        &deployment("nginx:1", 5),
        who("kubectl"),
        false,
    )
    .unwrap_err();
    assert_eq!(
        err,
        vec![Conflict {
            manager: "\"kubectl-create\" using apps/v1 at 2026-11-22T00:00:00Z".into(),
            field: ".spec.replicas".into()
        }]
    );
    // Objects nobody tracked yet: their fields belong to before-first-apply.
    let untracked = deployment("nginx:1", 1);
    let err = apply(
        Lists::GENERIC,
        Some(&untracked),
        &deployment("nginx:1", 5),
        who("kubectl"),
        false,
    )
    .unwrap_err();
    assert!(err[0].manager.starts_with("\"before-first-apply\""));
}

#[test]
fn status_writes_are_tracked_apart_from_the_main_resource() {
    let mut pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}});
    record_update(Lists::GENERIC, None, &mut pod, who("kubectl-create"));
    let mut running = pod.clone();
    running["status"]["phase"] = json!("Running");
    let w = Writer {
        scope: Scope::Status,
        ..who("kubelet")
    };
    record_update(Lists::GENERIC, Some(&pod), &mut running, w);
    let list = entries(&running);
    let kubelet = list.iter().find(|e| e.manager == "kubelet").unwrap();
    assert_eq!(kubelet.subresource, "status");
    assert_eq!(
        to_fields_v1(&kubelet.fields),
        json!({"f:status": {"f:phase": {}}})
    );
    assert!(list
        .iter()
        .find(|e| e.manager == "kubectl-create")
        .unwrap()
        .fields
        .iter()
        .all(|p| p[0] != "f:status"));
}

#[test]
fn long_keyed_lists_are_recorded_applied_and_dropped_in_linear_time() {
    // 20k env entries: per-path lookups made each of these quadratic (minutes); nextest's
    // slow-test limit catches a regression.
    let n = 20_000;
    let env = |from: usize, to: usize| -> Vec<Value> {
        (from..to)
            .map(|i| json!({"name": format!("E{i}"), "value": "v"}))
            .collect()
    };
    let obj = |env: Vec<Value>| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "env": env}]}}}})
    };
    let mut created = obj(env(0, n));
    record_update(Lists::GENERIC, None, &mut created, who("kubectl"));
    let mut edited = obj(env(0, n));
    edited["metadata"]["managedFields"] = created["metadata"]["managedFields"].clone();
    edited["spec"]["template"]["spec"]["containers"][0]["env"][n - 1]["value"] = json!("w");
    record_update(Lists::GENERIC, Some(&created), &mut edited, who("editor"));
    let editor = edited["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "editor")
        .unwrap()
        .clone();
    assert!(editor["fieldsV1"]
        .to_string()
        .contains(&format!("E{}", n - 1)));
    // Apply all, then apply half: the other half is dropped.
    let applied = apply(Lists::GENERIC, None, &obj(env(0, n)), who("a"), false).unwrap();
    let halved = apply(
        Lists::GENERIC,
        Some(&applied),
        &obj(env(0, n / 2)),
        who("a"),
        false,
    )
    .unwrap();
    let left = halved["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(left, n / 2);
}

#[test]
fn an_apply_keeps_items_another_manager_owns_fields_in_and_drops_the_rest() {
    let mut config = deployment("nginx:1", 2);
    config["metadata"]["finalizers"] = json!(["x/a", "x/b"]);
    config["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "side", "image": "s:1"}));
    let applied = apply(Lists::GENERIC, None, &config, who("a"), false).unwrap();
    // Another manager changes the sidecar's image, taking that field.
    let mut edited = applied.clone();
    edited["spec"]["template"]["spec"]["containers"][1]["image"] = json!("s:2");
    record_update(Lists::GENERIC, Some(&applied), &mut edited, who("editor"));
    assert_eq!(
        owners(
            &edited,
            ".spec.template.spec.containers[name=\"side\"].image"
        ),
        ["editor/Update"]
    );
    // The applier drops the sidecar, a finalizer and nginx's ports.
    let mut config2 = deployment("nginx:1", 2);
    config2["metadata"]["finalizers"] = json!(["x/a"]);
    config2["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("ports");
    let out = apply(Lists::GENERIC, Some(&edited), &config2, who("a"), false).unwrap();
    let containers = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2, "{containers:?}");
    // The sidecar stays with its key and the editor's field.
    assert_eq!(containers[1], json!({"name": "side", "image": "s:2"}));
    // Inside the kept nginx item, the dropped ports went.
    assert!(
        containers[0]
            .get("ports")
            .and_then(Value::as_array)
            .is_none_or(|p| p.is_empty()),
        "{:?}",
        containers[0]
    );
    assert_eq!(containers[0]["image"], "nginx:1");
    assert_eq!(out["metadata"]["finalizers"], json!(["x/a"]));
}

#[test]
fn dropping_half_of_a_long_set_is_linear() {
    let n = 20_000;
    let set = |to: usize| -> Vec<String> { (0..to).map(|i| format!("f/{i}")).collect() };
    let obj = |to: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "finalizers": set(to)}})
    };
    let applied = apply(Lists::GENERIC, None, &obj(n), who("a"), false).unwrap();
    let halved = apply(Lists::GENERIC, Some(&applied), &obj(n / 2), who("a"), false).unwrap();
    assert_eq!(halved["metadata"]["finalizers"], json!(set(n / 2)));
}

#[test]
fn upstreams_two_field_keys_and_spaced_keys_name_the_same_items() {
    let config = deployment("nginx:1", 2);
    let applied = apply(Lists::GENERIC, None, &config, who("a"), false).unwrap();
    // The same Apply entry as upstream writes it: ports keyed by port and protocol, and
    // a container key spelled with a space.
    let mut imported = applied.clone();
    let fields = imported["metadata"]["managedFields"][0]["fieldsV1"].to_string();
    let fields = fields
        .replace(
            r#"k:{\"containerPort\":80}"#,
            r#"k:{\"containerPort\":80,\"protocol\":\"TCP\"}"#,
        )
        .replace(r#"k:{\"name\":\"nginx\"}"#, r#"k:{\"name\": \"nginx\"}"#);
    assert!(fields.contains("protocol"), "{fields}");
    imported["metadata"]["managedFields"][0]["fieldsV1"] = serde_json::from_str(&fields).unwrap();
    // Re-applying the same configuration keeps the port and the container.
    let out = apply(Lists::GENERIC, Some(&imported), &config, who("a"), false).unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"],
        config["spec"]["template"]["spec"]["containers"]
    );
    // Another manager's field in the port, under upstream's two-field key, keeps the port
    // when the applier drops it.
    let theirs = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        r#"k:{"name":"nginx"}"#: {"f:ports": {
            r#"k:{"containerPort":80,"protocol":"TCP"}"#: {"f:hostPort": {}}}}}}}}});
    let mut shared = applied.clone();
    shared["metadata"]["managedFields"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"manager": "b", "operation": "Update", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": theirs}),
        );
    let mut portless = config.clone();
    portless["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("ports");
    let out = apply(Lists::GENERIC, Some(&shared), &portless, who("a"), false).unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80}])
    );
}

#[test]
fn a_struct_the_apply_no_longer_sets_goes_whole() {
    let mut config = deployment("nginx:1", 2);
    config["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] =
        json!({"httpGet": {"path": "/", "port": 80}});
    let mut applied = apply(Lists::GENERIC, None, &config, who("a"), false).unwrap();
    // The server defaulted a field nobody owns.
    applied["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSeconds"] =
        json!(10);
    let out = apply(
        Lists::GENERIC,
        Some(&applied),
        &deployment("nginx:1", 2),
        who("a"),
        false,
    )
    .unwrap();
    let c = &out["spec"]["template"]["spec"]["containers"][0];
    assert!(c.get("livenessProbe").is_none(), "{c}");
    // Top-level fields and metadata stay.
    assert_eq!(out["spec"]["replicas"], 2);
    assert_eq!(out["metadata"]["name"], "web");
}

#[test]
fn duplicate_keys_are_visited_once() {
    // 60k env entries with one name and an Apply entry with 60k fields under that key: each
    // item visiting every dropped field would be 3.6e9 steps (minutes; nextest's slow-test
    // limit catches it).
    let n = 60_000;
    let env: Vec<Value> = (0..n).map(|_| json!({"name": "a", "value": "v"})).collect();
    let mut live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "env": env}]}}}});
    let mut item: Map<String, Value> = Map::new();
    item.insert(".".into(), json!({}));
    for i in 0..n {
        item.insert(format!("f:x{i}"), json!({}));
    }
    let fields = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        r#"k:{"name":"c"}"#: {".": {}, "f:env": {r#"k:{"name":"a"}"#: item}}}}}}});
    // Another manager owns a field of `a`: the item stays and its dropped fields are visited.
    let theirs = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
        r#"k:{"name":"c"}"#: {"f:env": {r#"k:{"name":"a"}"#: {"f:value": {}}}}}}}}});
    live["metadata"]["managedFields"] = json!([
        {"manager": "a", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields},
        {"manager": "b", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": theirs},
    ]);
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let out = apply(Lists::GENERIC, Some(&live), &config, who("a"), false).unwrap();
    let c = &out["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["env"].as_array().map_or(0, Vec::len), n, "{}", c["image"]);
}

/// `changes` skips what is equal on both sides; it finds what comparing every field path of
/// both objects finds.
#[test]
fn changes_match_a_comparison_of_every_field() {
    let full = |lists: Lists, old: Option<&Value>, new: &Value, scope: Scope| {
        let before = old.map(|o| values_of(lists, o, scope)).unwrap_or_default();
        let after = values_of(lists, new, scope);
        let changed: FieldSet = after
            .iter()
            .filter(|(p, v)| match before.get(*p) {
                None => true,
                Some(was) => p.last().is_some_and(|s| s != ".") && was != *v,
            })
            .map(|(p, _)| p.clone())
            .collect();
        let removed: FieldSet = before
            .keys()
            .filter(|p| !after.contains_key(*p))
            .cloned()
            .collect();
        (changed, removed)
    };
    let base = deployment("nginx:1", 1);
    let mut variants = vec![
        deployment("nginx:2", 1),
        deployment("nginx:1", 3),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        json!({"metadata": "not a map", "spec": []}),
        json!([1, 2]),
    ];
    let mut v = base.clone();
    v["metadata"]["labels"] = json!({});
    v["metadata"]["annotations"] = json!({"a": "b"});
    v["metadata"]["uid"] = json!("changed, but unmanaged");
    v["status"] = json!({"replicas": 1});
    variants.push(v);
    let mut v = base.clone();
    v["spec"]["template"]["spec"]["containers"] = json!([{"name": "nginx", "image": "nginx:1"}, {"name": "side", "image": "s"},
               {"name": "side", "image": "duplicate key"}, {"image": "no key"}]);
    v["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "a"}]);
    v["metadata"]["finalizers"] = json!(["x", "y"]);
    variants.push(v);
    let mut v = base.clone();
    v["spec"]["selector"] = json!({});
    v["spec"]["strategy"] = json!(null);
    variants.push(v);
    variants.push(base);
    for lists in [Lists::GENERIC] {
        for scope in [Scope::Main, Scope::Status] {
            for a in &variants {
                for b in &variants {
                    assert_eq!(
                        changes(lists, Some(a), b, scope),
                        full(lists, Some(a), b, scope),
                        "{a} -> {b} ({scope:?})"
                    );
                }
                assert_eq!(changes(lists, None, a, scope), full(lists, None, a, scope));
                assert_eq!(changes(lists, Some(a), a, scope), Default::default());
            }
        }
    }
}

/// A pod's life as its writers see it: created, bound, its status written again and again,
/// labelled, applied to, edited, a container and a condition removed; and managedFields a
/// client wrote in other spellings (two-field and spaced keys, a stray entry key).
fn pod_versions() -> Vec<(Value, Writer<'static>)> {
    let status = |manager| Writer {
        scope: Scope::Status,
        ..who(manager)
    };
    let container = |name, image| {
        json!({"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "resources": {},
               "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
    };
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default", "generateName": "web-",
            "labels": {"app": "web", "pod-template-hash": "5d4f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f",
                "uid": "0b1c", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [container("nginx", "nginx:1"), container("side", "s:1")],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0, "restartPolicy": "Always", "schedulerName": "default-scheduler",
            "securityContext": {}, "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}});
    pod["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "protocol": "TCP"}]);
    let mut out = vec![(pod.clone(), who("kube-controller-manager"))];
    pod["spec"]["nodeName"] = json!("node-1");
    out.push((pod.clone(), who("kube-scheduler")));
    pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]);
    out.push((pod.clone(), status("kube-scheduler")));
    for (phase, ready) in [
        ("Pending", "False"),
        ("Running", "True"),
        ("Running", "False"),
    ] {
        pod["status"]["phase"] = json!(phase);
        pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready}, {"type": "ContainersReady", "status": ready}]);
        pod["status"]["containerStatuses"] =
            json!([{"name": "nginx", "ready": ready == "True", "restartCount": 0}]);
        pod["status"]["podIP"] = json!("10.0.0.7");
        out.push((pod.clone(), status("kubelet")));
    }
    pod["metadata"]["labels"]["tier"] = json!("front");
    out.push((pod.clone(), who("kubectl-label")));
    pod["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("app");
    pod["spec"]["containers"][0]["image"] = json!("nginx:2");
    out.push((pod.clone(), who("kubectl-edit")));
    pod["spec"]["containers"].as_array_mut().unwrap().pop();
    pod["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    out.push((pod.clone(), who("kubectl-edit")));
    out.push((pod.clone(), status("kubelet")));
    out
}

/// The in-place bookkeeping gives what reading every entry as a set and writing it back gives,
/// and it is the path taken for entries the server wrote.
#[test]
fn the_in_place_update_matches_the_general_one() {
    let lists = Lists::GENERIC;
    let mut in_place_taken = 0;
    let mut live: Option<Value> = None;
    for (mut next, w) in pod_versions() {
        if let Some(old) = &live {
            next["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
        }
        let (changed, removed) = changes(lists, live.as_ref(), &next, w.scope);
        let mut by_sets = next.clone();
        record_update_by_sets(lists, changed.clone(), removed.clone(), &mut by_sets, w);
        let mut fast = next.clone();
        if in_place::record_update(&mut fast, &changed, &removed, w) {
            in_place_taken += 1;
            assert_eq!(fast, by_sets, "{}", w.manager);
        }
        let mut public = next.clone();
        record_update(lists, live.as_ref(), &mut public, w);
        if !(changed.is_empty() && removed.is_empty()) {
            assert_eq!(public, by_sets, "{}", w.manager);
        }
        live = Some(public);
    }
    assert!(in_place_taken >= 8, "in place {in_place_taken} times");

    // Entries in other spellings take the general path, which respells them.
    let mut base = live.unwrap();
    let fields = &mut base["metadata"]["managedFields"];
    let mut spaced = fields[0].clone();
    spaced["manager"] = json!("spaced");
    spaced["fieldsV1"] =
        json!({"f:spec": {"f:containers": {"k:{\"name\": \"nginx\"}": {"f:image": {}}}}});
    let mut two_keys = fields[0].clone();
    two_keys["manager"] = json!("two-keys");
    two_keys["fieldsV1"] = json!({"f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {"f:ports":
        {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {"f:protocol": {}}}}}}});
    let mut stray = fields[0].clone();
    stray["manager"] = json!("stray");
    stray["extra"] = json!(1);
    let mut leaf_not_object = fields[0].clone();
    leaf_not_object["manager"] = json!("leaf");
    leaf_not_object["fieldsV1"] = json!({"f:spec": {"f:nodeName": true}});
    for odd in [spaced, two_keys, stray, leaf_not_object] {
        let mut obj = base.clone();
        obj["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(odd);
        let mut next = obj.clone();
        next["spec"]["containers"][0]["image"] = json!("nginx:3");
        next["spec"]["containers"][0]["ports"][0]["protocol"] = json!("UDP");
        next["spec"]["nodeName"] = json!("node-2");
        let next = takes_the_general_path(&obj, next, who("kubectl-edit"));
        assert!(entries(&next)
            .iter()
            .all(|e| e.manager != "spaced" && e.manager != "two-keys" && e.manager != "leaf"));
    }
}

/// Thousands of entries a client sent: each changed path would be looked up in each, so the
/// general path (linear in the entries) runs, with the same result.
#[test]
fn many_entries_take_the_general_path() {
    let entry = |i: usize| {
        json!({"manager": format!("m{i}"), "operation": "Update", "apiVersion": "v1",
               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
               "fieldsV1": {"f:data": {format!("f:k{}", i % 50): {}}}})
    };
    let data: Map<String, Value> = (0..50).map(|i| (format!("k{i}"), json!("v"))).collect();
    let old = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "managedFields": (0..2_000).map(entry).collect::<Vec<_>>()},
        "data": data});
    let mut new = old.clone();
    for i in 0..50 {
        new["data"][format!("k{i}")] = json!("changed");
    }
    let new = takes_the_general_path(&old, new, who("editor"));
    assert_eq!(entries(&new).len(), 1, "the editor took every field");
    assert_eq!(entries(&new)[0].fields.len(), 50);
}

/// Records `who`'s update of `old` to `new`, asserting the in-place path declines it and the
/// result is the general path's.
fn takes_the_general_path(old: &Value, mut new: Value, who: Writer<'_>) -> Value {
    let lists = Lists::GENERIC;
    let (changed, removed) = changes(lists, Some(old), &new, who.scope);
    assert!(!changed.is_empty() || !removed.is_empty());
    assert!(!in_place::record_update(
        &mut new.clone(),
        &changed,
        &removed,
        who
    ));
    let mut by_sets = new.clone();
    record_update_by_sets(lists, changed, removed, &mut by_sets, who);
    record_update(lists, Some(old), &mut new, who);
    assert_eq!(new, by_sets);
    new
}
