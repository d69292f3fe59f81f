//! `rkube-pki`: writes the cluster's CA, the apiserver's serving certificate and a client
//! certificate plus kubeconfig for the admin, the controller-manager, the scheduler and each
//! node (see `rkube_apiserver::pki`).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "rkube-pki",
    version,
    about = "Generates rkube's certificates and kubeconfigs"
)]
struct Flags {
    /// Where to write (an existing CA there is kept).
    #[arg(long)]
    dir: std::path::PathBuf,
    /// The apiserver URL the components' kubeconfigs use.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
    /// The admin kubeconfig's server, if users reach the apiserver by another address.
    #[arg(long)]
    admin_server: Option<String>,
    /// Further names or IP addresses for the serving certificate (repeatable or comma-separated).
    #[arg(long = "host", value_delimiter = ',')]
    hosts: Vec<String>,
    /// Node names that get a system:node:<name> identity (repeatable or comma-separated).
    #[arg(long = "node", value_delimiter = ',')]
    nodes: Vec<String>,
    /// UID:GID to own the admin's files (a root container writing them for a user).
    #[arg(long, value_parser = owner)]
    admin_owner: Option<(u32, u32)>,
}

fn owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("want UID:GID")?;
    Ok((
        u.parse().map_err(|_| format!("bad uid {u:?}"))?,
        g.parse().map_err(|_| format!("bad gid {g:?}"))?,
    ))
}

fn main() {
    let f = Flags::parse();
    let plan = rkube_apiserver::pki::Plan {
        dir: f.dir,
        server: f.server,
        admin_server: f.admin_server,
        hosts: f.hosts,
        nodes: f.nodes,
        admin_owner: f.admin_owner,
    };
    match rkube_apiserver::pki::generate(&plan) {
        Ok(files) => println!(
            "rkube-pki: wrote {} files in {}",
            files.len(),
            plan.dir.display()
        ),
        Err(e) => {
            eprintln!("rkube-pki: {e}");
            std::process::exit(1);
        }
    }
}
