//! What runs for a cluster: its [`Spec`] turned into processes — each a program, its
//! arguments and how to tell it is ready — in start order (storage, apiserver, controllers,
//! nodes). Pure: the same spec always gives the same plan, so `cluster start` brings back
//! exactly what `cluster create` started.

use std::path::{Path, PathBuf};

use super::home::{Home, Spec};

/// When a process counts as ready.
#[derive(Clone, Debug, PartialEq)]
pub enum Ready {
    /// Its port accepts connections.
    Listening(u16),
    /// The apiserver's `/readyz` answers 200 (asked with the admin's credentials).
    Apiserver,
    /// `GET http://127.0.0.1:PORT/readyz` answers 200.
    Readyz(u16),
    /// The node is Ready in the API.
    Node(String),
}

/// The step a process belongs to (what progress lines group).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Storage,
    Apiserver,
    Controllers,
    Nodes,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Proc {
    /// `store`, `etcd`, `apiserver`, `controller-manager`, `scheduler`, `node-<i>`.
    pub name: String,
    pub stage: Stage,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub ready: Ready,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Every process of `spec`, in start order. `rkube` is this binary (its components run as
/// `rkube store …`, `rkube apiserver …`); `etcd` the etcd program when `spec.etcd`.
pub fn processes(spec: &Spec, home: &Home, rkube: &Path, etcd: &Path) -> Vec<Proc> {
    let mut out = vec![
        storage(spec, home, rkube, etcd),
        apiserver(spec, home, rkube),
    ];
    out.extend(controllers(spec, home, rkube));
    out.extend((0..spec.nodes).map(|i| node(spec, home, rkube, i)));
    out
}

fn rkube_proc(
    name: &str,
    stage: Stage,
    rkube: &Path,
    sub: &str,
    args: Vec<String>,
    ready: Ready,
) -> Proc {
    let mut all = vec![sub.to_string()];
    all.extend(args);
    Proc {
        name: name.into(),
        stage,
        program: rkube.to_path_buf(),
        args: all,
        ready,
    }
}

fn storage(spec: &Spec, home: &Home, rkube: &Path, etcd: &Path) -> Proc {
    let url = spec.store_url();
    let data = s(&home.data(spec.etcd));
    if spec.etcd {
        let peer = format!("http://127.0.0.1:{}", spec.ports.store_peer);
        return Proc {
            name: "etcd".into(),
            stage: Stage::Storage,
            program: etcd.to_path_buf(),
            args: vec![
                "--name".into(),
                "default".into(),
                "--data-dir".into(),
                data,
                "--listen-client-urls".into(),
                url.clone(),
                "--advertise-client-urls".into(),
                url,
                "--listen-peer-urls".into(),
                peer.clone(),
                "--initial-advertise-peer-urls".into(),
                peer.clone(),
                "--initial-cluster".into(),
                format!("default={peer}"),
                "--experimental-watch-progress-notify-interval".into(),
                "5s".into(),
            ],
            ready: Ready::Listening(spec.ports.store),
        };
    }
    let mut args = vec![
        "--data-dir".into(),
        data,
        "--listen-client-urls".into(),
        url,
    ];
    if spec.secure {
        let pki = home.pki();
        args.extend([
            "--cert-file".into(),
            s(&pki.join("store.crt")),
            "--key-file".into(),
            s(&pki.join("store.key")),
            "--trusted-ca-file".into(),
            s(&pki.join("ca.crt")),
            "--client-cert-auth".into(),
            "--client-cert-allowed-cn".into(),
            "kube-apiserver-etcd-client".into(),
        ]);
    }
    rkube_proc(
        "store",
        Stage::Storage,
        rkube,
        "store",
        args,
        Ready::Listening(spec.ports.store),
    )
}

fn apiserver(spec: &Spec, home: &Home, rkube: &Path) -> Proc {
    let mut args = vec![
        "--etcd-servers".into(),
        spec.store_url(),
        "--bind-address".into(),
        "127.0.0.1".into(),
        "--secure-port".into(),
        spec.ports.apiserver.to_string(),
    ];
    if spec.secure {
        let pki = home.pki();
        let f = |n: &str| s(&pki.join(n));
        args.extend([
            "--tls-cert-file".into(),
            f("apiserver.crt"),
            "--tls-private-key-file".into(),
            f("apiserver.key"),
            "--client-ca-file".into(),
            f("ca.crt"),
            "--authorization-mode".into(),
            "Node,RBAC".into(),
            "--enable-priority-and-fairness=true".into(),
            "--enable-admission-plugins".into(),
            "NodeRestriction".into(),
            "--kubelet-client-certificate".into(),
            f("apiserver-kubelet-client.crt"),
            "--kubelet-client-key".into(),
            f("apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority".into(),
            f("ca.crt"),
        ]);
        if !spec.etcd {
            args.extend([
                "--etcd-cafile".into(),
                f("ca.crt"),
                "--etcd-certfile".into(),
                f("apiserver-etcd-client.crt"),
                "--etcd-keyfile".into(),
                f("apiserver-etcd-client.key"),
            ]);
        }
    }
    rkube_proc(
        "apiserver",
        Stage::Apiserver,
        rkube,
        "apiserver",
        args,
        Ready::Apiserver,
    )
}

/// The kubeconfig `who` uses (its own identity when secure, the open one otherwise).
fn kubeconfig_of(spec: &Spec, home: &Home, who: &str) -> String {
    if spec.secure {
        s(&home.pki().join(format!("{who}.kubeconfig")))
    } else {
        s(&home.kubeconfig())
    }
}

fn controllers(spec: &Spec, home: &Home, rkube: &Path) -> [Proc; 2] {
    let mut cm = vec![
        "--kubeconfig".into(),
        kubeconfig_of(spec, home, "controller-manager"),
        "--secure-port".into(),
        spec.ports.controller_manager.to_string(),
    ];
    if spec.secure {
        cm.extend([
            "--cluster-signing-cert-file".into(),
            s(&home.pki().join("ca.crt")),
            "--cluster-signing-key-file".into(),
            s(&home.pki().join("ca.key")),
        ]);
    }
    let sched = vec![
        "--kubeconfig".into(),
        kubeconfig_of(spec, home, "scheduler"),
        "--secure-port".into(),
        spec.ports.scheduler.to_string(),
    ];
    [
        rkube_proc(
            "controller-manager",
            Stage::Controllers,
            rkube,
            "controller-manager",
            cm,
            Ready::Readyz(spec.ports.controller_manager),
        ),
        rkube_proc(
            "scheduler",
            Stage::Controllers,
            rkube,
            "scheduler",
            sched,
            Ready::Readyz(spec.ports.scheduler),
        ),
    ]
}

/// Node `i` (0-based): one kubelet-agent process per node, so nodes come and go one by one.
pub fn node(spec: &Spec, home: &Home, rkube: &Path, i: usize) -> Proc {
    let name = Spec::node_name(i);
    let mut args = vec![
        "--kubeconfig".into(),
        kubeconfig_of(spec, home, &format!("node-{name}")),
        "--node-name".into(),
        name.clone(),
        "--node-index".into(),
        i.to_string(),
        "--port".into(),
        spec.ports.nodes[i].to_string(),
    ];
    if spec.secure {
        let pki = home.pki();
        args.extend([
            "--tls-cert-file".into(),
            s(&pki.join("kubelet.crt")),
            "--tls-private-key-file".into(),
            s(&pki.join("kubelet.key")),
            "--client-ca-file".into(),
            s(&pki.join("ca.crt")),
        ]);
    }
    rkube_proc(
        &format!("node-{}", i + 1),
        Stage::Nodes,
        rkube,
        "kubelet-agent",
        args,
        Ready::Node(name),
    )
}

#[cfg(test)]
mod tests {
    use super::super::home::Ports;
    use super::*;

    fn spec(secure: bool, etcd: bool) -> Spec {
        Spec {
            name: "dev".into(),
            nodes: 2,
            etcd,
            secure,
            ports: Ports {
                apiserver: 6443,
                store: 2379,
                store_peer: 2380,
                controller_manager: 10257,
                scheduler: 10259,
                nodes: vec![10250, 10251],
            },
            created: 0,
        }
    }

    fn home() -> Home {
        Home {
            dir: PathBuf::from("/h/clusters/dev"),
        }
    }

    #[test]
    fn processes_start_storage_first_and_nodes_last() {
        let p = processes(
            &spec(true, false),
            &home(),
            Path::new("/bin/rkube"),
            Path::new("etcd"),
        );
        let names: Vec<_> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "store",
                "apiserver",
                "controller-manager",
                "scheduler",
                "node-1",
                "node-2"
            ]
        );
        assert!(p.windows(2).all(|w| w[0].stage <= w[1].stage));
        assert_eq!(
            p[4].args[..7],
            [
                "kubelet-agent",
                "--kubeconfig",
                "/h/clusters/dev/pki/node-rkube-node-1.kubeconfig",
                "--node-name",
                "rkube-node-1",
                "--node-index",
                "0"
            ]
        );
    }

    #[test]
    fn secure_storage_needs_the_apiservers_client_certificate() {
        let p = processes(
            &spec(true, false),
            &home(),
            Path::new("rkube"),
            Path::new("etcd"),
        );
        assert!(p[0].args.contains(&"--client-cert-auth".to_string()));
        assert!(p[1].args.contains(&"--etcd-certfile".to_string()));
        assert!(p[1].args.contains(&"https://127.0.0.1:2379".to_string()));
        // etcd stays plain on loopback.
        let e = processes(
            &spec(true, true),
            &home(),
            Path::new("rkube"),
            Path::new("/usr/bin/etcd"),
        );
        assert_eq!(e[0].program, Path::new("/usr/bin/etcd"));
        assert!(e[0]
            .args
            .contains(&"default=http://127.0.0.1:2380".to_string()));
        assert!(!e[1].args.contains(&"--etcd-certfile".to_string()));
        assert!(e[1].args.contains(&"http://127.0.0.1:2379".to_string()));
    }

    #[test]
    fn the_open_configuration_shares_one_kubeconfig() {
        let p = processes(
            &spec(false, false),
            &home(),
            Path::new("rkube"),
            Path::new("etcd"),
        );
        for proc in &p[2..] {
            assert!(
                proc.args
                    .contains(&"/h/clusters/dev/kubeconfig".to_string()),
                "{proc:?}"
            );
            assert!(!proc.args.iter().any(|a| a.contains("pki")), "{proc:?}");
        }
    }
}
