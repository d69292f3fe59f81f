//! Jobs and CronJobs (`pkg/registry/batch`): defaults, the selector a Job generates from its
//! uid (`batch.kubernetes.io/controller-uid`) unless `manualSelector`, the restart policies a
//! Job's pods may have, what may change after creation, the cron schedule, and both columns.

use rkube_api::k8s::api::batch::v1 as batch;
use rkube_api::{meta, StatusCause};
use serde_json::{json, Value};

use super::apps::{selector_immutable, validate_selector_template};
use super::print::{self, i, list_of, or_none, s, selector_string, Column};
use super::{podspec, reset_status, set_at, set_default, Strategy};

pub struct Job;
pub struct CronJob;

/// The labels a generated selector puts on a Job's pods: both the prefixed and the legacy
/// spellings, as upstream.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";

fn job_defaults(spec: &mut Value) {
    let completions_unset = spec.get("completions").is_none_or(Value::is_null);
    let parallelism_unset = spec.get("parallelism").is_none_or(Value::is_null);
    if completions_unset && parallelism_unset {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set_default(spec, "/parallelism", json!(1));
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    set_default(
        spec,
        "/backoffLimit",
        json!(if per_index { i32::MAX } else { 6 }),
    );
    set_default(spec, "/completionMode", json!("NonIndexed"));
    set_default(spec, "/suspend", json!(false));
    let policy = if spec.get("podFailurePolicy").is_some_and(|v| !v.is_null()) {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "/podReplacementPolicy", json!(policy));
    set_default(spec, "/manualSelector", Value::Null);
    if spec.get("manualSelector").is_some_and(Value::is_null) {
        if let Some(m) = spec.as_object_mut() {
            m.remove("manualSelector");
        }
    }
    let mut holder = json!({ "spec": spec.clone() });
    podspec::template_defaults(&mut holder);
    *spec = holder["spec"].take();
}

/// A Job's validation, shared with a CronJob's `jobTemplate` (`path` is where its spec is).
fn validate_job_spec(spec: &Value, path: &str, causes: &mut Vec<StatusCause>) {
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
    ] {
        if let Some(n) = spec.get(f).and_then(Value::as_i64) {
            let bad = if f == "activeDeadlineSeconds" {
                n <= 0
            } else {
                n < 0
            };
            if bad {
                let why = if f == "activeDeadlineSeconds" {
                    "must be greater than 0"
                } else {
                    "must be greater than or equal to 0"
                };
                causes.push(StatusCause::invalid_raw(
                    &format!("{path}.{f}"),
                    &n.to_string(),
                    why,
                ));
            }
        }
    }
    let restart = spec
        .pointer("/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(restart, "OnFailure" | "Never") {
        let field = format!("{path}.template.spec.restartPolicy");
        // Pod defaulting fills in `Always`, so it reads as missing, as upstream.
        causes.push(if restart.is_empty() || restart == "Always" {
            StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: valid values: \"OnFailure\", \"Never\"".into(),
                field,
            }
        } else {
            StatusCause::not_supported(&field, restart, &["OnFailure", "Never"])
        });
    }
    let mode = spec
        .get("completionMode")
        .and_then(Value::as_str)
        .unwrap_or("NonIndexed");
    if !matches!(mode, "NonIndexed" | "Indexed") {
        causes.push(StatusCause::not_supported(
            &format!("{path}.completionMode"),
            mode,
            &["NonIndexed", "Indexed"],
        ));
    }
    if mode == "Indexed" && spec.get("completions").is_none_or(Value::is_null) {
        causes.push(StatusCause::required(&format!("{path}.completions")));
    }
}

impl Strategy for Job {
    crate::typed_kind!(batch::Job);

