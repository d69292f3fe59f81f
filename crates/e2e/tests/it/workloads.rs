//! Workloads that finish, through stock kubectl on the real binaries: pods that run to
//! completion (and fail, by annotation), init and sidecar containers, Jobs (NonIndexed with
//! completions and parallelism, Indexed, failing past their backoff limit, deleted after their
//! TTL) — what Helm hooks and migrations need.

use rkube_e2e::{Cluster, Opts};

use crate::builtin::{eventually, kubectl};
use crate::kubectl::{contains, manifest, Kubectl};

/// Writes `text` into the cluster's directory as `name` and applies it.
fn apply(c: &Cluster, k: &Kubectl<'_>, name: &str, text: &str) {
    k.ok(&["apply", "-f", &manifest(c, name, text)]);
}

/// `kubectl rollout history` of `obj` lists revisions 1 and 2, the first with `first_image`;
/// `rollout undo` goes back to it and its rollout completes.
fn history_then_undo(k: &Kubectl<'_>, obj: &str, first_image: &str) {
    let history = k.ok(&["rollout", "history", obj]);
    contains(&history, "1 ");
    contains(&history, "2 ");
    contains(
        &k.ok(&["rollout", "history", obj, "--revision=1"]),
        first_image,
    );
    k.ok(&["rollout", "undo", obj]);
    k.ok(&["rollout", "status", obj, "--timeout=90s"]);
}

/// The names of the pods of Job `job`.
fn job_pods(k: &Kubectl<'_>, job: &str) -> String {
    k.jsonpath(
        &["pods", "-l", &format!("job-name={job}")],
        "{.items[*].metadata.name}",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_jobs_run_to_completion() {
    let mut c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);

    // A pod that may finish does: Succeeded, its container Completed, its logs readable.
    k.ok(&[
        "run",
        "tmp",
        "--image=busybox",
        "--restart=Never",
        "--",
        "sleep",
        "1",
    ]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/tmp",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["pod", "tmp"],
            "{.status.containerStatuses[0].state.terminated.reason}"
        ),
        "Completed"
    );
    contains(&k.ok(&["get", "pod", "tmp"]), "Completed");
    contains(&k.ok(&["logs", "tmp"]), "tmp started (busybox)");
    // After an agent restart the finished pod is not run again, and deleting it removes it.
    drop(k);
    c.stop("node-1").await;
    c.start_proc("node-1").await;
    let k = kubectl(&c);
    assert_eq!(k.jsonpath(&["pod", "tmp"], "{.status.phase}"), "Succeeded");
    k.ok(&["delete", "pod", "tmp", "--timeout=30s"]);
    // An exit code by annotation: Failed, Error.
    k.ok(&[
        "run",
        "boom",
        "--image=busybox",
        "--restart=Never",
        "--annotations=sim.rkube.io/exit-code=2",
    ]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Failed",
        "pod/boom",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["pod", "boom"],
            "{.status.containerStatuses[0].state.terminated.exitCode}"
        ),
        "2"
    );

    // A liveness probe that starts failing: killed, restarted; the killed run's logs remain.
    apply(
        &c,
        &k,
        "live.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: flaky
  annotations: {sim.rkube.io/liveness-fail-after: 1s}
spec:
  containers:
  - name: app
    image: busybox
    livenessProbe: {httpGet: {port: 80}, periodSeconds: 1, failureThreshold: 1}
"#,
    );
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.containerStatuses[0].restartCount}=1",
        "pod/flaky",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["pod", "flaky"],
            "{.status.containerStatuses[0].lastState.terminated.exitCode}"
        ),
        "137"
    );
    contains(
        &k.ok(&["logs", "flaky", "--previous"]),
        "app started (busybox)",
    );
    contains(
        &k.ok(&["describe", "pod", "flaky"]),
        "failed liveness probe, will be restarted",
    );

    // Init containers in order, a sidecar beside the app: Running with both ready.
    apply(
        &c,
        &k,
        "init.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: staged
  annotations: {sim.rkube.io/run-duration.migrate: 300ms}
spec:
  initContainers:
  - {name: migrate, image: busybox}
  - {name: proxy, image: envoy, restartPolicy: Always}
  containers:
  - {name: app, image: nginx}
"#,
    );
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/staged",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["pod", "staged"],
            "{.status.initContainerStatuses[0].state.terminated.reason}"
        ),
        "Completed"
    );
    assert!(!k
        .jsonpath(
            &["pod", "staged"],
            "{.status.initContainerStatuses[1].state.running.startedAt}"
        )
        .is_empty());
    contains(&k.ok(&["get", "pod", "staged"]), "2/2");

    // A Job of 5 completions, 2 at a time: Complete, every pod released from the finalizer.
    apply(
        &c,
        &k,
        "jobs.yaml",
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: indexed}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: doomed}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations: {sim.rkube.io/exit-code: "1"}
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: perindex}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  backoffLimitPerIndex: 0
  template:
    metadata:
      annotations: {sim.rkube.io/exit-code: "1"}
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: shortlived}
spec:
  ttlSecondsAfterFinished: 0
  template:
    spec:
      restartPolicy: OnFailure
      containers: [{name: work, image: busybox}]
