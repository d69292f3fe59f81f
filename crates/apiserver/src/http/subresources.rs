//! Subresources with their own semantics: `pods/binding` (the scheduler's bind),
//! `pods/eviction`, and the `scale` view of workloads.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::patch::PatchKind;
use rkube_api::strategic::Lists;
use rkube_api::{meta, ApiError, DeleteOptions, GroupResource, Status, StatusCause};
use serde_json::{json, Value};

use super::body::{read_body, read_object, read_patch};
use super::{json_value, Scope};
use crate::kinds::pod;
use crate::registry::{Admit, Attributes, Decision, Operation, PatchType};

fn status(code: u16) -> Response {
    json_value(
        StatusCode::from_u16(code).unwrap_or(StatusCode::OK),
        &serde_json::to_value(Status::success(code, None)).unwrap_or_default(),
    )
}

/// `POST pods/{name}/binding`: sets `spec.nodeName` and `PodScheduled=True` in one CAS update.
pub async fn bind(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let (_, binding) = read_object(&s.content_type, read_body(body).await?)?;
    let name = s.name();
    pod::validate_binding(name, &binding)?;
    admit_subresource(s, "binding", &binding, dry).await?;
    s.reg
        .guaranteed_update(s.ns, name, dry, |cur| {
            pod::bind(cur, name, &binding).map(Decision::Write)
        })
        .await?;
    Ok(status(201))
}

/// `POST pods/{name}/eviction`: a delete honouring the eviction's DeleteOptions and the pod's
/// PodDisruptionBudget: refused (429) when the budget allows no disruption; otherwise the
/// budget's `disruptionsAllowed` is charged by compare-and-swap (the pod recorded in
/// `disruptedPods`) before the pod is deleted.
pub async fn evict(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let (_, eviction) = read_object(&s.content_type, read_body(body).await?)?;
    let opts_body = eviction
        .get("deleteOptions")
        .map(|d| serde_json::to_vec(d).unwrap_or_default())
        .unwrap_or_default();
    let mut opts = DeleteOptions::parse(&opts_body, &Default::default())?;
    opts.dry_run |= dry;
    admit_subresource(s, "eviction", &eviction, opts.dry_run).await?;
    charge_budget(s, opts.dry_run).await?;
    // The eviction was admitted; the pod's deletion is not admitted again (upstream deletes
    // with ValidateAllObjectFunc), so a webhook refusing pod deletes does not block drains.
    let w = crate::registry::Write {
        admit: &crate::registry::Unadmitted,
        dry_run: opts.dry_run,
        manager: None,
        verb: "delete",
    };
    s.reg.delete(s.ns, s.name(), &opts, w).await?;
    Ok(status(201))
}

