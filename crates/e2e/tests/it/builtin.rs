//! The whole built-in API through stock kubectl on the real binaries: `api-resources`
//! compared row for row with a 1.33 server's (testdata), a manifest with one object of every
//! kind applied client-side and server-side (every pod Running, every Service with
//! endpoints), and the kubectl commands that create, expose, print and describe the new kinds.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rkube_e2e::{workspace_root, Cluster, Opts};

use crate::kubectl::{contains, kubectl_beside, Kubectl};

/// Resources a 1.33 server lists that rkube does not serve yet, each with where it comes.
const NOT_YET: &[(&str, &str)] = &[];

/// `kubectl api-resources -o wide` rows by (name, apiVersion), cells cut at the header's
/// column starts.
fn rows(text: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let starts: Vec<usize> = [
        "NAME",
        "SHORTNAMES",
        "APIVERSION",
        "NAMESPACED",
        "KIND",
        "VERBS",
        "CATEGORIES",
    ]
    .iter()
    .map(|h| {
        header
            .find(h)
            .unwrap_or_else(|| panic!("no {h} column in {header:?}"))
    })
    .collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<String> = starts
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let end = starts.get(i + 1).copied().unwrap_or(l.len()).min(l.len());
                    l.get((*s).min(l.len())..end)
                        .unwrap_or("")
                        .trim()
                        .to_string()
                })
                .collect();
            ((cells[0].clone(), cells[2].clone()), cells)
        })
        .collect()
}

pub(crate) fn kubectl(c: &Cluster) -> Kubectl<'_> {
    Kubectl {
        c,
        bin: kubectl_beside("1.33").unwrap_or_else(|| "kubectl".into()),
    }
}

