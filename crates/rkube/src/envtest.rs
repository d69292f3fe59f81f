//! rkube as controller-runtime's envtest binaries: `rkube envtest-assets DIR` writes a
//! `KUBEBUILDER_ASSETS` directory whose `kube-apiserver` and `etcd` run `rkube envtest
//! kube-apiserver|etcd ARGS…`, which accept the flags envtest passes and answer its readiness
//! checks (controller-runtime `pkg/internal/testing/controlplane/{apiserver,etcd}.go`):
//!
//! - envtest first runs `kube-apiserver --help` (must exit 0; an `--insecure-port` line would
//!   make it pass `--insecure-port=0`, so none is listed) and `etcd --help` (an
//!   `--unsafe-no-fsync` line makes it pass `--unsafe-no-fsync=true`);
//! - flags come as `--name=value`, sorted, repeated for several values; users add their own
//!   (`--feature-gates`, `--runtime-config`, …), so flags rkube has no use for are accepted
//!   and named on stderr, never refused;
//! - the apiserver serves `<--cert-dir>/apiserver.crt|key` (envtest writes them, signed by a CA
//!   it keeps in memory), authenticates client certificates from `--client-ca-file`, and
//!   answers an anonymous `GET /healthz`; etcd answers `GET /health`; both are polled every
//!   100 ms and stopped with SIGTERM.
//!
//! With `--with-controllers` the apiserver process also runs rkube's controller-manager (as
//! `system:kube-controller-manager`, with a random bearer token only this process knows), so
//! owned objects are garbage-collected and namespaces finish deleting, unlike envtest's.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

#[derive(clap::Args, Debug, Clone)]
pub struct AssetsFlags {
    /// The directory to write (`KUBEBUILDER_ASSETS`).
    dir: PathBuf,
    /// The `kube-apiserver` also runs the controller-manager (garbage collection, namespace
    /// deletion, Deployments → ReplicaSets, …).
    #[arg(long)]
    with_controllers: bool,
    /// The kubectl to link as `kubectl` (default: the one on PATH).
    #[arg(long)]
    kubectl: Option<PathBuf>,
}

