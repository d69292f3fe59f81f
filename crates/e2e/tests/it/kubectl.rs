//! Stock kubectl as the oracle: every command of daily Deployment work, with the output a user
//! sees on Kubernetes — and kubectl's usual error text for the usual mistakes. The whole list
//! runs with the kubectl on PATH; a core subset with kubectl 1.31 and 1.33.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rkube_e2e::{workspace_root, Cluster, Opts};

/// One kubectl binary pointed at a cluster.
pub(crate) struct Kubectl<'a> {
    pub(crate) c: &'a Cluster,
    pub(crate) bin: String,
}

impl Kubectl<'_> {
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.c.kubeconfig)
            .args(args)
            .current_dir(workspace_root());
        cmd
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs")
    }

    /// Must succeed; its stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{} {args:?} failed:\n{}{}",
            self.bin,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Must fail; its stderr.
    pub(crate) fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "{} {args:?} should have failed:\n{}",
            self.bin,
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Must succeed, printing `needle`.
    pub(crate) fn says(&self, args: &[&str], needle: &str) {
        contains(&self.ok(args), needle);
    }

    pub(crate) fn jsonpath(&self, what: &[&str], path: &str) -> String {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        let expr = format!("jsonpath={path}");
        args.extend(["-o", &expr]);
        self.ok(&args)
    }
}

/// Writes a manifest into the cluster's directory; its path.
pub(crate) fn manifest(c: &Cluster, name: &str, text: &str) -> String {
    let path: PathBuf = c.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

pub(crate) fn deployment(name: &str, image: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  labels: {{app: {name}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - name: {name}\n        image: {image}\n"
    )
}

pub(crate) fn contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected {needle:?} in:\n{haystack}"
    );
}

