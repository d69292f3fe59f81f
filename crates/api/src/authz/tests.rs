use super::*;
use serde_json::json;

fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: true,
        api_group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
        path: String::new(),
    }
}

#[test]
fn rules_match_verbs_groups_resources_subresources_and_names() {
    let read_pods = json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]});
    let logs = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]});
    let any_status = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"]});
    let one = json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]});
    // (rule, verb, group, resource, subresource, name, allowed)
    let cases = [
        (&read_pods, "list", "", "pods", "", "", true),
        (&read_pods, "delete", "", "pods", "", "p", false),
        (&read_pods, "get", "apps", "pods", "", "p", false),
        // `pods` does not cover `pods/log`; `pods/log` and `*/log` do.
        (&read_pods, "get", "", "pods", "log", "p", false),
        (&logs, "get", "", "pods", "log", "p", true),
        (
            &any_status,
            "patch",
            "apps",
            "deployments",
            "status",
            "d",
            true,
        ),
        (&any_status, "patch", "apps", "deployments", "", "d", false),
        // resourceNames limit to those names; a list (no name) is not covered.
        (&one, "get", "", "configmaps", "", "a", true),
        (&one, "get", "", "configmaps", "", "b", false),
        (&one, "list", "", "configmaps", "", "", false),
    ];
    for (rule, verb, group, resource, sub, name, want) in cases {
        let a = attrs(verb, group, resource, sub, "default", name);
        assert_eq!(rule_allows(rule, &a), want, "{rule} {a:?}");
    }
    // Non-resource URLs, with a trailing * as a prefix.
    let urls = json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]});
    let path = |p: &str| Attributes {
        verb: "get".into(),
        path: p.into(),
        ..Default::default()
    };
    assert!(rule_allows(&urls, &path("/healthz")));
    assert!(rule_allows(&urls, &path("/api/v1")));
    assert!(!rule_allows(&urls, &path("/metrics")));
    assert!(!rule_allows(&read_pods, &path("/healthz")));
}

#[test]
fn subjects_are_users_groups_and_service_accounts() {
    let alice = UserInfo::authenticated("alice", "", vec!["dev".into()]);
    let binding =
        |subjects: Value| json!({"metadata": {"namespace": "team"}, "subjects": subjects});
    assert!(binding_applies(
        &binding(json!([{"kind": "User", "name": "alice"}])),
        &alice
    ));
    assert!(binding_applies(
        &binding(json!([{"kind": "Group", "name": "dev"}])),
        &alice
    ));
    assert!(binding_applies(
        &binding(json!([{"kind": "Group", "name": "system:authenticated"}])),
        &alice
    ));
    assert!(!binding_applies(
        &binding(json!([{"kind": "User", "name": "bob"}])),
        &alice
    ));
    let sa = UserInfo::authenticated("system:serviceaccount:team:builder", "", vec![]);
    assert!(binding_applies(
        &binding(json!([{"kind": "ServiceAccount", "name": "builder"}])),
        &sa
    ));
    assert!(!binding_applies(
        &binding(json!([{"kind": "ServiceAccount", "name": "builder", "namespace": "other"}])),
        &sa
    ));
    assert!(UserInfo::anonymous().in_group(UNAUTHENTICATED));
    assert!(!UserInfo::anonymous().in_group(AUTHENTICATED));
}

#[test]
fn forbidden_messages_are_upstreams() {
    let x = UserInfo::authenticated("x", "", vec![]);
    let e = forbidden(&x, &attrs("list", "", "pods", "", "default", ""), "");
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.status().message,
        "pods is forbidden: User \"x\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let e = forbidden(
        &x,
        &attrs("get", "apps", "deployments", "scale", "d", "web"),
        "",
    );
    assert_eq!(
        e.status().message,
        "deployments.apps \"web\" is forbidden: User \"x\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"d\""
    );
    let e = forbidden(&x, &attrs("delete", "", "nodes", "", "", "n1"), "no way");
    assert_eq!(
        e.status().message,
        "nodes \"n1\" is forbidden: User \"x\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope: no way"
    );
    let path = Attributes {
        verb: "get".into(),
        path: "/metrics".into(),
        ..Default::default()
    };
    assert_eq!(
        forbidden(&x, &path, "").status().message,
        "forbidden: User \"x\" cannot get path \"/metrics\""
    );
}