/// Waits until `f` returns true, up to 90 s.
pub(crate) fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_match_a_1_33_server() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    let expected = std::fs::read_to_string(
        workspace_root().join("crates/e2e/testdata/api-resources-1.33.txt"),
    )
    .unwrap();
    let got = rows(&k.ok(&["api-resources", "-o", "wide"]));
    let want = rows(&expected);
    let mut differences = Vec::new();
    for (key, cells) in &want {
        match got.get(key) {
            Some(g) if g == cells => {}
            Some(g) => differences.push(format!("{key:?}: want {cells:?}, got {g:?}")),
            None if NOT_YET.iter().any(|(n, _)| *n == key.0) => {}
            None => differences.push(format!("{key:?}: missing")),
        }
    }
    for key in got.keys() {
        if !want.contains_key(key) {
            differences.push(format!("{key:?}: not served by 1.33"));
        }
    }
    assert!(
        differences.is_empty(),
        "api-resources differ from 1.33:\n{}",
        differences.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_applies_and_serves() {
    let c = Cluster::start(Opts {
        nodes: 1,
        ..Default::default()
    })
    .await;
    let k = kubectl(&c);
    let template =
        std::fs::read_to_string(workspace_root().join("crates/e2e/testdata/every-kind.yaml"))
            .unwrap();
    for (ns, server_side) in [("kinds-csa", false), ("kinds-ssa", true)] {
        k.ok(&["create", "namespace", ns]);
        let file = crate::kubectl::manifest(
            &c,
            &format!("{ns}.yaml"),
            &template.replace("NAMESPACE", ns),
        );
        let mut args = vec!["apply", "-f", &file];
        if server_side {
            args.push("--server-side");
        }
        let out = k.ok(&args);
        let applied = out.lines().count();
        assert_eq!(
            applied,
            template.matches("\nkind: ").count() + usize::from(template.starts_with("kind: ")),
            "{out}"
        );
        // Applied again: accepted, and the objects without defaulted atomic lists or
        // write-only fields unchanged.
        let again = k.ok(&args);
        if !server_side {
            for unchanged in [
                "deployment.apps/web",
                "service/web ",
                "job.batch/migrate",
                "ingress.networking.k8s.io/web",
            ] {
                let line = again
                    .lines()
                    .find(|l| l.starts_with(unchanged.trim()))
                    .unwrap_or("");
                assert!(line.ends_with("unchanged"), "{unchanged}: {again}");
            }
        }
        eventually("two web pods Running", || {
            let phases = k.jsonpath(
                &["pods", "-n", ns, "-l", "app=web"],
                "{.items[*].status.phase}",
            );
            phases
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                == 2
        });
        for svc in ["web", "web-nodeport", "web-headless"] {
            eventually(&format!("{svc}'s endpoints"), || {
                let ips = k.jsonpath(
                    &["endpoints", svc, "-n", ns],
                    "{.subsets[*].addresses[*].ip}",
                );
                ips.split_whitespace().count() == 2
            });
        }
        let port = k.jsonpath(
            &["endpoints", "web", "-n", ns],
            "{.subsets[0].ports[0].port}",
        );
        assert_eq!(port, "80", "the named target port resolved");
        let slices = k.ok(&[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            "kubernetes.io/service-name=web",
        ]);
        contains(&slices, "IPv4");
        let ip = k.jsonpath(&["service", "web", "-n", ns], "{.spec.clusterIP}");
        assert!(ip.starts_with("10."), "{ip}");
        let node_port: u32 = k
            .jsonpath(
                &["service", "web-nodeport", "-n", ns],
                "{.spec.ports[0].nodePort}",
            )
            .parse()
            .unwrap();
        assert!((30000..=32767).contains(&node_port));
        let all = k.ok(&["get", "all", "-n", ns]);
        for needle in [
            "service/web ",
            "deployment.apps/web",
            "statefulset.apps/db",
            "daemonset.apps/agent",
            "cronjob.batch/nightly",
            "job.batch/migrate",
            "horizontalpodautoscaler.autoscaling/web",
            "replicationcontroller/legacy",
        ] {
            contains(&all, needle);
        }
        k.says(&["get", "sa", "-n", ns], "default");
        k.says(
            &["get", "configmap", "kube-root-ca.crt", "-n", ns],
            "kube-root-ca.crt",
        );
        // The claim of the default class is bound at once; the WaitForFirstConsumer one once
        // its pod was scheduled, to a volume on the pod's node.
        eventually("both claims bound", || {
            k.jsonpath(&["pvc", "-n", ns], "{.items[*].status.phase}") == "Bound Bound"
        });
        eventually("the pod using the local claim Running", || {
            k.jsonpath(&["pod", "uses-local", "-n", ns], "{.status.phase}") == "Running"
        });
        let node = k.jsonpath(&["pod", "uses-local", "-n", ns], "{.spec.nodeName}");
        let pv = k.jsonpath(&["pvc", "local", "-n", ns], "{.spec.volumeName}");
        let pinned = k.jsonpath(
            &["pv", &pv],
            "{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}",
        );
        assert_eq!(pinned, node);
        k.says(&["get", "events.events.k8s.io", "-n", ns], "Deployed");
    }
    k.ok(&[
        "delete",
        "namespace",
        "kinds-csa",
        "--wait=true",
        "--timeout=90s",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_exposes_and_describes_the_new_kinds() {
    let c = Cluster::start(Opts {
        nodes: 1,
        ..Default::default()
    })
    .await;
    let k = kubectl(&c);
    k.says(&["get", "svc", "kubernetes"], "10.96.0.1");
    k.says(&["get", "endpoints", "kubernetes"], ":");
    k.says(
        &["create", "deployment", "web", "--image=nginx", "--port=80"],
        "created",
    );
    k.says(
        &[
            "expose",
            "deployment",
            "web",
            "--port=8080",
            "--target-port=80",
        ],
        "service/web exposed",
    );
    k.ok(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    // The ServiceAccount plugin mounted the account's token in the pod.
    k.says(
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].spec.containers[0].volumeMounts[0].mountPath}",
        ],
        "/var/run/secrets/kubernetes.io/serviceaccount",
    );
    k.says(
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].spec.volumes[0].name}",
        ],
        "kube-api-access-",
    );
    // An autoscaler, read through both versions of its group.
    k.says(
        &[
            "autoscale",
            "deployment",
            "web",
            "--max=5",
            "--cpu-percent=60",
        ],
        "autoscaled",
    );
    k.says(
        &[
            "get",
            "horizontalpodautoscalers.v1.autoscaling",
            "web",
            "-o",
            "jsonpath={.spec.targetCPUUtilizationPercentage}",
        ],
        "60",
    );
    k.says(
        &[
            "get",
            "horizontalpodautoscalers.v2.autoscaling",
            "web",
            "-o",
            "jsonpath={.spec.metrics[0].resource.target.averageUtilization}",
        ],
        "60",
    );
    eventually("web's endpoints", || {
        k.ok(&["get", "endpoints", "web"]).contains(":80")
    });
    k.ok(&[
        "wait",
        "--for=jsonpath={.subsets[0].addresses[0].ip}",
        "endpoints/web",
        "--timeout=30s",
    ]);
    k.says(
        &["create", "service", "clusterip", "cip", "--tcp=80:8080"],
        "service/cip created",
    );
    k.says(
        &[
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=80:8080",
            "--node-port=30123",
        ],
        "service/np created",
    );
    k.says(&["get", "svc", "np"], "80:30123/TCP");
    k.says(
        &[
            "create",
            "service",
            "externalname",
            "ext",
            "--external-name=db.example.com",
        ],
        "service/ext created",
    );
    k.says(&["get", "svc", "ext"], "db.example.com");
    let refused = k.fails(&[
        "create",
        "service",
        "nodeport",
        "np2",
        "--tcp=80:8080",
        "--node-port=30123",
    ]);
    contains(&refused, "provided port is already allocated");
    k.says(
        &["create", "job", "once", "--image=busybox", "--", "true"],
        "job.batch/once created",
    );
    k.says(&["get", "job", "once", "-o", "wide"], "controller-uid=");
    k.says(
        &[
            "create",
            "cronjob",
            "tick",
            "--image=busybox",
            "--schedule=*/5 * * * *",
            "--",
            "true",
        ],
        "cronjob.batch/tick created",
    );
    k.says(&["get", "cj", "tick"], "*/5 * * * *");
    k.says(
        &[
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=1",
        ],
        "poddisruptionbudget.policy/web created",
    );
    k.says(
        &[
            "create",
            "priorityclass",
            "high",
            "--value=1000",
            "--description=high",
        ],
        "priorityclass.scheduling.k8s.io/high created",
    );
    k.says(&["get", "pc"], "system-node-critical");
    k.says(
        &[
            "create",
            "ingress",
            "web",
            "--rule=web.example.com/=web:8080",
        ],
        "ingress.networking.k8s.io/web created",
    );
    k.says(&["get", "ing", "web"], "web.example.com");
    k.says(
        &["create", "serviceaccount", "robot"],
        "serviceaccount/robot created",
    );
    k.says(
        &[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods",
        ],
        "role.rbac.authorization.k8s.io/reader created",
    );
    k.says(
        &[
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=default:robot",
        ],
        "rolebinding.rbac.authorization.k8s.io/reader created",
    );
    k.says(&["get", "all"], "service/web");
    k.says(&["get", "apiservices"], "Local");
    let cs = k.ok(&["get", "cs"]);
    contains(&cs, "MESSAGE");
    let etcd = cs.lines().find(|l| l.starts_with("etcd-0")).unwrap_or("");
    contains(etcd, "Healthy");
    for what in [
        ["svc", "web"],
        ["endpoints", "web"],
        ["job", "once"],
        ["cronjob", "tick"],
        ["pdb", "web"],
        ["ingress", "web"],
        ["priorityclass", "high"],
        ["sa", "robot"],
    ] {
        let out = k.ok(&["describe", what[0], what[1]]);
        contains(&out, "Name:");
        contains(&out, what[1]);
    }
    k.says(&["describe", "svc", "web"], "Endpoints:");
    // A ServiceAccount's token, used by a kubectl with nothing else to show.
    let token = k
        .ok(&["create", "token", "robot", "--duration=10m"])
        .trim()
        .to_string();
    let server = k.ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let ca = k.ok(&[
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let ca_file = c.dir.path().join("ca.crt");
    use base64::Engine as _;
    std::fs::write(
        &ca_file,
        base64::engine::general_purpose::STANDARD
            .decode(ca.trim())
            .unwrap(),
    )
    .unwrap();
    let as_robot = |args: &[&str]| {
        let out = std::process::Command::new(&k.bin)
            .args([
                "--kubeconfig=/dev/null",
                &format!("--server={server}"),
                &format!("--certificate-authority={}", ca_file.display()),
                &format!("--token={token}"),
            ])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, who) = as_robot(&["auth", "whoami"]);
    assert!(ok, "{who}");
    contains(&who, "system:serviceaccount:default:robot");
    let (ok, pods) = as_robot(&["get", "pods"]);
    assert!(ok, "the rolebinding lets it read pods: {pods}");
    let (ok, denied) = as_robot(&["get", "secrets"]);
    assert!(!ok && denied.contains("forbidden"), "{denied}");
    // A client certificate through a CertificateSigningRequest: approved, signed, usable.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "devs");
    let csr_pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: alice}}\nspec:\n  request: {}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [client auth]\n",
        base64::engine::general_purpose::STANDARD.encode(&csr_pem)
    );
    let file = crate::kubectl::manifest(&c, "csr.yaml", &csr);
    k.says(
        &["create", "-f", &file],
        "certificatesigningrequest.certificates.k8s.io/alice created",
    );
    k.says(&["get", "csr", "alice"], "Pending");
    k.says(&["certificate", "approve", "alice"], "approved");
    eventually("the certificate issued", || {
        k.ok(&["get", "csr", "alice"]).contains("Approved,Issued")
    });
    let cert = k.jsonpath(&["csr", "alice"], "{.status.certificate}");
    let cert_file = c.dir.path().join("alice.crt");
    let key_file = c.dir.path().join("alice.key");
    std::fs::write(
        &cert_file,
        base64::engine::general_purpose::STANDARD
            .decode(cert.trim())
            .unwrap(),
    )
    .unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let out = std::process::Command::new(&k.bin)
        .args([
            "--kubeconfig=/dev/null",
            &format!("--server={server}"),
            &format!("--certificate-authority={}", ca_file.display()),
            &format!("--client-certificate={}", cert_file.display()),
            &format!("--client-key={}", key_file.display()),
            "auth",
            "whoami",
        ])
        .output()
        .unwrap();
    let who =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{who}");
    contains(&who, "alice");
    contains(&who, "devs");
    // Impersonation, as an administrator may.
    assert_eq!(
        k.ok(&[
            "auth",
            "can-i",
            "get",
            "pods",
            "--as=system:serviceaccount:default:robot"
        ])
        .trim(),
        "yes"
    );
    assert_eq!(
        k.run(&[
            "auth",
            "can-i",
            "delete",
            "pods",
            "--as=system:serviceaccount:default:robot"
        ])
        .status
        .code(),
        Some(1)
    );
    k.says(&["events"], "ScalingReplicaSet");
}
