//! The HorizontalPodAutoscaler controller (autoscaling/v2): every sync period, each HPA's
//! target is read through its `scale` subresource, its ready pods' usage through
//! `metrics.k8s.io`, and the replicas `logic` decides are written back to `scale`, with
//! upstream's status, conditions and `SuccessfulRescale` events. Resource and ContainerResource
//! metrics (cpu, memory; Utilization or AverageValue) are served; others are reported as not
//! supported.

pub mod logic;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec};
use k8s_openapi::chrono::{DateTime, Utc};
use rkube_client::events::object_ref;
use rkube_client::informer::{index, key_of, split_key, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, Error, Patch, WorkQueue};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;
use logic::{Sample, Target};

pub struct HpaController {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    recorder: rkube_client::events::Recorder,
    period: Duration,
    clock: crate::Clock,
    /// Past recommendations per HPA, for the stabilization windows.
    history: Mutex<HashMap<String, logic::Recommendations>>,
}

/// A metric this controller can read: resource name, container (ContainerResource), target.
fn resource_metric(m: &MetricSpec) -> Option<(String, Option<String>, Target, String)> {
    let (name, container, target) = match m.type_.as_str() {
        "Resource" => {
            let r = m.resource.as_ref()?;
            (r.name.clone(), None, &r.target)
        }
        "ContainerResource" => {
            let r = m.container_resource.as_ref()?;
            (r.name.clone(), Some(r.container.clone()), &r.target)
        }
        _ => return None,
    };
    let target = match target.type_.as_str() {
        "Utilization" => Target::Utilization(target.average_utilization?),
        "AverageValue" => {
            let v = target.average_value.as_ref()?;
            Target::AverageValue(if name == "cpu" {
                rkube_api::quantity::parse_milli(&v.0)?
            } else {
                rkube_api::quantity::parse_value(&v.0)?
            })
        }
        _ => return None,
    };
    Some((name, container, target, m.type_.clone()))
}

fn quantity(name: &str, q: &Value) -> i64 {
    let s = q.as_str().unwrap_or("0");
    if name == "cpu" {
        rkube_api::quantity::parse_milli(s).unwrap_or(0)
    } else {
        rkube_api::quantity::parse_value(s).unwrap_or(0)
    }
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && crate::replicaset::logic::is_ready(p)
}

