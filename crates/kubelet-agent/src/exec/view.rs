//! What a container sees, for the simulated shell: its environment (literal values with
//! `$(VAR)` references, ConfigMap and Secret keys, the downward API, `envFrom`, the service
//! links of its namespace) and its files (mounted ConfigMaps, Secrets, downward-API and
//! projected volumes with their service-account token, `/etc/hostname`, `/etc/hosts`,
//! `/etc/resolv.conf`). The objects are read from the apiserver as the node (each at most
//! once per session); a missing optional source is skipped as the kubelet skips it.

use std::collections::BTreeMap;

use base64::Engine;
use rkube_client::{Client, Method};
use serde_json::{json, Value};

use super::shell::{View, STANDARD_DIRS};

/// Reads objects once per build.
struct Reader<'a> {
    client: &'a Client,
    ns: String,
    cache: BTreeMap<String, Option<Value>>,
}

impl Reader<'_> {
    async fn get(&mut self, resource: &str, name: &str) -> Option<Value> {
        let path = format!(
            "/api/v1/namespaces/{}/{resource}/{}",
            rkube_client::client::encode(&self.ns),
            rkube_client::client::encode(name)
        );
        if let Some(v) = self.cache.get(&path) {
            return v.clone();
        }
        let v = self
            .client
            .send_json::<Value>(Method::GET, &path, None)
            .await
            .ok();
        self.cache.insert(path, v.clone());
        v
    }

    /// A ConfigMap's or Secret's keys, decoded.
    async fn keys(&mut self, secret: bool, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let obj = self
            .get(if secret { "secrets" } else { "configmaps" }, name)
            .await?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = BTreeMap::new();
        for (k, v) in obj["data"].as_object().into_iter().flatten() {
            let s = v.as_str().unwrap_or("");
            let bytes = if secret {
                b64.decode(s).unwrap_or_default()
            } else {
                s.as_bytes().to_vec()
            };
            out.insert(k.clone(), bytes);
        }
        for (k, v) in obj["binaryData"].as_object().into_iter().flatten() {
            out.insert(
                k.clone(),
                b64.decode(v.as_str().unwrap_or("")).unwrap_or_default(),
            );
        }
        Some(out)
    }
}

/// The container named `container` among the pod's containers, init and ephemeral ones.
pub fn container_spec<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
        .find(|c| c["name"] == container)
}

