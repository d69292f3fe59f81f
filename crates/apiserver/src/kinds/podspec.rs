//! The pod spec, wherever it appears (pods, and workload templates): upstream's defaults
//! (`SetDefaults_PodSpec` and its containers), its validation, and its QoS class.

use rkube_api::StatusCause;
use serde_json::{json, Value};

use super::set_default;

fn image_pull_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    let name = name.split('@').next().unwrap_or(name);
    match name.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ if image.contains('@') => "IfNotPresent",
        _ => "Always",
    }
}

fn default_containers(spec: &mut Value, field: &str) {
    let Some(list) = spec.get_mut(field).and_then(|c| c.as_array_mut()) else {
        return;
    };
    for c in list {
        let image = c
            .get("image")
            .and_then(|i| i.as_str())
            .unwrap_or("")
            .to_string();
        set_default(c, "/imagePullPolicy", json!(image_pull_policy(&image)));
        set_default(c, "/terminationMessagePath", json!("/dev/termination-log"));
        set_default(c, "/terminationMessagePolicy", json!("File"));
        set_default(c, "/resources", json!({}));
        if let Some(ports) = c.get_mut("ports").and_then(|p| p.as_array_mut()) {
            for p in ports {
                set_default(p, "/protocol", json!("TCP"));
            }
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if let Some(p) = c.get_mut(probe) {
                set_default(p, "/timeoutSeconds", json!(1));
                set_default(p, "/periodSeconds", json!(10));
                set_default(p, "/successThreshold", json!(1));
                set_default(p, "/failureThreshold", json!(3));
            }
        }
    }
}

/// `SetDefaults_PodSpec` and its containers.
pub fn defaults(spec: &mut Value) {
    set_default(spec, "/restartPolicy", json!("Always"));
    set_default(spec, "/terminationGracePeriodSeconds", json!(30));
    set_default(spec, "/dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "/securityContext", json!({}));
    set_default(spec, "/schedulerName", json!("default-scheduler"));
    set_default(spec, "/enableServiceLinks", json!(true));
    default_containers(spec, "containers");
    default_containers(spec, "initContainers");
}

/// The defaults of a workload's `spec.template.spec`.
pub fn template_defaults(obj: &mut Value) {
    if let Some(spec) = obj.pointer_mut("/spec/template/spec") {
        defaults(spec);
    }
}

/// The QoS class kubelets and the scheduler report (`GetPodQOS`).
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec.get(*f).and_then(|c| c.as_array()))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(|r| r.as_object());
        let lim = c.pointer("/resources/limits").and_then(|r| r.as_object());
        for res in ["cpu", "memory"] {
            let r = req
                .and_then(|m| m.get(res))
                .or_else(|| lim.and_then(|m| m.get(res)));
            let l = lim.and_then(|m| m.get(res));
            if r.is_some() || l.is_some() {
                any = true;
            }
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Validation of a pod spec at `path` (`spec`, `spec.template.spec`).
pub fn validate(spec: Option<&Value>, path: &str, causes: &mut Vec<StatusCause>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(|c| c.as_array());
    match containers {
        None => causes.push(StatusCause::required(&format!("{path}.containers"))),
        Some(list) if list.is_empty() => {
            causes.push(StatusCause::required(&format!("{path}.containers")))
        }
        Some(list) => {
            let mut names = std::collections::HashSet::new();
            for (i, c) in list.iter().enumerate() {
                let name = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let p = format!("{path}.containers[{i}]");
                if name.is_empty() {
                    causes.push(StatusCause::required(&format!("{p}.name")));
                } else if let Err(e) = rkube_api::validation::dns1123_label(name) {
                    causes.push(StatusCause::invalid(&format!("{p}.name"), name, &e));
                } else if !names.insert(name.to_string()) {
                    causes.push(StatusCause::duplicate(&format!("{p}.name"), name));
                }
                if c.get("image")
                    .and_then(|i| i.as_str())
                    .unwrap_or("")
                    .trim()
                    .is_empty()
                {
                    causes.push(StatusCause::required(&format!("{p}.image")));
                }
                validate_resources(c, &p, causes);
            }
        }
    }
    if let Some(list) = spec
        .and_then(|s| s.get("initContainers"))
        .and_then(|c| c.as_array())
    {
        for (i, c) in list.iter().enumerate() {
            validate_resources(c, &format!("{path}.initContainers[{i}]"), causes);
        }
    }
    if let Some(rp) = spec
        .and_then(|s| s.get("restartPolicy"))
        .and_then(|r| r.as_str())
    {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            causes.push(StatusCause::not_supported(
                &format!("{path}.restartPolicy"),
                rp,
                &["Always", "OnFailure", "Never"],
            ));
        }
    }
    if let Some(g) = spec
        .and_then(|s| s.get("terminationGracePeriodSeconds"))
        .and_then(Value::as_i64)
    {
        if g > MAX_GRACE_SECONDS {
            causes.push(StatusCause::invalid_raw(
                &format!("{path}.terminationGracePeriodSeconds"),
                &g.to_string(),
                &format!("must be less than or equal to {MAX_GRACE_SECONDS}"),
            ));
        }
    }
}

