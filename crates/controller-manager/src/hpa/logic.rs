//! The HorizontalPodAutoscaler's decisions, without I/O (upstream's replica calculator and
//! `normalizeDesiredReplicasWithBehaviors`): replicas proposed by each resource metric from
//! the ready pods' usage against their requests (10 % tolerance), the largest proposal,
//! clamped to min/max, held by the stabilization windows (scale-down: the highest
//! recommendation of the last 300 s by default) and limited by the scaling policies.

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use k8s_openapi::chrono::{DateTime, Duration, Utc};

/// Upstream's `--horizontal-pod-autoscaler-tolerance`.
pub const TOLERANCE: f64 = 0.1;

/// One ready pod's usage and request of the metric's resource (millicores or bytes).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub usage: i64,
    pub request: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Percent of the request.
    Utilization(i32),
    /// Per pod, in the resource's unit.
    AverageValue(i64),
}

/// What one metric proposes, and what was seen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Proposal {
    pub replicas: i32,
    pub utilization: Option<i32>,
    pub average: i64,
}

/// The replicas a resource metric asks for with `current` replicas, from the samples of the
/// pods that are ready and have metrics.
pub fn resource_replicas(
    current: i32,
    samples: &[Sample],
    target: Target,
) -> Result<Proposal, String> {
    if samples.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let n = samples.len() as f64;
    let usage: i64 = samples.iter().map(|s| s.usage).sum();
    let average = (usage as f64 / n).round() as i64;
    let (ratio, utilization) = match target {
        Target::Utilization(t) => {
            let requests: Option<i64> = samples.iter().map(|s| s.request).sum();
            let requests = requests
                .filter(|r| *r > 0)
                .ok_or("missing request for the resource")?;
            let u = usage as f64 * 100.0 / requests as f64;
            (u / f64::from(t.max(1)), Some(u.round() as i32))
        }
        Target::AverageValue(v) => (usage as f64 / n / v.max(1) as f64, None),
    };
    let replicas = if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else {
        (ratio * n).ceil().min(f64::from(i32::MAX)) as i32
    };
    Ok(Proposal {
        replicas,
        utilization,
        average,
    })
}

/// Past recommendations, oldest first: (when, replicas).
pub type Recommendations = Vec<(DateTime<Utc>, i32)>;

/// A scaling decision once held back by the behavior.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub replicas: i32,
    /// The reason of the `ScalingLimited` condition when min, max or a policy limited it.
    pub limited: Option<&'static str>,
}

