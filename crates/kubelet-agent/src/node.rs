//! One simulated node's presence in the API: its Node object (capacity, allocatable, addresses,
//! kubelet endpoint, nodeInfo, conditions, podCIDR), its Lease in `kube-node-lease` renewed every
//! quarter of the lease duration, and status reports on change or every five minutes. Both
//! loops wait their period plus up to 4 % (upstream's jitter), and start at a place in their
//! first period set by the node's index: the simulated nodes start in one instant, which real
//! kubelets never do.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use rkube_client::{Api, Client, Error, Patch};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// How long a node may go without a status report when nothing changed (upstream's
/// `nodeStatusReportFrequency`).
pub const STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);

/// Upstream's kubelet runs its lease renewals and node status checks with
/// `wait.JitterUntil(…, period, 0.04, …)`: each wait is the period plus up to 4 %.
const JITTER: f64 = 0.04;

/// A node's first wait in a periodic loop: somewhere in (0, `period`], set by its index, so
/// nodes started together do not act together. A thousand nodes renewing their leases in one
/// instant held more write seats than the apiserver has (200), and the 429s' `Retry-After`
/// stopped every writer for a second, every period.
pub fn first_wait(period: Duration, index: usize) -> Duration {
    // Multiples of the golden ratio, modulo 1, spread any count of nodes evenly.
    let phase = 1.0 - (index as f64 * 0.618_033_988_749_895).fract();
    period.mul_f64(phase)
}

/// One period, jittered as upstream's.
fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + JITTER * rand::random::<f64>())
}

#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub name: String,
    pub index: usize,
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub ip: String,
    pub port: u16,
    pub lease_duration: Duration,
    pub status_update_frequency: Duration,
}

impl NodeSpec {
    /// `10.244.<i>.0/24`, continuing into 10.245… past 256 nodes.
    pub fn pod_cidr(&self) -> String {
        format!("10.{}.{}.0/24", 244 + self.index / 256, self.index % 256)
    }

    /// The n-th pod address of the node's CIDR (n from 0; `.2` upwards as the usual bridge).
    pub fn pod_ip(&self, n: u8) -> String {
        format!("10.{}.{}.{}", 244 + self.index / 256, self.index % 256, n)
    }

    fn labels(&self) -> Value {
        let mut l = json!({
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "rkube-simulated",
        });
        for (k, v) in &self.labels {
            l[k] = json!(v);
        }
        l
    }

    /// The status a kubelet posts, with heartbeats at `now`.
    pub fn status(&self, now: &str, since: &str) -> Value {
        let resources = json!({"cpu": self.cpu, "memory": self.memory, "pods": self.max_pods.to_string(),
            "ephemeral-storage": "100Gi", "hugepages-2Mi": "0"});
        let cond = |t: &str, s: &str, reason: &str, msg: &str| json!({"type": t, "status": s, "reason": reason, "message": msg, "lastHeartbeatTime": now, "lastTransitionTime": since});
        let id = format!("{:032x}", self.index as u128 + 0x5eed_0000);
        json!({
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {
                "machineID": id, "systemUUID": id, "bootID": id,
                "kernelVersion": "6.1.0-rkube", "osImage": "rkube simulated node",
                "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64"
            },
            "images": [],
        })
    }
}

fn now_rfc3339() -> String {
    rkube_client::now().to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true)
}

fn now_micro() -> String {
    rkube_client::now().to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Micros, true)
}

/// Creates the Node (or brings an existing one up to date) and posts its status.
pub async fn register(client: &Client, spec: &NodeSpec) -> Result<Node, Error> {
    let nodes: Api<Node> = Api::all(client);
    let body = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": spec.labels()},
        "spec": {"podCIDR": spec.pod_cidr(), "podCIDRs": [spec.pod_cidr()], "taints": spec.taints}});
    let node: Node = serde_json::from_value(body).map_err(|e| Error::Decode(e.to_string()))?;
    match nodes.create(&node).await {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {
            let patch = json!({"metadata": {"labels": spec.labels()}});
            nodes.patch(&spec.name, &Patch::Merge(patch)).await?;
        }
        Err(e) => return Err(e),
    }
    let now = now_rfc3339();
    nodes
        .patch_status(
            &spec.name,
            &Patch::Merge(json!({"status": spec.status(&now, &now)})),
        )
        .await
}