impl HpaController {
    pub fn new(ctx: Arc<Ctx>, period: Duration, clock: crate::Clock) -> Arc<Self> {
        let c = Arc::new(HpaController {
            ctx: ctx.clone(),
            queue: WorkQueue::new("horizontalpodautoscaler"),
            recorder: ctx.recorder.for_component("horizontal-pod-autoscaler"),
            period,
            clock,
            history: Mutex::default(),
        });
        let me = c.clone();
        ctx.hpas.on_change(move |ch| match ch {
            Change::Added(h) => me.queue.add(key_of(&**h)),
            Change::Updated { old, new } => {
                // Its own status writes do not trigger a sync; spec changes do.
                if old.spec != new.spec {
                    me.queue.add(key_of(&**new));
                }
            }
            Change::Deleted(h) => {
                me.history.lock().unwrap().remove(&key_of(&**h));
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "horizontalpodautoscaler", workers, shutdown);
    }

    /// The (group, version, plural) of a scale target's kind: the built-in table, else
    /// discovery (custom resources with a scale subresource).
    async fn resource_of(&self, api_version: &str, kind: &str) -> Option<(String, String, String)> {
        if let Some(d) = rkube_api::resources::find_kind(api_version, kind) {
            return Some((d.group.into(), d.version.into(), d.plural.into()));
        }
        let found = rkube_client::dynamic::discover(&self.ctx.client)
            .await
            .ok()?;
        found
            .into_iter()
            .find(|r| r.api_version() == api_version && r.kind == kind)
            .map(|r| (r.group, r.version, r.plural))
    }

    async fn sync(&self, key: &str) -> Reconciled {
        let Some(hpa) = self.ctx.hpas.get(key) else {
            return Ok(None);
        };
        let (ns, name) = split_key(key);
        let spec = hpa.spec.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let api_version = target.api_version.clone().unwrap_or_default();
        let now = (self.clock)();
        let regarding = object_ref(&*hpa);
        let mut conditions: Vec<Value> = Vec::new();
        let cond = |t: &str, ok: bool, reason: &str, message: String| {
            json!({"type": t, "status": if ok {"True"} else {"False"}, "reason": reason,
                "message": message, "lastTransitionTime": now})
        };
        let Some((group, version, plural)) = self.resource_of(&api_version, &target.kind).await
        else {
            let msg = format!(
                "the HPA controller was unable to get the target's current scale: no matches for kind \"{}\" in group \"{}\"",
                target.kind,
                api_version.split('/').next().unwrap_or_default()
            );
            return self
                .give_up(
                    &hpa,
                    conditions,
                    None,
                    "AbleToScale",
                    "FailedGetScale",
                    msg,
                    now,
                )
                .await;
        };
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let scale_path = format!(
            "{base}/namespaces/{}/{}/{}/scale",
            rkube_client::client::encode(ns),
            plural,
            rkube_client::client::encode(&target.name)
        );
        let scale: Value = match self
            .ctx
            .client
            .send_json(rkube_client::Method::GET, &scale_path, None)
            .await
        {
            Ok(s) => s,
            Err(e) => {
                let msg =
                    format!("the HPA controller was unable to get the target's current scale: {e}");
                return self
                    .give_up(
                        &hpa,
                        conditions,
                        None,
                        "AbleToScale",
                        "FailedGetScale",
                        msg,
                        now,
                    )
                    .await;
            }
        };
        let current = scale["spec"]["replicas"].as_i64().unwrap_or(0) as i32;
        let selector = scale["status"]["selector"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        conditions.push(cond(
            "AbleToScale",
            true,
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale".into(),
        ));
        if current == 0 && min > 0 {
            conditions.push(cond(
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            ));
            self.write_status(
                ns,
                name,
                &hpa,
                Some(current),
                Some(current),
                conditions,
                None,
            )
            .await?;
            return Ok(Some(self.period));
        }

        // The ready pods the target selects, and their usage.
        // A target without a selector would make every pod of the namespace its own.
        let sel = match rkube_api::LabelSelector::parse(&selector) {
            Ok(sel) if !selector.is_empty() => sel,
            _ => {
                let msg = format!(
                    "the HPA target's scale is missing a selector or has an invalid one: {selector:?}"
                );
                return self
                    .give_up(
                        &hpa,
                        conditions,
                        Some(current),
                        "ScalingActive",
                        "InvalidSelector",
                        msg,
                        now,
                    )
                    .await;
            }
        };
        let empty = BTreeMap::new();
        let pods: BTreeMap<String, Arc<Pod>> = self
            .ctx
            .pods
            .by_index(index::NAMESPACE, ns)
            .into_iter()
            .filter(|p| sel.matches(p.metadata.labels.as_ref().unwrap_or(&empty)) && ready(p))
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let metrics_path = format!(
            "/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector={}",
            rkube_api::options::percent_encode(&selector)
        );
        let usage: Result<Value, Error> = self
            .ctx
            .client
            .send_json(rkube_client::Method::GET, &metrics_path, None)
            .await;
        let metric_specs: Vec<MetricSpec> = spec.metrics.clone().unwrap_or_else(|| {
            serde_json::from_value(json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]))
            .expect("the default metric")
        });
        let mut desired: Option<i32> = None;
        let mut current_metrics = Vec::new();
        let mut failure: Option<(&str, String)> = None;
        let mut reason_metric = String::new();
        for m in &metric_specs {
            let Some((res, container, tgt, kind)) = resource_metric(m) else {
                failure = Some((
                    "InvalidMetricSourceType",
                    format!("the HPA controller does not serve {} metrics", m.type_),
                ));
                continue;
            };
            let items = match &usage {
                Ok(v) => v["items"].as_array().cloned().unwrap_or_default(),
                Err(e) => {
                    failure = Some((
                        "FailedGetResourceMetric",
                        format!("failed to get {res} utilization: unable to get metrics for resource {res}: {e}"),
                    ));
                    continue;
                }
            };
            let samples: Vec<Sample> = items
                .iter()
                .filter_map(|item| {
                    let pod = pods.get(item["metadata"]["name"].as_str()?)?;
                    let in_scope = |c: &str| container.as_deref().is_none_or(|w| w == c);
                    let usage = item["containers"]
                        .as_array()?
                        .iter()
                        .filter(|c| in_scope(c["name"].as_str().unwrap_or("")))
                        .map(|c| quantity(&res, &c["usage"][res.as_str()]))
                        .sum();
                    let request = pod
                        .spec
                        .iter()
                        .flat_map(|s| s.containers.iter())
                        .filter(|c| in_scope(&c.name))
                        .map(|c| {
                            c.resources
                                .as_ref()?
                                .requests
                                .as_ref()?
                                .get(&res)
                                .map(|q| quantity(&res, &json!(q.0)))
                        })
                        .sum::<Option<i64>>();
                    Some(Sample { usage, request })
                })
                .collect();
            match logic::resource_replicas(current, &samples, tgt) {
                Ok(p) => {
                    if desired.is_none_or(|d| p.replicas > d) {
                        reason_metric = format!(
                            "{res} resource{}",
                            if matches!(tgt, Target::Utilization(_)) {
                                " utilization (percentage of request)"
                            } else {
                                ""
                            }
                        );
                    }
                    desired = Some(desired.map_or(p.replicas, |d| d.max(p.replicas)));
                    let value = if res == "cpu" {
                        format!("{}m", p.average)
                    } else {
                        p.average.to_string()
                    };
                    let mut cur = json!({"averageValue": value});
                    if let Some(u) = p.utilization {
                        cur["averageUtilization"] = json!(u);
                    }
                    let key = if kind == "Resource" {
                        "resource"
                    } else {
                        "containerResource"
                    };
                    let mut entry = json!({"type": kind, key: {"name": res, "current": cur}});
                    if let Some(c) = &container {
                        entry[key]["container"] = json!(c);
                    }
                    current_metrics.push(entry);
                }
                Err(e) => {
                    failure = Some((
                        "FailedGetResourceMetric",
                        format!("failed to get {res} utilization: {e}"),
                    ))
                }
            }
        }
        let Some(desired) = desired else {
            let (reason, msg) = failure.unwrap_or(("FailedGetResourceMetric", "no metrics".into()));
            return self
                .give_up(
                    &hpa,
                    conditions,
                    Some(current),
                    "ScalingActive",
                    reason,
                    msg,
                    now,
                )
                .await;
        };
        conditions.push(cond(
            "ScalingActive",
            true,
            "ValidMetricFound",
            format!(
                "the HPA was able to successfully calculate a replica count from {reason_metric}"
            ),
        ));
        let decision = {
            let mut history = self.history.lock().unwrap();
            let h = history.entry(key.to_string()).or_default();
            logic::decide(current, desired, min, max, spec.behavior.as_ref(), h, now)
        };
        conditions.push(match decision.limited {
            Some(reason) => cond(
                "ScalingLimited",
                true,
                reason,
                match reason {
                    "TooManyReplicas" => {
                        "the desired replica count is more than the maximum replica count".into()
                    }
                    "TooFewReplicas" => {
                        "the desired replica count is less than the minimum replica count".into()
                    }
                    _ => "the desired replica count is limited by a scaling policy".into(),
                },
            ),
            None => cond(
                "ScalingLimited",
                false,
                "DesiredWithinRange",
                "the desired count is within the acceptable range".into(),
            ),
        });
        let mut last_scale = None;
        if decision.replicas != current {
            let patch = json!({"spec": {"replicas": decision.replicas}});
            self.ctx
                .client
                .send_json::<Value>(
                    rkube_client::Method::PATCH,
                    &scale_path,
                    Some((
                        "application/merge-patch+json",
                        serde_json::to_vec(&patch).unwrap_or_default(),
                    )),
                )
                .await?;
            let why = if decision.replicas > current {
                format!("{reason_metric} above target")
            } else {
                "All metrics below target".to_string()
            };
            self.recorder.normal(
                regarding,
                "SuccessfulRescale",
                format!("New size: {}; reason: {why}", decision.replicas),
            );
            last_scale = Some(now);
        }
        self.write_status(
            ns,
            name,
            &hpa,
            Some(current),
            Some(decision.replicas),
            conditions,
            Some((current_metrics, last_scale)),
        )
        .await?;
        Ok(Some(self.period))
    }

    /// A sync that cannot go on: a warning event, the failing condition (`kind`, `reason`,
    /// `message`) after `conditions`, the status written; tried again next period.
    #[allow(clippy::too_many_arguments)]
    async fn give_up(
        &self,
        hpa: &HorizontalPodAutoscaler,
        mut conditions: Vec<Value>,
        replicas: Option<i32>,
        kind: &str,
        reason: &str,
        message: String,
        now: DateTime<Utc>,
    ) -> Reconciled {
        let (ns, name) = (
            hpa.metadata.namespace.as_deref().unwrap_or_default(),
            hpa.metadata.name.as_deref().unwrap_or_default(),
        );
        self.recorder
            .warning(object_ref(hpa), reason, message.clone());
        conditions.push(json!({"type": kind, "status": "False", "reason": reason,
            "message": message, "lastTransitionTime": now}));
        self.write_status(ns, name, hpa, replicas, replicas, conditions, None)
            .await?;
        Ok(Some(self.period))
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_status(
        &self,
        ns: &str,
        name: &str,
        hpa: &HorizontalPodAutoscaler,
        current: Option<i32>,
        desired: Option<i32>,
        mut conditions: Vec<Value>,
        metrics: Option<(Vec<Value>, Option<DateTime<Utc>>)>,
    ) -> Result<(), Error> {
        // A condition keeps its transition time while its status stays.
        let old = hpa
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        for c in &mut conditions {
            if let Some(o) = old
                .iter()
                .find(|o| o.type_ == c["type"] && o.status == c["status"])
            {
                c["lastTransitionTime"] = json!(o.last_transition_time);
            }
        }
        let mut status = json!({"conditions": conditions});
        if let Some(c) = current {
            status["currentReplicas"] = json!(c);
        }
        if let Some(d) = desired {
            status["desiredReplicas"] = json!(d);
        }
        if let Some((m, last)) = metrics {
            status["currentMetrics"] = json!(m);
            if let Some(t) = last {
                status["lastScaleTime"] = json!(t);
            }
        }
        status["observedGeneration"] = json!(hpa.metadata.generation);
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(&self.ctx.client, ns);
        match api
            .patch_status(name, &Patch::Merge(json!({"status": status})))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}
