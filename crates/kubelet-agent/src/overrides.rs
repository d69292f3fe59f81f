//! Per-pod simulation overrides, read from the pod's annotations — the one place they are
//! defined (the README's table lists the same keys). `sim.rkube.io/<key>` applies to every
//! container of the pod, `sim.rkube.io/<key>.<container>` to one container and wins over the
//! pod-wide value. Values that do not parse are ignored, as if absent.
//!
//! | key            | value                          | effect                                        |
//! |----------------|--------------------------------|-----------------------------------------------|
//! | `run-duration` | a duration (`500ms`, `2s`) or `forever` | how long the container runs before it exits |
//! | `exit-code`    | an integer                     | the code it exits with (default 0)            |
//! | `ready`        | `false`                        | its readiness probe never succeeds            |
//! | `liveness-fail-after` | a duration              | its liveness probe (if it has one) fails from then on: killed (137) after `failureThreshold` × `periodSeconds`, restarted as the restart policy says |
//! | `cpu-usage`    | a quantity (`250m`, `1`)       | the CPU it uses (`kubectl top`, the HPA); default: a share of its request that drifts over minutes |
//! | `memory-usage` | a quantity (`300Mi`)           | the memory it uses; default likewise; above the memory limit each run ends OOMKilled |
//!
//! A crash after N seconds is `run-duration: Ns` with a non-zero `exit-code`.

use std::time::Duration;

use rkube_client::pod::Pod;

pub const PREFIX: &str = "sim.rkube.io/";

/// How long a container runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Run {
    For(Duration),
    Forever,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    pub run: Option<Run>,
    pub exit_code: Option<i32>,
    pub never_ready: bool,
    pub liveness_fail_after: Option<Duration>,
    /// Millicores.
    pub cpu_usage: Option<i64>,
    /// Bytes.
    pub memory_usage: Option<i64>,
}

/// The container's value of `key` that parses, else the pod's.
fn value<T>(pod: &Pod, key: &str, container: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
    let ann = pod.metadata.annotations.as_ref()?;
    [
        format!("{PREFIX}{key}.{container}"),
        format!("{PREFIX}{key}"),
    ]
    .iter()
    .find_map(|k| ann.get(k).and_then(|v| parse(v.trim())))
}

/// The overrides for `container` of `pod`.
pub fn for_container(pod: &Pod, container: &str) -> Overrides {
    let run = value(pod, "run-duration", container, |v| match v {
        "forever" => Some(Run::Forever),
        d => rkube_daemon::parse_duration(d).ok().map(Run::For),
    });
    Overrides {
        run,
        exit_code: value(pod, "exit-code", container, |v| v.parse().ok()),
        never_ready: value(pod, "ready", container, |v| (v == "false").then_some(())).is_some(),
        liveness_fail_after: value(pod, "liveness-fail-after", container, |v| {
            rkube_daemon::parse_duration(v).ok()
        }),
        cpu_usage: value(
            pod,
            "cpu-usage",
            container,
            rkube_api::quantity::parse_milli,
        ),
        memory_usage: value(
            pod,
            "memory-usage",
            container,
            rkube_api::quantity::parse_value,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_keys_win_over_pod_keys_and_bad_values_are_ignored() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"annotations": {
            "sim.rkube.io/run-duration": "2s",
            "sim.rkube.io/run-duration.web": "forever",
            "sim.rkube.io/exit-code": "3",
            "sim.rkube.io/exit-code.web": "many",
            "sim.rkube.io/ready.web": "false"}}}))
        .unwrap();
        let web = for_container(&pod, "web");
        assert_eq!(web.run, Some(Run::Forever));
        assert_eq!(web.exit_code, Some(3), "an unparsable value falls back");
        assert!(web.never_ready);
        let job = for_container(&pod, "job");
        assert_eq!(job.run, Some(Run::For(Duration::from_secs(2))));
        assert!(!job.never_ready);
        assert_eq!(for_container(&Pod::default(), "x"), Overrides::default());
    }
}
