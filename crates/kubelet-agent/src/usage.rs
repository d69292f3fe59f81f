//! Simulated resource usage, without I/O: what each running container uses now — the
//! `cpu-usage`/`memory-usage` overrides when set, else a share of its request (or limit) that
//! drifts slowly over a few minutes, different per container — and the node's total, in the
//! shape of the kubelet's Summary API (`/stats/summary`), which the apiserver turns into
//! `metrics.k8s.io` for `kubectl top` and the HPA.

use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::pod::{Container, Pod};
use serde_json::{json, Value};

use crate::overrides;

/// Millicores and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub milli_cpu: i64,
    pub bytes: i64,
}

/// A slow wave in [0, 1] with a phase of its own per `seed`, over a 2-minute period.
fn wave(seed: &str, now: DateTime<Utc>) -> f64 {
    let mut h: u32 = 0x811c9dc5;
    for b in seed.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x01000193);
    }
    let phase = f64::from(h % 1000) / 1000.0;
    let t = now.timestamp_millis() as f64 / 120_000.0;
    (1.0 + (std::f64::consts::TAU * (t + phase)).sin()) / 2.0
}

fn request(c: &Container, name: &str, milli: bool) -> i64 {
    let r = c.resources.as_ref();
    let q = r
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(name))
        .or_else(|| r.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(name)));
    q.and_then(|q| {
        if milli {
            rkube_api::quantity::parse_milli(&q.0)
        } else {
            rkube_api::quantity::parse_value(&q.0)
        }
    })
    .unwrap_or(0)
}

/// What container `c` of `pod` uses at `now`.
pub fn container(pod: &Pod, c: &Container, now: DateTime<Utc>) -> Usage {
    let o = overrides::for_container(pod, &c.name);
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let w = wave(&format!("{uid}/{}", c.name), now);
    let cpu_req = request(c, "cpu", true);
    let mem_req = request(c, "memory", false);
    let milli_cpu = o.cpu_usage.unwrap_or(if cpu_req > 0 {
        (cpu_req as f64 * (0.25 + 0.2 * w)).round() as i64
    } else {
        (1.0 + 4.0 * w).round() as i64
    });
    let bytes = o.memory_usage.unwrap_or(if mem_req > 0 {
        (mem_req as f64 * (0.4 + 0.1 * w)) as i64
    } else {
        ((8.0 + 4.0 * w) * 1048576.0) as i64
    });
    Usage {
        milli_cpu: milli_cpu.max(0),
        bytes: bytes.max(0),
    }
}

/// The Summary API document of `node` with its running `pods` at `now`: per container and
/// pod `usageNanoCores` and `workingSetBytes`, and the node's sum plus a base of its own.
pub fn summary(node: &str, pods: &[&Pod], now: DateTime<Utc>) -> Value {
    let ts = now.to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true);
    let stat = |u: Usage| {
        json!({
            "cpu": {"time": ts, "usageNanoCores": u.milli_cpu * 1_000_000},
            "memory": {"time": ts, "workingSetBytes": u.bytes},
        })
    };
    // The node's own processes: 50m and 256Mi.
    let mut total = Usage {
        milli_cpu: 50,
        bytes: 256 * 1048576,
    };
    let mut out_pods = Vec::new();
    for p in pods {
        let mut sum = Usage::default();
        let mut containers = Vec::new();
        for c in p.spec.iter().flat_map(|s| s.containers.iter()) {
            let u = container(p, c, now);
            sum.milli_cpu += u.milli_cpu;
            sum.bytes += u.bytes;
            let mut e = stat(u);
            e["name"] = json!(c.name);
            e["startTime"] = json!(ts);
            containers.push(e);
        }
        total.milli_cpu += sum.milli_cpu;
        total.bytes += sum.bytes;
        let mut e = stat(sum);
        e["podRef"] = json!({
            "name": p.metadata.name,
            "namespace": p.metadata.namespace,
            "uid": p.metadata.uid,
        });
        e["containers"] = json!(containers);
        out_pods.push(e);
    }
    let mut n = stat(total);
    n["nodeName"] = json!(node);
    json!({"node": n, "pods": out_pods})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ann: Value, resources: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "u", "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}}),
        )
        .unwrap()
    }

    #[test]
    fn usage_follows_requests_overrides_and_drifts() {
        let t0: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let p = pod(
            json!({}),
            json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
        );
        let c = &p.spec.as_ref().unwrap().containers[0];
        let samples: Vec<Usage> = (0..12)
            .map(|i| container(&p, c, t0 + k8s_openapi::chrono::Duration::seconds(i * 10)))
            .collect();
        for u in &samples {
            assert!((250..=450).contains(&u.milli_cpu), "{u:?}");
            assert!(u.bytes >= 429_496_729 && u.bytes <= 536_870_912, "{u:?}");
        }
        assert!(samples.iter().any(|u| *u != samples[0]), "it drifts");
        let fixed = pod(
            json!({"sim.rkube.io/cpu-usage": "750m", "sim.rkube.io/memory-usage.c": "300Mi"}),
            json!({}),
        );
        let c = &fixed.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            container(&fixed, c, t0),
            Usage {
                milli_cpu: 750,
                bytes: 300 * 1048576
            }
        );
        let s = summary("n1", &[&fixed], t0);
        assert_eq!(s["node"]["nodeName"], "n1");
        assert_eq!(s["node"]["cpu"]["usageNanoCores"], 800_000_000i64);
        assert_eq!(s["pods"][0]["podRef"]["name"], "p");
        assert_eq!(
            s["pods"][0]["containers"][0]["memory"]["workingSetBytes"],
            314_572_800i64
        );
    }
}
