//! The simulated runtime for one pod, without I/O: `advance(now)` moves every container through
//! its steps (sandbox → pull → create → start → running → ready → exit, with pull failures,
//! crash-loops and restarts as the restart policy says, and stop on deletion), returning the
//! events a kubelet would record and when to look again. Init containers run one after another
//! and must succeed before the app containers start; restartable init containers (sidecars)
//! start in order, keep running beside the app and stop once the app containers have finished.
//! `status()` renders what a real kubelet reports.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::pod::{Container as ContainerSpec, Pod};
use tokio::time::Instant;

use crate::overrides::{self, Run};
use crate::stages::Stages;

pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Kubelet-style backoff: 10 s, 20 s, 40 s … capped at 5 minutes.
pub fn backoff(attempt: u32) -> Duration {
    (BACKOFF_INITIAL * 2u32.saturating_pow(attempt.saturating_sub(1).min(8))).min(BACKOFF_MAX)
}

#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// Waiting for the sandbox, or for the init containers before this one.
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
        /// When the startup probe succeeds (`started` turns true).
        started_at: Option<Instant>,
        ready_at: Option<Instant>,
        exit_at: Option<Instant>,
    },
    CrashBackOff {
        until: Instant,
    },
    Stop {
        until: Instant,
    },
    Exited,
}

/// Where a container sits in the pod's spec.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    App,
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
    kind: Kind,
    always_pull: bool,
    /// From the start until the startup probe succeeds (readiness and liveness wait for it).
    startup_delay: Option<Duration>,
    /// The readiness probe: (its `initialDelaySeconds`, the periods for its further
    /// successes); it succeeds once both the delay and the startup probe are past.
    readiness: Option<(Duration, Duration)>,
    never_ready: bool,
    /// How long each run lasts; `None`: until stopped.
    run: Option<Duration>,
    /// The liveness probe's failure (`sim.rkube.io/liveness-fail-after` on a container with a
    /// probe): (from when, after a start, it fails — once the startup probe is past too —,
    /// the `failureThreshold` periods until the kill).
    liveness_kill: Option<(Duration, Duration)>,
    /// Its simulated memory use is above its limit: each run ends OOMKilled (137).
    oom: bool,
    /// How long its `preStop` hook keeps it running once deletion starts (a `sleep` action or
    /// a `sleep N` command), within the grace period.
    pre_stop: Duration,
    /// The current run ends by the liveness probe, not by itself.
    killed: bool,
    exit_code: i32,
    /// The code the current run ends with when its process was ended from outside the
    /// schedule (`end_run`); the next runs keep `exit_code`.
    exit_once: Option<i32>,
    step: Step,
    state: ContainerState,
    last_state: Option<ContainerState>,
    ready: bool,
    started: bool,
    restarts: i32,
    attempts: u32,
    container_id: Option<String>,
    pull_started: Option<Instant>,
    /// When the gate for the containers after it opened: an init container's successful
    /// exit, a sidecar's first start.
    opened_at: Option<Instant>,
}

/// What decides a restart: the pod's restart policy, and whether its app containers are done.
#[derive(Clone, Copy)]
struct Policy {
    always: bool,
    never: bool,
    apps_done: bool,
}

impl Policy {
    /// Whether a container of `kind` restarts after exiting with `code`.
    fn restarts(self, kind: Kind, code: i32) -> bool {
        match kind {
            Kind::Sidecar => !self.apps_done,
            Kind::Init => code != 0 && !self.never,
            Kind::App => self.always || (!self.never && code != 0),
        }
    }
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
    conditions: Conditions,
    uid: String,
    /// Ephemeral containers (`kubectl debug`) as they were added.
    ephemeral: Vec<Ephemeral>,
    /// Wakes the pod's worker when something outside its schedule changed the simulation.
    nudge: std::sync::Arc<tokio::sync::Notify>,
}

