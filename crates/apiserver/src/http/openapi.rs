//! OpenAPI v3 documents generated from the resource table: `/openapi/v3` (the index) and one
//! document per group-version with every resource's paths, operations, their
//! `x-kubernetes-group-version-kind` and the `fieldValidation` parameter (what kubectl reads to
//! decide that the server validates fields itself), and `components.schemas` with every served
//! type and all it references, descriptions included, generated from k8s-openapi's `JsonSchema`
//! impls — what `kubectl explain` walks. Documents are built once per group-version.

use std::collections::HashMap;
use std::sync::OnceLock;

use rkube_api::{resources, ResourceDef, RESOURCES};
use schemars::gen::SchemaSettings;
use serde_json::{json, Map, Value};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group-version's document lives, custom ones included.
pub fn index(custom: &[&'static ResourceDef]) -> Value {
    let mut paths = Map::new();
    let mut gvs = resources::group_versions();
    for d in custom {
        if !gvs.contains(&(d.group, d.version)) {
            gvs.push((d.group, d.version));
        }
    }
    for (g, v) in gvs {
        let p = gv_path(g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}")}),
        );
    }
    json!({"paths": paths})
}

fn param(name: &str, location: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": "string"}, "uniqueItems": true})
}

fn op(def: &ResourceDef, action: &str, extra: &[&str]) -> Value {
    let mut params: Vec<Value> = extra.iter().map(|p| param(p, "query")).collect();
    params.push(param("pretty", "query"));
    json!({
        "operationId": format!("{action}{}", def.kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", schema_name(def))}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    })
}

use crate::kinds::schema_name;

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`, built on first use.
pub fn group_version(group: &str, version: &str) -> Option<Value> {
    static DOCS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    DOCS.get_or_init(|| {
        resources::group_versions()
            .into_iter()
            .filter_map(|(g, v)| Some((gv_path(g, v), build_group_version(g, v)?)))
            .collect()
    })
    .get(&gv_path(group, version))
    .cloned()
}

/// Upstream's shape for a described reference: `{"description": …, "allOf": [{"$ref": …}]}`
/// (schemars writes `$ref` beside the description, which OpenAPI 3.0 readers ignore).
fn wrap_refs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.len() > 1 {
                if let Some(r) = map.remove("$ref") {
                    map.insert("allOf".into(), json!([{"$ref": r}]));
                }
            }
            map.values_mut().for_each(wrap_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(wrap_refs),
        _ => {}
    }
}

fn build_group_version(group: &str, version: &str) -> Option<Value> {
    let defs: Vec<&ResourceDef> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let base = format!("/{}", gv_path(group, version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let mut gen = SchemaSettings::openapi3().into_generator();
    let mut kinds = Vec::new();
    for def in defs {
        add_paths(&mut paths, &base, def);
        crate::kinds::of(def).schema(&mut gen);
        kinds.push(def);
    }
    for (name, schema) in gen.take_definitions() {
        let mut schema = serde_json::to_value(schema).ok()?;
        wrap_refs(&mut schema);
        schemas.insert(name, schema);
    }
    for def in kinds {
        if let Some(Value::Object(schema)) = schemas.get_mut(&schema_name(def)) {
            // k8s-openapi's `metadata` is not an Option, so schemars calls it required;
            // upstream's schemas do not.
            if let Some(Value::Array(required)) = schema.get_mut("required") {
                required.retain(|f| f != "metadata");
                if required.is_empty() {
                    schema.remove("required");
                }
            }
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
            );
        }
    }
    Some(document(paths, schemas))
}

fn document(paths: Map<String, Value>, schemas: Map<String, Value>) -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::KUBE_VERSION.2},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// A custom group-version's document: each resource's paths and its CRD's schema, with the
/// `apiVersion`, `kind` and `metadata` every object has (what `kubectl explain` walks).
pub fn custom_group_version(regs: &[std::sync::Arc<crate::registry::Registry>]) -> Option<Value> {
    let first = regs.first()?;
    let base = format!("/{}", gv_path(first.def.group, first.def.version));
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let mut gen = SchemaSettings::openapi3().into_generator();
    gen.subschema_for::<rkube_api::k8s::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
    gen.subschema_for::<rkube_api::k8s::apimachinery::pkg::apis::meta::v1::ListMeta>();
    for (name, schema) in gen.take_definitions() {
        let mut schema = serde_json::to_value(schema).ok()?;
        wrap_refs(&mut schema);
        schemas.insert(name, schema);
    }
    for reg in regs {
        let def = reg.def;
        add_paths(&mut paths, &base, def);
        let mut schema = reg
            .strategy
            .openapi_schema()
            .unwrap_or_else(|| json!({"type": "object"}));
        let gvk = json!([{"group": def.group, "version": def.version, "kind": def.kind}]);
        if let Some(m) = schema.as_object_mut() {
            let props = m.entry("properties").or_insert_with(|| json!({}));
            props["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
            props["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
            props["metadata"] = json!({"description": "Standard object's metadata.", "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]});
            m.insert("x-kubernetes-group-version-kind".into(), gvk);
        }
        let name = schema_name(def);
        schemas.insert(format!("{name}List"), json!({
            "type": "object", "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{name}")}},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}]},
            },
            "x-kubernetes-group-version-kind": [{"group": def.group, "version": def.version, "kind": def.list_kind}],
        }));
        schemas.insert(name, schema);
    }
    Some(document(paths, schemas))
}

/// A resource's collection and item paths with their operations.
fn add_paths(paths: &mut Map<String, Value>, base: &str, def: &ResourceDef) {
    {
        let (collection, item) = if def.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", def.plural),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", def.plural),
            )
        } else {
            (
                format!("{base}/{}", def.plural),
                format!("{base}/{}/{{name}}", def.plural),
            )
        };
        paths.insert(
            collection,
            json!({
                "get": op(def, "list", &["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"]),
                "post": op(def, "post", WRITE_PARAMS),
                "delete": op(def, "deletecollection", &["labelSelector", "fieldSelector"]),
            }),
        );
        paths.insert(
            item,
            json!({
                "get": op(def, "get", &[]),
                "put": op(def, "put", WRITE_PARAMS),
                "patch": op(def, "patch", &["dryRun", "fieldManager", "fieldValidation", "force"]),
                "delete": op(def, "delete", &["gracePeriodSeconds", "propagationPolicy", "dryRun"]),
            }),
        );
    }
}

/// `/openapi/v2`: an empty Swagger 2.0 document (as protobuf — a zero-length message — when
/// asked, as kubectl ≤ 1.29 does). Those clients then find no schema for a kind and skip
/// client-side validation instead of failing; `/openapi/v3` carries what rkube describes.
pub fn v2(accept: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    if accept.contains("protobuf") {
        return (
            axum::http::StatusCode::OK,
            [(
                "content-type",
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )],
            Vec::<u8>::new(),
        )
            .into_response();
    }
    let doc = serde_json::json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": crate::KUBE_VERSION.2}, "paths": {}, "definitions": {}});
    (
        axum::http::StatusCode::OK,
        [("content-type", "application/json")],
        doc.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_declare_field_validation() {
        let doc = group_version("apps", "v1").unwrap();
        let item =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            item["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        assert!(item["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
        assert!(index(&[])["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .ends_with("/openapi/v3/api/v1"));
        assert!(group_version("nope", "v1").is_none());
    }

    #[test]
    fn schemas_describe_every_served_kind_for_kubectl_explain() {
        let doc = group_version("apps", "v1").unwrap();
        let schemas = &doc["components"]["schemas"];
        let deploy = &schemas["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deploy["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
        assert!(deploy.get("required").is_none(), "metadata is not required");
        // `explain deployment.spec.strategy` walks spec -> strategy through described refs.
        let spec_ref = deploy["properties"]["spec"]["allOf"][0]["$ref"]
            .as_str()
            .unwrap();
        assert_eq!(
            spec_ref,
            "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"
        );
        let strategy = &schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"];
        assert!(strategy["description"]
            .as_str()
            .unwrap()
            .contains("replace existing pods"));
        let strategy_type = &schemas["io.k8s.api.apps.v1.DeploymentStrategy"]["properties"]["type"];
        assert_eq!(strategy_type["type"], "string");
        // Referenced types from other groups come along.
        assert!(schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"].is_object());
        assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
        let core = group_version("", "v1").unwrap();
        for kind in [
            "Pod",
            "Namespace",
            "Node",
            "Event",
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
        ] {
            let schema = &core["components"]["schemas"][format!("io.k8s.api.core.v1.{kind}")];
            assert_eq!(schema["x-kubernetes-group-version-kind"][0]["kind"], kind);
            assert!(schema["properties"]["metadata"].is_object(), "{kind}");
        }
    }
}