#[test]
fn the_node_authorizer_confines_a_kubelet_to_its_own_objects() {
    let n1 = UserInfo::authenticated("system:node:n1", "", vec![NODES.into()]);
    let pods = |ns: &str, name: &str| match (ns, name) {
        ("default", "mine") => Some("n1".to_string()),
        ("default", "theirs") => Some("n2".to_string()),
        _ => None,
    };
    let on_n1 = |ns: &str, node: &str| {
        if ns == "default" && node == "n1" {
            vec![serde_json::json!({"spec": {"serviceAccountName": "app",
                "volumes": [{"name": "v", "secret": {"secretName": "mounted"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "data"}}],
                "containers": [{"name": "c", "env": [{"name": "X",
                    "valueFrom": {"secretKeyRef": {"name": "envsecret", "key": "k"}}}]}]}})]
        } else {
            Vec::new()
        }
    };
    let d = |a: Attributes| node_decision(&n1, &a, pods, on_n1);
    assert_eq!(d(attrs("get", "", "nodes", "", "", "n1")), Decision::Allow);
    assert_eq!(
        d(attrs("patch", "", "nodes", "status", "", "n1")),
        Decision::Allow
    );
    assert_eq!(d(attrs("create", "", "nodes", "", "", "")), Decision::Allow);
    assert!(matches!(
        d(attrs("patch", "", "nodes", "status", "", "n2")),
        Decision::Deny(_)
    ));
    assert_eq!(
        d(attrs(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-node-lease",
            "n1"
        )),
        Decision::Allow
    );
    assert!(matches!(
        d(attrs(
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-node-lease",
            "n2"
        )),
        Decision::Deny(_)
    ));
    assert_eq!(d(attrs("watch", "", "pods", "", "", "")), Decision::Allow);
    assert_eq!(
        d(attrs("patch", "", "pods", "status", "default", "mine")),
        Decision::Allow
    );
    assert_eq!(
        d(attrs("delete", "", "pods", "", "default", "theirs")),
        Decision::Deny("no relationship found between node 'n1' and this object".into())
    );
    assert!(matches!(
        d(attrs("get", "", "pods", "", "default", "ghost")),
        Decision::Deny(_)
    ));
    assert_eq!(
        d(attrs("create", "", "events", "", "default", "")),
        Decision::Allow
    );
    assert!(matches!(
        d(attrs("list", "", "secrets", "", "default", "")),
        Decision::NoOpinion(_)
    ));
    // What its pods use, and nothing else.
    for (resource, name) in [
        ("secrets", "mounted"),
        ("secrets", "envsecret"),
        ("persistentvolumeclaims", "data"),
    ] {
        assert_eq!(
            d(attrs("get", "", resource, "", "default", name)),
            Decision::Allow
        );
    }
    assert!(matches!(
        d(attrs("get", "", "secrets", "", "default", "other")),
        Decision::NoOpinion(_)
    ));
    assert!(matches!(
        d(attrs("get", "", "secrets", "", "kube-system", "mounted")),
        Decision::NoOpinion(_)
    ));
    assert_eq!(
        d(attrs(
            "create",
            "",
            "serviceaccounts",
            "token",
            "default",
            "app"
        )),
        Decision::Allow
    );
    assert!(matches!(
        d(attrs(
            "create",
            "",
            "serviceaccounts",
            "token",
            "default",
            "admin"
        )),
        Decision::NoOpinion(_)
    ));
    // Not a kubelet: no opinion.
    let alice = UserInfo::authenticated("alice", "", vec![]);
    assert!(matches!(
        node_decision(
            &alice,
            &attrs("get", "", "nodes", "", "", "n1"),
            pods,
            on_n1
        ),
        Decision::NoOpinion(_)
    ));
}

#[test]
fn escalation_compares_rules_as_upstream() {
    let owner = vec![
        json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}),
        json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["d1"]}),
        json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/status"]}),
        json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}),
    ];
    let covered = [
        json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
        json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["d1"]}),
        json!({"verbs": ["get"], "apiGroups": ["batch"], "resources": ["jobs/status"]}),
        json!({"verbs": ["get"], "nonResourceURLs": ["/api/v1", "/healthz"]}),
        // Groups without resources grant nothing, so they escalate nothing.
        json!({"verbs": ["delete"], "apiGroups": [""]}),
    ];
    for r in &covered {
        assert!(uncovered(&owner, std::slice::from_ref(r)).is_empty(), "{r}");
    }
    let missing = uncovered(
        &owner,
        &[
            json!({"verbs": ["get", "delete", "watch"], "apiGroups": [""], "resources": ["pods", "secrets"]}),
            json!({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]}),
            json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}),
        ],
    );
    assert_eq!(
        missing,
        [
            "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\" \"watch\"]}",
            "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\" \"watch\"]}",
            "{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"get\"]}",
            "{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}",
        ]
    );
}