pub(crate) fn kubectl_beside(version: &str) -> Option<String> {
    let which = Command::new("sh")
        .args(["-c", "dirname \"$(readlink -f \"$(command -v kubectl)\")\""])
        .output()
        .ok()?;
    let path = format!(
        "{}/kubectl.{version}",
        String::from_utf8_lossy(&which.stdout).trim()
    );
    std::path::Path::new(&path).exists().then_some(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_of_the_walkthrough_behaves_as_on_kubernetes() {
    let c = Cluster::start(Opts {
        nodes: 1,
        ..Default::default()
    })
    .await;
    let k = Kubectl {
        c: &c,
        bin: "kubectl".into(),
    };

    // create -f the seed's Deployment (default validation on), and it runs.
    k.says(
        &["create", "-f", "e2e/nginx.yml"],
        "deployment.apps/nginx-deployment created",
    );
    k.says(
        &[
            "rollout",
            "status",
            "deployment/nginx-deployment",
            "--timeout=60s",
        ],
        "successfully rolled out",
    );
    let pod = k.jsonpath(&["po", "-l", "app=nginx"], "{.items[0].metadata.name}");
    assert!(pod.starts_with("nginx-deployment-"), "{pod}");

    // get in every output format.
    let table = k.ok(&["get", "deploy", "nginx-deployment"]);
    contains(
        &table,
        "NAME               READY   UP-TO-DATE   AVAILABLE   AGE",
    );
    contains(&table, "nginx-deployment   1/1     1            1");
    let yaml = k.ok(&["get", "deploy", "nginx-deployment", "-o", "yaml"]);
    contains(&yaml, "kind: Deployment");
    contains(&yaml, "image: nginx:1.14.2");
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "deploy", "nginx-deployment", "-o", "json"])).unwrap();
    assert_eq!(json["spec"]["replicas"], 1);
    assert_eq!(json["status"]["readyReplicas"], 1);
    let wide = k.ok(&["get", "po", "-o", "wide"]);
    contains(&wide, "IP");
    contains(&wide, "NODE");
    contains(&wide, "node-1");
    assert_eq!(
        k.ok(&["get", "deploy", "-o", "name"]).trim(),
        "deployment.apps/nginx-deployment"
    );
    assert_eq!(
        k.jsonpath(
            &["deploy", "nginx-deployment"],
            "{.spec.template.spec.containers[0].image}"
        ),
        "nginx:1.14.2"
    );
    let described = k.ok(&["describe", "deployment", "nginx-deployment"]);
    contains(&described, "Replicas:");
    contains(&described, "ScalingReplicaSet");
    k.says(
        &["describe", "pod", &pod],
        &format!("Successfully assigned default/{pod} to node-1"),
    );

    // Selectors.
    contains(&k.ok(&["get", "po", "-l", "app=nginx"]), &pod);
    contains(
        &k.ok(&["get", "po", "--field-selector", "status.phase=Running"]),
        &pod,
    );
    assert!(k
        .ok(&[
            "get",
            "po",
            "--field-selector",
            "status.phase=Failed",
            "-o",
            "name"
        ])
        .trim()
        .is_empty());

    // apply: create, then change the image in the file and apply again.
    let web = manifest(&c, "web.yml", &deployment("web", "nginx:1.14.2", 1));
    k.says(&["apply", "-f", &web], "deployment.apps/web created");
    let web2 = manifest(&c, "web2.yml", &deployment("web", "nginx:1.16.1", 1));
    k.says(&["apply", "-f", &web2], "deployment.apps/web configured");
    assert_eq!(
        k.jsonpath(
            &["deploy", "web"],
            "{.spec.template.spec.containers[0].image}"
        ),
        "nginx:1.16.1"
    );
    k.says(&["apply", "-f", &web2], "deployment.apps/web unchanged");

    // apply --server-side: create, update, conflict between managers, force.
    let ssa = manifest(&c, "ssa.yml", &deployment("ssa", "nginx:1.14.2", 1));
    k.says(
        &["apply", "--server-side", "-f", &ssa],
        "deployment.apps/ssa serverside-applied",
    );
    let ssa3 = manifest(&c, "ssa3.yml", &deployment("ssa", "nginx:1.14.2", 3));
    k.says(
        &["apply", "--server-side", "-f", &ssa3],
        "serverside-applied",
    );
    assert_eq!(k.jsonpath(&["deploy", "ssa"], "{.spec.replicas}"), "3");
    let ssa2 = manifest(&c, "ssa2.yml", &deployment("ssa", "nginx:1.14.2", 2));
    let conflict = k.fails(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &ssa2,
    ]);
    contains(
        &conflict,
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas",
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &ssa2,
    ]);
    assert_eq!(k.jsonpath(&["deploy", "ssa"], "{.spec.replicas}"), "2");
    let managers = k.jsonpath(&["deploy", "ssa"], "{.metadata.managedFields[*].manager}");
    let managers: Vec<&str> = managers.split(' ').collect();
    assert!(
        managers.contains(&"kubectl") && managers.contains(&"other"),
        "managedFields: {managers:?}"
    );

    // edit through an editor script.
    let editor = manifest(
        &c,
        "editor.sh",
        "#!/bin/sh\nsed -i 's/replicas: 1$/replicas: 2/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = k
        .command(&["edit", "deployment", "web"])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    contains(
        &String::from_utf8_lossy(&out.stdout),
        "deployment.apps/web edited",
    );
    assert_eq!(k.jsonpath(&["deploy", "web"], "{.spec.replicas}"), "2");

    // label, annotate, scale, set image.
    k.says(
        &["label", "deploy", "web", "tier=front"],
        "deployment.apps/web labeled",
    );
    k.says(
        &["annotate", "deploy", "web", "note=hello"],
        "deployment.apps/web annotated",
    );
    assert_eq!(
        k.jsonpath(
            &["deploy", "web"],
            "{.metadata.labels.tier}/{.metadata.annotations.note}"
        ),
        "front/hello"
    );
    k.says(
        &["get", "deploy", "-l", "tier=front", "-o", "name"],
        "deployment.apps/web",
    );
    k.says(
        &["scale", "deploy", "web", "--replicas=3"],
        "deployment.apps/web scaled",
    );
    k.says(
        &["rollout", "status", "deploy/web", "--timeout=60s"],
        "successfully rolled out",
    );
    assert_eq!(
        k.jsonpath(&["deploy", "web"], "{.status.readyReplicas}"),
        "3"
    );
    k.says(
        &["set", "image", "deploy/web", "web=nginx:1.17.0"],
        "deployment.apps/web image updated",
    );
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]);

    // rollout history | undo | restart | pause | resume.
    let history = k.ok(&["rollout", "history", "deploy/web"]);
    contains(&history, "REVISION");
    assert!(
        history
            .lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count()
            >= 2,
        "{history}"
    );
    k.says(
        &["rollout", "undo", "deploy/web"],
        "deployment.apps/web rolled back",
    );
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    assert_eq!(
        k.jsonpath(
            &["deploy", "web"],
            "{.spec.template.spec.containers[0].image}"
        ),
        "nginx:1.16.1"
    );
    k.says(
        &["rollout", "restart", "deploy/web"],
        "deployment.apps/web restarted",
    );
    assert!(!k
        .jsonpath(
            &["deploy", "web"],
            "{.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}"
        )
        .is_empty());
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    k.says(
        &["rollout", "pause", "deploy/web"],
        "deployment.apps/web paused",
    );
    assert_eq!(k.jsonpath(&["deploy", "web"], "{.spec.paused}"), "true");
    k.says(
        &["rollout", "resume", "deploy/web"],
        "deployment.apps/web resumed",
    );

    // get -w across create, update and delete.
    let mut watch = k
        .command(&["get", "configmaps", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let saw = |event: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.starts_with(event) && line.contains("watched") => return,
                Ok(_) => {}
                Err(_) => panic!("kubectl get -w showed no {event} for the configmap"),
            }
        }
    };
    k.ok(&["create", "configmap", "watched", "--from-literal=a=1"]);
    saw("ADDED");
    k.ok(&["label", "configmap", "watched", "changed=yes"]);
    saw("MODIFIED");
    k.ok(&["delete", "configmap", "watched"]);
    saw("DELETED");
    let _ = watch.kill();
    let _ = watch.wait();

    // Discovery and schemas.
    let resources = k.ok(&["api-resources"]);
    let deploy_row = resources
        .lines()
        .find(|l| l.starts_with("deployments "))
        .unwrap_or("");
    for col in ["deploy", "apps/v1", "true", "Deployment"] {
        contains(deploy_row, col);
    }
    contains(&resources, "pods                ");
    let versions = k.ok(&["api-versions"]);
    contains(&versions, "apps/v1\n");
    contains(&versions, "v1\n");
    let explained = k.ok(&["explain", "deployment.spec.strategy"]);
    contains(&explained, "FIELD: strategy <DeploymentStrategy>");
    contains(&explained, "rollingUpdate\t<RollingUpdateDeployment>");
    k.says(
        &["explain", "pods.spec.containers.image"],
        "Container image name.",
    );

    // The create generators (protobuf bodies).
    k.says(&["create", "namespace", "demo"], "namespace/demo created");
    k.says(
        &[
            "create",
            "configmap",
            "cm1",
            "--from-literal=a=b",
            "-n",
            "demo",
        ],
        "configmap/cm1 created",
    );
    k.says(
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=x",
            "-n",
            "demo",
        ],
        "secret/s1 created",
    );
    assert_eq!(k.jsonpath(&["cm", "cm1", "-n", "demo"], "{.data.a}"), "b");
    // kubectl's typed clients ask for protobuf first: the created object comes back as
    // protobuf, and what kubectl decodes from it is the object.
    let out = k.run(&[
        "create",
        "configmap",
        "cm-pb",
        "--from-literal=a=b",
        "-n",
        "demo",
        "-o",
        "json",
        "-v=8",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.lines().any(|l| l.contains("Content-Type")
            && l.contains("application/vnd.kubernetes.protobuf")
            && !l.contains("Accept")),
        "no protobuf response in kubectl's log:\n{log}"
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["data"]["a"], "b");
    assert_eq!(created["metadata"]["namespace"], "demo");
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36),
        "{created}"
    );
    assert!(
        created["metadata"]["creationTimestamp"].is_string(),
        "{created}"
    );
    assert_eq!(
        k.jsonpath(&["secret", "s1", "-n", "demo"], "{.data.password}"),
        "eA=="
    );
    k.says(
        &[
            "create",
            "deployment",
            "gen",
            "--image=nginx:1.14.2",
            "-n",
            "demo",
        ],
        "deployment.apps/gen created",
    );
    k.says(
        &[
            "rollout",
            "status",
            "deploy/gen",
            "-n",
            "demo",
            "--timeout=60s",
        ],
        "successfully rolled out",
    );

    // Logs, events, authorization.
    k.says(
        &["logs", &pod],
        "Configuration complete; ready for start up",
    );
    assert_eq!(k.ok(&["logs", &pod, "--tail=1"]).lines().count(), 1);
    let events = k.ok(&["get", "events", "--sort-by=.lastTimestamp"]);
    contains(&events, "LAST SEEN");
    contains(&events, "Scheduled");
    contains(&events, "ScalingReplicaSet");
    assert_eq!(
        k.ok(&["auth", "can-i", "create", "deployments"]).trim(),
        "yes"
    );
    assert_eq!(
        k.ok(&["auth", "can-i", "delete", "pods", "-n", "kube-system"])
            .trim(),
        "yes"
    );
    // The walkthrough runs as the admin of a secure cluster: a client certificate's CN and O.
    let whoami = k.ok(&["auth", "whoami"]);
    contains(&whoami, "kubernetes-admin");
    contains(&whoami, "[system:masters system:authenticated]");
    let node = c.kubectl_as(
        "node-node-1",
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&node.stdout), "system:node:node-1");
    assert_eq!(
        String::from_utf8_lossy(
            &c.kubectl_as("node-node-1", &["auth", "can-i", "list", "secrets"])
                .stdout
        )
        .trim(),
        "no"
    );

    // Mistakes, with kubectl's usual error text.
    let malformed = manifest(
        &c,
        "malformed.yml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: [oops\n",
    );
    contains(
        &k.fails(&["create", "-f", &malformed]),
        "error converting YAML to JSON",
    );
    let unknown = manifest(
        &c,
        "unknown.yml",
        &deployment("typo", "nginx", 1).replace("  replicas:", "  replicass:"),
    );
    contains(
        &k.fails(&["create", "-f", &unknown]),
        "unknown field \"spec.replicass\"",
    );
    let dup = k.fails(&["create", "-f", "e2e/nginx.yml"]);
    contains(&dup, "Error from server (AlreadyExists)");
    contains(&dup, "deployments.apps \"nginx-deployment\" already exists");
    let stale = k.ok(&["get", "cm", "cm1", "-n", "demo", "-o", "json"]);
    k.ok(&["label", "cm", "cm1", "-n", "demo", "v=2"]);
    let stale_file = manifest(&c, "stale.json", &stale);
    let conflict = k.fails(&["replace", "-f", &stale_file]);
    contains(&conflict, "Error from server (Conflict)");
    contains(&conflict, "the object has been modified; please apply your changes to the latest version and try again");
    contains(
        &k.fails(&["get", "foos"]),
        "the server doesn't have a resource type \"foos\"",
    );
    contains(
        &k.fails(&[
            "create",
            "configmap",
            "x",
            "--from-literal=a=b",
            "-n",
            "nope",
        ]),
        "error: failed to create configmap: namespaces \"nope\" not found",
    );
    let missing_ns = k.fails(&["create", "-f", &web, "-n", "nope"]);
    contains(&missing_ns, "Error from server (NotFound)");
    contains(&missing_ns, "namespaces \"nope\" not found");
    contains(
        &k.fails(&["get", "deploy", "missing"]),
        "Error from server (NotFound): deployments.apps \"missing\" not found",
    );

    // delete waits until the object is gone.
    k.says(
        &["delete", "deployment", "web"],
        "deployment.apps \"web\" deleted",
    );
    contains(&k.fails(&["get", "deploy", "web"]), "NotFound");
    k.says(
        &["delete", "namespace", "demo"],
        "namespace \"demo\" deleted",
    );
    contains(&k.fails(&["get", "ns", "demo"]), "NotFound");
}