"#,
    );
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/batch",
        "job/indexed",
        "--timeout=60s",
    ]);
    assert_eq!(k.jsonpath(&["job", "batch"], "{.status.succeeded}"), "5");
    assert_eq!(
        k.jsonpath(&["job", "indexed"], "{.status.completedIndexes}"),
        "0-2"
    );
    let finalizers = k.jsonpath(
        &["pods", "-l", "job-name=batch"],
        "{.items[*].metadata.finalizers}",
    );
    assert!(finalizers.trim().is_empty(), "{finalizers}");
    let hostnames = k.jsonpath(
        &["pods", "-l", "job-name=indexed"],
        "{.items[*].spec.hostname}",
    );
    let mut hostnames: Vec<&str> = hostnames.split_whitespace().collect();
    hostnames.sort();
    assert_eq!(hostnames, ["indexed-0", "indexed-1", "indexed-2"]);
    contains(&k.ok(&["get", "job", "batch"]), "Complete");
    contains(&k.ok(&["get", "job", "batch"]), "5/5");

    k.ok(&[
        "wait",
        "--for=condition=failed",
        "job/doomed",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["job", "doomed"],
            "{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "BackoffLimitExceeded"
    );
    assert_eq!(k.jsonpath(&["job", "doomed"], "{.status.failed}"), "1");
    contains(
        &k.ok(&["describe", "job", "doomed"]),
        "BackoffLimitExceeded",
    );
    // Each index on its own back-off limit: both fail, the Job fails by its failed indexes.
    k.ok(&[
        "wait",
        "--for=condition=failed",
        "job/perindex",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["job", "perindex"],
            "{.status.failedIndexes} {.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "0,1 FailedIndexes"
    );

    // A CronJob every second: its Jobs run and complete, history is trimmed to one.
    apply(
        &c,
        &k,
        "cron.yaml",
        r#"apiVersion: batch/v1
kind: CronJob
metadata: {name: ticker}
spec:
  schedule: "@every 1s"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: tick, image: busybox}]
"#,
    );
    eventually("a successful tick", || {
        !k.jsonpath(&["cronjob", "ticker"], "{.status.lastSuccessfulTime}")
            .trim()
            .is_empty()
    });
    k.ok(&[
        "patch",
        "cronjob",
        "ticker",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    eventually("history trimmed to one finished job", || {
        let names = k.jsonpath(
            &["jobs", "-l", "app!=none"],
            "{.items[*].metadata.ownerReferences[0].name}",
        );
        names.split_whitespace().filter(|n| *n == "ticker").count() == 1
    });
    // Room in the history, so the hand-made run (owned by the CronJob too) is not trimmed.
    k.ok(&[
        "patch",
        "cronjob",
        "ticker",
        "-p",
        r#"{"spec":{"successfulJobsHistoryLimit":3}}"#,
    ]);
    k.ok(&["create", "job", "by-hand", "--from=cronjob/ticker"]);
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/by-hand",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["job", "by-hand"],
            "{.metadata.annotations.cronjob\\.kubernetes\\.io/instantiate}"
        ),
        "manual"
    );

    // A Job deleted while its pods run: they stop and go (the finalizer is released).
    apply(
        &c,
        &k,
        "endless.yaml",
        r#"apiVersion: batch/v1
kind: Job
metadata: {name: endless}
spec:
  template:
    metadata:
      annotations: {sim.rkube.io/run-duration: forever}
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox}]
"#,
    );
    eventually("the endless job's pod running", || {
        k.jsonpath(
            &["pods", "-l", "job-name=endless"],
            "{.items[*].status.phase}",
        ) == "Running"
    });
    k.ok(&["delete", "job", "endless"]);
    eventually("the deleted job's pods gone", || {
        job_pods(&k, "endless").trim().is_empty()
    });

    // Finished with a TTL of 0: deleted, and its pods with it.
    eventually("the expired job deleted", || {
        !k.run(&["get", "job", "shortlived"]).status.success()
    });
    eventually("its pods collected", || {
        job_pods(&k, "shortlived").trim().is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_follows_its_nodes_and_rolls_out() {
    let c = Cluster::start(Opts {
        nodes: 3,
        ..Opts::default()
    })
    .await;
    let k = kubectl(&c);
    apply(
        &c,
        &k,
        "ds.yaml",
        r#"apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "fluent-bit:1"}]
"#,
    );
    k.ok(&["rollout", "status", "daemonset/agent", "--timeout=60s"]);
    let nodes_of = || {
        let mut n: Vec<String> = k
            .jsonpath(
                &[
                    "pods",
                    "-l",
                    "app=agent",
                    "--field-selector=status.phase=Running",
                ],
                "{.items[*].spec.nodeName}",
            )
            .split_whitespace()
            .map(String::from)
            .collect();
        n.sort();
        n
    };
    assert_eq!(nodes_of(), ["node-1", "node-2", "node-3"]);
    contains(
        &k.ok(&["get", "ds", "agent"]),
        "3         3         3       3            3",
    );
    // A NoExecute taint it does not tolerate: its pod there goes; untainted, it comes back.
    k.ok(&["taint", "node", "node-3", "dedicated=x:NoExecute"]);
    eventually("the daemon pod off the tainted node", || {
        nodes_of() == ["node-1", "node-2"]
    });
    k.ok(&["taint", "node", "node-3", "dedicated-"]);
    eventually("the daemon pod back", || nodes_of().len() == 3);
    // A new template rolls out node by node.
    k.ok(&["set", "image", "daemonset/agent", "agent=fluent-bit:2"]);
    k.ok(&["rollout", "status", "daemonset/agent", "--timeout=60s"]);
    let all_on = |image: &str| {
        let images = k.jsonpath(
            &["pods", "-l", "app=agent"],
            "{.items[*].spec.containers[0].image}",
        );
        images.split_whitespace().filter(|i| *i == image).count() == 3
            && images.split_whitespace().count() == 3
    };
    eventually("every pod on the new image", || all_on("fluent-bit:2"));
    // Its history, and undo back to the first template.
    history_then_undo(&k, "daemonset/agent", "fluent-bit:1");
    eventually("every pod back on the first image", || {
        all_on("fluent-bit:1")
    });
    // maxSurge: the new pod starts beside the old one on each node.
    k.ok(&[
        "patch",
        "daemonset",
        "agent",
        "--type=merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxSurge":1,"maxUnavailable":0}},"template":{"spec":{"containers":[{"name":"agent","image":"fluent-bit:3"}]}}}}"#,
    ]);
    k.ok(&["rollout", "status", "daemonset/agent", "--timeout=60s"]);
    eventually("every pod on the surged image", || all_on("fluent-bit:3"));
    let hash = k.jsonpath(
        &["pods", "-l", "app=agent"],
        "{.items[0].metadata.labels.controller-revision-hash}",
    );
    assert_eq!(
        k.jsonpath(
            &["controllerrevisions", &format!("agent-{hash}")],
            "{.revision}"
        ),
        "4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_keeps_order_identity_and_claims() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    apply(
        &c,
        &k,
        "sts.yaml",
        r#"apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, name: http}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.24", ports: [{containerPort: 80, name: http}]}]
  volumeClaimTemplates:
  - metadata: {name: www}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: stuck}