/// Writes the assets directory; returns the paths written.
pub fn write_assets(flags: &AssetsFlags) -> anyhow::Result<Vec<PathBuf>> {
    let rkube = std::env::current_exe().context("locating the rkube binary")?;
    let rkube = rkube.canonicalize().unwrap_or(rkube);
    std::fs::create_dir_all(&flags.dir)
        .with_context(|| format!("create {}", flags.dir.display()))?;
    let quoted = shell_quote(&rkube.to_string_lossy());
    let extra = if flags.with_controllers {
        " --with-controllers"
    } else {
        ""
    };
    let mut written = Vec::new();
    for (name, args) in [
        ("kube-apiserver", format!("kube-apiserver{extra}")),
        ("etcd", "etcd".to_string()),
    ] {
        let path = flags.dir.join(name);
        let script =
            format!("#!/bin/sh\n# rkube's stand-in for envtest's {name}\nexec {quoted} envtest {args} \"$@\"\n");
        write_executable(&path, &script)?;
        written.push(path);
    }
    let kubectl = match &flags.kubectl {
        Some(k) => Some(k.clone()),
        None => find_on_path("kubectl"),
    };
    let link = flags.dir.join("kubectl");
    let _ = std::fs::remove_file(&link);
    match kubectl {
        Some(k) => {
            #[cfg(unix)]
            std::os::unix::fs::symlink(&k, &link)
                .with_context(|| format!("link {} to {}", link.display(), k.display()))?;
            written.push(link);
        }
        None => eprintln!("rkube: no kubectl on PATH; the assets have none (pass --kubectl)"),
    }
    Ok(written)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn write_executable(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `--name=value`, `--name value` (when `takes_value(name)`) and bare `--name` (`true`), in
/// order; anything else (envtest's legacy templates leave empty arguments) is skipped.
pub fn parse_args(args: &[String], takes_value: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(arg) = it.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        if let Some((k, v)) = flag.split_once('=') {
            out.push((k.to_string(), v.to_string()));
        } else if takes_value(flag) && it.peek().is_some_and(|n| !n.starts_with('-')) {
            out.push((flag.to_string(), it.next().cloned().unwrap_or_default()));
        } else {
            out.push((flag.to_string(), "true".to_string()));
        }
    }
    out
}

/// The flags a clap command defines, with whether each takes a value.
fn known_flags(cmd: &clap::Command) -> Vec<(String, bool)> {
    cmd.get_arguments()
        .filter_map(|a| {
            let takes = a.get_action().takes_values();
            a.get_long().map(|l| (l.to_string(), takes))
        })
        .collect()
}

/// Flags envtest (or its users) pass that rkube has no use for: accepted silently.
const APISERVER_IGNORED: &[&str] = &[
    "allow-privileged",
    "insecure-port",
    "insecure-bind-address",
    "feature-gates",
    "runtime-config",
    "v",
];

/// The apiserver command line rkube runs for envtest's `kube-apiserver` arguments, and the
/// flags it did not understand (named to the user, not fatal).
pub fn apiserver_argv(args: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let known = known_flags(&rkube_apiserver::cli::Flags::command());
    let mut argv = vec!["kube-apiserver".to_string()];
    let mut unknown = Vec::new();
    let mut cert_dir = None;
    let has = |k: &str| args.iter().any(|(a, _)| a == k);
    for (k, v) in args {
        match k.as_str() {
            "cert-dir" => cert_dir = Some(PathBuf::from(v)),
            // Lists: the entries rkube has are kept, the others named (envtest users add
            // upstream's plugins and modes, e.g. `Webhook` authorization).
            "enable-admission-plugins" | "disable-admission-plugins" | "authorization-mode" => {
                let (keep, drop): (Vec<&str>, Vec<&str>) = v
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .partition(|name| match k.as_str() {
                        "authorization-mode" => {
                            rkube_apiserver::auth::Mode::parse_list(name).is_ok()
                        }
                        _ => rkube_apiserver::admission::is_known(name),
                    });
                unknown.extend(drop.iter().map(|d| format!("--{k} entry {d}")));
                if !keep.is_empty() {
                    argv.push(format!("--{k}={}", keep.join(",")));
                } else if k == "authorization-mode" && !drop.is_empty() {
                    // None rkube has: passed as given, so the apiserver refuses to start
                    // rather than fall back to its default, AlwaysAllow.
                    argv.push(format!("--{k}={v}"));
                }
            }
            k if APISERVER_IGNORED.contains(&k) => {}
            k if known.iter().any(|(name, _)| name == k) => argv.push(format!("--{k}={v}")),
            _ => unknown.push(format!("--{k}={v}")),
        }
    }
    // Upstream serves <cert-dir>/apiserver.crt|key when no --tls-cert-file is given.
    if let (Some(dir), false) = (cert_dir, has("tls-cert-file")) {
        argv.push(format!(
            "--tls-cert-file={}",
            dir.join("apiserver.crt").display()
        ));
        argv.push(format!(
            "--tls-private-key-file={}",
            dir.join("apiserver.key").display()
        ));
    }
    (argv, unknown)
}

/// `rkube envtest kube-apiserver|etcd ARGS…`.
pub async fn main(args: Vec<String>) -> anyhow::Result<()> {
    let (which, rest) = args
        .split_first()
        .context("usage: rkube envtest kube-apiserver|etcd [FLAGS…]")?;
    let help = rest.iter().any(|a| a == "--help" || a == "-h");
    match which.as_str() {
        "kube-apiserver" if help => {
            let mut cmd = rkube_apiserver::cli::Flags::command().name("kube-apiserver");
            println!("{}", cmd.render_long_help());
            println!(
                "      --cert-dir string   the directory holding apiserver.crt and apiserver.key"
            );
            Ok(())
        }
        "etcd" if help => {
            println!(
                "{}",
                rkube_store::cli::Flags::command()
                    .name("etcd")
                    .render_long_help()
            );
            println!(
                "      --unsafe-no-fsync   accepted: rkube's envtest etcd keeps its data in memory"
            );
            println!(
                "      --listen-peer-urls, --advertise-client-urls, --name   accepted and unused"
            );
            Ok(())
        }
        "kube-apiserver" => kube_apiserver(rest).await,
        "etcd" => etcd(rest).await,
        other => anyhow::bail!("rkube envtest: unknown binary {other:?} (kube-apiserver or etcd)"),
    }
}

async fn kube_apiserver(rest: &[String]) -> anyhow::Result<()> {
    use clap::Parser;
    let with_controllers = rest.iter().any(|a| a == "--with-controllers");
    let known = known_flags(&rkube_apiserver::cli::Flags::command());
    let takes = |k: &str| k == "cert-dir" || known.iter().any(|(n, t)| n == k && *t);
    let args: Vec<(String, String)> = parse_args(rest, takes)
        .into_iter()
        .filter(|(k, _)| k != "with-controllers")
        .collect();
    let (mut argv, unknown) = apiserver_argv(&args);
    for u in &unknown {
        eprintln!("rkube kube-apiserver: ignoring {u} (rkube has no such flag or value)");
    }
    let shutdown = rkube_daemon::shutdown_token();
    let mut token_dir = None;
    let mut controllers = None;
    if with_controllers {
        // The in-process controller-manager authenticates with a random token added to the
        // apiserver's token file (copying the user's, if they gave one).
        let token = format!("{:032x}", rand::random::<u128>());
        let dir = tempfile::Builder::new()
            .prefix("rkube-envtest-")
            .tempdir()?;
        let file = dir.path().join("tokens.csv");
        let mut text = match args.iter().find(|(k, _)| k == "token-auth-file") {
            Some((_, f)) => std::fs::read_to_string(f).with_context(|| f.clone())?,
            None => String::new(),
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "{token},system:kube-controller-manager,rkube-envtest-controller-manager\n"
        ));
        std::fs::write(&file, text)?;
        argv.retain(|a| !a.starts_with("--token-auth-file="));
        argv.push(format!("--token-auth-file={}", file.display()));
        token_dir = Some(dir);
        controllers = Some(token);
    }
    let flags = rkube_apiserver::cli::Flags::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("kube-apiserver flags: {e}"))?;
    let server = flags.url();
    if let Some(token) = controllers {
        let mut client = rkube_client::Config::new(server.clone());
        client.token = Some(token);
        // Same process, loopback: envtest keeps its serving CA in memory, so there is none
        // to verify against.
        client.insecure = server.starts_with("https://");
        client.user_agent = "rkube-controller-manager".into();
        let cm = rkube_controller_manager::Config::new(client);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => l,
                Err(e) => return tracing::error!(error = %e, "controller-manager: listen"),
            };
            if let Err(e) = rkube_controller_manager::run(cm, listener, stop).await {
                tracing::error!(error = %format!("{e:#}"), "controller-manager failed");
            }
        });
    }
    let result = rkube_apiserver::cli::run(flags, shutdown).await;
    drop(token_dir);
    result
}