    fn defaults(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
            job_defaults(spec);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
        let manual = obj
            .pointer("/spec/manualSelector")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if manual {
            return;
        }
        let uid = meta::meta_str(obj, "uid").to_string();
        let name = meta::name(obj).to_string();
        if obj.pointer("/spec/selector").is_none_or(Value::is_null) {
            set_at(
                obj,
                "/spec/selector",
                json!({ "matchLabels": { CONTROLLER_UID: uid } }),
            );
        }
        set_default(obj, "/spec/template/metadata/labels", json!({}));
        let Some(labels) = obj
            .pointer_mut("/spec/template/metadata/labels")
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        for (k, v) in [
            (CONTROLLER_UID, &uid),
            (JOB_NAME, &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            labels.entry(k).or_insert_with(|| json!(v));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_selector_template(obj, causes);
        if let Some(spec) = obj.get("spec") {
            validate_job_spec(spec, "spec", causes);
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        selector_immutable(new, old, causes);
        let suspended = old.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
        let mut a = new
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        let mut b = old
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        if suspended {
            // A suspended Job's scheduling directives may change (upstream's mutable
            // scheduling directives): node affinity, selector, tolerations, labels,
            // annotations, scheduling gates.
            for t in [&mut a, &mut b] {
                for p in [
                    "/spec/nodeSelector",
                    "/spec/tolerations",
                    "/spec/affinity",
                    "/spec/schedulingGates",
                ] {
                    super::remove_at(t, p);
                }
                for p in ["/metadata/labels", "/metadata/annotations"] {
                    super::remove_at(t, p);
                }
            }
        }
        if a != b {
            causes.push(StatusCause::invalid_raw(
                "spec.template",
                "core.PodTemplateSpec{...}",
                "field is immutable",
            ));
        }
        let indexed =
            new.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
        if !indexed && new.pointer("/spec/completions") != old.pointer("/spec/completions") {
            causes.push(StatusCause::invalid_raw(
                "spec.completions",
                &new.pointer("/spec/completions")
                    .map_or("null".into(), |v| v.to_string()),
                "field is immutable",
            ));
        }
        if new.pointer("/spec/completionMode") != old.pointer("/spec/completionMode") {
            causes.push(StatusCause::invalid(
                "spec.completionMode",
                &s(new, "/spec/completionMode"),
                "field is immutable",
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
    }

    fn field_value(&self, obj: &Value, field: &str) -> String {
        match field {
            "status.successful" => i(obj, "/status/succeeded").to_string(),
            f => rkube_api::fields::field_at(obj, f),
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Status"),
            Column::text("Completions"),
            Column::text("Duration"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
            Column::wide("Selector"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(job_status(obj)),
            json!(completions(obj)),
            json!(job_duration(obj, now)),
            json!(print::age(obj, now)),
            json!(list_of(obj, "/spec/template/spec/containers", "name")),
            json!(list_of(obj, "/spec/template/spec/containers", "image")),
            json!(selector_string(obj)),
        ]
    }
}

/// Whether the Job's first condition of `kind` is true.
fn has_condition(obj: &Value, kind: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        })
        .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// kubectl 1.33's Status column of a Job.
fn job_status(obj: &Value) -> &'static str {
    if has_condition(obj, "Complete") {
        "Complete"
    } else if has_condition(obj, "Failed") {
        "Failed"
    } else if !meta::meta_str(obj, "deletionTimestamp").is_empty() {
        "Terminating"
    } else if has_condition(obj, "Suspended") {
        "Suspended"
    } else if has_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// `succeeded/completions`, or `succeeded/1 of parallelism` for a work queue.
fn completions(obj: &Value) -> String {
    let succeeded = i(obj, "/status/succeeded");
    match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let p = i(obj, "/spec/parallelism");
            if p > 1 {
                format!("{succeeded}/1 of {p}")
            } else {
                format!("{succeeded}/1")
            }
        }
    }
}

fn job_duration(obj: &Value, now: i64) -> String {
    let start = s(obj, "/status/startTime");
    let Some(start) = print::parse_time(&start) else {
        return String::new();
    };
    let end = print::parse_time(&s(obj, "/status/completionTime")).unwrap_or(now);
    print::human_duration(end - start)
}

impl Strategy for CronJob {
    crate::typed_kind!(batch::CronJob);

    fn defaults(&self, obj: &mut Value) {
        set_default(obj, "/spec/concurrencyPolicy", json!("Allow"));
        set_default(obj, "/spec/suspend", json!(false));
        set_default(obj, "/spec/successfulJobsHistoryLimit", json!(3));
        set_default(obj, "/spec/failedJobsHistoryLimit", json!(1));
        if let Some(spec) = obj
            .pointer_mut("/spec/jobTemplate/spec")
            .filter(|s| s.is_object())
        {
            job_defaults(spec);
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        reset_status(obj, json!({}));
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        let schedule = s(obj, "/spec/schedule");
        if schedule.is_empty() {
            causes.push(StatusCause::required("spec.schedule"));
        } else if let Err(e) = rkube_api::cron::Schedule::parse(&schedule) {
            causes.push(StatusCause::invalid("spec.schedule", &schedule, &e));
        } else if schedule.contains("TZ=") {
            causes.push(StatusCause::invalid(
                "spec.schedule",
                &schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
        let policy = s(obj, "/spec/concurrencyPolicy");
        if !matches!(policy.as_str(), "Allow" | "Forbid" | "Replace") {
            causes.push(StatusCause::not_supported(
                "spec.concurrencyPolicy",
                &policy,
                &["Allow", "Forbid", "Replace"],
            ));
        }
        let tz = s(obj, "/spec/timeZone");
        if obj.pointer("/spec/timeZone").is_some() && (tz.is_empty() || tz.contains(' ')) {
            causes.push(StatusCause::invalid(
                "spec.timeZone",
                &tz,
                "unknown time zone",
            ));
        }
        match obj.pointer("/spec/jobTemplate/spec") {
            Some(spec) => {
                validate_job_spec(spec, "spec.jobTemplate.spec", causes);
                podspec::validate(
                    spec.pointer("/template/spec"),
                    "spec.jobTemplate.spec.template.spec",
                    causes,
                );
            }
            None => causes.push(StatusCause::required("spec.jobTemplate")),
        }
        if meta::name(obj).len() > 52 {
            causes.push(StatusCause::invalid(
                "metadata.name",
                meta::name(obj),
                "must be no more than 52 characters",
            ));
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Schedule"),
            Column::text("Timezone"),
            Column("Suspend", "boolean", 0, ""),
            Column::integer("Active"),
            Column::text("Last Schedule"),
            Column::AGE,
            Column::wide("Containers"),
            Column::wide("Images"),
            Column::wide("Selector"),
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let last = s(obj, "/status/lastScheduleTime");
        let last = match print::parse_time(&last) {
            Some(t) => print::human_duration(now - t),
            None => "<none>".into(),
        };
        let suspend = obj
            .pointer("/spec/suspend")
            .and_then(Value::as_bool)
            .map_or("<unset>".to_string(), |b| {
                if b { "True" } else { "False" }.to_string()
            });
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/spec/schedule")),
            json!(or_none(s(obj, "/spec/timeZone"))),
            json!(suspend),
            json!(obj
                .pointer("/status/active")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)),
            json!(last),
            json!(print::age(obj, now)),
            json!(list_of(
                obj,
                "/spec/jobTemplate/spec/template/spec/containers",
                "name"
            )),
            json!(list_of(
                obj,
                "/spec/jobTemplate/spec/template/spec/containers",
                "image"
            )),
            json!(or_none(print::label_map(
                obj.pointer("/spec/jobTemplate/spec/selector/matchLabels")
            ))),
        ]
    }
}