/// An ephemeral container: it runs from when it is added until its process ends (`end_run`).
struct Ephemeral {
    name: String,
    image: String,
    started: DateTime<Utc>,
    /// Exit code and time, once it exited.
    ended: Option<(i32, DateTime<Utc>)>,
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
            reason: Some(
                match code {
                    0 => "Completed",
                    137 if c.oom && !c.killed => "OOMKilled",
                    _ => "Error",
                }
                .into(),
            ),
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

/// A probe's (`initialDelaySeconds`, time for its further `successThreshold` − 1 successes).
fn probe_success(p: &k8s_openapi::api::core::v1::Probe) -> (Duration, Duration) {
    let secs = |v: Option<i32>, d: i32| v.unwrap_or(d).max(0) as u64;
    let successes = secs(p.success_threshold, 1).max(1);
    (
        Duration::from_secs(secs(p.initial_delay_seconds, 0)),
        Duration::from_secs((successes - 1) * secs(p.period_seconds, 10).max(1)),
    )
}

/// How long a `preStop` hook takes: a `sleep` action's seconds, or the N of an exec'd
/// `sleep N` (directly or through `sh -c`); other hooks end at once.
fn pre_stop_duration(h: &k8s_openapi::api::core::v1::LifecycleHandler) -> Duration {
    if let Some(s) = &h.sleep {
        return Duration::from_secs(s.seconds.max(0) as u64);
    }
    let words: Vec<&str> = h
        .exec
        .as_ref()
        .and_then(|e| e.command.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|w| w.split_whitespace())
        .collect();
    words
        .windows(2)
        .find(|w| w[0] == "sleep" || w[0].ends_with("/sleep"))
        .and_then(|w| w[1].parse::<f64>().ok())
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map(|n| Duration::from_secs_f64(n.min(86_400.0)))
        .unwrap_or_default()
}

/// A runtime's image id for `image`: its repository and a stable digest.
fn image_id(image: &str) -> String {
    format!(
        "docker.io/library/{}@sha256:{}",
        image.split(':').next().unwrap_or(image),
        hex_id(image)
    )
}

fn ev(warning: bool, reason: &'static str, message: String, c: &Container) -> SimEvent {
    let list = match c.kind {
        Kind::App => "containers",
        Kind::Init | Kind::Sidecar => "initContainers",
    };
    SimEvent {
        warning,
        reason,
        message,
        field_path: Some(format!("spec.{list}{{{}}}", c.name)),
    }
}

/// Whether the container's process is a shell (`exec::shell::container_shell`).
fn runs_a_shell(spec: &ContainerSpec) -> bool {
    let argv: Vec<&str> = spec
        .command
        .iter()
        .flatten()
        .chain(spec.args.iter().flatten())
        .map(String::as_str)
        .collect();
    crate::exec::shell::container_shell(&argv, spec.image.as_deref().unwrap_or_default()).is_some()
}

impl Container {
    fn new(pod: &Pod, spec: &ContainerSpec, kind: Kind, stages: &Stages, pod_ends: bool) -> Self {
        let o = overrides::for_container(pod, &spec.name);
        let crash = stages.crash_for(spec.image.as_deref().unwrap_or_default());
        // Annotation, then the stages' crash effect, then the default: init containers and
        // the app containers of pods that may finish run for the default duration.
        let run = match o.run {
            Some(Run::For(d)) => Some(d),
            Some(Run::Forever) => None,
            None => match crash {
                Some(k) => Some(k.after),
                // A shell reading its stdin (`kubectl run -it … -- sh`) runs until it exits
                // (`end_run`).
                None if spec.stdin == Some(true) && runs_a_shell(spec) => None,
                None if kind == Kind::Init || (kind == Kind::App && pod_ends) => Some(stages.run),
                None => None,
            },
        };
        // Memory use above the limit: killed by the OOM killer after a short run.
        let limit = spec
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("memory"))
            .and_then(|q| rkube_api::quantity::parse_value(&q.0));
        let oom = o
            .memory_usage
            .zip(limit)
            .is_some_and(|(used, limit)| used > limit);
        let run = if oom { Some(stages.run) } else { run };
        let exit_code = if oom {
            137
        } else {
            o.exit_code.or(crash.map(|k| k.exit_code)).unwrap_or(0)
        };
        let liveness_kill =
            spec.liveness_probe
                .as_ref()
                .zip(o.liveness_fail_after)
                .map(|(p, after)| {
                    let secs =
                        |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(1) as u64);
                    let delay =
                        Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64);
                    (
                        after.max(delay),
                        secs(p.period_seconds, 10) * p.failure_threshold.unwrap_or(3).max(1) as u32,
                    )
                });
        Container {
            name: spec.name.clone(),
            image: spec.image.clone().unwrap_or_default(),
            kind,
            always_pull: spec.image_pull_policy.as_deref() == Some("Always"),
            startup_delay: spec
                .startup_probe
                .as_deref()
                .map(probe_success)
                .map(|(delay, more)| delay + more),
            readiness: spec.readiness_probe.as_deref().map(probe_success),
            never_ready: o.never_ready,
            run,
            liveness_kill,
            killed: false,
            oom,
            pre_stop: spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .map(pre_stop_duration)
                .unwrap_or_default(),
            exit_code,
            exit_once: None,
            step: Step::WaitSandbox,
            state: waiting(
                if kind == Kind::App
                    && pod
                        .spec
                        .as_ref()
                        .is_some_and(|s| s.init_containers.as_ref().is_some_and(|i| !i.is_empty()))
                {
                    "PodInitializing"
                } else {
                    "ContainerCreating"
                },
                None,
            ),
            last_state: None,
            ready: false,
            started: false,
            restarts: 0,
            attempts: 0,
            container_id: None,
            pull_started: None,
            opened_at: None,
        }
    }

    fn waiting_reason(&self) -> Option<&str> {
        self.state
            .waiting
            .as_ref()
            .and_then(|w| w.reason.as_deref())
    }

    /// Exited for good with code 0 (an init container's success).
    fn succeeded(&self) -> bool {
        self.step == Step::Exited
            && self
                .state
                .terminated
                .as_ref()
                .is_some_and(|t| t.exit_code == 0)
    }

    /// Its next deadline.
    fn next(&self) -> Option<Instant> {
        match &self.step {
            Step::Pull { until }
            | Step::Create { until }
            | Step::Start { until }
            | Step::CrashBackOff { until }
            | Step::Stop { until } => Some(*until),
            Step::PullFailed {
                backoff_at,
                retry_at,
            } => Some(if self.waiting_reason() == Some("ErrImagePull") {
                *backoff_at
            } else {
                *retry_at
            }),
            Step::Running {
                started_at,
                ready_at,
                exit_at,
            } => [started_at, ready_at, exit_at]
                .into_iter()
                .flatten()
                .min()
                .copied(),
            Step::WaitSandbox | Step::Exited => None,
        }
    }
}

