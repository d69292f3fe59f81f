//! The simulated runtime for one pod, without I/O: `advance(now)` moves every container through
//! its steps (sandbox → pull → create → start → running → ready, with pull failures and
//! crash-loops as the stages say, and stop on deletion), returning the events a kubelet would
//! record and when to look again. `status()` renders what a real kubelet reports.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::stages::Stages;

pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Kubelet-style backoff: 10 s, 20 s, 40 s … capped at 5 minutes.
pub fn backoff(attempt: u32) -> Duration {
    (BACKOFF_INITIAL * 2u32.saturating_pow(attempt.saturating_sub(1).min(8))).min(BACKOFF_MAX)
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    WaitSandbox,
    Pull {
        until: Instant,
    },
    PullFailed {
        backoff_at: Instant,
        retry_at: Instant,
    },
    Create {
        until: Instant,
    },
    Start {
        until: Instant,
    },
    Running {
        ready_at: Option<Instant>,
        crash_at: Option<Instant>,
    },
    CrashBackOff {
        until: Instant,
    },
    Stop {
        until: Instant,
    },
    Exited,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
    /// `spec.containers{name}`, as upstream's fieldPath.
    pub field_path: Option<String>,
}

struct Container {
    name: String,
    image: String,
    always_pull: bool,
    readiness_delay: Option<Duration>,
    step: Step,
    state: ContainerState,
    last_state: Option<ContainerState>,
    ready: bool,
    started: bool,
    restarts: i32,
    attempts: u32,
    container_id: Option<String>,
    pull_started: Option<Instant>,
}