spec:
  replicas: 2
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}, annotations: {sim.rkube.io/ready: "false"}}
    spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: burst}
spec:
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: burst}}
  template:
    metadata: {labels: {app: burst}, annotations: {sim.rkube.io/ready: "false"}}
    spec: {containers: [{name: c, image: busybox}]}
"#,
    );
    contains(
        &k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]),
        "partitioned roll out complete: 3 new pods have been updated",
    );
    // A pod that lost an identity label gets it back.
    k.ok(&["label", "pod", "web-1", "apps.kubernetes.io/pod-index-"]);
    eventually("web-1's index label restored", || {
        k.jsonpath(
            &["pod", "web-1"],
            "{.metadata.labels.apps\\.kubernetes\\.io/pod-index}",
        ) == "1"
    });
    // Stable names, hostnames under the headless Service, one bound claim each.
    let names =
        |k: &Kubectl<'_>| k.jsonpath(&["pods", "-l", "app=web"], "{.items[*].metadata.name}");
    assert_eq!(names(&k), "web-0 web-1 web-2");
    assert_eq!(
        k.jsonpath(&["pod", "web-1"], "{.spec.hostname}.{.spec.subdomain}"),
        "web-1.web"
    );
    assert_eq!(
        k.jsonpath(
            &["pod", "web-1"],
            "{.metadata.labels.apps\\.kubernetes\\.io/pod-index}"
        ),
        "1"
    );
    eventually("three bound claims", || {
        k.jsonpath(&["pvc", "-l", "app=web"], "{.items[*].status.phase}") == "Bound Bound Bound"
    });
    assert_eq!(
        k.jsonpath(&["pvc", "-l", "app=web"], "{.items[*].metadata.name}"),
        "www-web-0 www-web-1 www-web-2"
    );
    eventually("the pods' hostnames in the Service's slice", || {
        let mut h: Vec<String> = k
            .jsonpath(
                &["endpointslices", "-l", "kubernetes.io/service-name=web"],
                "{.items[*].endpoints[*].hostname}",
            )
            .split_whitespace()
            .map(String::from)
            .collect();
        h.sort();
        h == ["web-0", "web-1", "web-2"]
    });
    // OrderedReady waits for each pod to be ready before the next (pods that never become
    // ready by annotation); Parallel does not.
    let first = |set: &str| {
        k.jsonpath(
            &["pods", "-l", &format!("app={set}")],
            "{.items[*].metadata.name}",
        )
    };
    assert_eq!(first("stuck"), "stuck-0");
    eventually("both parallel pods", || first("burst") == "burst-0 burst-1");
    assert_eq!(first("stuck"), "stuck-0");
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector=involvedObject.name=web,involvedObject.kind=StatefulSet",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    contains(
        &events,
        "create Claim www-web-0 Pod web-0 in StatefulSet web success",
    );

    // A new template rolls from the highest ordinal; history and undo through revisions.
    k.ok(&["set", "image", "statefulset/web", "nginx=nginx:1.25"]);
    contains(
        &k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]),
        "partitioned roll out complete: 3 new pods have been updated",
    );
    let images = |k: &Kubectl<'_>| {
        k.jsonpath(
            &["pods", "-l", "app=web"],
            "{.items[*].spec.containers[0].image}",
        )
    };
    assert_eq!(images(&k), "nginx:1.25 nginx:1.25 nginx:1.25");
    let (current, update) = (
        k.jsonpath(&["sts", "web"], "{.status.currentRevision}"),
        k.jsonpath(&["sts", "web"], "{.status.updateRevision}"),
    );
    assert_eq!(current, update);
    assert_eq!(
        k.jsonpath(
            &["pod", "web-0"],
            "{.metadata.labels.controller-revision-hash}"
        ),
        update
    );
    history_then_undo(&k, "statefulset/web", "nginx:1.24");
    eventually("every pod back on the first image", || {
        images(&k) == "nginx:1.24 nginx:1.24 nginx:1.24"
    });
    // The first revision was renumbered, not copied.
    let mut numbers: Vec<String> = k
        .jsonpath(
            &["controllerrevisions", "-l", "app=web"],
            "{.items[*].revision}",
        )
        .split_whitespace()
        .map(String::from)
        .collect();
    numbers.sort();
    assert_eq!(numbers, ["2", "3"]);
    k.ok(&["rollout", "restart", "statefulset/web"]);
    k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]);
    contains(
        &k.jsonpath(&["pod", "web-0"], "{.metadata.annotations}"),
        "kubectl.kubernetes.io/restartedAt",
    );

    // Scaled down, the default policy keeps the claims; `whenScaled: Delete` removes them.
    k.ok(&["scale", "statefulset/web", "--replicas=1"]);
    eventually("one pod left", || names(&k) == "web-0");
    assert_eq!(
        k.jsonpath(&["pvc", "-l", "app=web"], "{.items[*].metadata.name}"),
        "www-web-0 www-web-1 www-web-2"
    );
    k.ok(&[
        "patch",
        "statefulset",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3,"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}"#,
    ]);
    k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]);
    k.ok(&["scale", "statefulset/web", "--replicas=2"]);
    eventually("the condemned pod's claim collected", || {
        k.jsonpath(&["pvc", "-l", "app=web"], "{.items[*].metadata.name}") == "www-web-0 www-web-1"
    });
    // A deleted pod comes back under the same name.
    let uid = k.jsonpath(&["pod", "web-1"], "{.metadata.uid}");
    k.ok(&["delete", "pod", "web-1", "--wait=false"]);
    eventually("web-1 back, a new pod", || {
        let now = k.jsonpath(&["pod", "web-1", "--ignore-not-found"], "{.metadata.uid}");
        !now.is_empty() && now != uid
    });
    k.ok(&["rollout", "status", "statefulset/web", "--timeout=90s"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replication_controller_keeps_its_replicas() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    // The legacy kind of the Kubernetes examples: a map selector defaulted from the template.
    apply(
        &c,
        &k,
        "rc.yaml",
        r#"apiVersion: v1
kind: ReplicationController
metadata: {name: nginx}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: nginx}}
    spec: {containers: [{name: nginx, image: nginx}]}
"#,
    );
    let running = |k: &Kubectl<'_>| {
        k.jsonpath(
            &[
                "pods",
                "-l",
                "app=nginx",
                "--field-selector=status.phase=Running",
            ],
            "{.items[*].metadata.name}",
        )
        .split_whitespace()
        .count()
    };
    eventually("three pods Running", || running(&k) == 3);
    eventually("the rc's status", || {
        k.jsonpath(
            &["rc", "nginx"],
            "{.status.readyReplicas}/{.status.replicas}",
        ) == "3/3"
    });
    assert_eq!(
        k.jsonpath(
            &["pods", "-l", "app=nginx"],
            "{.items[0].metadata.ownerReferences[0].kind}"
        ),
        "ReplicationController"
    );
    contains(&k.ok(&["describe", "rc", "nginx"]), "SuccessfulCreate");
    // A pod deleted by hand is replaced; scaled down, the extra pods go.
    let first = k.jsonpath(&["pods", "-l", "app=nginx"], "{.items[0].metadata.name}");
    k.ok(&["delete", "pod", &first, "--wait=false"]);
    eventually("a replacement", || {
        running(&k) == 3
            && !k
                .jsonpath(&["pods", "-l", "app=nginx"], "{.items[*].metadata.name}")
                .contains(&first)
    });
    k.ok(&["scale", "rc", "nginx", "--replicas=1"]);
    eventually("one pod left", || {
        k.jsonpath(&["pods", "-l", "app=nginx"], "{.items[*].metadata.name}")
            .split_whitespace()
            .count()
            == 1
    });
    // Deleted, its pods are collected.
    k.ok(&["delete", "rc", "nginx"]);
    eventually("no pods left", || {
        k.jsonpath(&["pods", "-l", "app=nginx"], "{.items[*].metadata.name}")
            .is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_debug_adds_a_running_ephemeral_container() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    k.ok(&["run", "web", "--image=nginx"]);
    k.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    k.ok(&[
        "debug",
        "web",
        "--image=busybox",
        "--target=web",
        "--container=dbg",
    ]);
    eventually("the debug container running", || {
        k.jsonpath(
            &["pod", "web"],
            "{.status.ephemeralContainerStatuses[?(@.name==\"dbg\")].started}",
        ) == "true"
    });
    assert_eq!(
        k.jsonpath(
            &["pod", "web"],
            "{.spec.ephemeralContainers[0].targetContainerName}"
        ),
        "web"
    );
    contains(
        &k.ok(&[
            "get",
            "events",
            "--field-selector=involvedObject.name=web,reason=Started",
            "-o",
            "jsonpath={.items[*].involvedObject.fieldPath}",
        ]),
        "spec.ephemeralContainers{dbg}",
    );
    // A second one under a name the pod already uses is refused; the pod keeps running.
    let err = k.fails(&["debug", "web", "--image=busybox", "--container=web"]);
    contains(&err, "Duplicate value");
    assert_eq!(k.jsonpath(&["pod", "web"], "{.status.phase}"), "Running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_shows_simulated_usage() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    // Usage by annotation, per container; a second pod with requests only drifts around a
    // share of them.
    apply(
        &c,
        &k,
        "busy.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: busy
  labels: {app: busy}
  annotations: {sim.rkube.io/cpu-usage: 250m, sim.rkube.io/memory-usage: 300Mi}
spec:
  containers: [{name: main, image: nginx}, {name: side, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata:
  name: hog
  annotations: {sim.rkube.io/memory-usage: 300Mi}
spec:
  containers:
  - name: main
    image: nginx
    resources: {limits: {memory: 256Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: calm, labels: {app: calm}}
spec:
  containers:
  - name: main
    image: nginx
    resources: {requests: {cpu: "1", memory: 1Gi}}
"#,
    );
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/busy",
        "pod/calm",
        "--timeout=60s",
    ]);
    let top = k.ok(&["top", "pod", "busy", "--containers"]);
    contains(&top, "busy   main   250m");
    contains(&top, "300Mi");
    contains(&k.ok(&["top", "pod", "busy"]), "500m");
    let calm = k.ok(&["top", "pod", "-l", "app=calm", "--no-headers"]);
    let cpu: i64 = calm
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.trim_end_matches('m').parse().ok())
        .unwrap_or_else(|| panic!("no cpu in {calm:?}"));
    assert!((250..=450).contains(&cpu), "{calm}");
    // The node: its pods plus its own share, as a percentage of allocatable.
    let nodes = k.ok(&["top", "node", "--no-headers"]);
    contains(&nodes, "node-1");
    contains(&nodes, "%");
    // The API as clients see it.
    let raw = k.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy",
    ]);
    contains(&raw, "\"kind\":\"PodMetrics\"");
    let missing = k.fails(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
    ]);
    contains(&missing, "NotFound");
    // Above its memory limit a container is OOM-killed, and restarted with back-off.
    eventually("the hog OOM-killed", || {
        k.jsonpath(
            &["pod", "hog"],
            "{.status.containerStatuses[0].lastState.terminated.reason}",
        ) == "OOMKilled"
    });
    assert_eq!(
        k.jsonpath(
            &["pod", "hog"],
            "{.status.containerStatuses[0].lastState.terminated.exitCode}"
        ),
        "137"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_scales_a_deployment_on_simulated_usage() {
    let c = Cluster::start(Opts {
        controller_manager: vec!["--horizontal-pod-autoscaler-sync-period=1s".into()],
        ..Opts::default()
    })
    .await;
    let k = kubectl(&c);
    // Each pod uses 90m of its 100m request: 90 % against a 50 % target.
    apply(
        &c,
        &k,
        "hot.yaml",
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: hot}
spec:
  replicas: 1
  selector: {matchLabels: {app: hot}}
  template:
    metadata:
      labels: {app: hot}
      annotations: {sim.rkube.io/cpu-usage: 90m}
    spec:
      containers:
      - name: app
        image: nginx
        resources: {requests: {cpu: 100m}}
"#,
    );
    k.ok(&["rollout", "status", "deployment/hot", "--timeout=60s"]);
    k.ok(&[
        "autoscale",
        "deployment",
        "hot",
        "--min=1",
        "--max=5",
        "--cpu-percent=50",
    ]);
    eventually("the Deployment scaled to the maximum", || {
        k.jsonpath(&["deployment", "hot"], "{.spec.replicas}") == "5"
    });
    eventually("the HPA's status", || {
        k.jsonpath(
            &["hpa", "hot"],
            "{.status.currentMetrics[0].resource.current.averageUtilization} {.status.conditions[?(@.type==\"ScalingLimited\")].reason}",
        ) == "90 TooManyReplicas"
    });
    contains(&k.ok(&["describe", "hpa", "hot"]), "SuccessfulRescale");
    contains(&k.ok(&["get", "hpa", "hot"]), "cpu: 90%/50%");
}
