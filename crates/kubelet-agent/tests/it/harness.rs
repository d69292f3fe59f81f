//! The kubelet-agent on top of rkube-testkit's in-process cluster.

use rkube_daemon::ShutdownToken;
pub use rkube_testkit::*;

pub fn agent_config(env: &Env, node: &str) -> rkube_kubelet_agent::Config {
    rkube_kubelet_agent::Config::new(rkube_client::Config::new(&env.base), node)
}

/// Runs a kubelet-agent in-process; returns its stop token and HTTP address.
pub async fn start_agent(cfg: rkube_kubelet_agent::Config) -> (ShutdownToken, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let stop = ShutdownToken::new();
    tokio::spawn(rkube_kubelet_agent::run(cfg, listener, stop.clone()));
    wait_ready(&addr).await;
    (stop, addr)
}
