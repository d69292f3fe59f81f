//! CustomResourceDefinitions (upstream's `apiextensions-apiserver/pkg/registry/
//! customresourcedefinition` and `apis/apiextensions/validation`): names, scope, versions
//! (exactly one storage version), structural schemas, printer columns, selectable fields,
//! subresources and conversion are validated here; `status.storedVersions` keeps every
//! version ever marked for storage; `crate::crd` sets the conditions and serves the
//! resources.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use rkube_api::validation as v;
use rkube_api::StatusCause;
use serde_json::{json, Value};

use super::custom::{jsonpath, schema};
use super::{print, Column, Strategy};

pub struct CustomResourceDefinition;

/// What holds a deleted CRD until its objects are gone (`crate::crd` lifts it).
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn dns1035_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn str_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Adds the storage version to `status.storedVersions` (upstream's PrepareForCreate and
/// PrepareForUpdate).
fn record_storage_version(obj: &mut Value) {
    let Some(storage) = super::custom::storage_version(obj).map(String::from) else {
        return;
    };
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    let stored = &mut obj["status"]["storedVersions"];
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut() {
        if !list.iter().any(|v| v == storage.as_str()) {
            list.push(json!(storage));
        }
    }
}

impl Strategy for CustomResourceDefinition {
    crate::typed_kind!(ext::CustomResourceDefinition);

    fn defaults(&self, obj: &mut Value) {
        let kind = str_at(obj, "/spec/names/kind").to_string();
        if !kind.is_empty() {
            super::set_default(obj, "/spec/names/singular", json!(kind.to_lowercase()));
            super::set_default(obj, "/spec/names/listKind", json!(format!("{kind}List")));
        }
        if obj.get("spec").is_some_and(Value::is_object) {
            super::set_default(obj, "/spec/conversion/strategy", json!("None"));
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({});
        record_storage_version(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        new["status"] = old.get("status").cloned().unwrap_or(json!({}));
        record_storage_version(new);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        validate_spec(obj, causes);
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        let (n, o) = (str_at(new, "/spec/scope"), str_at(old, "/spec/scope"));
        if n != o && !o.is_empty() {
            causes.push(StatusCause::invalid("spec.scope", n, "field is immutable"));
        }
        if str_at(new, "/spec/group") != str_at(old, "/spec/group") {
            causes.push(StatusCause::invalid(
                "spec.group",
                str_at(new, "/spec/group"),
                "field is immutable",
            ));
        }
    }

    /// The first delete adds the cleanup finalizer: the CRD goes once its objects are gone.
    fn deletion_blocked(&self, obj: &Value) -> bool {
        rkube_api::meta::deletion_timestamp(obj).is_none()
    }

    fn begin_deletion(&self, obj: &mut Value) {
        begin_deletion(obj);
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column("Created At", "date", 0, "")]
    }

    fn cells(&self, obj: &Value, _now: i64) -> Vec<Value> {
        vec![
            json!(rkube_api::meta::name(obj)),
            json!(print::s(obj, "/metadata/creationTimestamp")),
        ]
    }
}

fn validate_spec(obj: &Value, causes: &mut Vec<StatusCause>) {
    let group = str_at(obj, "/spec/group");
    let plural = str_at(obj, "/spec/names/plural");
    let name = rkube_api::meta::name(obj);
    if name != format!("{plural}.{group}") {
        causes.push(StatusCause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        causes.push(StatusCause::required("spec.group"));
    } else if v::dns1123_subdomain(group).is_err() {
        let e = v::dns1123_subdomain(group).unwrap_err();
        causes.push(StatusCause::invalid("spec.group", group, &e));
    } else if !group.contains('.') {
        causes.push(StatusCause::invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    let scope = str_at(obj, "/spec/scope");
    if scope.is_empty() {
        causes.push(StatusCause::required("spec.scope"));
    } else if !matches!(scope, "Cluster" | "Namespaced") {
        causes.push(StatusCause::not_supported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }
    validate_names(obj, causes);
    if obj.pointer("/spec/preserveUnknownFields") == Some(&json!(true)) {
        causes.push(StatusCause::invalid_raw(
            "spec.preserveUnknownFields",
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    validate_versions(obj, causes);
    validate_conversion(obj, causes);
}

fn validate_names(obj: &Value, causes: &mut Vec<StatusCause>) {
    let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let get = |f: &str| {
        names
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    for f in ["plural", "singular"] {
        let n = get(f);
        if n.is_empty() {
            causes.push(StatusCause::required(&format!("spec.names.{f}")));
        } else if !dns1035_label(&n) {
            causes.push(StatusCause::invalid(
                &format!("spec.names.{f}"),
                &n,
                DNS1035_MSG,
            ));
        }
    }
    for f in ["kind", "listKind"] {
        let n = get(f);
        if n.is_empty() {
            causes.push(StatusCause::required(&format!("spec.names.{f}")));
        } else if !dns1035_label(&n.to_lowercase()) {
            causes.push(StatusCause::invalid(
                &format!("spec.names.{f}"),
                &n,
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    if !get("kind").is_empty() && get("kind") == get("listKind") {
        causes.push(StatusCause::invalid(
            "spec.names.listKind",
            &get("listKind"),
            "kind and listKind may not be the same",
        ));
    }
    for f in ["shortNames", "categories"] {
        for (i, s) in names
            .get(f)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let s = s.as_str().unwrap_or("");
            if !dns1035_label(s) {
                causes.push(StatusCause::invalid(
                    &format!("spec.names.{f}[{i}]"),
                    s,
                    DNS1035_MSG,
                ));
            }
        }
    }
}

fn validate_versions(obj: &Value, causes: &mut Vec<StatusCause>) {
    let versions = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must have exactly one version marked as storage version"
                .into(),
            field: "spec.versions".into(),
        });
        return;
    }
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if storage != 1 {
        causes.push(StatusCause::invalid_raw(
            "spec.versions",
            &format!(
                "[]apiextensions.CustomResourceDefinitionVersion{{... {} versions}}",
                versions.len()
            ),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.iter().any(|v| v["served"] == true) {
        causes.push(StatusCause::invalid_raw(
            "spec.versions",
            "[]",
            "must have at least one served version",
        ));
    }
    let mut seen = Vec::new();
    for (i, ver) in versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        let name = ver.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            causes.push(StatusCause::required(&format!("{at}.name")));
        } else if !dns1035_label(name) {
            causes.push(StatusCause::invalid(
                &format!("{at}.name"),
                name,
                DNS1035_MSG,
            ));
        } else if seen.contains(&name) {
            causes.push(StatusCause::duplicate(&format!("{at}.name"), name));
        }
        seen.push(name);
        match ver.pointer("/schema/openAPIV3Schema") {
            None => causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: schemas are required".into(),
                field: format!("{at}.schema.openAPIV3Schema"),
            }),
            Some(s) => validate_schema(s, &format!("{at}.schema.openAPIV3Schema"), causes),
        }
        for (j, c) in ver
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cat = format!("{at}.additionalPrinterColumns[{j}]");
            if str_at(c, "/name").is_empty() {
                causes.push(StatusCause::required(&format!("{cat}.name")));
            }
            let ty = str_at(c, "/type");
            if !matches!(ty, "integer" | "number" | "string" | "boolean" | "date") {
                causes.push(StatusCause::not_supported(
                    &format!("{cat}.type"),
                    ty,
                    &["integer", "number", "string", "boolean", "date"],
                ));
            }
            let path = str_at(c, "/jsonPath");
            if path.is_empty() {
                causes.push(StatusCause::required(&format!("{cat}.jsonPath")));
            } else if let Err(e) = jsonpath::parse(path) {
                causes.push(StatusCause::invalid(
                    &format!("{cat}.jsonPath"),
                    path,
                    &format!("must be a simple json path: {e}"),
                ));
            }
        }
        for (j, f) in ver
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = str_at(f, "/jsonPath");
            if !path.starts_with('.') || path.contains('[') || path.starts_with(".metadata") {
                causes.push(StatusCause::invalid(
                    &format!("{at}.selectableFields[{j}].jsonPath"),
                    path,
                    "must be a simple json path to a field of the object, outside metadata",
                ));
            }
        }
        if let Some(scale) = ver.pointer("/subresources/scale") {
            for (f, under) in [
                ("specReplicasPath", ".spec."),
                ("statusReplicasPath", ".status."),
                ("labelSelectorPath", ".status."),
            ] {
                let p = str_at(scale, &format!("/{f}"));
                if p.is_empty() {
                    if f != "labelSelectorPath" {
                        causes.push(StatusCause::required(&format!(
                            "{at}.subresources.scale.{f}"
                        )));
                    }
                } else if !(p.starts_with(under)
                    || (f == "labelSelectorPath" && p.starts_with(".spec.")))
                    || p.contains('[')
                {
                    causes.push(StatusCause::invalid(
                        &format!("{at}.subresources.scale.{f}"),
                        p,
                        &format!(
                            "should be a json path under {}",
                            under.trim_end_matches('.')
                        ),
                    ));
                }
            }
        }
    }
}

/// The structural rules upstream enforces that matter for serving: an object root, types
/// everywhere a value is specified, compilable patterns, `metadata` limited to names.
fn validate_schema(s: &Value, at: &str, causes: &mut Vec<StatusCause>) {
    match s.get("type").and_then(Value::as_str) {
        None | Some("") => causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must not be empty at the root".into(),
            field: format!("{at}.type"),
        }),
        Some("object") => {}
        Some(other) => causes.push(StatusCause::invalid(
            &format!("{at}.type"),
            other,
            "must be object at the root",
        )),
    }
    if let Some(m) = s
        .pointer("/properties/metadata/properties")
        .and_then(Value::as_object)
    {
        if m.keys().any(|k| k != "name" && k != "generateName") {
            causes.push(StatusCause::forbidden(
                &format!("{at}.properties[metadata]"),
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    typed_everywhere(s, at, causes, 0);
    let (_, errors) = super::custom::rules::Rules::compile(s);
    for (field, why) in errors {
        causes.push(StatusCause::invalid_raw(
            &format!("{at}.{field}"),
            "apiextensions.ValidationRule{...}",
            &why,
        ));
    }
    if let Err(e) = schema::Patterns::compile(s) {
        causes.push(StatusCause::invalid_raw(
            at,
            "pattern",
            &format!("must be a valid regular expression: {e}"),
        ));
    }
}

fn typed_everywhere(s: &Value, at: &str, causes: &mut Vec<StatusCause>, depth: usize) {
    if depth > 64 || causes.len() > 50 {
        return;
    }
    if s.get("uniqueItems") == Some(&json!(true)) {
        causes.push(StatusCause::forbidden(
            &format!("{at}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
        && s.get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .is_none_or(|k| k.is_empty())
    {
        causes.push(StatusCause::required(&format!(
            "{at}.x-kubernetes-list-map-keys"
        )));
    }
    let untyped_ok = |n: &Value| {
        n.get("x-kubernetes-int-or-string") == Some(&json!(true))
            || n.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
            || n.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
    };
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            let pat = format!("{at}.properties[{k}]");
            if !untyped_ok(p) {
                causes.push(StatusCause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: must not be empty for specified object fields".into(),
                    field: format!("{pat}.type"),
                });
            }
            typed_everywhere(p, &pat, causes, depth + 1);
        }
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        if !untyped_ok(items) {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value: must not be empty for specified array items".into(),
                field: format!("{at}.items.type"),
            });
        }
        typed_everywhere(items, &format!("{at}.items"), causes, depth + 1);
    } else if s.get("type").and_then(Value::as_str) == Some("array") && s.get("items").is_none() {
        causes.push(StatusCause::required(&format!("{at}.items")));
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        if s.get("properties").is_some() {
            causes.push(StatusCause::forbidden(
                &format!("{at}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        typed_everywhere(a, &format!("{at}.additionalProperties"), causes, depth + 1);
    }
}

fn validate_conversion(obj: &Value, causes: &mut Vec<StatusCause>) {
    let strategy = str_at(obj, "/spec/conversion/strategy");
    match strategy {
        "" | "None" => {
            if obj.pointer("/spec/conversion/webhook").is_some() {
                causes.push(StatusCause::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            let Some(w) = obj.pointer("/spec/conversion/webhook") else {
                causes.push(StatusCause::required("spec.conversion.webhook"));
                return;
            };
            let cc = w.get("clientConfig");
            if cc.is_none_or(|c| c.get("url").is_none() && c.get("service").is_none()) {
                causes.push(StatusCause::required(
                    "spec.conversion.webhook.clientConfig",
                ));
            }
            let reviews: Vec<&str> = w
                .get("conversionReviewVersions")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !reviews.contains(&"v1") && !reviews.contains(&"v1beta1") {
                causes.push(StatusCause::invalid_raw(
                    "spec.conversion.webhook.conversionReviewVersions",
                    &format!("{reviews:?}"),
                    "must include at least one of v1, v1beta1",
                ));
            }
        }
        other => causes.push(StatusCause::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
}

/// The finalizer a CRD's first deletion adds, and the condition it shows meanwhile.
pub fn begin_deletion(crd: &mut Value) {
    let mut finalizers = rkube_api::meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.to_string());
        rkube_api::meta::set_finalizers(crd, &finalizers);
    }
    let cond = json!({"type": "Terminating", "status": "True", "lastTransitionTime": rkube_api::meta::now_rfc3339(),
        "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon"});
    if !crd.get("status").is_some_and(Value::is_object) {
        crd["status"] = json!({});
    }
    let conds = &mut crd["status"]["conditions"];
    if !conds.is_array() {
        *conds = json!([]);
    }
    if let Some(list) = conds.as_array_mut() {
        list.retain(|c| c["type"] != "Terminating");
        list.push(cond);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
    }

    fn causes(obj: &Value) -> Vec<String> {
        let s = CustomResourceDefinition;
        let mut o = s.round_trip(obj.clone()).unwrap();
        s.defaults(&mut o);
        let mut c = Vec::new();
        s.validate(&o, &mut c);
        c.into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_valid_crd_is_defaulted_and_records_its_storage_version() {
        assert!(causes(&crd()).is_empty(), "{:?}", causes(&crd()));
        let s = CustomResourceDefinition;
        let mut o = s.round_trip(crd()).unwrap();
        s.defaults(&mut o);
        s.prepare_for_create(&mut o);
        assert_eq!(o["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(o["spec"]["names"]["singular"], "widget");
        assert_eq!(o["status"]["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn refuses_what_upstream_refuses() {
        let mut bad = crd();
        bad["metadata"]["name"] = json!("gadgets.example.com");
        bad["spec"]["scope"] = json!("Global");
        bad["spec"]["versions"][0]["storage"] = json!(false);
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["count"] =
            json!({"minimum": 1});
        let c = causes(&bad);
        assert!(c.contains(&"metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group".to_string()), "{c:?}");
        assert!(c
            .iter()
            .any(|m| m.starts_with("spec.scope: Unsupported value: \"Global\"")));
        assert!(c
            .iter()
            .any(|m| m.contains("must have exactly one version marked as storage version")));
        assert!(c.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[count].type: Required value: must not be empty for specified object fields".to_string()), "{c:?}");
        let mut no_schema = crd();
        no_schema["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("schema");
        assert_eq!(
            causes(&no_schema),
            ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
        );
        let mut update = crd();
        update["spec"]["scope"] = json!("Cluster");
        let mut c = Vec::new();
        CustomResourceDefinition.validate_update(&update, &crd(), &mut c);
        assert_eq!(
            c[0].message,
            "Invalid value: \"Cluster\": field is immutable"
        );
    }
}
