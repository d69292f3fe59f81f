//! rkube-testcluster's tests: in-process clusters started, used with kube-rs and kubectl,
//! run side by side, and torn down; and a kube-rs operator tested against one.

mod cluster;
mod operator;

use std::time::Duration;

/// Polls `f` until it holds (30 s).
pub(crate) async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
