//! Resource arithmetic for scheduling: a pod's requests (upstream's effective request: the sum
//! over containers, or the largest init container if larger, plus overhead; limits stand in for
//! missing requests) and a node's allocatable.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rkube_api::quantity::{parse_milli, parse_value};
use rkube_client::pod::{Container, Pod, Quantities};

/// Non-zero defaults used only for scoring pods without requests (upstream's
/// `DefaultMilliCPURequest` and `DefaultMemoryRequest`).
pub const DEFAULT_MILLI_CPU: i64 = 100;
pub const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub pods: i64,
}

impl Resources {
    pub fn add(&mut self, o: &Resources) {
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.pods += o.pods;
    }

    pub fn sub(&mut self, o: &Resources) {
        self.milli_cpu -= o.milli_cpu;
        self.memory -= o.memory;
        self.pods -= o.pods;
    }
}

fn value(q: Option<&Quantity>, milli: bool) -> Option<i64> {
    let q = q?;
    if milli {
        parse_milli(&q.0)
    } else {
        parse_value(&q.0)
    }
}

fn container(c: &Container) -> (i64, i64) {
    let r = c.resources.as_ref();
    let req = r.and_then(|r| r.requests.as_ref());
    let lim = r.and_then(|r| r.limits.as_ref());
    let get = |m: Option<&Quantities>, name: &str, milli: bool| value(m?.get(name), milli);
    let cpu = get(req, "cpu", true)
        .or_else(|| get(lim, "cpu", true))
        .unwrap_or(0);
    let mem = get(req, "memory", false)
        .or_else(|| get(lim, "memory", false))
        .unwrap_or(0);
    (cpu, mem)
}

/// What the pod asks for (`pods: 1`), and the same with scoring defaults for zero requests.
pub fn pod_requests(p: &Pod) -> (Resources, Resources) {
    let Some(spec) = p.spec.as_ref() else {
        return (
            Resources {
                pods: 1,
                ..Default::default()
            },
            Resources {
                milli_cpu: DEFAULT_MILLI_CPU,
                memory: DEFAULT_MEMORY,
                pods: 1,
            },
        );
    };
    let (mut cpu, mut mem, mut nz_cpu, mut nz_mem) = (0, 0, 0, 0);
    for c in &spec.containers {
        let (c_cpu, c_mem) = container(c);
        cpu += c_cpu;
        mem += c_mem;
        nz_cpu += if c_cpu == 0 { DEFAULT_MILLI_CPU } else { c_cpu };
        nz_mem += if c_mem == 0 { DEFAULT_MEMORY } else { c_mem };
    }
    for c in spec.init_containers.iter().flatten() {
        let (c_cpu, c_mem) = container(c);
        cpu = cpu.max(c_cpu);
        mem = mem.max(c_mem);
    }
    let overhead = spec.overhead.as_ref();
    cpu += value(overhead.and_then(|o| o.get("cpu")), true).unwrap_or(0);
    mem += value(overhead.and_then(|o| o.get("memory")), false).unwrap_or(0);
    (
        Resources {
            milli_cpu: cpu,
            memory: mem,
            pods: 1,
        },
        Resources {
            milli_cpu: nz_cpu.max(cpu),
            memory: nz_mem.max(mem),
            pods: 1,
        },
    )
}

/// The node's allocatable (capacity when allocatable is absent).
pub fn allocatable(n: &Node) -> Resources {
    let st = n.status.as_ref();
    let a = st
        .and_then(|s| s.allocatable.as_ref())
        .or_else(|| st.and_then(|s| s.capacity.as_ref()));
    let get = |name: &str, milli: bool| value(a.and_then(|a| a.get(name)), milli).unwrap_or(0);
    Resources {
        milli_cpu: get("cpu", true),
        memory: get("memory", false),
        pods: get("pods", false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_sum_containers_take_max_init_and_fall_back_to_limits() {
        let p: Pod = serde_json::from_value(json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "c"}
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
        }}))
        .unwrap();
        let (req, nz) = pod_requests(&p);
        assert_eq!(
            req,
            Resources {
                milli_cpu: 2000,
                memory: (64 << 20) + (1 << 30),
                pods: 1
            }
        );
        assert_eq!(nz.memory, (64 << 20) + (1 << 30) + DEFAULT_MEMORY);
        let n: Node = serde_json::from_value(
            json!({"status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        )
        .unwrap();
        assert_eq!(
            allocatable(&n),
            Resources {
                milli_cpu: 4000,
                memory: 8 << 30,
                pods: 110
            }
        );
    }
}