/// The core of daily work with the oldest and newest kubectl beside the default one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_31_and_1_33_do_the_core_commands() {
    let bins: Vec<String> = ["1.31", "1.33"]
        .iter()
        .filter_map(|v| kubectl_beside(v))
        .collect();
    if bins.is_empty() {
        eprintln!("SKIPPED: no kubectl.1.31 / kubectl.1.33 beside kubectl");
        return;
    }
    let c = Cluster::start(Opts {
        nodes: 1,
        ..Default::default()
    })
    .await;
    for bin in bins {
        let k = Kubectl {
            c: &c,
            bin: bin.clone(),
        };
        let v = bin.rsplit('.').next().unwrap().to_string();
        let name = format!("core{v}");
        let file = manifest(
            &c,
            &format!("{name}.yml"),
            &deployment(&name, "nginx:1.14.2", 1),
        );
        k.says(
            &["create", "-f", &file],
            &format!("deployment.apps/{name} created"),
        );
        k.ok(&[
            "rollout",
            "status",
            &format!("deploy/{name}"),
            "--timeout=60s",
        ]);
        k.says(
            &["get", "po", "-l", &format!("app={name}"), "-o", "wide"],
            "Running",
        );
        let changed = manifest(
            &c,
            &format!("{name}-2.yml"),
            &deployment(&name, "nginx:1.16.1", 2),
        );
        k.says(&["apply", "-f", &changed], "configured");
        k.ok(&[
            "rollout",
            "status",
            &format!("deploy/{name}"),
            "--timeout=60s",
        ]);
        assert_eq!(
            k.jsonpath(&["deploy", &name], "{.status.readyReplicas}"),
            "2"
        );
        k.says(&["label", "deploy", &name, "v=x"], "labeled");
        k.says(&["scale", "deploy", &name, "--replicas=1"], "scaled");
        k.says(
            &[
                "set",
                "image",
                &format!("deploy/{name}"),
                &format!("{name}=nginx:1.17.0"),
            ],
            "image updated",
        );
        let ssa = manifest(
            &c,
            &format!("{name}-ssa.yml"),
            &deployment(&format!("{name}-ssa"), "nginx:1.14.2", 1),
        );
        k.says(
            &["apply", "--server-side", "-f", &ssa],
            "serverside-applied",
        );
        k.says(&["explain", "deployment.spec.replicas"], "replicas");
        k.says(&["api-resources"], "deployments");
        let ns = format!("ns{v}");
        k.ok(&["create", "namespace", &ns]);
        k.ok(&["create", "configmap", "cm", "--from-literal=a=b", "-n", &ns]);
        k.ok(&[
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=p=q",
            "-n",
            &ns,
        ]);
        assert_eq!(k.jsonpath(&["secret", "s", "-n", &ns], "{.data.p}"), "cQ==");
        assert_eq!(k.ok(&["auth", "can-i", "get", "pods"]).trim(), "yes");
        contains(&k.fails(&["create", "-f", &file]), "AlreadyExists");
        k.says(&["delete", "deploy", &name], "deleted");
    }
}
