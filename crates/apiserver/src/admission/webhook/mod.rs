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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rkube_api::authz::UserInfo;
use rkube_api::{meta, ApiError, GroupResource, StatusDetails};
use serde_json::Value;

use crate::registry::{Attributes, Operation, Registries};
use matching::{Hook, Request};

const GROUP: &str = "admissionregistration.k8s.io";

/// The mutating and the validating webhooks in force.
type Loaded = (Arc<Vec<Hook>>, Arc<Vec<Hook>>);

#[derive(Default)]
struct Snapshot {
    versions: Option<(u64, u64)>,
    mutating: Arc<Vec<Hook>>,
    validating: Arc<Vec<Hook>>,
}

pub struct Webhooks {
    registries: Arc<Registries>,
    snapshot: Mutex<Snapshot>,
    caller: Arc<crate::callout::Caller>,
}

/// What one request's webhooks said besides yes or no.
#[derive(Default)]
pub struct Said {
    pub warnings: Vec<String>,
    /// Audit annotations: `<webhook or policy>/<key>` → value.
    pub annotations: Vec<(String, String)>,
}

/// Two configuration resources' watch caches.
pub(crate) type Caches = [Option<Arc<crate::cache::Cacher>>; 2];

/// The caches of two admissionregistration resources (webhook configurations, or policies
/// and bindings) and their content versions; an error until both are loaded, so nothing is
/// admitted unchecked.
pub(crate) fn configurations(
    registries: &Registries,
    plurals: [&str; 2],
) -> Result<(Caches, (u64, u64)), ApiError> {
    let caches = plurals.map(|p| registries.get(&(GROUP, p)).and_then(|r| r.cache.clone()));
    if caches.iter().flatten().any(|c| !c.is_ready()) {
        return Err(ApiError::forbidden_path(
            "not yet ready to handle request".into(),
        ));
    }
    let version =
        |c: &Option<Arc<crate::cache::Cacher>>| c.as_ref().map_or(0, |c| c.content_version());
    let versions = (version(&caches[0]), version(&caches[1]));
    Ok((caches, versions))
}

impl Webhooks {
    pub fn new(registries: Arc<Registries>) -> Self {
        Webhooks {
            caller: Arc::new(crate::callout::Caller::new(registries.clone())),
            registries,
            snapshot: Mutex::default(),
        }
    }

    /// What calls webhooks (conversion webhooks share it).
    pub fn caller(&self) -> Arc<crate::callout::Caller> {
        self.caller.clone()
    }

    /// The configured webhooks, parsed again when either configuration resource changed.
    fn current(&self) -> Result<Loaded, ApiError> {
        let (caches, versions) = configurations(
            &self.registries,
            [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ],
        )?;
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
        Ok((snap.mutating.clone(), snap.validating.clone()))
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
        let (hooks, _) = self.current()?;
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
                said.annotations.extend(
                    outcome
                        .annotations
                        .into_iter()
                        .map(|(k, v)| (format!("{}/{k}", hook.name), v)),
                );
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
        let (mutating, validating) = self.current()?;
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
        for (h, r) in hooks.iter().zip(results) {
            if let Some(outcome) = r? {
                said.warnings.extend(outcome.warnings);
                said.annotations.extend(
                    outcome
                        .annotations
                        .into_iter()
                        .map(|(k, v)| (format!("{}/{k}", h.name), v)),
                );
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
            operation: a.operation.as_str(),
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
        let answer = match self
            .caller
            .post(&hook.target, hook.ca_bundle.as_deref(), hook.timeout, &body)
            .await
        {
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
