//! OpenAPI v3 documents generated from the resource table: `/openapi/v3` (the index) and one
//! document per group-version with every resource's paths, operations, their
//! `x-kubernetes-group-version-kind` and the `fieldValidation` parameter. That is what kubectl
//! reads to decide that the server validates fields itself (`fieldValidation=Strict`). Schemas
//! are open objects for now (`kubectl explain` needs the full ones).

use rkube_api::{resources, ResourceDef, RESOURCES};
use serde_json::{json, Map, Value};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group-version's document lives.
pub fn index() -> Value {
    let mut paths = Map::new();
    for (g, v) in resources::group_versions() {
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

fn schema_name(def: &ResourceDef) -> String {
    let group = match def.group {
        "" => "core",
        g => g.split('.').next().unwrap_or(g),
    };
    format!("io.k8s.api.{group}.{}.{}", def.version, def.kind)
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`.
pub fn group_version(group: &str, version: &str) -> Option<Value> {
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
    for def in defs {
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
        schemas.insert(
            schema_name(def),
            json!({
                "type": "object",
                "description": format!("{} (rkube serves open schemas; fields are validated by the server).", def.kind),
                "x-kubernetes-group-version-kind": [{"group": def.group, "version": def.version, "kind": def.kind}],
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::KUBE_VERSION.2},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
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
        assert!(index()["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .ends_with("/openapi/v3/api/v1"));
        assert!(group_version("nope", "v1").is_none());
    }
}