pub struct PodSim {
    containers: Vec<Container>,
    sandbox_at: Instant,
    sandbox_ready: bool,
    pod_ip: String,
    start_time: DateTime<Utc>,
    restart_always: bool,
    restart_never: bool,
    deleting: bool,
    /// Condition type → (status, last transition).
    conditions: BTreeMap<&'static str, (bool, DateTime<Utc>)>,
    uid: String,
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

/// The terminated state of `c`'s current instance, exiting with `code` at `wall`.
fn terminated(c: &Container, code: i32, wall: DateTime<Utc>) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
            started_at: c.state.running.as_ref().and_then(|r| r.started_at.clone()),
            finished_at: Some(Time(wall)),
            container_id: c.container_id.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn hex_id(seed: &str) -> String {
    // A stable 64-hex-digit id from the seed (FNV-1a rounds), like a runtime's container id.
    let mut out = String::with_capacity(64);
    let mut h: u64 = 0xcbf29ce484222325;
    for round in 0..4u8 {
        for b in seed.bytes().chain([round]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn ev(warning: bool, reason: &'static str, message: String, c: &str) -> SimEvent {
    SimEvent {
        warning,
        reason,
        message,
        field_path: Some(format!("spec.containers{{{c}}}")),
    }
}

impl PodSim {
    pub fn new(
        pod: &Pod,
        pod_ip: String,
        stages: &Stages,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers = spec
            .containers
            .iter()
            .map(|c| Container {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                always_pull: c.image_pull_policy.as_deref() == Some("Always"),
                readiness_delay: c.readiness_probe.as_ref().map(|p| {
                    Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64)
                }),
                step: Step::WaitSandbox,
                state: waiting("ContainerCreating", None),
                last_state: None,
                ready: false,
                started: false,
                restarts: 0,
                attempts: 0,
                container_id: None,
                pull_started: None,
            })
            .collect();
        let policy = spec.restart_policy.as_deref().unwrap_or("Always");
        let mut conditions = BTreeMap::new();
        conditions.insert("PodReadyToStartContainers", (false, wall));
        conditions.insert("Initialized", (true, wall));
        conditions.insert("ContainersReady", (false, wall));
        conditions.insert("Ready", (false, wall));
        PodSim {
            containers,
            sandbox_at: now + stages.sandbox,
            sandbox_ready: false,
            pod_ip,
            start_time: wall,
            restart_always: policy == "Always",
            restart_never: policy == "Never",
            deleting: false,
            conditions,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }

    /// Starts the pull at `at` (a step's deadline: chained steps keep their own timing even
    /// when `advance` is called late).
    fn begin_pull(
        c: &mut Container,
        at: Instant,
        stages: &Stages,
        images: &mut HashSet<String>,
    ) -> Vec<SimEvent> {
        if !c.always_pull && images.contains(&c.image) {
            c.step = Step::Create {
                until: at + stages.create,
            };
            return vec![ev(
                false,
                "Pulled",
                format!("Container image \"{}\" already present on machine", c.image),
                &c.name,
            )];
        }
        c.pull_started = Some(at);
        c.step = Step::Pull {
            until: at + stages.pull_delay(&c.image),
        };
        vec![ev(
            false,
            "Pulling",
            format!("Pulling image \"{}\"", c.image),
            &c.name,
        )]
    }

    /// Moves every container as far as `now` allows; returns the events and the next deadline.
    pub fn advance(
        &mut self,
        now: Instant,
        wall: DateTime<Utc>,
        stages: &Stages,
        images: &mut HashSet<String>,
    ) -> (Vec<SimEvent>, Option<Instant>) {
        let mut events = Vec::new();
        if !self.sandbox_ready && !self.deleting && now >= self.sandbox_at {
            self.sandbox_ready = true;
            self.conditions
                .insert("PodReadyToStartContainers", (true, wall));
            for c in &mut self.containers {
                if c.step == Step::WaitSandbox {
                    events.extend(Self::begin_pull(c, self.sandbox_at, stages, images));
                }
            }
        }
        let (restart_always, restart_never, uid) =
            (self.restart_always, self.restart_never, self.uid.clone());
        for c in &mut self.containers {
            // Several steps may be due at once (zero delays): loop until one is in the future.
            for _ in 0..16 {
                let progressed = match c.step.clone() {
                    Step::Pull { until } if now >= until => {
                        if stages.pull_fails(&c.image) {
                            c.attempts += 1;
                            let msg = format!("Failed to pull image \"{}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{}\": not found", c.image, c.image);
                            events.push(ev(true, "Failed", msg.clone(), &c.name));
                            events.push(ev(true, "Failed", "Error: ErrImagePull".into(), &c.name));
                            c.state = waiting("ErrImagePull", Some(msg));
                            c.step = Step::PullFailed {
                                backoff_at: until + Duration::from_secs(1).min(backoff(c.attempts)),
                                retry_at: until + backoff(c.attempts),
                            };
                        } else {
                            images.insert(c.image.clone());
                            let took = until
                                .duration_since(c.pull_started.unwrap_or(until))
                                .as_secs_f64();
                            events.push(ev(false, "Pulled", format!("Successfully pulled image \"{}\" in {took:.3}s ({took:.3}s including waiting). Image size: 72000000 bytes.", c.image), &c.name));
                            c.step = Step::Create {
                                until: until + stages.create,
                            };
                        }
                        true
                    }
                    Step::PullFailed {
                        backoff_at,
                        retry_at,
                    } if now >= backoff_at
                        && c.state.waiting.as_ref().and_then(|w| w.reason.as_deref())
                            == Some("ErrImagePull") =>
                    {
                        let msg = format!("Back-off pulling image \"{}\"", c.image);
                        events.push(ev(false, "BackOff", msg.clone(), &c.name));
                        events.push(ev(
                            true,
                            "Failed",
                            "Error: ImagePullBackOff".into(),
                            &c.name,
                        ));
                        c.state = waiting("ImagePullBackOff", Some(msg));
                        let _ = retry_at;
                        true
                    }
                    Step::PullFailed { retry_at, .. } if now >= retry_at => {
                        events.extend(Self::begin_pull(c, retry_at, stages, images));
                        true
                    }
                    Step::Create { until } if now >= until => {
                        c.container_id = Some(format!(
                            "containerd://{}",
                            hex_id(&format!("{uid}/{}/{}", c.name, c.restarts))
                        ));
                        events.push(ev(
                            false,
                            "Created",
                            format!("Created container: {}", c.name),
                            &c.name,
                        ));
                        c.step = Step::Start {
                            until: until + stages.start,
                        };
                        true
                    }
                    Step::Start { until } if now >= until => {
                        events.push(ev(
                            false,
                            "Started",
                            format!("Started container {}", c.name),
                            &c.name,
                        ));
                        c.state = ContainerState {
                            running: Some(ContainerStateRunning {
                                started_at: Some(Time(wall)),
                            }),
                            ..Default::default()
                        };
                        c.started = true;
                        let ready_at = Some(until + c.readiness_delay.unwrap_or(Duration::ZERO));
                        let crash_at = stages.crash_for(&c.image).map(|k| until + k.after);
                        c.step = Step::Running { ready_at, crash_at };
                        true
                    }
                    Step::Running {
                        ready_at: Some(r),
                        crash_at,
                    } if now >= r && crash_at.is_none_or(|k| r <= k) => {
                        c.ready = true;
                        c.step = Step::Running {
                            ready_at: None,
                            crash_at,
                        };
                        true
                    }
                    Step::Running {
                        crash_at: Some(k), ..
                    } if now >= k => {
                        let code = stages.crash_for(&c.image).map(|k| k.exit_code).unwrap_or(1);
                        let term = terminated(c, code, wall);
                        c.ready = false;
                        c.started = false;
                        let restart = restart_always || (!restart_never && code != 0);
                        if restart {
                            c.last_state = Some(term);
                            c.restarts += 1;
                            c.attempts += 1;
                            let msg = format!(
                                "back-off {:?} restarting failed container={} pod=",
                                backoff(c.attempts),
                                c.name
                            );
                            c.state = waiting("CrashLoopBackOff", Some(msg));
                            events.push(ev(
                                true,
                                "BackOff",
                                format!("Back-off restarting failed container {} in pod", c.name),
                                &c.name,
                            ));
                            c.step = Step::CrashBackOff {
                                until: k + backoff(c.attempts),
                            };
                        } else {
                            c.state = term;
                            c.step = Step::Exited;
                        }
                        true
                    }
                    Step::CrashBackOff { until } if now >= until => {
                        c.step = Step::Create {
                            until: until + stages.create,
                        };
                        true
                    }
                    Step::Stop { until } if now >= until => {
                        if c.state.running.is_some() || c.container_id.is_some() {
                            c.state = terminated(c, 0, wall);
                        }
                        c.ready = false;
                        c.started = false;
                        c.step = Step::Exited;
                        true
                    }
                    _ => false,
                };
                if !progressed {
                    break;
                }
            }
        }
        // Pod conditions follow the containers.
        let all_ready = !self.containers.is_empty() && self.containers.iter().all(|c| c.ready);
        for t in ["ContainersReady", "Ready"] {
            if self.conditions.get(t).map(|c| c.0) != Some(all_ready) {
                self.conditions.insert(t, (all_ready, wall));
            }
        }
        let next = self.containers.iter().filter_map(|c| match &c.step {
            Step::Pull { until }
            | Step::Create { until }
            | Step::Start { until }
            | Step::CrashBackOff { until }
            | Step::Stop { until } => Some(*until),
            Step::PullFailed {
                backoff_at,
                retry_at,
            } => Some(
                if c.state.waiting.as_ref().and_then(|w| w.reason.as_deref())
                    == Some("ErrImagePull")
                {
                    *backoff_at
                } else {
                    *retry_at
                },
            ),
            Step::Running { ready_at, crash_at } => match (ready_at, crash_at) {
                (Some(r), Some(k)) => Some((*r).min(*k)),
                (Some(r), None) => Some(*r),
                (None, k) => *k,
            },
            Step::WaitSandbox if !self.sandbox_ready => Some(self.sandbox_at),
            _ => None,
        });
        (events, next.min())
    }

    /// Graceful deletion: every container stops within `grace` (Killing events).
    pub fn delete(&mut self, now: Instant, grace: Duration, stages: &Stages) -> Vec<SimEvent> {
        if self.deleting {
            return Vec::new();
        }
        self.deleting = true;
        let stop = stages.stop.min(grace);
        let mut events = Vec::new();
        for c in &mut self.containers {
            if c.step == Step::Exited {
                continue;
            }
            if c.started {
                events.push(ev(
                    false,
                    "Killing",
                    format!("Stopping container {}", c.name),
                    &c.name,
                ));
            }
            c.step = Step::Stop { until: now + stop };
        }
        events
    }

    /// Every container has exited (after deletion, or run to completion with restartPolicy Never).
    pub fn finished(&self) -> bool {
        self.containers.iter().all(|c| c.step == Step::Exited)
    }

    pub fn restarts(&self, container: &str) -> i32 {
        self.containers
            .iter()
            .find(|c| c.name == container)
            .map(|c| c.restarts)
            .unwrap_or(0)
    }

    pub fn container_names(&self) -> Vec<(String, String)> {
        self.containers
            .iter()
            .map(|c| (c.name.clone(), c.image.clone()))
            .collect()
    }

    pub fn start_time(&self) -> DateTime<Utc> {
        self.start_time
    }

    /// The phase as a kubelet computes it.
    pub fn phase(&self) -> &'static str {
        let term: Vec<i32> = self
            .containers
            .iter()
            .filter_map(|c| c.state.terminated.as_ref().map(|t| t.exit_code))
            .collect();
        if !self.containers.is_empty()
            && term.len() == self.containers.len()
            && (self.deleting || !self.restart_always)
        {
            return if term.iter().all(|c| *c == 0) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if self.containers.iter().any(|c| c.started || c.restarts > 0) {
            "Running"
        } else {
            "Pending"
        }
    }

    /// The pod's status as a kubelet reports it (keeping conditions it does not own).
    pub fn status(&self, pod: &Pod, host_ip: &str) -> PodStatus {
        let ts = |t: DateTime<Utc>| Some(Time(t));
        let mut conditions: Vec<PodCondition> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !self.conditions.contains_key(c.type_.as_str()))
            .collect();
        for (t, (ok, at)) in &self.conditions {
            let reason = match (*t, ok) {
                ("ContainersReady" | "Ready", false) => Some("ContainersNotReady".to_string()),
                _ => None,
            };
            let message = reason.as_ref().map(|_| {
                let names: Vec<&str> = self
                    .containers
                    .iter()
                    .filter(|c| !c.ready)
                    .map(|c| c.name.as_str())
                    .collect();
                format!("containers with unready status: [{}]", names.join(" "))
            });
            conditions.push(PodCondition {
                type_: t.to_string(),
                status: if *ok { "True" } else { "False" }.into(),
                last_transition_time: ts(*at),
                reason,
                message,
                ..Default::default()
            });
        }
        let order = [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        ];
        conditions.sort_by_key(|c| {
            order
                .iter()
                .position(|o| *o == c.type_)
                .unwrap_or(order.len())
        });
        let statuses = self
            .containers
            .iter()
            .map(|c| ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone(),
                image_id: if c.container_id.is_some() {
                    format!(
                        "docker.io/library/{}@sha256:{}",
                        c.image.split(':').next().unwrap_or(&c.image),
                        hex_id(&c.image)
                    )
                } else {
                    String::new()
                },
                container_id: c.container_id.clone(),
                ready: c.ready,
                started: Some(c.started),
                restart_count: c.restarts,
                state: Some(c.state.clone()),
                last_state: Some(c.last_state.clone().unwrap_or_default()),
                ..Default::default()
            })
            .collect();
        PodStatus {
            phase: Some(self.phase().into()),
            conditions: Some(conditions),
            host_ip: Some(host_ip.into()),
            host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
            pod_ip: self.sandbox_ready.then(|| self.pod_ip.clone()),
            pod_ips: self.sandbox_ready.then(|| {
                vec![PodIP {
                    ip: self.pod_ip.clone(),
                }]
            }),
            start_time: ts(self.start_time),
            // Computed by the apiserver at creation, as upstream.
            qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
            container_statuses: Some(statuses),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": containers}}),
        )
        .unwrap()
    }

    fn reasons(evs: &[SimEvent]) -> Vec<&str> {
        evs.iter().map(|e| e.reason).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn fast_profile_runs_and_is_ready_at_once() {
        let stages = Stages::fast();
        let p = pod(json!([{"name": "nginx", "image": "nginx:1.14.2"}]));
        let now = Instant::now();
        let mut sim = PodSim::new(&p, "10.244.0.2".into(), &stages, now, rkube_client::now());
        let mut images = HashSet::new();
        let (evs, next) = sim.advance(now, rkube_client::now(), &stages, &mut images);
        assert_eq!(reasons(&evs), ["Pulling", "Pulled", "Created", "Started"]);
        assert_eq!(next, None);
        let st = sim.status(&p, "127.0.0.1");
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(st.pod_ip.as_deref(), Some("10.244.0.2"));
        let cs = &st.container_statuses.unwrap()[0];
        assert!(
            cs.ready && cs.started == Some(true) && cs.state.as_ref().unwrap().running.is_some()
        );
        assert!(cs
            .container_id
            .as_ref()
            .unwrap()
            .starts_with("containerd://"));
        let conds: Vec<(String, String)> = st
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| (c.type_, c.status))
            .collect();
        assert_eq!(
            conds,
            [
                ("PodReadyToStartContainers".into(), "True".into()),
                ("Initialized".into(), "True".into()),
                ("Ready".into(), "True".into()),
                ("ContainersReady".into(), "True".into()),
            ]
        );
        // A second pod on the node: the image is already present.
        let mut sim2 = PodSim::new(&p, "10.244.0.3".into(), &stages, now, rkube_client::now());
        let (evs, _) = sim2.advance(now, rkube_client::now(), &stages, &mut images);
        assert_eq!(
            evs[0].message,
            "Container image \"nginx:1.14.2\" already present on machine"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn realistic_steps_take_their_time_and_readiness_waits_for_the_probe() {
        let mut stages = Stages::realistic();
        stages.pull_jitter = Duration::ZERO;
        let p = pod(
            json!([{"name": "c", "image": "app:1", "readinessProbe": {"initialDelaySeconds": 5, "httpGet": {"port": 80}}}]),
        );
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let mut sim = PodSim::new(&p, "10.244.0.2".into(), &stages, t0, rkube_client::now());
        let (evs, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert!(evs.is_empty());
        assert_eq!(next, Some(t0 + Duration::from_millis(300)));
        assert_eq!(sim.status(&p, "h").phase.as_deref(), Some("Pending"));
        let (evs, _) = sim.advance(
            t0 + Duration::from_millis(300),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reasons(&evs), ["Pulling"]);
        let t_started = t0 + Duration::from_millis(300 + 2000 + 100 + 200);
        let (evs, next) = sim.advance(t_started, rkube_client::now(), &stages, &mut images);
        assert_eq!(reasons(&evs), ["Pulled", "Created", "Started"]);
        assert_eq!(next, Some(t_started + Duration::from_secs(5)));
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert!(
            !st.container_statuses.as_ref().unwrap()[0].ready,
            "not ready before the probe delay"
        );
        sim.advance(
            t_started + Duration::from_secs(5),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert!(sim.status(&p, "h").container_statuses.unwrap()[0].ready);
    }

    #[tokio::test(start_paused = true)]
    async fn failing_pulls_back_off_and_crashes_loop() {
        let mut stages = Stages::fast();
        stages.fail_images = vec!["bad:*".into()];
        stages.crash = vec![crate::stages::Crash {
            image: "crash:*".into(),
            after: Duration::from_secs(3),
            exit_code: 2,
        }];
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let p = pod(json!([{"name": "c", "image": "bad:1"}]));
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (evs, _) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(reasons(&evs), ["Pulling", "Failed", "Failed"]);
        let reason = |sim: &PodSim| {
            sim.status(&p, "h").container_statuses.unwrap()[0]
                .state
                .clone()
                .unwrap()
                .waiting
                .unwrap()
                .reason
                .unwrap()
        };
        assert_eq!(reason(&sim), "ErrImagePull");
        sim.advance(
            t0 + Duration::from_secs(1),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reason(&sim), "ImagePullBackOff");
        let (evs, _) = sim.advance(
            t0 + Duration::from_secs(10),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(evs[0].reason, "Pulling", "retried after the 10 s backoff");

        let p = pod(json!([{"name": "c", "image": "crash:1"}]));
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        let (evs, next) = sim.advance(
            t0 + Duration::from_secs(3),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reasons(&evs), ["BackOff"]);
        assert_eq!(next, Some(t0 + Duration::from_secs(13)));
        let st = sim.status(&p, "h");
        let cs = &st.container_statuses.unwrap()[0];
        assert_eq!(cs.restart_count, 1);
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            2
        );
        let (evs, _) = sim.advance(
            t0 + Duration::from_secs(13),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(
            reasons(&evs),
            ["Created", "Started"],
            "restarted without pulling again"
        );
        assert_eq!(backoff(2), Duration::from_secs(20));
        assert_eq!(backoff(9), BACKOFF_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn deletion_stops_containers_and_ends_in_a_terminal_phase() {
        let stages = Stages::realistic();
        let t0 = Instant::now();
        let mut images = HashSet::from(["nginx".to_string()]);
        let p = pod(json!([{"name": "c", "image": "nginx"}]));
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(
            t0 + Duration::from_secs(1),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        sim.advance(
            t0 + Duration::from_secs(2),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(sim.phase(), "Running");
        let evs = sim.delete(
            t0 + Duration::from_secs(2),
            Duration::from_secs(30),
            &stages,
        );
        assert_eq!(reasons(&evs), ["Killing"]);
        assert!(!sim.finished());
        sim.advance(
            t0 + Duration::from_millis(2500),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert!(sim.finished());
        assert_eq!(sim.phase(), "Succeeded");
    }
}
