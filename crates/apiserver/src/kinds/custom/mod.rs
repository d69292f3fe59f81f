//! Custom resources (upstream's `apiextensions-apiserver/pkg/registry/customresource`): the
//! strategy of one served version of a CustomResourceDefinition, built from it — the
//! structural schema prunes, defaults (on write and on read) and validates; the `status`
//! and `scale` subresources split what writers may change; `metadata.generation` moves on
//! anything but metadata and (with the status subresource) status; printer columns and
//! selectable fields come from the CRD.

pub mod convert;
pub mod jsonpath;
pub mod rules;
pub mod schema;

use rkube_api::{intern, meta, ResourceDef, StatusCause};
use schemars::gen::SchemaGenerator;
use serde_json::{json, Value};

use super::{Column, ScalePaths, Strategy};

/// One printer column: its table column and where its value is.
struct PrinterColumn {
    column: Column,
    path: Vec<jsonpath::Step>,
}

/// The strategy of one served version of a custom resource.
pub struct CustomKind {
    /// `group/version` served.
    api_version: String,
    /// `group/version` stored.
    storage_api_version: String,
    schema: Value,
    patterns: schema::Patterns,
    rules: rules::Rules,
    /// How server-side apply merges the lists.
    lists: rkube_api::strategic::Lists,
    status: bool,
    scale: Option<ScalePaths>,
    columns: Vec<PrinterColumn>,
    selectable: &'static [&'static str],
    /// The definition is being deleted: no new objects.
    pub terminating: bool,
    conversion: std::sync::Arc<convert::Conversion>,
    /// `deprecated` with its warning.
    deprecation: Option<String>,
}

/// The version entry of `crd` named `version`.
pub fn version_of<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
}

/// The name of the storage version.
pub fn storage_version(crd: &Value) -> Option<&str> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v["storage"] == true)?
        .get("name")?
        .as_str()
}

/// The resource table row of one served version (names interned: the tables hold
/// `&'static` rows).
pub fn resource_def(crd: &Value, version: &str) -> Option<&'static ResourceDef> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let group = s(spec.get("group"));
    let plural = s(names.get("plural"));
    let kind = s(names.get("kind"));
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return None;
    }
    let list_kind = match s(names.get("listKind")) {
        l if l.is_empty() => format!("{kind}List"),
        l => l,
    };
    let singular = match s(names.get("singular")) {
        l if l.is_empty() => kind.to_lowercase(),
        l => l,
    };
    let strs = rkube_api::meta::string_list;
    let short = strs(names.get("shortNames"));
    let categories = strs(names.get("categories"));
    let v = version_of(crd, version)?;
    let mut subs = Vec::new();
    if v.pointer("/subresources/status").is_some() {
        subs.push("status");
    }
    if v.pointer("/subresources/scale").is_some() {
        subs.push("scale");
    }
    let refs = |v: &[String]| -> &'static [&'static str] {
        intern::strs(&v.iter().map(String::as_str).collect::<Vec<_>>())
    };
    Some(intern::def(ResourceDef {
        group: intern::str(&group),
        version: intern::str(version),
        kind: intern::str(&kind),
        list_kind: intern::str(&list_kind),
        plural: intern::str(&plural),
        singular: intern::str(&singular),
        namespaced: spec.get("scope").and_then(Value::as_str) == Some("Namespaced"),
        short_names: refs(&short),
        subresources: intern::strs(&subs),
        categories: refs(&categories),
        storage_prefix: intern::str(&format!("{group}/{plural}")),
        watch_cached: true,
    }))
}

/// A printer column's `.spec.x` as a selectable field's `spec.x`.
fn field_name(json_path: &str) -> String {
    json_path.trim_start_matches('.').to_string()
}

