//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it:
//! acquire when the lease is free or its holder has not renewed for `lease_duration` (measured
//! on our own clock from when we last saw the record change), renew every `retry_period`, give
//! up leadership when renewal has failed for `renew_deadline`, release on clean shutdown.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{Api, Client, Error};

#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Settings {
    /// Upstream's defaults (15 s / 10 s / 2 s) for lease `kube-system/<name>`; the identity is
    /// `<hostname>_<random>` like upstream's.
    pub fn new(name: &str) -> Self {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let suffix: u64 = rand::thread_rng().gen();
        Settings {
            namespace: "kube-system".into(),
            name: name.into(),
            identity: format!("{host}_{suffix:016x}"),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why `run` returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Shutdown was asked for; the lease was released if held.
    Shutdown,
    /// Renewal failed for longer than the renew deadline: another instance may lead now.
    Lost,
}

pub struct LeaderElector {
    api: Api<Lease>,
    s: Settings,
    /// (holder, renewTime) as last seen, and when we saw it change.
    observed: Option<((String, String), Instant)>,
}

impl LeaderElector {
    pub fn new(client: &Client, settings: Settings) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            s: settings,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.s.identity
    }

    /// Waits to become leader, then runs `lead(token)`; `token` is cancelled when leadership is
    /// lost or shutdown is asked for, and `lead` should return soon after.
    pub async fn run<F, Fut>(mut self, shutdown: CancellationToken, lead: F) -> Ended
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        tracing::info!(lease = %self.s.name, identity = %self.s.identity, "attempting to acquire leader lease");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.s.name, error = %e, "leader election: lease check failed")
                }
            }
            let jitter = self
                .s
                .retry_period
                .mul_f64(rand::thread_rng().gen_range(0.0..1.2));
            tokio::select! {
                _ = shutdown.cancelled() => return Ended::Shutdown,
                _ = tokio::time::sleep(self.s.retry_period + jitter) => {}
            }
        }
        tracing::info!(lease = %self.s.name, identity = %self.s.identity, "became leader");
        let token = shutdown.child_token();
        let work = tokio::spawn(lead(token.clone()));
        let mut last_renew = Instant::now();
        let ended = loop {
            tokio::select! {
                _ = shutdown.cancelled() => break Ended::Shutdown,
                _ = tokio::time::sleep(self.s.retry_period) => {}
            }
            let attempt =
                tokio::time::timeout(self.s.renew_deadline, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(true)) => last_renew = Instant::now(),
                Ok(Ok(false)) => break Ended::Lost,
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.s.name, error = %e, "lease renewal failed")
                }
                Err(_) => tracing::warn!(lease = %self.s.name, "lease renewal timed out"),
            }
            if last_renew.elapsed() > self.s.renew_deadline {
                break Ended::Lost;
            }
        };
        token.cancel();
        let _ = work.await;
        match ended {
            Ended::Lost => {
                tracing::error!(lease = %self.s.name, identity = %self.s.identity, "leader lease lost")
            }
            Ended::Shutdown => self.release().await,
        }
        ended
    }

    fn record(&self, now: MicroTime, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.s.identity.clone()),
            lease_duration_seconds: Some(self.s.lease_duration.as_secs() as i32),
            acquire_time: acquire.or_else(|| Some(now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One round: true when we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, Error> {
        let now = MicroTime(crate::now());
        let Some(mut lease) = self.api.get_opt(&self.s.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.s.name.clone()),
                    namespace: Some(self.s.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.record(now, None, 0)),
            };
            return match self.api.create(&lease).await {
                Ok(_) => Ok(true),
                Err(e) if e.is_already_exists() => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let renew = spec
            .renew_time
            .as_ref()
            .map(|t| t.0.to_rfc3339())
            .unwrap_or_default();
        let seen = (holder.clone(), renew);
        let observed_at = match &self.observed {
            Some((rec, at)) if *rec == seen => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((seen, at));
                at
            }
        };
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(1) as u64))
            .unwrap_or(self.s.lease_duration);
        let mine = holder == self.s.identity;
        if !holder.is_empty() && !mine && observed_at.elapsed() < duration {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if mine {
            self.record(now, spec.acquire_time.clone(), transitions)
        } else {
            self.record(now, None, transitions + 1)
        });
        match self.api.replace(&self.s.name, &lease).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up so a standby need not wait out the duration.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.s.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(&self.s.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(crate::now()));
        match self.api.replace(&self.s.name, &lease).await {
            Ok(_) => tracing::info!(lease = %self.s.name, "released leader lease"),
            Err(e) => {
                tracing::warn!(lease = %self.s.name, error = %e, "releasing leader lease failed")
            }
        }
    }
}

/// How a component runs: a client for `config`, then `lead(client, token)` directly when
/// `settings` is `None`, else once elected (see `LeaderElector::run`). Losing leadership is an
/// error: the process should exit and campaign again.
pub async fn run_component<F, Fut>(
    config: &crate::Config,
    settings: Option<Settings>,
    shutdown: CancellationToken,
    lead: F,
) -> Result<(), Error>
where
    F: FnOnce(Client, CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let client = Client::new(config.clone())?;
    match settings {
        None => {
            lead(client, shutdown).await;
            Ok(())
        }
        Some(s) => {
            let c = client.clone();
            // Its own client, as upstream's components elect with one: renewals never wait
            // behind the component's own requests (its in-flight cap, its rate limit).
            let elect = Client::new(crate::Config {
                max_in_flight: 0,
                ..config.clone()
            })?;
            match LeaderElector::new(&elect, s)
                .run(shutdown, move |t| lead(c, t))
                .await
            {
                Ended::Shutdown => Ok(()),
                Ended::Lost => Err(Error::LeaderLost),
            }
        }
    }
}

impl Settings {
    /// `name`'s lease with the given timing (the `--leader-elect-*` flags).
    pub fn timed(
        name: &str,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        Settings {
            lease_duration,
            renew_deadline,
            retry_period,
            ..Settings::new(name)
        }
    }
}