/// Renews the node's Lease every `lease_duration / 4` until shutdown; a failed renewal is
/// retried sooner, backing off from 100 ms to 7 s as upstream's lease controller does, so a
/// loaded apiserver's refusals (429, timeouts) do not cost the node its lease.
pub async fn lease_loop(
    client: Client,
    spec: NodeSpec,
    node_uid: String,
    shutdown: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(&client, "kube-node-lease");
    let interval = spec.lease_duration / 4;
    const RETRY_FIRST: Duration = Duration::from_millis(100);
    const RETRY_MAX: Duration = Duration::from_secs(7);
    let mut retry = RETRY_FIRST;
    // Until a write succeeds the lease may not exist yet: created first (a new node's lease
    // never does), renewed when it already does.
    let mut renewed_once = false;
    let create = || async {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": spec.name, "namespace": "kube-node-lease",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": node_uid}]},
            "spec": {"holderIdentity": spec.name, "leaseDurationSeconds": spec.lease_duration.as_secs(), "renewTime": now_micro()}});
        match serde_json::from_value::<Lease>(lease) {
            Ok(l) => leases.create(&l).await.map(|_| ()),
            Err(e) => Err(Error::Decode(e.to_string())),
        }
    };
    let renew = || async {
        let renew = json!({"spec": {"holderIdentity": spec.name, "leaseDurationSeconds": spec.lease_duration.as_secs(), "renewTime": now_micro()}});
        leases
            .patch(&spec.name, &Patch::Merge(renew))
            .await
            .map(|_| ())
    };
    loop {
        let result = if renewed_once {
            // Each call boxed: a node loop waits most of its life, and the calls' state
            // inline made each of the thousands of idle loops several KB.
            match Box::pin(renew()).await {
                Err(e) if e.is_not_found() => Box::pin(create()).await,
                r => r,
            }
        } else {
            match Box::pin(create()).await {
                Err(e) if e.is_already_exists() => Box::pin(renew()).await,
                r => r,
            }
        };
        let wait = match result {
            Ok(()) => {
                retry = RETRY_FIRST;
                if std::mem::replace(&mut renewed_once, true) {
                    jittered(interval)
                } else {
                    first_wait(interval, spec.index)
                }
            }
            Err(e) => {
                tracing::warn!(node = %spec.name, error = %e, "lease renewal failed");
                let wait = retry.min(interval);
                retry = (retry * 2).min(RETRY_MAX);
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Posts node status every `status_update_frequency` when it changed (conditions back to Ready
/// after the node controller marked them Unknown) and at least every five minutes.
pub async fn status_loop(client: Client, spec: NodeSpec, shutdown: CancellationToken) {
    let nodes: Api<Node> = Api::all(&client);
    let mut last_report = tokio::time::Instant::now();
    let mut since = now_rfc3339();
    let mut wait = first_wait(spec.status_update_frequency, spec.index);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = jittered(spec.status_update_frequency);
        // Boxed, as the lease loop's calls.
        let stale = match Box::pin(nodes.get(&spec.name)).await {
            Ok(n) => n
                .status
                .and_then(|s| s.conditions)
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
                .is_none_or(|c| c.status != "True"),
            Err(e) if e.is_not_found() => {
                // Deleted under us: register again, as a kubelet does.
                if let Err(e) = Box::pin(register(&client, &spec)).await {
                    tracing::warn!(node = %spec.name, error = %e, "re-registering node failed");
                }
                continue;
            }
            Err(_) => continue,
        };
        if stale || last_report.elapsed() >= STATUS_REPORT_FREQUENCY {
            let now = now_rfc3339();
            if stale {
                since = now.clone();
            }
            let patch = json!({"status": spec.status(&now, &since)});
            match Box::pin(nodes.patch_status(&spec.name, &Patch::Merge(patch))).await {
                Ok(_) => last_report = tokio::time::Instant::now(),
                Err(e) => {
                    tracing::warn!(node = %spec.name, error = %e, "node status update failed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_started_together_spread_their_first_waits_over_the_period() {
        let period = Duration::from_secs(10);
        // A thousand nodes: every tenth of a second of the period holds about ten of them.
        let mut buckets = [0usize; 100];
        for i in 0..1000 {
            let w = first_wait(period, i);
            assert!(w > Duration::ZERO && w <= period, "node {i}: {w:?}");
            buckets[(w.as_secs_f64() * 10.0).min(99.0) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (5..=15).contains(&n)),
            "{buckets:?}"
        );
        // Agents with consecutive index ranges (`--node-index`) spread too.
        let a: Vec<_> = (0..10).map(|i| first_wait(period, i)).collect();
        let b: Vec<_> = (10..20).map(|i| first_wait(period, i)).collect();
        assert!(a.iter().all(|w| !b.contains(w)));
    }

    #[test]
    fn a_jittered_period_is_at_most_four_percent_longer() {
        let period = Duration::from_secs(10);
        for _ in 0..1000 {
            let w = jittered(period);
            assert!(w >= period && w <= period.mul_f64(1.04), "{w:?}");
        }
    }
}
