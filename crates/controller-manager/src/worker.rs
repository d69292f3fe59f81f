//! Runs a controller's reconcile function over its work queue with N workers, and records
//! queue depth, reconcile latency and errors per controller.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rkube_client::{Error, WorkQueue};
use rkube_daemon::metrics::{Registry, LATENCY_BUCKETS};
use tokio_util::sync::CancellationToken;

/// A controller's `start`: its `sync(&key)` run over its `queue` by `workers` workers, its
/// metrics in its `ctx`'s registry, until `shutdown`.
macro_rules! serve {
    ($me:expr, $name:literal, $workers:expr, $shutdown:expr) => {
        $crate::worker::spawn_workers(
            $name,
            $me.queue.clone(),
            $workers,
            &$me.ctx.metrics,
            $shutdown,
            $me.clone(),
            |me, key| async move { me.sync(&key).await },
        )
    };
}
pub(crate) use serve;

/// What a reconcile asks for next.
pub type Reconciled = Result<Option<Duration>, Error>;

/// Spawns `workers` tasks that take keys from `queue` and run `reconcile(controller, key)`
/// until shutdown. `Ok(Some(d))` re-queues the key after `d`; an error re-queues it with
/// backoff.
pub fn spawn_workers<C, F, Fut>(
    name: &'static str,
    queue: Arc<WorkQueue<String>>,
    workers: usize,
    metrics: &Arc<Registry>,
    shutdown: CancellationToken,
    controller: Arc<C>,
    reconcile: F,
) where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reconciled> + Send + 'static,
{
    let labels = [("name", name)];
    {
        let q = queue.clone();
        metrics.gauge_fn(
            "workqueue_depth",
            "Current depth of the work queue.",
            &labels,
            move || q.len() as f64,
        );
    }
    let latency = metrics.histogram(
        "controller_reconcile_duration_seconds",
        "Time per reconcile, by controller.",
        &[("controller", name)],
        LATENCY_BUCKETS,
    );
    let errors = metrics.counter(
        "controller_reconcile_errors_total",
        "Reconciles that failed and were re-queued with backoff.",
        &[("controller", name)],
    );
    let adds = metrics.counter(
        "workqueue_adds_total",
        "Items processed from the work queue.",
        &labels,
    );
    {
        let q = queue.clone();
        let s = shutdown.clone();
        tokio::spawn(async move {
            s.cancelled().await;
            q.shutdown();
        });
    }
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let reconcile = reconcile.clone();
        let controller = controller.clone();
        let latency = latency.clone();
        let errors = errors.clone();
        let adds = adds.clone();
        tokio::spawn(async move {
            while let Some(key) = queue.get().await {
                adds.inc();
                let start = tokio::time::Instant::now();
                // A panic (a defect, never input's fault to bring down the controller) is a
                // failed reconcile: logged, retried with backoff, the worker lives on.
                let result = {
                    use futures_util::FutureExt;
                    std::panic::AssertUnwindSafe(reconcile(controller.clone(), key.clone()))
                        .catch_unwind()
                        .await
                };
                latency.observe_duration(start.elapsed());
                let result = match result {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::error!(
                            controller = name,
                            key,
                            "reconcile panicked; retrying with backoff"
                        );
                        errors.inc();
                        queue.add_rate_limited(key.clone());
                        queue.done(&key);
                        continue;
                    }
                };
                match result {
                    Ok(next) => {
                        queue.forget(&key);
                        if let Some(d) = next {
                            queue.add_after(key.clone(), d);
                        }
                    }
                    Err(e) => {
                        errors.inc();
                        if e.is_conflict() {
                            tracing::debug!(controller = name, key, error = %e, "reconcile conflict; retrying");
                        } else {
                            tracing::warn!(controller = name, key, error = %e, "reconcile failed; retrying with backoff");
                        }
                        queue.add_rate_limited(key.clone());
                    }
                }
                queue.done(&key);
            }
        });
    }
}

/// Runs `pass` every `period` until `shutdown` (a controller without a queue: node lifecycle,
/// the pod collector); a failed pass is logged and the next one comes on time.
pub fn every<C, F, Fut>(
    name: &'static str,
    period: Duration,
    shutdown: CancellationToken,
    me: Arc<C>,
    pass: F,
) where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = pass(me.clone()).await {
                tracing::warn!(controller = name, error = %e, "periodic pass failed");
            }
        }
    });
}