impl CustomKind {
    /// The strategy of `version` of `crd`; an error when the CRD cannot be served (its
    /// validation keeps that from being stored).
    pub fn new(
        crd: &Value,
        version: &str,
        caller: Option<std::sync::Arc<crate::callout::Caller>>,
    ) -> Result<CustomKind, String> {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let v = version_of(crd, version).ok_or("no such version")?;
        let storage = storage_version(crd).ok_or("no storage version")?;
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        let patterns = schema::Patterns::compile(&schema)?;
        let lists = schema::lists(&schema);
        let (rules, errors) = rules::Rules::compile(&schema);
        if let Some((at, why)) = errors.first() {
            return Err(format!("{at}: {why}"));
        }
        let scale = v.pointer("/subresources/scale").map(|s| {
            let ptr = |f: &str| -> Option<String> {
                s.get(f)
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .map(|p| p.replace('.', "/"))
            };
            ScalePaths {
                spec: ptr("specReplicasPath").unwrap_or_else(|| "/spec/replicas".into()),
                status: ptr("statusReplicasPath").unwrap_or_else(|| "/status/replicas".into()),
                selector: ptr("labelSelectorPath"),
            }
        });
        let mut columns = Vec::new();
        for c in v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
            let Ok(steps) = jsonpath::parse(path) else {
                continue;
            };
            let ty = match c.get("type").and_then(Value::as_str).unwrap_or("string") {
                "date" => "date",
                "integer" => "integer",
                "number" => "number",
                "boolean" => "boolean",
                _ => "string",
            };
            columns.push(PrinterColumn {
                column: Column(
                    intern::str(c.get("name").and_then(Value::as_str).unwrap_or("")),
                    ty,
                    c.get("priority")
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                        .min(255) as u8,
                    intern::str(c.get("format").and_then(Value::as_str).unwrap_or("")),
                ),
                path: steps,
            });
        }
        let selectable: Vec<String> = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
            .map(field_name)
            .collect();
        let gv = |ver: &str| format!("{group}/{ver}");
        Ok(CustomKind {
            api_version: gv(version),
            storage_api_version: gv(storage),
            schema,
            patterns,
            rules,
            lists,
            status: v.pointer("/subresources/status").is_some(),
            scale,
            columns,
            selectable: intern::strs(&selectable.iter().map(String::as_str).collect::<Vec<_>>()),
            terminating: false,
            conversion: std::sync::Arc::new(convert::Conversion::of(crd, caller)),
            deprecation: (v.get("deprecated") == Some(&Value::Bool(true))).then(|| {
                v.get("deprecationWarning")
                    .and_then(Value::as_str)
                    .map(String::from)
                    .unwrap_or_else(|| {
                        let kind = crd
                            .pointer("/spec/names/kind")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        format!("{group}/{version} {kind} is deprecated")
                    })
            }),
        })
    }

    /// The object without what does not move `metadata.generation`.
    fn generation_part(&self, obj: &Value) -> Value {
        let mut v = obj.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("apiVersion");
            m.remove("kind");
            if self.status {
                m.remove("status");
            }
        }
        v
    }
}

impl Strategy for CustomKind {
    /// Unknown fields are pruned; wrong types are the schema validation's to report (422,
    /// as upstream, not the 400 of a typed decode).
    fn round_trip(&self, mut obj: Value) -> Result<Value, String> {
        if !obj.is_object() {
            return Err("the object is not a JSON object".into());
        }
        // Metadata is ObjectMeta whatever the schema says: decoded and re-encoded, so
        // wrong types are refused and unknown fields dropped (typed clients read it).
        if let Some(m) = obj.get("metadata").cloned() {
            obj["metadata"] =
                super::typed::<rkube_api::k8s::apimachinery::pkg::apis::meta::v1::ObjectMeta>(m)
                    .map_err(|e| format!("metadata: {e}"))?;
        }
        schema::prune(&self.schema, &mut obj, true);
        Ok(obj)
    }

    fn schema(&self, _gen: &mut SchemaGenerator) {}

    fn served_as_stored(&self) -> bool {
        false
    }

    /// Stored objects may be in any version (the storage version changes): converted to
    /// the one served, then defaulted.
    fn storage_to_served(&self, obj: &mut Value) -> Result<(), String> {
        self.conversion.convert(obj, &self.api_version)?;
        schema::default(&self.schema, obj);
        Ok(())
    }

    fn served_to_storage(&self, obj: &Value) -> Result<Option<Value>, String> {
        if self.api_version == self.storage_api_version {
            return Ok(None);
        }
        let mut stored = obj.clone();
        self.conversion
            .convert(&mut stored, &self.storage_api_version)?;
        Ok(Some(stored))
    }