/// `POST serviceaccounts/{name}/token` (TokenRequest): a signed token for the account, for
/// the audiences and lifetime asked (default: the API's, one hour), optionally bound to a pod
/// or secret that must exist.
pub async fn token(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let (_, mut req) = read_object(&s.content_type, read_body(body).await?)?;
    let issuer = s
        .state
        .auth
        .issuer()
        .cloned()
        .ok_or_else(|| ApiError::internal("ServiceAccount tokens are not configured"))?;
    let sa: Value = serde_json::from_slice(&s.reg.get(s.ns, s.name(), None).await?)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let invalid = |field: &str, msg: String| {
        ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            s.name(),
            vec![StatusCause {
                reason: "FieldValueInvalid".into(),
                message: msg,
                field: field.into(),
            }],
        )
    };
    let expiration = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if expiration < crate::auth::serviceaccount::MIN_EXPIRATION {
        return Err(invalid(
            "spec.expirationSeconds",
            format!("Invalid value: {expiration}: may not specify a duration less than 10 minutes"),
        ));
    }
    let expiration = expiration.min(crate::auth::serviceaccount::MAX_EXPIRATION);
    let audiences: Vec<String> = req
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let mut bound = None;
    if let Some(r) = req.pointer("/spec/boundObjectRef").filter(|r| !r.is_null()) {
        let kind = r
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = r
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(plural) = crate::kinds::service::token_binding_resource(&kind) else {
            return Err(invalid(
                "spec.boundObjectRef.kind",
                format!("Unsupported value: {kind:?}: supported values: \"Pod\", \"Secret\""),
            ));
        };
        let reg = s
            .state
            .registries
            .get(&("", plural))
            .ok_or_else(crate::request::not_found_path)?;
        let obj: Value = serde_json::from_slice(&reg.get(s.ns, &name, None).await?)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let uid = meta::uid(&obj).to_string();
        let runs_as = obj
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str);
        if plural == "pods" && runs_as != Some(s.name()) {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount {:?} to pod running with different serviceaccount name.",
                s.name()
            )));
        }
        if let Some(want) = r
            .get("uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
        {
            if want != uid {
                return Err(ApiError::conflict(
                    &GroupResource::new("", plural),
                    &name,
                    &format!("the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"),
                ));
            }
        }
        bound = Some((plural.to_string(), name, uid));
    }
    let claims = crate::auth::serviceaccount::Claims {
        namespace: s.ns.to_string(),
        name: s.name().to_string(),
        uid: meta::uid(&sa).to_string(),
        bound,
    };
    let (token, exp) = issuer
        .issue(&claims, &audiences, expiration)
        .map_err(ApiError::internal)?;
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    meta::set_meta(&mut req, "name", json!(s.name()));
    meta::set_meta(&mut req, "namespace", json!(s.ns));
    meta::set_meta(&mut req, "creationTimestamp", json!(meta::now_rfc3339()));
    req["spec"]["expirationSeconds"] = json!(expiration);
    req["spec"]["audiences"] = json!(if audiences.is_empty() {
        issuer.audiences.clone()
    } else {
        audiences
    });
    req["status"] = json!({
        "token": if dry { String::new() } else { token },
        "expirationTimestamp": meta::rfc3339(exp),
    });
    Ok(json_value(StatusCode::CREATED, &req))
}

/// Charges the disruption budget covering the pod, or refuses the eviction.
async fn charge_budget(s: &Scope<'_>, dry_run: bool) -> Result<(), ApiError> {
    let Some(pdbs) = s.state.registries.get(&("policy", "poddisruptionbudgets")) else {
        return Ok(());
    };
    let pod: Value = serde_json::from_slice(&s.reg.get(s.ns, s.name(), None).await?)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let budgets: Vec<Value> = pdbs
        .cache
        .as_ref()
        .map(|c| c.values())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| meta::namespace(p) == s.ns)
        .collect();
    let refuse = |code: u16, message: String| {
        let mut e = if code == 429 {
            ApiError::too_many_requests(message.clone(), 0)
        } else {
            ApiError::internal(message.clone())
        };
        if code == 429 {
            let mut details = e.status().details.clone().unwrap_or_default();
            const HEAD: &str = "Cannot evict pod as it would violate the pod's disruption budget. ";
            details.causes = vec![StatusCause {
                reason: "DisruptionBudget".into(),
                message: message.strip_prefix(HEAD).unwrap_or(&message).to_string(),
                field: String::new(),
            }];
            e.0.details = Some(details);
            e.0.message =
                "Cannot evict pod as it would violate the pod's disruption budget.".into();
        }
        e
    };
    let Some(budget) =
        crate::kinds::policy::eviction(&pod, &budgets).map_err(|(c, m)| refuse(c, m))?
    else {
        return Ok(());
    };
    let pod_name = s.name().to_string();
    let now = meta::now_rfc3339();
    pdbs.guaranteed_update(s.ns, &budget, dry_run, |cur| {
        let allowed = cur
            .pointer("/status/disruptionsAllowed")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if allowed <= 0 {
            return Err(refuse(
                429,
                format!("Cannot evict pod as it would violate the pod's disruption budget. The disruption budget {budget} has no disruptions left"),
            ));
        }
        let mut new = cur.clone();
        new["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if !new["status"]["disruptedPods"].is_object() {
            new["status"]["disruptedPods"] = json!({});
        }
        new["status"]["disruptedPods"][&pod_name] = json!(now);
        Ok(Decision::Write(new))
    })
    .await?;
    Ok(())
}

/// Validating admission of a subresource create (`binding`, `eviction`) with its body: what
/// NodeRestriction and the other plugins see of it, as upstream.
async fn admit_subresource(
    s: &Scope<'_>,
    sub: &str,
    body: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let attrs = Attributes {
        operation: Operation::Create,
        def: s.reg.def,
        subresource: Some(sub),
        namespace: s.ns,
        name: s.name(),
        dry_run,
        verb: s.info.verb,
    };
    s.admission().validate(&attrs, body, None).await
}

