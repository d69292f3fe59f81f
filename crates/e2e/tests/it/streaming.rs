//! `kubectl exec`, `attach` and `port-forward` on simulated pods, through the apiserver's
//! upgrade proxy to the kubelet-agent: with kubectl 1.33 (WebSocket `v5.channel.k8s.io`, and
//! SPDY tunnelled in WebSocket for port-forward) and kubectl 1.27 (SPDY/3.1), each the
//! oracle of its protocol.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rkube_e2e::{Cluster, Opts};

use crate::builtin::kubectl;
use crate::kubectl::{contains, kubectl_beside, manifest, Kubectl};

const POD: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {mode: fast, greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Service
metadata: {name: web-svc}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: web
    image: nginx:1.27
    ports: [{containerPort: 80}]
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: app-config, key: greeting}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    - {name: LITERAL, value: "x-$(GREETING)"}
    envFrom: [{prefix: CFG_, configMapRef: {name: app-config}}]
    volumeMounts:
    - {name: config, mountPath: /etc/config}
    - {name: creds, mountPath: /etc/creds, readOnly: true}
    - {name: info, mountPath: /etc/podinfo}
  - name: api
    image: example/api:1
    ports: [{containerPort: 8080}]
  volumes:
  - {name: config, configMap: {name: app-config}}
  - {name: creds, secret: {secretName: creds}}
  - name: info
    downwardAPI:
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]
"#;

