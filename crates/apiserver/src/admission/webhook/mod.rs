//! Admission webhooks (admissionregistration.k8s.io/v1): the Mutating and Validating
//! webhook configurations in the watch cache, parsed again when they change
//! (`matching`), called with AdmissionReviews (`review`) over HTTPS verified against each
//! webhook's `caBundle`. A `service` reference is resolved through the Service's
//! EndpointSlices to a ready endpoint (simulated pods run nothing, so a webhook server runs
//! on a host address: a Service without a selector plus an EndpointSlice pointing at it, or
//! a `url`); the TLS name checked is `<service>.<namespace>.svc`.
//!
//! Mutating webhooks run one after another in configuration-name order, their JSONPatches
//! applied, and those with `reinvocationPolicy: IfNeeded` run once more when a later one
//! changed the object; validating webhooks run concurrently. `failurePolicy`,
//! `timeoutSeconds` (at most 30), `sideEffects` with dry runs, `matchConditions` (CEL) and
//! the selectors behave as upstream's, with its messages. Configuration objects themselves
//! (and admission policies) are never sent to webhooks.

pub mod matching;
pub mod review;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rkube_api::authz::UserInfo;
use rkube_api::{meta, ApiError, GroupResource, StatusDetails};
use serde_json::Value;

use crate::cache::object::Filter;
use crate::registry::{Attributes, Operation, Registries};
use matching::{Hook, Request, Target};

const GROUP: &str = "admissionregistration.k8s.io";
/// The largest webhook response read.
const MAX_RESPONSE: usize = 16 << 20;
/// Clients kept (one per CA bundle and resolved endpoint).
const MAX_CLIENTS: usize = 128;

#[derive(Default)]
struct Snapshot {
    versions: Option<(u64, u64)>,
    mutating: Arc<Vec<Hook>>,
    validating: Arc<Vec<Hook>>,
}

pub struct Webhooks {
    registries: Arc<Registries>,
    snapshot: Mutex<Snapshot>,
    clients: Mutex<HashMap<String, reqwest::Client>>,
}

/// What one request's webhooks said besides yes or no.
#[derive(Default)]
pub struct Said {
    pub warnings: Vec<String>,
}

fn operation(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}

impl Webhooks {
    pub fn new(registries: Arc<Registries>) -> Self {
        Webhooks {
            registries,
            snapshot: Mutex::default(),
            clients: Mutex::default(),
        }
    }

    /// The configured webhooks, parsed again when either configuration resource changed.
    fn current(&self) -> (Arc<Vec<Hook>>, Arc<Vec<Hook>>) {
        let caches = [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ]
        .map(|p| {
            self.registries
                .get(&(GROUP, p))
                .and_then(|r| r.cache.clone())
        });
        let versions = (
            caches[0].as_ref().map_or(0, |c| c.content_version()),
            caches[1].as_ref().map_or(0, |c| c.content_version()),
        );
        let mut snap = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if snap.versions != Some(versions) {
            let mut cel = crate::cel::Cache::default();
            let mut parse = |c: &Option<Arc<crate::cache::Cacher>>| {
                let mut configs = c.as_ref().map(|c| c.values()).unwrap_or_default();
                configs.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
                Arc::new(
                    configs
                        .iter()
                        .flat_map(|cfg| matching::hooks(cfg, &mut cel))
                        .collect::<Vec<_>>(),
                )
            };
            snap.mutating = parse(&caches[0]);
            snap.validating = parse(&caches[1]);
            snap.versions = Some(versions);
        }
        (snap.mutating.clone(), snap.validating.clone())
    }

    /// Whether any webhook is configured (the common case is none: nothing to do).
    fn intercepts(&self, a: &Attributes) -> bool {
        a.def.group != GROUP
    }

    /// The labels of the namespace a request is in (`None`: cluster-scoped, matched by any
    /// namespace selector), or the Namespace's own.
    fn namespace_labels(
        &self,
        a: &Attributes,
        new: Option<&Value>,
        old: Option<&Value>,
    ) -> Option<BTreeMap<String, String>> {
        if a.def.group.is_empty() && a.def.plural == "namespaces" {
            return Some(matching::labels(new.or(old)));
        }
        if !a.def.namespaced {
            return None;
        }
        let reg = self.registries.get(&("", "namespaces"))?;
        let cache = reg.cache.as_ref()?;
        let (found, _) = cache.get(&reg.key("", a.namespace)).ok()?;
        Some(matching::labels(found.map(|o| o.value()).as_ref()))
    }