async fn etcd(rest: &[String]) -> anyhow::Result<()> {
    use clap::Parser;
    let args = parse_args(rest, |k| {
        [
            "listen-client-urls",
            "advertise-client-urls",
            "listen-peer-urls",
            "data-dir",
            "name",
            "initial-cluster",
            "initial-advertise-peer-urls",
        ]
        .contains(&k)
    });
    let mut argv = vec!["etcd".to_string()];
    for (k, v) in &args {
        match k.as_str() {
            "listen-client-urls" | "data-dir" => argv.push(format!("--{k}={v}")),
            // envtest's data directory is a fresh temporary one it deletes afterwards, and it
            // asks for no fsync: the data lives in memory.
            "unsafe-no-fsync" => argv.push("--ephemeral".into()),
            _ => {}
        }
    }
    let flags = rkube_store::cli::Flags::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("etcd flags: {e}"))?;
    rkube_store::cli::run(flags, rkube_daemon::shutdown_token()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn envtest_flags_parse_in_every_form() {
        let parsed = parse_args(
            &args(&[
                "--secure-port=6443",
                "",
                "--cert-dir",
                "/c",
                "--allow-privileged",
                "-v=4",
            ]),
            |k| k == "cert-dir",
        );
        assert_eq!(
            parsed,
            vec![
                ("secure-port".into(), "6443".into()),
                ("cert-dir".into(), "/c".into()),
                ("allow-privileged".into(), "true".into()),
                ("v".into(), "4".into()),
            ]
        );
    }

    #[test]
    fn authorization_modes_rkube_lacks_never_open_the_server() {
        let given = vec![("authorization-mode".to_string(), "Webhook".to_string())];
        let (argv, unknown) = apiserver_argv(&given);
        assert_eq!(argv, vec!["kube-apiserver", "--authorization-mode=Webhook"]);
        assert_eq!(unknown, vec!["--authorization-mode entry Webhook"]);
        // …which rkube-apiserver refuses at start, naming the modes it has.
        let err = rkube_apiserver::auth::Mode::parse_list("Webhook").unwrap_err();
        assert!(err.contains("Webhook") && err.contains("RBAC"), "{err}");
    }

    #[test]
    fn envtest_apiserver_flags_become_rkube_apiserver_flags() {
        let given: Vec<(String, String)> = [
            ("allow-privileged", "true"),
            ("authorization-mode", "Webhook,RBAC"),
            ("cert-dir", "/certs"),
            ("client-ca-file", "/certs/client-cert-auth-ca.crt"),
            ("enable-admission-plugins", "NodeRestriction,PodSecurity"),
            ("etcd-servers", "http://127.0.0.1:2379"),
            ("feature-gates", "Foo=true"),
            ("secure-port", "6443"),
            ("some-future-flag", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (argv, unknown) = apiserver_argv(&given);
        assert_eq!(
            argv,
            vec![
                "kube-apiserver",
                "--authorization-mode=RBAC",
                "--client-ca-file=/certs/client-cert-auth-ca.crt",
                "--enable-admission-plugins=NodeRestriction",
                "--etcd-servers=http://127.0.0.1:2379",
                "--secure-port=6443",
                "--tls-cert-file=/certs/apiserver.crt",
                "--tls-private-key-file=/certs/apiserver.key",
            ]
        );
        assert_eq!(
            unknown,
            vec![
                "--authorization-mode entry Webhook",
                "--enable-admission-plugins entry PodSecurity",
                "--some-future-flag=x"
            ]
        );
        use clap::Parser;
        let flags = rkube_apiserver::cli::Flags::try_parse_from(&argv).unwrap();
        assert_eq!(flags.url(), "https://127.0.0.1:6443");
    }
}