/// Runs kubectl with `stdin` fed in; (stdout, stderr, exit code).
fn with_stdin(k: &Kubectl<'_>, args: &[&str], stdin: &str) -> (String, String, i32) {
    let mut child = k
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// `kubectl port-forward pod/web :<port>`, then one HTTP GET through the forwarded port: the
/// answer, and what kubectl said on stderr.
fn forward_and_get(k: &Kubectl<'_>, port: u16, path: &str) -> (String, String) {
    let mut child = k
        .command(&["port-forward", "pod/web", &format!(":{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let local = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                // "Forwarding from 127.0.0.1:40123 -> 80"
                if let Some(p) = line
                    .strip_prefix("Forwarding from 127.0.0.1:")
                    .and_then(|r| r.split_whitespace().next())
                {
                    break p.parse::<u16>().unwrap();
                }
            }
            Err(_) => {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{} port-forward never said where: {}",
                    k.bin,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    };
    let mut answer = String::new();
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", local)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (answer, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn check_exec(k: &Kubectl<'_>) {
    let env = k.ok(&["exec", "web", "-c", "web", "--", "env"]);
    for line in [
        "GREETING=hello\n",
        "POD_NAME=web\n",
        "PASSWORD=s3cret\n",
        "LITERAL=x-hello\n",
        "CFG_mode=fast\n",
        "HOSTNAME=web\n",
        "WEB_SVC_SERVICE_PORT_HTTP=80\n",
    ] {
        contains(&env, line);
    }
    contains(&env, "WEB_SVC_SERVICE_HOST=");
    assert_eq!(k.ok(&["exec", "web", "--", "hostname"]), "web\n");
    assert_eq!(
        k.ok(&["exec", "web", "--", "printenv", "GREETING"]),
        "hello\n"
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "cat", "/etc/config/mode"]),
        "fast"
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "ls", "/etc/config"]),
        "greeting\nmode\n"
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "cat", "/etc/creds/password"]),
        "s3cret"
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "cat", "/etc/podinfo/labels"]),
        "app=\"web\""
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "echo", "one", "two"]),
        "one two\n"
    );
    contains(&k.ok(&["exec", "web", "--", "id"]), "uid=0(root)");
    // The projected service-account volume: a bound token, the cluster's CA, the namespace.
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(
        k.ok(&["exec", "web", "--", "ls", sa]),
        "ca.crt\nnamespace\ntoken\n"
    );
    assert_eq!(
        k.ok(&["exec", "web", "--", "cat", &format!("{sa}/namespace")]),
        "default"
    );
    assert!(k
        .ok(&["exec", "web", "--", "cat", &format!("{sa}/token")])
        .starts_with("eyJ"));
    contains(
        &k.ok(&["exec", "web", "--", "cat", &format!("{sa}/ca.crt")]),
        "BEGIN CERTIFICATE",
    );
    contains(&k.ok(&["exec", "web", "--", "date"]), " UTC ");
    assert_eq!(k.ok(&["exec", "web", "--", "true"]), "");
    // The other container: its own view.
    let (out, _, code) = with_stdin(
        k,
        &["exec", "web", "-c", "api", "--", "printenv", "GREETING"],
        "",
    );
    assert_eq!((out.as_str(), code), ("", 1));
    // Exit codes come back as kubectl's own.
    let (out, err, code) = with_stdin(
        k,
        &["exec", "web", "--", "sh", "-c", "echo $GREETING; exit 3"],
        "",
    );
    assert_eq!((out.as_str(), code), ("hello\n", 3), "{err}");
    contains(&err, "command terminated with exit code 3");
    assert_eq!(with_stdin(k, &["exec", "web", "--", "false"], "").2, 1);
    assert_eq!(
        k.ok(&[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "env | grep ^GREET | sort | head -n 1"
        ]),
        "GREETING=hello\n"
    );
    assert_eq!(
        k.ok(&[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "env | grep GREETING= | wc -l"
        ]),
        "1\n"
    );
    let (_, err, code) = with_stdin(k, &["exec", "web", "--", "sh", "-c", "nosuch"], "");
    assert_eq!(code, 127, "{err}");
    contains(&err, "nosuch: command not found");
    assert_eq!(
        with_stdin(k, &["exec", "web", "--", "curl", "x"], "").2,
        127
    );
    // A sleeping command takes its time.
    let started = Instant::now();
    k.ok(&["exec", "web", "--", "sleep", "1"]);
    assert!(started.elapsed() >= Duration::from_secs(1));
    // A shell reading stdin.
    let (out, err, code) = with_stdin(
        k,
        &["exec", "-i", "web", "--", "sh"],
        "echo hi\ncd /etc/config\nls\nexit 4\necho never\n",
    );
    assert_eq!((out.as_str(), code), ("hi\ngreeting\nmode\n", 4), "{err}");
    // kubectl cp out of the pod: a file, and a directory.
    let dest = k.c.dir.path().join(format!("cp-{}", k.bin.len()));
    let file = dest.join("mode");
    std::fs::create_dir_all(&dest).unwrap();
    k.ok(&[
        "cp",
        "web:/etc/config/mode",
        file.to_str().unwrap(),
        "-c",
        "web",
    ]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "fast");
    let dir = dest.join("cfg");
    k.ok(&["cp", "web:/etc/config", dir.to_str().unwrap(), "-c", "web"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("greeting")).unwrap(),
        "hello"
    );
    // What cannot be exec'ed into.
    contains(
        &k.fails(&["exec", "web", "-c", "nope", "--", "true"]),
        "container nope is not valid for pod web",
    );
}