/// The `autoscaling/v1` Scale of a workload, or of a custom resource at its CRD's paths.
fn scale_of(strategy: &dyn crate::kinds::Strategy, obj: &Value) -> Value {
    let (spec, status, selector) = match strategy.scale_paths() {
        Some(p) => (
            obj.pointer(&p.spec).cloned().unwrap_or(json!(0)),
            obj.pointer(&p.status).cloned().unwrap_or(json!(0)),
            p.selector
                .and_then(|at| obj.pointer(&at).and_then(Value::as_str).map(String::from))
                .unwrap_or_default(),
        ),
        None => (
            obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0)),
            obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            crate::kinds::print::selector_string(obj),
        ),
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta::name(obj),
            "namespace": meta::namespace(obj),
            "uid": meta::uid(obj),
            "resourceVersion": meta::resource_version(obj),
            "creationTimestamp": meta::meta_str(obj, "creationTimestamp"),
        },
        "spec": {"replicas": spec},
        "status": {"replicas": status, "selector": selector},
    })
}

pub async fn get_scale(s: &Scope<'_>) -> Result<Response, ApiError> {
    let bytes = s.reg.get(s.ns, s.name(), None).await?;
    let obj: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(json_value(
        StatusCode::OK,
        &scale_of(&*s.reg.strategy, &obj),
    ))
}

/// Writes the replicas of the Scale `make` builds from the current one.
async fn write_scale(
    s: &Scope<'_>,
    mut make: impl FnMut(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let name = s.name();
    let reg = s.reg;
    let gr = GroupResource::new(reg.def.group, &format!("{}/scale", reg.def.plural));
    let admission = s.admission();
    let w = s.write(&admission, dry, s.update_manager.as_deref());
    let (obj, _) = reg
        .update_with(s.ns, name, Some("scale"), w, |cur| {
            let scale = make(&scale_of(&*reg.strategy, cur))?;
            let replicas = match scale.pointer("/spec/replicas") {
                None => 0,
                Some(r) => r.as_i64().filter(|r| *r <= i64::from(i32::MAX)).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: {r} is not an int32"
                    ))
                })?,
            };
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![StatusCause::invalid_raw(
                        "spec.replicas",
                        &replicas.to_string(),
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            let uid = meta::uid(&scale);
            if !uid.is_empty() && uid != meta::uid(cur) {
                return Err(ApiError::conflict(
                    &gr,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(cur)
                    ),
                ));
            }
            let rv = meta::resource_version(&scale);
            if !rv.is_empty() && rv != meta::resource_version(cur) {
                return Err(ApiError::conflict(
                    &reg.def.group_resource(),
                    name,
                    rkube_api::status::OPTIMISTIC_LOCK_MSG,
                ));
            }
            let mut new = cur.clone();
            let at = reg
                .strategy
                .scale_paths()
                .map_or_else(|| "/spec/replicas".to_string(), |p| p.spec);
            crate::kinds::set_at(&mut new, &at, json!(replicas));
            Ok(new)
        })
        .await?;
    Ok(json_value(
        StatusCode::OK,
        &scale_of(&*s.reg.strategy, &obj),
    ))
}

pub async fn update_scale(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let (_, scale) = read_object(&s.content_type, read_body(body).await?)?;
    write_scale(s, |_| Ok(scale.clone())).await
}

pub async fn patch_scale(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let kind = match super::patch::patch_type(s)? {
        PatchType::Merge => PatchKind::Merge,
        PatchType::Json => PatchKind::Json,
        PatchType::Strategic => PatchKind::Strategic,
        PatchType::Apply { .. } => {
            return Err(ApiError::unsupported_media_type(
                "application/apply-patch+yaml (server-side apply of the scale subresource)",
            ))
        }
    };
    let patch = read_patch(false, &read_body(body).await?)?;
    write_scale(s, |scale| {
        rkube_api::patch::apply(kind, Lists::GENERIC, scale, &patch).map_err(|e| match e {
            rkube_api::patch::PatchError::TooManyOperations(m) => {
                ApiError::request_entity_too_large(m)
            }
            rkube_api::patch::PatchError::Malformed(m)
            | rkube_api::patch::PatchError::Invalid(m) => ApiError::bad_request(m),
        })
    })
    .await
}