fn default_rules(up: bool) -> HPAScalingRules {
    // Upstream's defaults: up at once, by 100 % or 4 pods per 15 s; down after 300 s, by
    // 100 % per 15 s.
    serde_json::from_value(if up {
        serde_json::json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    } else {
        serde_json::json!({"stabilizationWindowSeconds": 300, "selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    })
    .expect("valid defaults")
}

/// `desired` (the largest proposal) against min/max, the stabilization windows over
/// `history` (past recommendations, newest last, pruned here to the longest window) and the
/// policies' limits on one step from `current`.
pub fn decide(
    current: i32,
    desired: i32,
    min: i32,
    max: i32,
    behavior: Option<&HorizontalPodAutoscalerBehavior>,
    history: &mut Recommendations,
    now: DateTime<Utc>,
) -> Decision {
    let up = behavior
        .and_then(|b| b.scale_up.clone())
        .unwrap_or_else(|| default_rules(true));
    let down = behavior
        .and_then(|b| b.scale_down.clone())
        .unwrap_or_else(|| default_rules(false));
    let window = |r: &HPAScalingRules, d: i32| {
        Duration::seconds(i64::from(
            r.stabilization_window_seconds.unwrap_or(d).max(0),
        ))
    };
    let (w_up, w_down) = (window(&up, 0), window(&down, 300));
    history.push((now, desired));
    let keep = w_up.max(w_down);
    history.retain(|(t, _)| *t + keep >= now);
    // Up: the lowest recommendation within the up window; down: the highest within the down
    // window.
    let in_window = |w: Duration| history.iter().filter(move |(t, _)| *t + w >= now);
    let stabilized = if desired > current {
        in_window(w_up)
            .map(|(_, r)| *r)
            .min()
            .unwrap_or(desired)
            .max(current)
    } else {
        in_window(w_down)
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(desired)
            .min(current)
    };
    let mut limited = None;
    let mut replicas = stabilized;
    // The policies' limit on one step.
    let rules = if replicas > current { &up } else { &down };
    if replicas != current && rules.select_policy.as_deref() != Some("Disabled") {
        let step = |p: &k8s_openapi::api::autoscaling::v2::HPAScalingPolicy| -> i64 {
            if p.type_ == "Pods" {
                i64::from(p.value)
            } else {
                (i64::from(current) * i64::from(p.value) + 99) / 100
            }
        };
        let steps = rules.policies.iter().flatten().map(step);
        let allowed = if rules.select_policy.as_deref() == Some("Min") {
            steps.min()
        } else {
            steps.max()
        };
        if let Some(a) = allowed {
            let a = a.max(1);
            let bound = if replicas > current {
                (i64::from(current) + a).min(i64::from(i32::MAX)) as i32
            } else {
                (i64::from(current) - a).max(0) as i32
            };
            if (replicas > current && replicas > bound) || (replicas < current && replicas < bound)
            {
                replicas = bound;
                limited = Some(if replicas > current {
                    "ScaleUpLimit"
                } else {
                    "ScaleDownLimit"
                });
            }
        }
    } else if replicas != current {
        replicas = current;
    }
    if replicas > max {
        replicas = max;
        limited = Some("TooManyReplicas");
    } else if replicas < min {
        replicas = min;
        limited = Some("TooFewReplicas");
    }
    Decision { replicas, limited }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(usages: &[i64], request: i64) -> Vec<Sample> {
        usages
            .iter()
            .map(|u| Sample {
                usage: *u,
                request: Some(request),
            })
            .collect()
    }

    #[test]
    fn utilization_proposes_replicas_within_tolerance() {
        // Two pods at 90 % of 100m against a 50 % target: ceil(1.8 × 2) = 4.
        let p = resource_replicas(2, &samples(&[90, 90], 100), Target::Utilization(50)).unwrap();
        assert_eq!((p.replicas, p.utilization, p.average), (4, Some(90), 90));
        // Within 10 % of the target: unchanged.
        let p =
            resource_replicas(3, &samples(&[52, 53, 54], 100), Target::Utilization(50)).unwrap();
        assert_eq!(p.replicas, 3);
        // Low usage scales down.
        let p = resource_replicas(4, &samples(&[10, 10, 10, 10], 100), Target::Utilization(50))
            .unwrap();
        assert_eq!(p.replicas, 1);
        // Average value: 3 pods at 300 against 100 each → 9.
        let p =
            resource_replicas(3, &samples(&[300, 300, 300], 0), Target::AverageValue(100)).unwrap();
        assert_eq!(p.replicas, 9);
        assert!(resource_replicas(1, &[], Target::Utilization(50)).is_err());
        let no_req = [Sample {
            usage: 5,
            request: None,
        }];
        assert!(resource_replicas(1, &no_req, Target::Utilization(50)).is_err());
    }

    #[test]
    fn behavior_holds_scale_down_and_limits_steps() {
        let t0: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut h = Vec::new();
        // Up by default: at most max(4 pods, 100 %) per step, then capped by max.
        assert_eq!(decide(1, 20, 1, 10, None, &mut h, t0).replicas, 5);
        assert_eq!(
            decide(8, 20, 1, 10, None, &mut h, t0),
            Decision {
                replicas: 10,
                limited: Some("TooManyReplicas")
            }
        );
        // Down waits out the 300 s window's highest recommendation.
        let mut h = vec![(t0, 10)];
        let later = t0 + Duration::seconds(60);
        assert_eq!(decide(10, 2, 1, 10, None, &mut h, later).replicas, 10);
        let much_later = t0 + Duration::seconds(400);
        assert_eq!(decide(10, 2, 1, 10, None, &mut h, much_later).replicas, 2);
        // A behavior without a window scales down at once, within its policy.
        let b: HorizontalPodAutoscalerBehavior = serde_json::from_value(serde_json::json!({
            "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}))
        .unwrap();
        let mut h = Vec::new();
        assert_eq!(
            decide(5, 2, 1, 10, Some(&b), &mut h, t0),
            Decision {
                replicas: 4,
                limited: Some("ScaleDownLimit")
            }
        );
        // min wins over a lower recommendation.
        let mut h = Vec::new();
        assert_eq!(decide(1, 0, 2, 10, Some(&b), &mut h, t0).replicas, 2);
    }
}
