//! The controller-manager on top of rkube-testkit's in-process cluster: started and stopped (or
//! crashed) at will.

use std::time::Duration;

use rkube_daemon::ShutdownToken;
pub use rkube_testkit::*;

pub trait CmEnv {
    fn cm_config(&self) -> rkube_controller_manager::Config;
    fn start_cm(
        &self,
        cfg: rkube_controller_manager::Config,
    ) -> impl std::future::Future<Output = (Cm, String)>;
    fn spawn_cm(
        &self,
        cfg: rkube_controller_manager::Config,
    ) -> impl std::future::Future<Output = (Cm, String)>;
}

impl CmEnv for Env {
    fn cm_config(&self) -> rkube_controller_manager::Config {
        let mut cfg = rkube_controller_manager::Config::new(rkube_client::Config::new(&self.base));
        cfg.node_monitor_period = Duration::from_millis(200);
        cfg
    }

    /// Runs a controller-manager in-process without waiting for it (a standby that may never
    /// lead). Returns it and its health/metrics address.
    async fn spawn_cm(&self, cfg: rkube_controller_manager::Config) -> (Cm, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let stop = ShutdownToken::new();
        let task = tokio::spawn(rkube_controller_manager::run(cfg, listener, stop.clone()));
        (Cm { stop, task }, addr)
    }

    /// Runs a controller-manager in-process and waits until it is ready.
    async fn start_cm(&self, cfg: rkube_controller_manager::Config) -> (Cm, String) {
        let (cm, addr) = self.spawn_cm(cfg).await;
        // Ready once every informer has listed and the controllers run: a test's deadlines
        // then measure the controllers, not a start slowed by a loaded machine.
        let http = reqwest::Client::new();
        wait_for(
            "the controller-manager ready",
            Duration::from_secs(90),
            || {
                let (http, url) = (http.clone(), format!("{addr}/readyz"));
                async move {
                    let r = http.get(&url).send().await.ok()?;
                    r.status().is_success().then_some(())
                }
            },
        )
        .await;
        (cm, addr)
    }
}

/// A running in-process controller-manager; stopped when dropped.
pub struct Cm {
    stop: ShutdownToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Cm {
    /// A clean stop (a leader releases its lease).
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// A clean stop, returning once the controller-manager's run has returned.
    pub async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
    }

    /// A crash: the leader-election loop vanishes without releasing anything, then the
    /// controllers stop.
    pub fn cancel_without_release(&self) {
        self.task.abort();
        self.stop.cancel();
    }
}

impl Drop for Cm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