    fn defaults(&self, obj: &mut Value) {
        schema::default(&self.schema, obj);
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if self.status {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if self.status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        schema::validate(&self.schema, &self.patterns, obj, causes);
    }

    /// CEL rules run once the object is structurally valid: on creates without `oldSelf`,
    /// on updates with it (`validate_update`).
    fn validate_create(&self, obj: &Value, causes: &mut Vec<StatusCause>) {
        if causes.is_empty() {
            self.rules.validate(&self.schema, obj, None, causes);
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, causes: &mut Vec<StatusCause>) {
        if causes.is_empty() {
            self.rules.validate(&self.schema, new, Some(old), causes);
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn spec_changed(&self, new: &Value, old: &Value) -> bool {
        self.generation_part(new) != self.generation_part(old)
    }

    fn lists(&self) -> rkube_api::strategic::Lists {
        self.lists
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        self.selectable
    }

    fn columns(&self) -> Vec<Column> {
        let mut cols = vec![Column::NAME];
        if self.columns.is_empty() {
            cols.push(Column::AGE);
        }
        cols.extend(self.columns.iter().map(|c| c.column));
        cols
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        let mut cells = vec![json!(meta::name(obj))];
        if self.columns.is_empty() {
            cells.push(json!(super::print::age(obj, now)));
        }
        for c in &self.columns {
            let found = jsonpath::eval(&c.path, obj);
            let cell = match (c.column.1, found.as_slice()) {
                (_, []) => Value::Null,
                ("date", [Value::String(s)]) => match super::print::parse_time(s) {
                    Some(t) => json!(super::print::human_duration(now.saturating_sub(t))),
                    None => json!(s),
                },
                (_, [one]) => match one {
                    Value::Object(_) | Value::Array(_) => json!(one.to_string()),
                    other => (*other).clone(),
                },
                (_, many) => json!(many
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(",")),
            };
            cells.push(cell);
        }
        cells
    }

    fn scale_paths(&self) -> Option<ScalePaths> {
        self.scale.clone()
    }

    fn strategic_merge(&self) -> bool {
        false
    }

    fn deprecation(&self) -> Option<String> {
        self.deprecation.clone()
    }

    fn openapi_schema(&self) -> Option<Value> {
        Some(self.schema.clone())
    }

    fn create_refused(&self) -> Option<String> {
        self.terminating
            .then(|| "create not allowed while custom resource definition is terminating".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}, "color": {"type": "string"}}},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}}}}}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                                              {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]},
                {"name": "v1beta1", "served": true, "storage": false}]}})
    }

    #[test]
    fn the_resource_row_and_strategy_come_from_the_crd() {
        let crd = crd();
        let def = resource_def(&crd, "v1").unwrap();
        assert_eq!(def.api_version(), "example.com/v1");
        assert_eq!(
            def.key("/registry", "ns", "a"),
            "/registry/example.com/widgets/ns/a"
        );
        assert_eq!(def.list_kind, "WidgetList");
        assert_eq!(def.singular, "widget");
        assert_eq!(def.subresources, ["status", "scale"]);
        assert!(std::ptr::eq(def, resource_def(&crd, "v1").unwrap()));
        let k = CustomKind::new(&crd, "v1", None).unwrap();
        let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"color": "red", "bogus": 1}, "status": {"replicas": 2}});
        k.defaults(&mut w);
        let mut w = k.round_trip(w).unwrap();
        assert!(w["spec"].get("bogus").is_none());
        assert_eq!(w["spec"]["replicas"], 1);
        k.prepare_for_create(&mut w);
        assert!(
            w.get("status").is_none(),
            "status is the status subresource's"
        );
        let mut changed = w.clone();
        changed["status"] = json!({"replicas": 5});
        assert!(!k.spec_changed(&changed, &w));
        changed["spec"]["color"] = json!("blue");
        assert!(k.spec_changed(&changed, &w));
        let now = meta::parse_rfc3339("2026-01-01T00:05:00Z").unwrap();
        assert_eq!(k.cells(&w, now), [json!("a"), json!(1), json!("5m")]);
        assert_eq!(k.selectable_fields(), ["spec.color"]);
        assert_eq!(
            k.scale_paths().unwrap().selector.as_deref(),
            Some("/status/selector")
        );
        let beta = CustomKind::new(&crd, "v1beta1", None).unwrap();
        assert_eq!(
            beta.served_to_storage(&w).unwrap().unwrap()["apiVersion"],
            "example.com/v1"
        );
        let mut read = w.clone();
        beta.storage_to_served(&mut read).unwrap();
        assert_eq!(read["apiVersion"], "example.com/v1beta1");
    }
}