/// The longest grace period anything may ask for (ten years): a deletion timestamp must stay a
/// valid RFC 3339 time that every client can decode.
pub const MAX_GRACE_SECONDS: i64 = 10 * 365 * 24 * 3600;

/// A container's requests and limits: valid quantities that fit in 64 bits, not negative,
/// and requests no larger than limits.
fn validate_resources(c: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    let mut parsed: [std::collections::BTreeMap<String, i64>; 2] = Default::default();
    for (i, field) in ["requests", "limits"].into_iter().enumerate() {
        let Some(m) = c
            .pointer(&format!("/resources/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (res, q) in m {
            let p = format!("{path}.resources.{field}[{res}]");
            if let Some(n) = super::quantity(&p, q, causes) {
                parsed[i].insert(res.clone(), n);
            }
        }
    }
    let [requests, limits] = &parsed;
    for (res, req) in requests {
        if let Some(lim) = limits.get(res) {
            if req > lim {
                let shown = c
                    .pointer(&format!("/resources/requests/{res}"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let limit_shown = c
                    .pointer(&format!("/resources/limits/{res}"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                causes.push(StatusCause::invalid(
                    &format!("{path}.resources.requests"),
                    shown,
                    &format!("must be less than or equal to {res} limit of {limit_shown}"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_qos() {
        let mut spec = json!({"containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}, {"name": "b", "image": "busybox"}]});
        defaults(&mut spec);
        assert_eq!(spec.pointer("/restartPolicy"), Some(&json!("Always")));
        assert_eq!(
            spec.pointer("/containers/0/imagePullPolicy"),
            Some(&json!("IfNotPresent"))
        );
        assert_eq!(
            spec.pointer("/containers/1/imagePullPolicy"),
            Some(&json!("Always"))
        );
        assert_eq!(
            spec.pointer("/containers/0/ports/0/protocol"),
            Some(&json!("TCP"))
        );
        assert_eq!(qos_class(&spec), "BestEffort");
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn quantities_must_parse_fit_and_order() {
        let spec =
            |res: Value| json!({"containers": [{"name": "c", "image": "i", "resources": res}]});
        let check = |res: Value| {
            let mut causes = Vec::new();
            validate(Some(&spec(res)), "spec", &mut causes);
            causes
        };
        assert!(check(
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}})
        )
        .is_empty());
        let c = check(json!({"requests": {"cpu": "lots"}}));
        assert_eq!(c[0].field, "spec.containers[0].resources.requests[cpu]");
        assert!(c[0].message.contains("valid quantity"), "{}", c[0].message);
        assert_eq!(
            check(json!({"limits": {"memory": "99999999999999999999999Ei"}})).len(),
            1
        );
        assert_eq!(check(json!({"requests": {"cpu": "-1"}})).len(), 1);
        let c = check(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}));
        assert!(c[0]
            .message
            .contains("must be less than or equal to cpu limit of 1"));
    }
}
