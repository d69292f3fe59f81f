//! `rkube-pki`: writes the cluster's CA, the apiserver's serving certificate and a client
//! certificate plus kubeconfig for the admin, the controller-manager, the scheduler and each
//! node (see `rkube_apiserver::pki`).

use clap::Parser;

fn main() {
    if let Err(e) = rkube_apiserver::cli::pki(rkube_apiserver::cli::PkiFlags::parse()) {
        eprintln!("rkube-pki: {e}");
        std::process::exit(1);
    }
}