/// The pod's hostname, as the kubelet sets it (`spec.hostname`, else the name, at most 63).
pub fn hostname(pod: &Value) -> String {
    let h = pod["spec"]["hostname"]
        .as_str()
        .filter(|h| !h.is_empty())
        .or(pod["metadata"]["name"].as_str())
        .unwrap_or("");
    h.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// A downward-API `fieldRef` value.
fn field(pod: &Value, path: &str) -> Option<String> {
    let s = |v: &Value| v.as_str().map(str::to_string);
    let map_key = |m: &str, rest: &str| {
        let key = rest.strip_prefix("['")?.strip_suffix("']")?;
        s(&pod["metadata"][m][key]).or(Some(String::new()))
    };
    let lines = |m: &str| {
        let mut out = String::new();
        for (k, v) in pod["metadata"][m].as_object().into_iter().flatten() {
            let v = v.as_str().unwrap_or("");
            out.push_str(&format!(
                "{k}={}\n",
                serde_json::to_string(v).unwrap_or_default()
            ));
        }
        Some(out.trim_end().to_string())
    };
    let ips = |k: &str| {
        let list: Vec<&str> = pod["status"][k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ip"].as_str())
            .collect();
        Some(list.join(","))
    };
    match path {
        "metadata.name" | "metadata.namespace" | "metadata.uid" => {
            s(&pod["metadata"][path.trim_start_matches("metadata.")])
        }
        "metadata.labels" => lines("labels"),
        "metadata.annotations" => lines("annotations"),
        "spec.nodeName" => s(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => s(&pod["spec"]["serviceAccountName"]),
        "status.hostIP" => s(&pod["status"]["hostIP"]),
        "status.podIP" => s(&pod["status"]["podIP"]),
        "status.podIPs" => ips("podIPs"),
        "status.hostIPs" => ips("hostIPs"),
        p => p
            .strip_prefix("metadata.labels")
            .and_then(|r| map_key("labels", r))
            .or_else(|| {
                p.strip_prefix("metadata.annotations")
                    .and_then(|r| map_key("annotations", r))
            }),
    }
}

/// A downward-API `resourceFieldRef` value: the container's limit (else request), divided.
fn resource(pod: &Value, default_container: &str, r: &Value) -> Option<String> {
    let cname = r["containerName"].as_str().unwrap_or(default_container);
    let c = container_spec(pod, cname)?;
    let what = r["resource"].as_str()?;
    let (kind, name) = what.split_once('.')?;
    let q = c["resources"][kind][name].as_str().or_else(|| {
        c["resources"]["requests"][name]
            .as_str()
            .filter(|_| kind == "limits")
    });
    let cpu = name == "cpu";
    let divisor = r["divisor"].as_str().unwrap_or("1");
    let (value, div) = if cpu {
        (
            q.and_then(rkube_api::quantity::parse_milli)
                .unwrap_or(if kind == "limits" { 4000 } else { 0 }),
            rkube_api::quantity::parse_milli(divisor)
                .filter(|d| *d > 0)
                .unwrap_or(1000),
        )
    } else {
        (
            q.and_then(rkube_api::quantity::parse_value).unwrap_or(0),
            rkube_api::quantity::parse_value(divisor)
                .filter(|d| *d > 0)
                .unwrap_or(1),
        )
    };
    // Rounded up, as the kubelet rounds.
    Some((value / div + i64::from(value % div != 0)).to_string())
}

/// `$(NAME)` references to earlier variables expanded; `$$` escapes a dollar.
fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The variables of one Service's links (`MY_SVC_SERVICE_HOST`, `MY_SVC_PORT_80_TCP`, …).
fn service_links(svc: &Value, out: &mut Vec<(String, String)>) {
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or("");
    if ip.is_empty() || ip == "None" {
        return;
    }
    let name = svc["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_uppercase()
        .replace('-', "_");
    let ports = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
    let Some(first) = ports.first() else { return };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    out.push((format!("{name}_SERVICE_HOST"), ip.into()));
    out.push((format!("{name}_SERVICE_PORT"), first["port"].to_string()));
    for p in &ports {
        if let Some(pn) = p["name"].as_str().filter(|n| !n.is_empty()) {
            out.push((
                format!(
                    "{name}_SERVICE_PORT_{}",
                    pn.to_uppercase().replace('-', "_")
                ),
                p["port"].to_string(),
            ));
        }
    }
    let proto = |p: &Value| p["protocol"].as_str().unwrap_or("TCP").to_string();
    out.push((
        format!("{name}_PORT"),
        format!("{}://{host}:{}", proto(first).to_lowercase(), first["port"]),
    ));
    for p in &ports {
        let pr = proto(p);
        let base = format!("{name}_PORT_{}_{pr}", p["port"]);
        out.push((
            base.clone(),
            format!("{}://{host}:{}", pr.to_lowercase(), p["port"]),
        ));
        out.push((format!("{base}_PROTO"), pr.to_lowercase()));
        out.push((format!("{base}_PORT"), p["port"].to_string()));
        out.push((format!("{base}_ADDR"), ip.into()));
    }
}

/// The files of one volume, by path relative to its root.
async fn volume_files(
    rd: &mut Reader<'_>,
    pod: &Value,
    container: &str,
    vol: &Value,
) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    // ConfigMap or Secret keys, all or the listed items.
    async fn keyed(
        rd: &mut Reader<'_>,
        secret: bool,
        src: &Value,
        files: &mut BTreeMap<String, Vec<u8>>,
    ) {
        let name = src[if secret && src.get("secretName").is_some() {
            "secretName"
        } else {
            "name"
        }]
        .as_str()
        .unwrap_or("");
        let Some(keys) = rd.keys(secret, name).await else {
            return;
        };
        match src["items"].as_array() {
            Some(items) => {
                for it in items {
                    let (Some(k), Some(p)) = (it["key"].as_str(), it["path"].as_str()) else {
                        continue;
                    };
                    if let Some(v) = keys.get(k) {
                        files.insert(p.to_string(), v.clone());
                    }
                }
            }
            None => files.extend(keys),
        }
    }
    let downward = |src: &Value, files: &mut BTreeMap<String, Vec<u8>>| {
        for it in src["items"].as_array().into_iter().flatten() {
            let Some(p) = it["path"].as_str() else {
                continue;
            };
            let v = match (it.get("fieldRef"), it.get("resourceFieldRef")) {
                (Some(f), _) => field(pod, f["fieldPath"].as_str().unwrap_or("")),
                (_, Some(r)) => resource(pod, container, r),
                _ => None,
            };
            if let Some(v) = v {
                files.insert(p.to_string(), v.into_bytes());
            }
        }
    };
    if let Some(cm) = vol.get("configMap") {
        keyed(rd, false, cm, &mut files).await;
    } else if let Some(s) = vol.get("secret") {
        keyed(rd, true, s, &mut files).await;
    } else if let Some(d) = vol.get("downwardAPI") {
        downward(d, &mut files);
    } else if let Some(p) = vol.get("projected") {
        for src in p["sources"].as_array().into_iter().flatten() {
            if let Some(cm) = src.get("configMap") {
                keyed(rd, false, cm, &mut files).await;
            } else if let Some(s) = src.get("secret") {
                keyed(rd, true, s, &mut files).await;
            } else if let Some(d) = src.get("downwardAPI") {
                downward(d, &mut files);
            } else if let Some(t) = src.get("serviceAccountToken") {
                if let Some(token) = token(rd, pod, t).await {
                    let path = t["path"].as_str().unwrap_or("token");
                    files.insert(path.to_string(), token.into_bytes());
                }
            }
        }
    }
    files
}

/// Tokens minted for exec views, reused for a while: (pod uid, account, audience) →
/// (token, when minted). Bounded: emptied when it grows past `MAX_TOKENS`.
type Tokens = std::sync::Mutex<
    std::collections::HashMap<(String, String, String), (String, std::time::Instant)>,
>;
static TOKENS: std::sync::OnceLock<Tokens> = std::sync::OnceLock::new();
const TOKEN_REUSE: std::time::Duration = std::time::Duration::from_secs(600);
const MAX_TOKENS: usize = 10_000;

/// A token for the pod's service account, bound to the pod (TokenRequest), minted once per
/// pod, account and audience every ten minutes rather than on every exec.
async fn token(rd: &mut Reader<'_>, pod: &Value, src: &Value) -> Option<String> {
    let key = (
        pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
        pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        src["audience"].as_str().unwrap_or("").to_string(),
    );
    let tokens = TOKENS.get_or_init(Default::default);
    if let Some((t, at)) = tokens.lock().unwrap().get(&key) {
        if at.elapsed() < TOKEN_REUSE {
            return Some(t.clone());
        }
    }
    let minted = mint(rd, pod, src).await?;
    let mut tokens = tokens.lock().unwrap();
    if tokens.len() >= MAX_TOKENS {
        tokens.clear();
    }
    tokens.insert(key, (minted.clone(), std::time::Instant::now()));
    Some(minted)
}

async fn mint(rd: &mut Reader<'_>, pod: &Value, src: &Value) -> Option<String> {
    let sa = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    let mut spec = json!({
        "expirationSeconds": src["expirationSeconds"].as_i64().unwrap_or(3607),
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
            "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]},
    });
    if let Some(aud) = src["audience"].as_str().filter(|a| !a.is_empty()) {
        spec["audiences"] = json!([aud]);
    }
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let path = format!(
        "/api/v1/namespaces/{}/serviceaccounts/{}/token",
        rkube_client::client::encode(&rd.ns),
        rkube_client::client::encode(sa)
    );
    let resp: Value = rd
        .client
        .send_json(
            Method::POST,
            &path,
            Some(("application/json", serde_json::to_vec(&body).ok()?)),
        )
        .await
        .ok()?;
    resp["status"]["token"].as_str().map(str::to_string)
}

/// The view of `container` in `pod` (a Pod as JSON).
pub async fn build(client: &Client, pod: &Value, container: &str) -> View {
    let ns = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let mut rd = Reader {
        client,
        ns: ns.clone(),
        cache: BTreeMap::new(),
    };
    let c = container_spec(pod, container)
        .cloned()
        .unwrap_or(Value::Null);
    let host = hostname(pod);
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOSTNAME".into(), host.clone()),
    ];
    // Service links: the namespace's Services (unless turned off), and the API's.
    if pod["spec"]["enableServiceLinks"].as_bool() != Some(false) {
        let path = format!(
            "/api/v1/namespaces/{}/services?limit=500",
            rkube_client::client::encode(&ns)
        );
        if let Ok(list) = client.send_json::<Value>(Method::GET, &path, None).await {
            for svc in list["items"].as_array().into_iter().flatten() {
                service_links(svc, &mut env);
            }
        }
    }
    if ns != "default" || pod["spec"]["enableServiceLinks"].as_bool() == Some(false) {
        if let Ok(svc) = client
            .send_json::<Value>(
                Method::GET,
                "/api/v1/namespaces/default/services/kubernetes",
                None,
            )
            .await
        {
            service_links(&svc, &mut env);
        }
    }
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        let (secret, src) = match (from.get("configMapRef"), from.get("secretRef")) {
            (Some(r), _) => (false, r),
            (_, Some(r)) => (true, r),
            _ => continue,
        };
        if let Some(keys) = rd.keys(secret, src["name"].as_str().unwrap_or("")).await {
            for (k, v) in keys {
                env.push((
                    format!("{prefix}{k}"),
                    String::from_utf8_lossy(&v).into_owned(),
                ));
            }
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let value = if let Some(v) = e["value"].as_str() {
            Some(expand(v, &env))
        } else if let Some(vf) = e.get("valueFrom") {
            if let Some(f) = vf.get("fieldRef") {
                field(pod, f["fieldPath"].as_str().unwrap_or(""))
            } else if let Some(r) = vf.get("resourceFieldRef") {
                resource(pod, container, r)
            } else if let Some(r) = vf.get("configMapKeyRef").or(vf.get("secretKeyRef")) {
                let secret = vf.get("secretKeyRef").is_some();
                let keys = rd.keys(secret, r["name"].as_str().unwrap_or("")).await;
                keys.and_then(|k| k.get(r["key"].as_str().unwrap_or("")).cloned())
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
            } else {
                None
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            env.push((name.to_string(), v));
        }
    }
    if !env.iter().any(|(k, _)| k == "HOME") {
        env.push(("HOME".into(), "/root".into()));
    }
    let mut view = View {
        env,
        hostname: host.clone(),
        workdir: c["workingDir"].as_str().unwrap_or("/").to_string(),
        ..Default::default()
    };
    let sc = |k: &str| {
        c["securityContext"][k]
            .as_i64()
            .or(pod["spec"]["securityContext"][k].as_i64())
    };
    view.uid = sc("runAsUser").unwrap_or(0);
    view.gid = sc("runAsGroup").unwrap_or(0);
    view.dirs
        .extend(STANDARD_DIRS.iter().map(|s| s.to_string()));
    let ip = pod["status"]["podIP"].as_str().unwrap_or("");
    let sub = pod["spec"]["subdomain"].as_str().filter(|s| !s.is_empty());
    let fqdn = match sub {
        Some(s) => format!("\t{host}.{s}.{ns}.svc.cluster.local\t{host}"),
        None => format!("\t{host}"),
    };
    view.files
        .insert("/etc/hostname".into(), format!("{host}\n").into_bytes());
    view.files.insert(
        "/etc/hosts".into(),
        format!("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}{fqdn}\n")
            .into_bytes(),
    );
    view.files.insert(
        "/etc/resolv.conf".into(),
        format!("search {ns}.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n")
            .into_bytes(),
    );
    let volumes = pod["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for m in c["volumeMounts"].as_array().into_iter().flatten().take(256) {
        let (Some(name), Some(at)) = (m["name"].as_str(), m["mountPath"].as_str()) else {
            continue;
        };
        let Some(vol) = volumes.iter().find(|v| v["name"] == name) else {
            continue;
        };
        let at = if at.starts_with('/') {
            at.to_string()
        } else {
            format!("/{at}")
        };
        let at = at.trim_end_matches('/').to_string();
        let files = volume_files(&mut rd, pod, container, vol).await;
        let sub = m["subPath"].as_str().filter(|s| !s.is_empty());
        match sub {
            // A key mounted as a file of its own.
            Some(s) if files.contains_key(s) => {
                view.files.insert(at.clone(), files[s].clone());
            }
            Some(s) => {
                let prefix = format!("{}/", s.trim_end_matches('/'));
                for (k, v) in files {
                    if let Some(rest) = k.strip_prefix(&prefix) {
                        view.files.insert(format!("{at}/{rest}"), v);
                    }
                }
                view.dirs.insert(at.clone());
            }
            None => {
                for (k, v) in files {
                    view.files.insert(format!("{at}/{k}"), v);
                }
                view.dirs.insert(at.clone());
            }
        }
    }
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downward_values_and_references() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                "labels": {"app": "web", "tier": "front"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]},
            "status": {"podIP": "10.244.0.5", "podIPs": [{"ip": "10.244.0.5"}]}
        });
        assert_eq!(field(&pod, "metadata.name").as_deref(), Some("web"));
        assert_eq!(
            field(&pod, "metadata.labels['app']").as_deref(),
            Some("web")
        );
        assert_eq!(
            field(&pod, "metadata.labels").as_deref(),
            Some("app=\"web\"\ntier=\"front\"")
        );
        assert_eq!(field(&pod, "status.podIPs").as_deref(), Some("10.244.0.5"));
        let r = |res: &str, div: Option<&str>| {
            let mut v = json!({"resource": res});
            if let Some(d) = div {
                v["divisor"] = json!(d);
            }
            resource(&pod, "c", &v)
        };
        assert_eq!(r("limits.cpu", None).as_deref(), Some("1"));
        assert_eq!(r("limits.cpu", Some("1m")).as_deref(), Some("500"));
        assert_eq!(r("limits.memory", Some("1Mi")).as_deref(), Some("64"));
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)", &env), "x-$(B)-$(A)");
        assert_eq!(hostname(&pod), "web");
        let mut links = Vec::new();
        service_links(
            &json!({"metadata": {"name": "my-svc"}, "spec": {"clusterIP": "10.96.0.7",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
            &mut links,
        );
        let get = |k: &str| links.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MY_SVC_SERVICE_HOST"), Some("10.96.0.7"));
        assert_eq!(get("MY_SVC_SERVICE_PORT_HTTP"), Some("80"));
        assert_eq!(get("MY_SVC_PORT"), Some("tcp://10.96.0.7:80"));
        assert_eq!(get("MY_SVC_PORT_80_TCP_ADDR"), Some("10.96.0.7"));
    }
}
