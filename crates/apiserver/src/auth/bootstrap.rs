//! Upstream's bootstrap RBAC policy, created at startup when RBAC is on (existing objects are
//! left alone): `cluster-admin` for `system:masters`, the `admin`/`edit`/`view` user-facing
//! roles, discovery and public-info for everyone, and the roles of the scheduler, the
//! controller-manager and the nodes, bound to their identities.

use serde_json::{json, Value};

const CORE_NAMESPACED: &[&str] = &[
    "pods",
    "pods/log",
    "pods/status",
    "pods/eviction",
    "services",
    "services/status",
    "configmaps",
    "secrets",
    "serviceaccounts",
    "events",
];
const APPS: &[&str] = &[
    "deployments",
    "deployments/scale",
    "deployments/status",
    "replicasets",
    "replicasets/status",
];
const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules})
}

fn binding(name: &str, role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects})
}

/// The bootstrap ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let edit = |verbs: &[&str]| {
        vec![
            rule(&[""], CORE_NAMESPACED, verbs),
            rule(&["apps"], APPS, verbs),
            rule(&["coordination.k8s.io"], &["leases"], verbs),
            rule(&[""], &["namespaces"], READ),
        ]
    };
    let mut admin = edit(WRITE);
    admin.push(rule(
        &["rbac.authorization.k8s.io"],
        &["roles", "rolebindings"],
        WRITE,
    ));
    let mut view = edit(READ);
    view[0] = rule(
        &[""],
        &[
            "pods",
            "pods/log",
            "pods/status",
            "services",
            "configmaps",
            "serviceaccounts",
            "events",
        ],
        READ,
    );
    vec![
        cluster_role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role("admin", admin),
        cluster_role("edit", edit(WRITE)),
        cluster_role("view", view),
        cluster_role(
            "system:discovery",
            vec![urls(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/openapi",
                    "/openapi/*",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            vec![
                rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
                rule(&[""], &["pods/binding", "bindings"], &["create"]),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                rule(
                    &[""],
                    &["nodes", "namespaces", "services", "persistentvolumes"],
                    READ,
                ),
                rule(
                    &[""],
                    &["persistentvolumeclaims"],
                    &["get", "list", "watch", "patch", "update"],
                ),
                rule(
                    &["storage.k8s.io"],
                    &["storageclasses", "csinodes", "csidrivers"],
                    READ,
                ),
                rule(&[""], &["events"], &["create", "patch", "update"]),
                rule(
                    &["events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(&["apps"], &["replicasets"], READ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "patch", "list", "watch"],
                ),
            ],
        ),
        // One identity runs every controller (upstream splits them into per-controller service
        // accounts): the workload controllers write core and apps objects, and the garbage
        // collector and namespace deletion read and delete objects of every resource.
        cluster_role(
            "system:kube-controller-manager",
            vec![
                rule(
                    &[
                        "",
                        "apps",
                        "batch",
                        "autoscaling",
                        "policy",
                        "coordination.k8s.io",
                        "discovery.k8s.io",
                        "networking.k8s.io",
                        "storage.k8s.io",
                        "certificates.k8s.io",
                        "rbac.authorization.k8s.io",
                        "events.k8s.io",
                    ],
                    &["*"],
                    &["*"],
                ),
                rule(
                    &["*"],
                    &["*"],
                    &[
                        "get",
                        "list",
                        "watch",
                        "patch",
                        "update",
                        "delete",
                        "deletecollection",
                    ],
                ),
            ],
        ),
        cluster_role(
            "system:node",
            vec![
                rule(
                    &[""],
                    &["nodes"],
                    &["get", "list", "watch", "create", "update", "patch"],
                ),
                rule(&[""], &["nodes/status"], &["patch", "update"]),
                rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                rule(&[""], &["events"], &["create", "patch", "update"]),
                rule(&[""], &["services", "configmaps", "namespaces"], READ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["get", "create", "update", "patch"],
                ),
            ],
        ),
    ]
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding(
            "cluster-admin",
            "cluster-admin",
            &[("Group", "system:masters")],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            &[("User", "system:kube-controller-manager")],
        ),
        binding("system:node", "system:node", &[("Group", "system:nodes")]),
    ]
}