/// The four conditions the kubelet owns: (type, status, last transition), in type order. An
/// array, not a map: a map's node took ~350 bytes of every simulated pod.
#[derive(Clone, Debug)]
struct Conditions([(&'static str, bool, DateTime<Utc>); 4]);

impl Conditions {
    /// Each owned condition False since `wall`.
    fn new(wall: DateTime<Utc>) -> Self {
        Conditions(
            [
                "ContainersReady",
                "Initialized",
                "PodReadyToStartContainers",
                "Ready",
            ]
            .map(|t| (t, false, wall)),
        )
    }

    /// The condition's status, `None` for a type the kubelet does not own.
    fn get(&self, t: &str) -> Option<bool> {
        self.0.iter().find(|c| c.0 == t).map(|c| c.1)
    }

    /// Sets an owned condition's status (a type not owned is ignored).
    fn set(&mut self, t: &str, status: bool, wall: DateTime<Utc>) {
        if let Some(c) = self.0.iter_mut().find(|c| c.0 == t) {
            c.1 = status;
            c.2 = wall;
        }
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
        let policy = spec.restart_policy.as_deref().unwrap_or("Always");
        let pod_ends = policy != "Always";
        let inits = spec.init_containers.iter().flatten().map(|c| {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                Kind::Sidecar
            } else {
                Kind::Init
            };
            Container::new(pod, c, kind, stages, pod_ends)
        });
        let apps = spec
            .containers
            .iter()
            .map(|c| Container::new(pod, c, Kind::App, stages, pod_ends));
        let mut containers: Vec<Container> = inits.chain(apps).collect();
        // A collected chain of a flatten starts at room for four (of ~700 bytes each): ten
        // thousand one-container pods kept 19 MB of it.
        containers.shrink_to_fit();
        let mut conditions = Conditions::new(wall);
        let no_inits = containers.iter().all(|c| c.kind == Kind::App);
        conditions.set("Initialized", no_inits, wall);
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
            ephemeral: Vec::new(),
            nudge: Default::default(),
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
                c,
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
            c,
        )]
    }

    /// Every app container has exited for good (a pod that may finish has finished).
    fn apps_done(&self) -> bool {
        let mut apps = self
            .containers
            .iter()
            .filter(|c| c.kind == Kind::App)
            .peekable();
        apps.peek().is_some() && apps.all(|c| c.step == Step::Exited)
    }

    /// An init container failed for good (restartPolicy Never).
    fn init_failed(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.kind == Kind::Init && c.step == Step::Exited && !c.succeeded())
    }

    /// Moves one container as far as `now` allows.
    #[allow(clippy::too_many_arguments)]
    fn step_container(
        c: &mut Container,
        policy: Policy,
        uid: &str,
        now: Instant,
        wall: DateTime<Utc>,
        stages: &Stages,
        images: &mut HashSet<String>,
        events: &mut Vec<SimEvent>,
    ) {
        // Several steps may be due at once (zero delays): loop until one is in the future.
        for _ in 0..16 {
            let progressed = match c.step.clone() {
                Step::Pull { until } if now >= until => {
                    if stages.pull_fails(&c.image) {
                        c.attempts += 1;
                        let msg = format!("Failed to pull image \"{}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{}\": not found", c.image, c.image);
                        events.push(ev(true, "Failed", msg.clone(), c));
                        events.push(ev(true, "Failed", "Error: ErrImagePull".into(), c));
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
                        events.push(ev(false, "Pulled", format!("Successfully pulled image \"{}\" in {took:.3}s ({took:.3}s including waiting). Image size: 72000000 bytes.", c.image), c));
                        c.step = Step::Create {
                            until: until + stages.create,
                        };
                    }
                    true
                }
                Step::PullFailed { backoff_at, .. }
                    if now >= backoff_at && c.waiting_reason() == Some("ErrImagePull") =>
                {
                    let msg = format!("Back-off pulling image \"{}\"", c.image);
                    events.push(ev(false, "BackOff", msg.clone(), c));
                    events.push(ev(true, "Failed", "Error: ImagePullBackOff".into(), c));
                    c.state = waiting("ImagePullBackOff", Some(msg));
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
                        c,
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
                        c,
                    ));
                    c.state = ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(Time(wall)),
                        }),
                        ..Default::default()
                    };
                    // Started once the startup probe (if any) succeeds; readiness and
                    // liveness probes only run from then on.
                    let startup = c.startup_delay.unwrap_or(Duration::ZERO);
                    c.started = c.startup_delay.is_none();
                    if c.started && c.kind == Kind::Sidecar && c.opened_at.is_none() {
                        c.opened_at = Some(until);
                    }
                    // Regular init containers are never ready while they run.
                    let ready_at = (c.kind != Kind::Init && !c.never_ready).then(|| {
                        let (delay, more) = c.readiness.unwrap_or_default();
                        until + delay.max(startup) + more
                    });
                    let liveness_kill =
                        c.liveness_kill.map(|(from, more)| from.max(startup) + more);
                    c.killed = liveness_kill.is_some_and(|k| c.run.is_none_or(|r| k < r));
                    let exit_at = if c.killed { liveness_kill } else { c.run }.map(|d| until + d);
                    c.step = Step::Running {
                        started_at: c.startup_delay.map(|d| until + d),
                        ready_at,
                        exit_at,
                    };
                    true
                }
                Step::Running {
                    started_at: Some(at),
                    ready_at,
                    exit_at,
                } if now >= at && exit_at.is_none_or(|k| at <= k) => {
                    c.started = true;
                    if c.kind == Kind::Sidecar && c.opened_at.is_none() {
                        c.opened_at = Some(at);
                    }
                    c.step = Step::Running {
                        started_at: None,
                        ready_at,
                        exit_at,
                    };
                    true
                }
                Step::Running {
                    started_at: None,
                    ready_at: Some(r),
                    exit_at,
                } if now >= r && exit_at.is_none_or(|k| r <= k) => {
                    c.ready = true;
                    c.step = Step::Running {
                        started_at: None,
                        ready_at: None,
                        exit_at,
                    };
                    true
                }
                Step::Running {
                    exit_at: Some(k), ..
                } if now >= k => {
                    let code = if c.killed {
                        events.push(ev(
                            true,
                            "Unhealthy",
                            "Liveness probe failed: HTTP probe failed with statuscode: 500".into(),
                            c,
                        ));
                        events.push(ev(
                            false,
                            "Killing",
                            format!(
                                "Container {} failed liveness probe, will be restarted",
                                c.name
                            ),
                            c,
                        ));
                        137
                    } else {
                        c.exit_once.take().unwrap_or(c.exit_code)
                    };
                    let term = terminated(c, code, wall);
                    c.ready = false;
                    c.started = false;
                    if policy.restarts(c.kind, code) {
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
                            c,
                        ));
                        c.step = Step::CrashBackOff {
                            until: k + backoff(c.attempts),
                        };
                    } else {
                        c.state = term;
                        // A successful init container opens the way for the next one.
                        c.ready = c.kind == Kind::Init && code == 0;
                        if c.ready {
                            c.opened_at = Some(k);
                        }
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
            self.conditions.set("PodReadyToStartContainers", true, wall);
        }
        // In spec order: each init container waits for the ones before it (`gate`: when the
        // last of them let the next start), the app containers for all of them.
        let policy = Policy {
            always: self.restart_always,
            never: self.restart_never,
            apps_done: self.apps_done(),
        };
        let mut gate = (self.sandbox_ready && !self.deleting).then_some(self.sandbox_at);
        for c in &mut self.containers {
            if c.step == Step::WaitSandbox {
                if let Some(at) = gate {
                    events.extend(Self::begin_pull(c, at, stages, images));
                }
            }
            Self::step_container(c, policy, &self.uid, now, wall, stages, images, &mut events);
            if c.kind != Kind::App {
                // Gate times only grow: each container opens after the one before it.
                gate = gate.and(c.opened_at);
            }
        }
        // The app containers of a pod that may finish are done: the sidecars stop.
        if !self.restart_always && !self.deleting && self.apps_done() {
            let stop = stages.stop;
            for c in self
                .containers
                .iter_mut()
                .filter(|c| c.kind == Kind::Sidecar)
            {
                if !matches!(c.step, Step::Stop { .. } | Step::Exited) {
                    if c.started {
                        events.push(ev(
                            false,
                            "Killing",
                            format!("Stopping container {}", c.name),
                            c,
                        ));
                    }
                    c.step = Step::Stop { until: now + stop };
                }
            }
            for c in self
                .containers
                .iter_mut()
                .filter(|c| c.kind == Kind::Sidecar)
            {
                if let Step::Stop { until } = c.step {
                    if now >= until {
                        if c.container_id.is_some() {
                            c.state = terminated(c, 0, wall);
                        }
                        c.ready = false;
                        c.started = false;
                        c.step = Step::Exited;
                    }
                }
            }
        }
        self.update_conditions(wall);
        let next = self.containers.iter().filter_map(Container::next).min();
        let sandbox = (!self.sandbox_ready && !self.deleting).then_some(self.sandbox_at);
        (events, next.into_iter().chain(sandbox).min())
    }

    fn update_conditions(&mut self, wall: DateTime<Utc>) {
        let terminal = matches!(self.phase(), "Succeeded" | "Failed");
        let initialized = self.containers.iter().all(|c| match c.kind {
            Kind::Init => c.succeeded(),
            Kind::Sidecar => c.opened_at.is_some(),
            Kind::App => true,
        });
        let ready = !terminal
            && self.containers.iter().any(|c| c.kind == Kind::App)
            && self
                .containers
                .iter()
                .filter(|c| c.kind != Kind::Init)
                .all(|c| c.ready);
        let mut set = |t: &'static str, v: bool| {
            if self.conditions.get(t) != Some(v) {
                self.conditions.set(t, v, wall);
            }
        };
        set("Initialized", initialized);
        set("ContainersReady", ready);
        set("Ready", ready);
        if terminal {
            set("PodReadyToStartContainers", false);
        }
    }

    /// Graceful deletion: every container stops within `grace` (Killing events).
    pub fn delete(&mut self, now: Instant, grace: Duration, stages: &Stages) -> Vec<SimEvent> {
        if self.deleting {
            return Vec::new();
        }
        self.deleting = true;
        let mut events = Vec::new();
        for c in &mut self.containers {
            if c.step == Step::Exited {
                continue;
            }
            // A running container's preStop hook runs first; all of it within the grace.
            let hook = if c.started {
                c.pre_stop
            } else {
                Duration::ZERO
            };
            let stop = (stages.stop + hook).min(grace);
            if c.started {
                events.push(ev(
                    false,
                    "Killing",
                    format!("Stopping container {}", c.name),
                    c,
                ));
            }
            c.step = Step::Stop { until: now + stop };
        }
        events
    }

    /// What wakes the pod's worker (`end_run` pokes it).
    pub fn nudge(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.nudge.clone()
    }

    /// Container `name`'s current run ends now with `code`, as a process that exits does
    /// (the shell of `kubectl run -it` after `exit`). False when it is not running.
    pub fn end_run(&mut self, name: &str, code: i32, now: Instant, wall: DateTime<Utc>) -> bool {
        if let Some(e) = self.ephemeral.iter_mut().find(|e| e.name == name) {
            if e.ended.is_some() {
                return false;
            }
            e.ended = Some((code, wall));
            self.nudge.notify_one();
            return true;
        }
        let Some(c) = self.containers.iter_mut().find(|c| c.name == name) else {
            return false;
        };
        let Step::Running { exit_at, .. } = &mut c.step else {
            return false;
        };
        *exit_at = Some(now);
        c.exit_once = Some(code);
        c.killed = false;
        self.nudge.notify_one();
        true
    }

    /// Every container has exited (after deletion, or run to completion with restartPolicy Never).
    pub fn finished(&self) -> bool {
        self.containers.iter().all(|c| c.step == Step::Exited)
    }

    pub fn start_time(&self) -> DateTime<Utc> {
        self.start_time
    }

    /// What the log endpoint shows of container `name`: the current run (or, while it waits
    /// to restart, the last one), or with `previous` the run before the last restart.
    pub fn log_run(&self, name: &str, previous: bool, pod: &str) -> Result<LogRun, String> {
        if let Some(e) = self.ephemeral.iter().find(|e| e.name == name) {
            if previous {
                return Err(format!(
                    "previous terminated container \"{name}\" in pod \"{pod}\" not found"
                ));
            }
            return Ok(LogRun {
                image: e.image.clone(),
                start: e.started,
                end: e.ended.map(|(_, at)| at),
            });
        }
        let c = self
            .containers
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| format!("container {name} is not valid for pod {pod}"))?;
        let run = |s: &ContainerState| -> Option<LogRun> {
            if let Some(r) = &s.running {
                return Some(LogRun {
                    image: c.image.clone(),
                    start: r.started_at.as_ref()?.0,
                    end: None,
                });
            }
            let t = s.terminated.as_ref()?;
            Some(LogRun {
                image: c.image.clone(),
                start: t.started_at.as_ref()?.0,
                end: t.finished_at.as_ref().map(|f| f.0),
            })
        };
        if previous {
            return c.last_state.as_ref().and_then(run).ok_or_else(|| {
                format!("previous terminated container \"{name}\" in pod \"{pod}\" not found")
            });
        }
        run(&c.state)
            .or_else(|| c.last_state.as_ref().and_then(run))
            .ok_or_else(|| {
                format!(
                    "container \"{name}\" in pod \"{pod}\" is waiting to start: {}",
                    c.waiting_reason().unwrap_or("ContainerCreating")
                )
            })
    }

    /// The phase as a kubelet computes it.
    pub fn phase(&self) -> &'static str {
        if self.init_failed() {
            return "Failed";
        }
        let apps: Vec<&Container> = self
            .containers
            .iter()
            .filter(|c| c.kind == Kind::App)
            .collect();
        let term: Vec<i32> = apps
            .iter()
            .filter_map(|c| c.state.terminated.as_ref().map(|t| t.exit_code))
            .collect();
        if !apps.is_empty() && term.len() == apps.len() && (self.deleting || !self.restart_always) {
            return if term.iter().all(|c| *c == 0) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if apps
            .iter()
            .any(|c| c.started || c.restarts > 0 || c.state.terminated.is_some())
        {
            "Running"
        } else {
            "Pending"
        }
    }

    fn container_status(c: &Container) -> ContainerStatus {
        ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone(),
            image_id: if c.container_id.is_some() {
                image_id(&c.image)
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
        }
    }

    /// The pod's status as a kubelet reports it (keeping conditions it does not own).
    /// Starts the ephemeral containers `pod` has gained (a running pod's `kubectl debug`):
    /// they run until the pod ends, never ready, never restarted.
    pub fn ephemeral(&mut self, pod: &Pod, wall: DateTime<Utc>) -> Vec<SimEvent> {
        let mut events = Vec::new();
        if matches!(self.phase(), "Succeeded" | "Failed") || self.deleting {
            // A pod that stops stops its ephemeral containers too.
            for e in self.ephemeral.iter_mut().filter(|e| e.ended.is_none()) {
                e.ended = Some((137, wall));
            }
            return events;
        }
        let added = pod
            .spec
            .iter()
            .flat_map(|s| s.ephemeral_containers.iter().flatten());
        for e in added {
            if self.ephemeral.iter().any(|x| x.name == e.name) {
                continue;
            }
            let image = e.image.clone().unwrap_or_default();
            let path = Some(format!("spec.ephemeralContainers{{{}}}", e.name));
            for (reason, message) in [
                (
                    "Pulled",
                    format!("Container image \"{image}\" already present on machine"),
                ),
                ("Created", format!("Created container: {}", e.name)),
                ("Started", format!("Started container {}", e.name)),
            ] {
                events.push(SimEvent {
                    warning: false,
                    reason,
                    message,
                    field_path: path.clone(),
                });
            }
            self.ephemeral.push(Ephemeral {
                name: e.name.clone(),
                image,
                started: wall,
                ended: None,
            });
        }
        events
    }

    pub fn status(&self, pod: &Pod, host_ip: &str) -> PodStatus {
        let ts = |t: DateTime<Utc>| Some(Time(t));
        let terminal = matches!(self.phase(), "Succeeded" | "Failed");
        let mut conditions: Vec<PodCondition> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| self.conditions.get(&c.type_).is_none())
            .collect();
        let names = |pick: &dyn Fn(&Container) -> bool| {
            let n: Vec<&str> = self
                .containers
                .iter()
                .filter(|c| pick(c))
                .map(|c| c.name.as_str())
                .collect();
            n.join(" ")
        };
        for &(t, ok, at) in &self.conditions.0 {
            let (reason, message) = match (t, ok) {
                ("ContainersReady" | "Ready", false) if terminal => {
                    (Some("PodCompleted".to_string()), None)
                }
                ("ContainersReady" | "Ready", false) => (
                    Some("ContainersNotReady".to_string()),
                    Some(format!(
                        "containers with unready status: [{}]",
                        names(&|c| c.kind != Kind::Init && !c.ready)
                    )),
                ),
                ("Initialized", false) => (
                    Some("ContainersNotInitialized".to_string()),
                    Some(format!(
                        "containers with incomplete status: [{}]",
                        names(&|c| match c.kind {
                            Kind::Init => !c.succeeded(),
                            Kind::Sidecar => c.opened_at.is_none(),
                            Kind::App => false,
                        })
                    )),
                ),
                ("Initialized", true)
                    if terminal && self.containers.iter().any(|c| c.kind != Kind::App) =>
                {
                    (Some("PodCompleted".to_string()), None)
                }
                _ => (None, None),
            };
            conditions.push(PodCondition {
                type_: t.to_string(),
                status: if ok { "True" } else { "False" }.into(),
                last_transition_time: ts(at),
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
        let statuses: Vec<ContainerStatus> = self
            .containers
            .iter()
            .filter(|c| c.kind == Kind::App)
            .map(Self::container_status)
            .collect();
        let inits: Vec<ContainerStatus> = self
            .containers
            .iter()
            .filter(|c| c.kind != Kind::App)
            .map(Self::container_status)
            .collect();
        let ephemeral: Vec<ContainerStatus> = self
            .ephemeral
            .iter()
            .map(|e| ContainerStatus {
                name: e.name.clone(),
                image: e.image.clone(),
                image_id: image_id(&e.image),
                container_id: Some(format!(
                    "containerd://{}",
                    hex_id(&format!("{}/{}", self.uid, e.name))
                )),
                ready: false,
                restart_count: 0,
                started: Some(e.ended.is_none()),
                state: Some(match e.ended {
                    None => ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: ts(e.started),
                        }),
                        ..Default::default()
                    },
                    Some((code, at)) => ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                            started_at: ts(e.started),
                            finished_at: ts(at),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            })
            .collect();
        PodStatus {
            ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
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
            init_container_statuses: (!inits.is_empty()).then_some(inits),
            container_statuses: Some(statuses),
            ..Default::default()
        }
    }
}