    /// Runs the mutating webhooks on `obj`.
    pub async fn mutate(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &mut Value,
        old: Option<&Value>,
        said: &mut Said,
    ) -> Result<(), ApiError> {
        if !self.intercepts(a) || a.operation == Operation::Delete {
            return Ok(());
        }
        let (hooks, _) = self.current();
        if hooks.is_empty() {
            return Ok(());
        }
        let ns_labels = self.namespace_labels(a, Some(obj), old);
        let mut ran: Vec<(usize, u64)> = Vec::new();
        let mut version = 0u64;
        for pass in 0..2 {
            for (i, hook) in hooks.iter().enumerate() {
                if pass == 1 {
                    // The reinvocation: IfNeeded webhooks that ran before the object last
                    // changed.
                    let Some(seen) = ran.iter().find(|(j, _)| *j == i).map(|(_, v)| *v) else {
                        continue;
                    };
                    if !hook.reinvoke || seen == version {
                        continue;
                    }
                }
                let before = obj.clone();
                let outcome = self
                    .run(hook, user, a, Some(&before), old, ns_labels.as_ref())
                    .await?;
                let Some(outcome) = outcome else { continue };
                said.warnings.extend(outcome.warnings);
                if let Some(patch) = outcome.patch {
                    let mut patched = before;
                    rkube_api::patch::json_patch(&mut patched, &patch).map_err(|e| {
                        ApiError::internal(format!(
                            "failed calling webhook \"{}\": JSON patch: {e:?}",
                            hook.name
                        ))
                    })?;
                    if patched != *obj {
                        *obj = patched;
                        version += 1;
                    }
                }
                if pass == 0 {
                    ran.push((i, version));
                }
            }
            if !ran.iter().any(|(i, v)| hooks[*i].reinvoke && *v != version) {
                break;
            }
        }
        Ok(())
    }

    /// Runs the validating webhooks (concurrently), and for deletes the mutating ones too
    /// (which may only allow or deny them).
    pub async fn validate(
        &self,
        user: &UserInfo,
        a: &Attributes<'_>,
        obj: &Value,
        old: Option<&Value>,
        said: &mut Said,
    ) -> Result<(), ApiError> {
        if !self.intercepts(a) {
            return Ok(());
        }
        let (mutating, validating) = self.current();
        if validating.is_empty() && (mutating.is_empty() || a.operation != Operation::Delete) {
            return Ok(());
        }
        // A delete's object is the one being deleted: sent as oldObject.
        let (new, old) = match a.operation {
            Operation::Delete => (None, Some(obj)),
            _ => (Some(obj), old),
        };
        let ns_labels = self.namespace_labels(a, new, old);
        let mut hooks: Vec<&Hook> = validating.iter().collect();
        if a.operation == Operation::Delete {
            hooks.extend(mutating.iter());
        }
        let runs = hooks
            .iter()
            .map(|h| self.run(h, user, a, new, old, ns_labels.as_ref()));
        let results = futures_util::future::join_all(runs).await;
        for r in results {
            if let Some(outcome) = r? {
                said.warnings.extend(outcome.warnings);
            }
        }
        Ok(())
    }

