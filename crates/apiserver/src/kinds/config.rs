//! ConfigMaps and Secrets: their columns, and a Secret's write-only `stringData` merged into
//! `data` (base64) with `type` defaulting to `Opaque`.

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::meta;
use serde_json::{json, Value};

use super::print::{self, entries, s, Column};
use super::{set_default, Strategy};

pub struct ConfigMap;
pub struct Secret;

impl Strategy for ConfigMap {
    crate::typed_kind!(core::ConfigMap);

    fn columns(&self) -> Vec<Column> {
        vec![Column::NAME, Column::integer("Data"), Column::AGE]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(entries(obj, &["data", "binaryData"])),
            json!(print::age(obj, now)),
        ]
    }
}

impl Strategy for Secret {
    crate::typed_kind!(core::Secret);

    fn defaults(&self, obj: &mut Value) {
        merge_string_data(obj);
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Type"),
            Column::integer("Data"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value, now: i64) -> Vec<Value> {
        vec![
            json!(meta::name(obj)),
            json!(s(obj, "/type")),
            json!(entries(obj, &["data"])),
            json!(print::age(obj, now)),
        ]
    }
}

/// A Secret's write-only `stringData` goes into `data` (base64), overriding keys there, and
/// is not stored; `type` defaults to Opaque.
fn merge_string_data(obj: &mut Value) {
    use base64::Engine as _;
    set_default(obj, "/type", json!("Opaque"));
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in strings {
        let text = v.as_str().unwrap_or("").to_string();
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}
