//! What a Service needs allocated (pure): from a new Service, or from an update's old and new
//! objects, the cluster IPs (per family, requested or any) and node ports (per port, requested
//! or any) to take; then the object with what was taken filled in, as upstream shows it
//! (`clusterIP`, `clusterIPs`, `ipFamilies`, `ipFamilyPolicy`, `nodePort`).

use std::net::IpAddr;

use rkube_api::StatusCause;
use serde_json::{json, Value};

use super::ServiceConfig;

/// One cluster IP to take: of the primary family (`v4`) or the other, this one or any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpWant {
    pub family_v4: bool,
    pub ip: Option<IpAddr>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Want {
    pub ips: Vec<IpWant>,
    /// (index in `spec.ports`, the port asked for or any).
    pub ports: Vec<(usize, Option<u16>)>,
    /// `ipFamilies` and `ipFamilyPolicy` to set (None: leave as they are).
    pub families: Option<(Vec<&'static str>, String)>,
    /// A headless Service: `clusterIPs: ["None"]`.
    pub headless: bool,
}

/// What was taken, in `Want`'s order.
#[derive(Clone, Debug, Default)]
pub struct Taken {
    pub ips: Vec<IpAddr>,
    pub ports: Vec<(usize, u16)>,
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn service_type(svc: &Value) -> &str {
    match str_at(svc, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    }
}

/// Whether the type's ports get node ports.
fn wants_node_ports(svc: &Value) -> bool {
    match service_type(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

fn family_name(v4: bool) -> &'static str {
    if v4 {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// The cluster IPs a Service asks for (`clusterIPs`, else `clusterIP`).
fn requested_ips(svc: &Value) -> Result<Vec<String>, StatusCause> {
    let ips: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let single = str_at(svc, "/spec/clusterIP");
    if !ips.is_empty() && !single.is_empty() && ips[0] != single {
        return Err(StatusCause::invalid_raw(
            "spec.clusterIPs",
            &format!("{ips:?}")
                .replace('[', "[]string{")
                .replace(']', "}"),
            "first value must match `clusterIP`",
        ));
    }
    if ips.is_empty() && !single.is_empty() {
        return Ok(vec![single.to_string()]);
    }
    Ok(ips)
}

/// What a new Service needs.
pub fn for_create(svc: &Value, config: &ServiceConfig) -> Result<Want, StatusCause> {
    let mut want = Want::default();
    if service_type(svc) == "ExternalName" {
        return Ok(want);
    }
    let requested = requested_ips(svc)?;
    let configured: Vec<bool> = config
        .cluster_ip_ranges
        .iter()
        .map(|c| c.is_ipv4())
        .collect();
    let families: Vec<bool> = match svc.pointer("/spec/ipFamilies").and_then(Value::as_array) {
        Some(f) if !f.is_empty() => f
            .iter()
            .map(|f| match f.as_str() {
                Some("IPv4") => Ok(true),
                Some("IPv6") => Ok(false),
                other => Err(StatusCause::not_supported(
                    "spec.ipFamilies[0]",
                    other.unwrap_or(""),
                    &["IPv4", "IPv6"],
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    let policy = match str_at(svc, "/spec/ipFamilyPolicy") {
        "" if families.len() > 1 || requested.len() > 1 => "RequireDualStack".to_string(),
        "" => "SingleStack".to_string(),
        p => p.to_string(),
    };
    let mut order: Vec<bool> = if !families.is_empty() {
        families
    } else if let Some(first) = requested.first().and_then(|ip| ip.parse::<IpAddr>().ok()) {
        let v4 = first.is_ipv4();
        let mut o = vec![v4];
        o.extend(configured.iter().copied().filter(|f| *f != v4));
        o
    } else {
        configured.clone()
    };
    match policy.as_str() {
        "SingleStack" => order.truncate(1),
        "PreferDualStack" => order.retain(|f| configured.contains(f)),
        "RequireDualStack" => {
            if configured.len() < 2 {
                return Err(StatusCause::invalid(
                    "spec.ipFamilyPolicy",
                    &policy,
                    "this cluster is not configured for dual-stack services",
                ));
            }
        }
        other => {
            return Err(StatusCause::not_supported(
                "spec.ipFamilyPolicy",
                other,
                &["PreferDualStack", "RequireDualStack", "SingleStack"],
            ))
        }
    }
    for f in &order {
        if !configured.contains(f) {
            return Err(StatusCause::invalid(
                "spec.ipFamilies",
                family_name(*f),
                "not configured on this cluster",
            ));
        }
    }
    want.families = Some((order.iter().map(|f| family_name(*f)).collect(), policy));
    if requested.first().map(String::as_str) == Some("None") {
        want.headless = true;
        return Ok(want);
    }
    for (i, v4) in order.iter().enumerate() {
        let ip = match requested.get(i).filter(|s| !s.is_empty()) {
            Some(text) => {
                let ip: IpAddr = text.parse().map_err(|_| {
                    StatusCause::invalid(
                        &format!("spec.clusterIPs[{i}]"),
                        text,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )
                })?;
                if ip.is_ipv4() != *v4 {
                    return Err(StatusCause::invalid(
                        &format!("spec.clusterIPs[{i}]"),
                        text,
                        &format!("expected an {} address", family_name(*v4)),
                    ));
                }
                Some(ip)
            }
            None => None,
        };
        want.ips.push(IpWant { family_v4: *v4, ip });
    }
    want.ports = wanted_ports(svc, &[]);
    Ok(want)
}

/// The node ports a Service needs that `held` does not already cover.
fn wanted_ports(svc: &Value, held: &[u16]) -> Vec<(usize, Option<u16>)> {
    if !wants_node_ports(svc) {
        return Vec::new();
    }
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    match p.get("nodePort").and_then(Value::as_u64).filter(|n| *n > 0) {
                        None => Some((i, None)),
                        Some(n) if held.contains(&(n as u16)) => None,
                        Some(n) => Some((i, Some(n.min(u16::MAX as u64) as u16))),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What an update needs beyond what the old object holds.
pub fn for_update(old: &Value, new: &Value, config: &ServiceConfig) -> Result<Want, StatusCause> {
    if service_type(new) == "ExternalName" {
        return Ok(Want::default());
    }
    let (old_ips, old_ports) = held(old);
    let old_headless = str_at(old, "/spec/clusterIP") == "None";
    if old_ips.is_empty() && !old_headless {
        // From ExternalName: allocated as a new Service would be.
        return for_create(new, config);
    }
    Ok(Want {
        ports: wanted_ports(new, &old_ports),
        ..Want::default()
    })
}

/// `svc` with what was taken filled in.
pub fn apply(svc: &mut Value, want: &Want, taken: &Taken) {
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some((families, policy)) = &want.families {
        spec.insert("ipFamilies".into(), json!(families));
        spec.insert("ipFamilyPolicy".into(), json!(policy));
    }
    if want.headless {
        spec.insert("clusterIP".into(), json!("None"));
        spec.insert("clusterIPs".into(), json!(["None"]));
    } else if !taken.ips.is_empty() {
        let ips: Vec<String> = taken.ips.iter().map(IpAddr::to_string).collect();
        spec.insert("clusterIP".into(), json!(ips[0]));
        spec.insert("clusterIPs".into(), json!(ips));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for (i, port) in &taken.ports {
            if let Some(p) = ports.get_mut(*i).and_then(Value::as_object_mut) {
                p.insert("nodePort".into(), json!(port));
            }
        }
    }
}

/// The cluster IPs and node ports a stored Service holds.
pub fn held(svc: &Value) -> (Vec<IpAddr>, Vec<u16>) {
    let ips = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter_map(|s| s.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
                .filter(|n| *n > 0 && *n <= u16::MAX as u64)
                .map(|n| n as u16)
                .collect()
        })
        .unwrap_or_default();
    (ips, ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ServiceConfig {
        ServiceConfig::default()
    }

    #[test]
    fn plans_follow_the_type() {
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30080}]}});
        let want = for_create(&svc, &config()).unwrap();
        assert_eq!(
            want.ips,
            vec![IpWant {
                family_v4: true,
                ip: None
            }]
        );
        assert_eq!(want.ports, vec![(0, None), (1, Some(30080))]);
        let headless = json!({"spec": {"clusterIP": "None"}});
        let want = for_create(&headless, &config()).unwrap();
        assert!(want.headless && want.ips.is_empty());
        let external = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
        assert_eq!(for_create(&external, &config()).unwrap(), Want::default());
        let dual = json!({"spec": {"ipFamilyPolicy": "RequireDualStack"}});
        assert!(
            for_create(&dual, &config()).is_err(),
            "single-stack cluster"
        );
        let bad = json!({"spec": {"clusterIP": "10.96.0.300"}});
        assert!(for_create(&bad, &config()).is_err());
    }

    #[test]
    fn updates_take_only_what_is_new_and_apply_fills_in() {
        let old = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"], "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["type"] = json!("NodePort");
        let want = for_update(&old, &new, &config()).unwrap();
        assert!(want.ips.is_empty());
        assert_eq!(want.ports, vec![(0, None)]);
        apply(
            &mut new,
            &want,
            &Taken {
                ips: vec![],
                ports: vec![(0, 31000)],
            },
        );
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 31000);
        assert_eq!(
            held(&new),
            (vec!["10.96.0.5".parse().unwrap()], vec![31000])
        );
    }
}