    /// One webhook on one request: `None` when it does not apply (or failed open), its
    /// outcome when it allowed the request, the error when it denied it or failed closed.
    async fn run(
        &self,
        hook: &Hook,
        user: &UserInfo,
        a: &Attributes<'_>,
        new: Option<&Value>,
        old: Option<&Value>,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<review::Outcome>, ApiError> {
        let req = Request {
            operation: operation(a.operation),
            group: a.def.group,
            version: a.def.version,
            resource: a.def.plural,
            subresource: a.subresource.unwrap_or(""),
            namespaced: a.def.namespaced,
        };
        if !hook.matches(&req, ns_labels, new, old) {
            return Ok(None);
        }
        let uid = uuid();
        let name = match (a.name, new) {
            ("", Some(o)) => meta::name(o),
            (n, _) => n,
        };
        let Some(version) = review::version_for(&hook.review_versions) else {
            return Err(ApiError::internal(format!(
                "failed calling webhook \"{}\": none of the admissionReviewVersions {:?} is understood",
                hook.name, hook.review_versions
            )));
        };
        let body = review::request(
            &review::Input {
                uid: &uid,
                group: a.def.group,
                version: a.def.version,
                kind: a.def.kind,
                resource: a.def.plural,
                subresource: a.subresource,
                name,
                namespace: a.namespace,
                operation: req.operation,
                user,
                object: new,
                old_object: old,
                dry_run: a.dry_run,
            },
            version,
        );
        // matchConditions: every one must hold; an error follows the failure policy.
        for (cname, expr) in &hook.conditions {
            let null = Value::Null;
            let vars = [
                ("object", new.unwrap_or(&null)),
                ("oldObject", old.unwrap_or(&null)),
                ("request", &body["request"]),
            ];
            match crate::cel::eval_bool(expr, &vars) {
                Ok(true) => {}
                Ok(false) => return Ok(None),
                Err(e) if hook.fail_closed => {
                    return Err(ApiError::internal(format!(
                        "failed calling webhook \"{}\": failed to evaluate match condition {cname:?}: {e}",
                        hook.name
                    )))
                }
                Err(_) => return Ok(None),
            }
        }
        if a.dry_run && !hook.dry_run_safe() {
            return Err(ApiError::bad_request(format!(
                "admission webhook \"{}\" does not support dry run",
                hook.name
            )));
        }
        let started = std::time::Instant::now();
        let answer = match self.call(hook, &body).await {
            Ok(bytes) => review::response(&bytes, &uid, version),
            Err(e) => Err(e),
        };
        tracing::debug!(webhook = %hook.name, took_ms = started.elapsed().as_millis() as u64, ok = answer.is_ok(), "admission webhook called");
        let outcome = match answer {
            Ok(o) => o,
            Err(e) if hook.fail_closed => {
                return Err(ApiError::internal(format!(
                    "failed calling webhook \"{}\": {e}",
                    hook.name
                )));
            }
            Err(e) => {
                tracing::warn!(webhook = %hook.name, error = %e, "admission webhook failed; ignored (failurePolicy: Ignore)");
                return Ok(None);
            }
        };
        if !outcome.allowed {
            return Err(denied(a, name, &hook.name, &outcome.status));
        }
        Ok(Some(outcome))
    }

    /// POSTs the review; the response body.
    async fn call(&self, hook: &Hook, body: &Value) -> Result<Vec<u8>, String> {
        let (url, resolve) = self.endpoint(hook)?;
        let client = self.client(hook.ca_bundle.as_deref(), resolve)?;
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(serde_json::to_vec(body).unwrap_or_default())
            .timeout(hook.timeout)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    format!("failed to call webhook: Post {url:?}: context deadline exceeded")
                } else {
                    format!("failed to call webhook: Post {url:?}: {}", error_chain(&e))
                }
            })?;
        let status = resp.status().as_u16();
        let mut resp = resp;
        let mut out = Vec::new();
        loop {
            match tokio::time::timeout(hook.timeout, resp.chunk()).await {
                Ok(Ok(Some(c))) => {
                    if out.len() + c.len() > MAX_RESPONSE {
                        return Err(
                            "received invalid webhook response: the response is too large".into(),
                        );
                    }
                    out.extend_from_slice(&c);
                }
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(format!("failed to call webhook: {e}")),
                Err(_) => {
                    return Err(format!(
                        "failed to call webhook: Post {url:?}: context deadline exceeded"
                    ))
                }
            }
        }
        if status != 200 {
            return Err(format!(
                "failed to call webhook: the server responded with the status code {status} but did not return more information"
            ));
        }
        Ok(out)
    }

    /// The URL to POST to, and for a Service the endpoint its name resolves to.
    fn endpoint(
        &self,
        hook: &Hook,
    ) -> Result<(String, Option<(String, std::net::SocketAddr)>), String> {
        match &hook.target {
            Target::Url(u) => Ok((u.clone(), None)),
            Target::Service {
                namespace,
                name,
                path,
                port,
            } => {
                let (ip, target_port) = self.resolve_service(namespace, name, *port)?;
                let host = format!("{name}.{namespace}.svc");
                let path = if path.starts_with('/') || path.is_empty() {
                    path.clone()
                } else {
                    format!("/{path}")
                };
                Ok((
                    format!("https://{host}:{target_port}{path}"),
                    Some((host, std::net::SocketAddr::new(ip, target_port))),
                ))
            }
        }
    }

    /// A ready endpoint of Service `ns/name` for its port `port`: its address and port.
    fn resolve_service(
        &self,
        ns: &str,
        name: &str,
        port: u16,
    ) -> Result<(std::net::IpAddr, u16), String> {
        let unavailable = || {
            format!("failed to call webhook: service \"{name}\" not found or has no ready endpoints in namespace {ns:?}")
        };
        let svc_reg = self
            .registries
            .get(&("", "services"))
            .ok_or_else(unavailable)?;
        let svc = svc_reg
            .cache
            .as_ref()
            .and_then(|c| c.get(&svc_reg.key(ns, name)).ok())
            .and_then(|(o, _)| o)
            .map(|o| o.value())
            .ok_or_else(|| format!("failed to call webhook: service \"{name}\" not found"))?;
        let svc_port = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p["port"].as_u64() == Some(u64::from(port)))
            })
            .cloned()
            .ok_or_else(|| {
                format!("failed to call webhook: service \"{name}\" has no port {port}")
            })?;
        let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
        let numeric_target = svc_port
            .get("targetPort")
            .and_then(Value::as_u64)
            .map(|p| p as u16);
        let slices = self
            .registries
            .get(&("discovery.k8s.io", "endpointslices"))
            .ok_or_else(unavailable)?;
        let cache = slices.cache.as_ref().ok_or_else(unavailable)?;
        let filter = Filter {
            namespace: Some(ns.to_string()),
            ..Default::default()
        };
        let list = cache
            .list(&filter, None, 0)
            .map_err(|e| e.status().message.clone())?;
        for o in list.items {
            if o.label("kubernetes.io/service-name") != Some(name) {
                continue;
            }
            let slice = o.value();
            let ports = slice
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ep_port = ports
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .or(if ports.len() == 1 {
                    ports.first()
                } else {
                    None
                })
                .and_then(|p| p.get("port").and_then(Value::as_u64))
                .map(|p| p as u16)
                .or(numeric_target)
                .unwrap_or(port);
            for ep in slice
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if ep.pointer("/conditions/ready") == Some(&Value::Bool(false)) {
                    continue;
                }
                if let Some(ip) = ep
                    .pointer("/addresses/0")
                    .and_then(Value::as_str)
                    .and_then(|a| a.parse().ok())
                {
                    return Ok((ip, ep_port));
                }
            }
        }
        Err(unavailable())
    }

    /// A client trusting `ca` (only it), resolving `resolve`'s name to its address.
    fn client(
        &self,
        ca: Option<&[u8]>,
        resolve: Option<(String, std::net::SocketAddr)>,
    ) -> Result<reqwest::Client, String> {
        let key = format!(
            "{:x}|{:?}",
            ca.map_or(0, |c| {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                c.hash(&mut h);
                h.finish()
            }),
            resolve
        );
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .tls_built_in_root_certs(false);
        if let Some(ca) = ca {
            for c in reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|e| format!("failed to call webhook: caBundle: {e}"))?
            {
                b = b.add_root_certificate(c);
            }
        }
        if let Some((host, addr)) = resolve {
            b = b.resolve(&host, addr);
        }
        let client = b
            .build()
            .map_err(|e| format!("failed to call webhook: {e}"))?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// Every cause of a transport error, as Go prints them (`…: connection refused`).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        cur = s.source();
    }
    out
}

fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]])
    )
}

/// A denial as upstream words it (`webhook/errors.ToStatusErr`).
fn denied(a: &Attributes, name: &str, hook: &str, status: &Value) -> ApiError {
    let name = if name.is_empty() { "Unknown" } else { name };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| (400..600).contains(c))
        .unwrap_or(403) as u16;
    let message = status.get("message").and_then(Value::as_str).unwrap_or("");
    let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
    let by = format!("admission webhook \"{hook}\" denied the request");
    let said = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let gr = GroupResource::new(a.def.group, a.def.plural);
    let (prefix, default_reason) = if code == 500 {
        ("Internal error occurred".to_string(), "InternalError")
    } else {
        (format!("{gr} {name:?} is forbidden"), "Forbidden")
    };
    let details = if code == 500 {
        StatusDetails {
            causes: vec![rkube_api::StatusCause {
                reason: String::new(),
                message: said.clone(),
                field: String::new(),
            }],
            ..Default::default()
        }
    } else {
        StatusDetails {
            name: name.into(),
            group: a.def.group.into(),
            kind: a.def.plural.into(),
            ..Default::default()
        }
    };
    let reason = if reason.is_empty() {
        default_reason
    } else {
        reason
    };
    ApiError::new(code, reason, format!("{prefix}: {said}"), Some(details))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn denials_read_as_upstream() {
        let def = rkube_api::resources::find("apps", "v1", "deployments").unwrap();
        let a = Attributes {
            operation: Operation::Create,
            def,
            subresource: None,
            namespace: "default",
            name: "web",
            dry_run: false,
            verb: "create",
        };
        let e = denied(
            &a,
            "web",
            "v.example.com",
            &json!({"message": "no latest tags"}),
        );
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.status().message,
            "deployments.apps \"web\" is forbidden: admission webhook \"v.example.com\" denied the request: no latest tags"
        );
        let e = denied(
            &a,
            "",
            "v.example.com",
            &json!({"code": 422, "reason": "Invalid"}),
        );
        assert_eq!((e.code(), e.reason()), (422, "Invalid"));
        assert!(e.status().message.contains("\"Unknown\" is forbidden"));
        assert_eq!(uuid().len(), 36);
    }
}
