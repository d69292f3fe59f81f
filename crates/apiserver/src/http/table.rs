//! Server-side printing: `meta.k8s.io/v1` Tables for
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` on lists, gets and watches, with
//! the columns and cells each kind's strategy prints.

use rkube_api::meta;
use serde_json::{json, Value};

use crate::kinds::{Column, Strategy};

/// Whether the Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn row(s: &dyn Strategy, obj: &Value, now: i64, include_object: bool) -> Value {
    let object = if include_object {
        obj.clone()
    } else {
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
    };
    json!({"cells": s.cells(obj, now), "object": object})
}

/// A Table of `objects`; `include_object` is `includeObject=Object` (default: metadata only).
pub fn table(
    s: &dyn Strategy,
    objects: &[Value],
    rv: &str,
    continue_token: Option<&str>,
    include_object: bool,
) -> Value {
    let now = meta::unix_now();
    let cols: Vec<Value> = s
        .columns()
        .into_iter()
        .map(|Column(name, ty, priority, format)| json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority}))
        .collect();
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": cols,
        "rows": objects.iter().map(|o| row(s, o, now, include_object)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_carry_metadata_unless_the_object_is_asked_for() {
        let pod = json!({"metadata": {"name": "nginx-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "nginx"}], "nodeName": "node-1"},
            "status": {"phase": "Running"}});
        let t = table(
            &crate::kinds::pod::Pod,
            std::slice::from_ref(&pod),
            "5",
            None,
            false,
        );
        assert_eq!(t["rows"][0]["cells"][0], "nginx-1");
        assert_eq!(t["columnDefinitions"][1]["name"], "Ready");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let t = table(
            &crate::kinds::pod::Pod,
            std::slice::from_ref(&pod),
            "5",
            Some("c"),
            true,
        );
        assert_eq!(t["rows"][0]["object"]["spec"]["nodeName"], "node-1");
        assert_eq!(t["metadata"]["continue"], "c");
    }
}