/// One run of a container, as the log endpoint shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRun {
    pub image: String,
    pub start: DateTime<Utc>,
    /// When it exited; `None` while it runs.
    pub end: Option<DateTime<Utc>>,
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
    async fn a_startup_probe_holds_readiness_and_liveness_until_it_succeeds() {
        let stages = Stages::fast();
        let p = pod(json!([{"name": "c", "image": "app:1",
            "startupProbe": {"initialDelaySeconds": 4, "httpGet": {"port": 80}},
            "readinessProbe": {"initialDelaySeconds": 1, "periodSeconds": 2, "successThreshold": 3, "httpGet": {"port": 80}}}]));
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let mut sim = PodSim::new(&p, "10.244.0.2".into(), &stages, t0, rkube_client::now());
        // Drive to the container's start.
        let mut at = t0;
        let started_at = loop {
            let (evs, next) = sim.advance(at, rkube_client::now(), &stages, &mut images);
            if reasons(&evs).contains(&"Started") {
                break at;
            }
            at = next.expect("more to do before the start");
        };
        let cs = |sim: &PodSim| sim.status(&p, "h").container_statuses.unwrap()[0].clone();
        assert_eq!(
            cs(&sim).started,
            Some(false),
            "not started before the startup probe"
        );
        let (_, next) = sim.advance(started_at, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, Some(started_at + Duration::from_secs(4)));
        sim.advance(next.unwrap(), rkube_client::now(), &stages, &mut images);
        assert_eq!(cs(&sim).started, Some(true));
        assert!(!cs(&sim).ready);
        // Readiness: its 1 s delay is long past at the startup (4 s); then two more successes
        // two seconds apart.
        let ready_at = started_at + Duration::from_secs(4 + 2 * 2);
        let (_, next) = sim.advance(
            started_at + Duration::from_secs(4),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(next, Some(ready_at));
        sim.advance(ready_at, rkube_client::now(), &stages, &mut images);
        assert!(cs(&sim).ready);
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

    fn pod_with(spec: serde_json::Value, annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u1", "annotations": annotations}, "spec": spec}))
            .unwrap()
    }

    fn state_of(st: &PodStatus, init: bool, i: usize) -> ContainerState {
        let list = if init {
            st.init_container_statuses.as_ref()
        } else {
            st.container_statuses.as_ref()
        };
        list.unwrap()[i].state.clone().unwrap()
    }

    fn condition(st: &PodStatus, t: &str) -> (String, Option<String>) {
        let c = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[tokio::test(start_paused = true)]
    async fn memory_over_the_limit_is_oom_killed_and_pre_stop_delays_the_stop() {
        let stages = Stages::fast();
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let p = pod_with(
            json!({"restartPolicy": "Always", "containers": [{"name": "c", "image": "app",
                "resources": {"limits": {"memory": "256Mi"}}}]}),
            json!({"sim.rkube.io/memory-usage": "300Mi"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        let (evs, _) = sim.advance(
            t0 + crate::stages::DEFAULT_RUN,
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reasons(&evs), ["BackOff"], "restarted with back-off");
        let cs = sim.status(&p, "h").container_statuses.unwrap()[0].clone();
        let last = cs.last_state.unwrap().terminated.unwrap();
        assert_eq!(
            (last.exit_code, last.reason.as_deref()),
            (137, Some("OOMKilled"))
        );
        assert_eq!(cs.restart_count, 1);
        // Within the limit it runs on.
        let p = pod_with(
            json!({"containers": [{"name": "c", "image": "app",
                "resources": {"limits": {"memory": "512Mi"}},
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}}}]}),
            json!({"sim.rkube.io/memory-usage": "300Mi"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, None, "runs until stopped");
        // Deleted: the preStop hook's 5 s, within a 30 s grace period.
        sim.delete(t0, Duration::from_secs(30), &stages);
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, Some(t0 + stages.stop + Duration::from_secs(5)));
        // A shorter grace period cuts it.
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        sim.delete(t0, Duration::from_secs(2), &stages);
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, Some(t0 + Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shell_on_stdin_runs_until_it_exits_and_ephemeral_containers_end() {
        let stages = Stages::fast();
        let t0 = Instant::now();
        let mut images = HashSet::new();
        // `kubectl run -i --restart=Never -- sh`: no run duration; `exit 3` ends it with 3.
        let p = pod_with(
            json!({"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "args": ["sh"], "stdin": true}]}),
            json!({}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!((next, sim.phase()), (None, "Running"));
        assert!(sim.end_run("c", 3, t0, rkube_client::now()));
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(sim.phase(), "Failed");
        let t = state_of(&sim.status(&p, "h"), false, 0).terminated.unwrap();
        assert_eq!(t.exit_code, 3);
        assert!(
            !sim.end_run("c", 0, t0, rkube_client::now()),
            "nothing runs"
        );
        // A stdin container that is not a shell keeps its run duration.
        let p = pod_with(
            json!({"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["echo", "hi"], "stdin": true}]}),
            json!({}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, Some(t0 + crate::stages::DEFAULT_RUN));
        // An ephemeral container runs until its shell exits; a finished pod stops it.
        let mut p = pod_with(
            json!({"restartPolicy": "Always", "containers": [{"name": "c", "image": "nginx"}],
                "ephemeralContainers": [{"name": "dbg", "image": "busybox"},
                    {"name": "dbg2", "image": "busybox"}]}),
            json!({}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        sim.ephemeral(&p, rkube_client::now());
        assert!(sim.log_run("dbg", false, "p").unwrap().end.is_none());
        assert!(sim.end_run("dbg", 0, t0, rkube_client::now()));
        let st = sim.status(&p, "h");
        let dbg = &st.ephemeral_container_statuses.as_ref().unwrap()[0];
        let t = dbg.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        p.metadata.deletion_timestamp = Some(Time(rkube_client::now()));
        sim.delete(t0, Duration::from_secs(1), &stages);
        sim.ephemeral(&p, rkube_client::now());
        let st = sim.status(&p, "h");
        let dbg2 = &st.ephemeral_container_statuses.as_ref().unwrap()[1];
        assert_eq!(
            dbg2.state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pods_that_may_finish_complete_after_the_run_duration() {
        let stages = Stages::fast();
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let p = pod_with(
            json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}),
            json!({}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, Some(t0 + crate::stages::DEFAULT_RUN));
        assert_eq!(sim.phase(), "Running");
        let (evs, next) = sim.advance(
            t0 + crate::stages::DEFAULT_RUN,
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert!(evs.is_empty() && next.is_none(), "{evs:?}");
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
        let t = state_of(&st, false, 0).terminated.unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert!(t.started_at.is_some() && t.finished_at.is_some());
        assert_eq!(
            condition(&st, "Ready"),
            ("False".into(), Some("PodCompleted".into()))
        );
        assert_eq!(condition(&st, "PodReadyToStartContainers").0, "False");
        let run = sim.log_run("c", false, "p").unwrap();
        assert!(run.end.is_some(), "logs end where the container ended");

        // An exit code from the annotations: Never fails the pod, OnFailure restarts.
        let ann = json!({"sim.rkube.io/exit-code": "3", "sim.rkube.io/run-duration": "2s"});
        let p = pod_with(
            json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}),
            ann.clone(),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        sim.advance(
            t0 + Duration::from_secs(2),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        let t = state_of(&st, false, 0).terminated.unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
        let p = pod_with(
            json!({"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}),
            ann,
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        let (evs, next) = sim.advance(
            t0 + Duration::from_secs(2),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reasons(&evs), ["BackOff"]);
        assert_eq!(next, Some(t0 + Duration::from_secs(12)));
        assert_eq!(sim.phase(), "Running");
        assert!(
            sim.log_run("c", true, "p").is_ok(),
            "the previous run's logs"
        );
        // Always pods run until deleted, whatever the default run duration.
        let p = pod_with(
            json!({"containers": [{"name": "c", "image": "busybox"}]}),
            json!({}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(next, None);
        assert!(sim
            .log_run("c", true, "p")
            .unwrap_err()
            .contains("previous terminated container"));
    }

    #[tokio::test(start_paused = true)]
    async fn init_containers_run_in_order_and_sidecars_run_beside_the_app() {
        let stages = Stages::fast();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut images = HashSet::new();
        let p = pod_with(
            json!({"restartPolicy": "Never",
                "initContainers": [{"name": "a", "image": "busybox"}, {"name": "side", "image": "envoy", "restartPolicy": "Always"},
                    {"name": "b", "image": "busybox"}],
                "containers": [{"name": "app", "image": "busybox"}]}),
            json!({"sim.rkube.io/run-duration.a": "1s", "sim.rkube.io/run-duration.app": "5s"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (evs, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(
            evs.iter().filter(|e| e.reason == "Started").count(),
            1,
            "only the first init container"
        );
        assert_eq!(evs[0].field_path.as_deref(), Some("spec.initContainers{a}"));
        assert_eq!(next, Some(t0 + ms(1000)));
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Pending"));
        assert_eq!(
            condition(&st, "Initialized"),
            ("False".into(), Some("ContainersNotInitialized".into()))
        );
        assert_eq!(
            state_of(&st, false, 0).waiting.unwrap().reason.as_deref(),
            Some("PodInitializing")
        );
        // a done: the sidecar starts, then b (at once: the sidecar counts as started).
        let (evs, next) = sim.advance(t0 + ms(1000), rkube_client::now(), &stages, &mut images);
        let started: Vec<&str> = evs
            .iter()
            .filter(|e| e.reason == "Started")
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(started, ["Started container side", "Started container b"]);
        assert_eq!(next, Some(t0 + ms(1100)));
        let st = sim.status(&p, "h");
        assert!(
            st.init_container_statuses.as_ref().unwrap()[0].ready,
            "a succeeded"
        );
        // b done: the app starts; the pod is Running and Initialized.
        sim.advance(t0 + ms(1100), rkube_client::now(), &stages, &mut images);
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&st, "Initialized").0, "True");
        assert_eq!(condition(&st, "Ready").0, "True", "app and sidecar ready");
        assert!(state_of(&st, true, 1).running.is_some());
        // The app finishes: the sidecar stops, the pod succeeds.
        let (evs, _) = sim.advance(t0 + ms(6100), rkube_client::now(), &stages, &mut images);
        assert_eq!(reasons(&evs), ["Killing"]);
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
        assert!(state_of(&st, true, 1).terminated.is_some());
        assert!(sim.finished());

        // A failing init container: Never fails the pod and no app container starts.
        let p = pod_with(
            json!({"restartPolicy": "Never", "initContainers": [{"name": "a", "image": "busybox"}],
                "containers": [{"name": "app", "image": "busybox"}]}),
            json!({"sim.rkube.io/exit-code.a": "1"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        let (evs, next) = sim.advance(t0 + ms(100), rkube_client::now(), &stages, &mut images);
        assert!(evs.is_empty() && next.is_none());
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(
            state_of(&st, false, 0).waiting.unwrap().reason.as_deref(),
            Some("PodInitializing")
        );
        // With Always, it backs off and tries again.
        let p = pod_with(
            json!({"initContainers": [{"name": "a", "image": "busybox"}], "containers": [{"name": "app", "image": "busybox"}]}),
            json!({"sim.rkube.io/exit-code.a": "1"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        sim.advance(t0, rkube_client::now(), &stages, &mut images);
        let (evs, next) = sim.advance(t0 + ms(100), rkube_client::now(), &stages, &mut images);
        assert_eq!(reasons(&evs), ["BackOff"]);
        assert_eq!(next, Some(t0 + ms(10_100)));
        let st = sim.status(&p, "h");
        assert_eq!(st.phase.as_deref(), Some("Pending"));
        assert_eq!(
            state_of(&st, true, 0).waiting.unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_liveness_probe_kills_and_restarts_the_container() {
        let stages = Stages::fast();
        let t0 = Instant::now();
        let mut images = HashSet::new();
        let p = pod_with(
            json!({"containers": [{"name": "c", "image": "app", "livenessProbe": {"httpGet": {"port": 80}, "periodSeconds": 2, "failureThreshold": 3}}]}),
            json!({"sim.rkube.io/liveness-fail-after": "4s"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        let (_, next) = sim.advance(t0, rkube_client::now(), &stages, &mut images);
        assert_eq!(
            next,
            Some(t0 + Duration::from_secs(10)),
            "4 s, then 3 failures 2 s apart"
        );
        let (evs, _) = sim.advance(
            t0 + Duration::from_secs(10),
            rkube_client::now(),
            &stages,
            &mut images,
        );
        assert_eq!(reasons(&evs), ["Unhealthy", "Killing", "BackOff"]);
        let st = sim.status(&p, "h");
        let cs = &st.container_statuses.unwrap()[0];
        assert_eq!(cs.restart_count, 1);
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (last.exit_code, last.reason.as_deref()),
            (137, Some("Error"))
        );
        assert!(sim.log_run("c", true, "p").is_ok(), "the killed run's logs");
        // Without a probe the annotation does nothing.
        let p = pod_with(
            json!({"containers": [{"name": "c", "image": "app"}]}),
            json!({"sim.rkube.io/liveness-fail-after": "4s"}),
        );
        let mut sim = PodSim::new(&p, "ip".into(), &stages, t0, rkube_client::now());
        assert_eq!(
            sim.advance(t0, rkube_client::now(), &stages, &mut images).1,
            None
        );
    }
}