fn check_port_forward(k: &Kubectl<'_>) {
    let (page, err) = forward_and_get(k, 80, "/");
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}\n{err}");
    contains(&page, "<title>Welcome to nginx!</title>");
    let (api, err) = forward_and_get(k, 8080, "/healthz");
    contains(
        &api,
        "Hello from web (example/api:1) on port 8080: GET /healthz",
    );
    assert!(err.is_empty() || !err.contains("error"), "{err}");
    // A port nothing listens on: the connection closes, kubectl says why.
    let (nothing, err) = forward_and_get(k, 81, "/");
    assert_eq!(nothing, "");
    contains(&err, "error forwarding port 81");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_port_forward_reach_the_simulated_containers() {
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    k.ok(&["apply", "-f", &manifest(&c, "web.yaml", POD)]);
    k.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    // kubectl 1.33 speaks WebSocket; 1.27 only SPDY.
    let mut clients = vec![k];
    if let Some(old) = kubectl_beside("1.27") {
        clients.push(Kubectl { c: &c, bin: old });
    } else {
        eprintln!("SKIPPED for SPDY: no kubectl.1.27 beside kubectl");
    }
    for k in &clients {
        check_exec(k);
        check_port_forward(k);
    }
    let k = &clients[0];
    // A container running a shell on its stdin: `kubectl attach -i` talks to it.
    k.ok(&[
        "run",
        "shell",
        "--image=busybox",
        "--stdin",
        // Its stdin stays open between attaches (else the first detach would end the shell).
        "--leave-stdin-open",
        "--restart=Always",
        "--",
        "sh",
    ]);
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/shell",
        "--timeout=60s",
    ]);
    for k in &clients {
        let (out, err, code) =
            with_stdin(k, &["attach", "-i", "shell"], "echo attached\nhostname\n");
        assert_eq!(code, 0, "{err}");
        contains(&out, "attached\nshell\n");
    }
    // `kubectl run -i --rm`: the container is the shell; `exit 3` ends it, its pod and kubectl
    // with that code, and the pod goes.
    let (out, err, code) = with_stdin(
        k,
        &[
            "run",
            "once",
            "-i",
            "--rm",
            "--restart=Never",
            "--image=busybox",
            "--",
            "sh",
        ],
        "echo from-the-shell\nexit 3\n",
    );
    contains(&out, "from-the-shell\n");
    assert_eq!(code, 3, "{out}{err}");
    crate::builtin::eventually("the --rm pod deleted", || {
        !k.run(&["get", "pod", "once"]).status.success()
    });
    // `kubectl debug -i`: an ephemeral container running a shell, attached; it ends at `exit`.
    let (out, err, code) = with_stdin(
        k,
        &[
            "debug",
            "-i",
            "web",
            "--image=busybox",
            "--container=dbg",
            "--",
            "sh",
        ],
        "echo from-debug\nexit 0\n",
    );
    assert_eq!(code, 0, "{out}{err}");
    contains(&out, "from-debug\n");
    crate::builtin::eventually("the debug container terminated", || {
        k.jsonpath(
            &["pod", "web"],
            "{.status.ephemeralContainerStatuses[?(@.name==\"dbg\")].state.terminated.reason}",
        ) == "Completed"
    });
    // A finished pod cannot be exec'ed into.
    k.ok(&[
        "run",
        "done",
        "--image=busybox",
        "--restart=Never",
        "--",
        "true",
    ]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/done",
        "--timeout=60s",
    ]);
    contains(
        &k.fails(&["exec", "done", "--", "true"]),
        "cannot exec into a container in a completed pod; current phase is Succeeded",
    );
    // The kubelet's port is not the way in: without the apiserver's certificate, no exec.
    let node_port = k.jsonpath(
        &["node", "node-1"],
        "{.status.daemonEndpoints.kubeletEndpoint.Port}",
    );
    let out = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("https://127.0.0.1:{node_port}/exec/default/web/web?command=env&output=1"),
        ])
        .output();
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    }
}

/// A virtualenv with the official Python client (`kubernetes` from PyPI) and pytest under `target/`,
/// made once; `None` where Python or PyPI is unavailable, having said so (the caller skips).
pub(crate) fn python_client() -> Option<std::path::PathBuf> {
    let venv = rkube_e2e::workspace_root().join("target/python-client");
    let python = venv.join("bin/python");
    let ready = |p: &std::path::Path| {
        Command::new(p)
            .args(["-c", "import kubernetes, pytest"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "kubernetes", "pytest"])
            .status()
            .is_ok_and(|s| s.success());
    let got = (made && ready(&python)).then_some(python);
    if got.is_none() {
        eprintln!("SKIPPED: no Python 3 with venv, pip and PyPI to install the kubernetes client and pytest");
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_execs_and_forwards_ports() {
    let Some(python) = python_client() else {
        return;
    };
    let c = Cluster::start(Opts::default()).await;
    let k = kubectl(&c);
    k.ok(&["run", "web", "--image=nginx:1.27", "--port=80"]);
    k.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=60s"]);
    let out = Command::new(python)
        .arg(rkube_e2e::workspace_root().join("crates/e2e/testdata/python-stream.py"))
        .arg(&c.kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // WebSocket v4 channels for exec (with its exit code) and for port-forward.
    contains(&text, "EXEC web\n");
    contains(&text, "STDOUT out\n");
    contains(&text, "CODE 3\n");
    contains(&text, "PF HTTP/1.1 200 OK True\n");
}
