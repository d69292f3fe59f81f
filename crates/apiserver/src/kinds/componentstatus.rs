//! ComponentStatuses (read-only, computed by `http::computed`): how one is written and how
//! kubectl prints it (Name, Status, Message, Error from the `Healthy` condition).

use rkube_api::k8s::api::core::v1 as core;
use rkube_api::meta;
use serde_json::{json, Value};

use super::print::Column;
use super::Strategy;

pub struct ComponentStatus;

/// A component's status: healthy with a message, or unhealthy with an error.
pub fn status_of(name: &str, healthy: Result<String, String>) -> Value {
    let condition = match healthy {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": name}, "conditions": [condition]})
}

impl Strategy for ComponentStatus {
    crate::typed_kind!(core::ComponentStatus);

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::text("Status"),
            Column::text("Message"),
            Column::text("Error"),
        ]
    }

    fn cells(&self, obj: &Value, _now: i64) -> Vec<Value> {
        let healthy = obj
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Healthy"))
            });
        let text = |k: &str| {
            healthy
                .and_then(|c| c.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let status = match healthy {
            None => "Unknown",
            Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => "Healthy",
            Some(_) => "Unhealthy",
        };
        vec![
            json!(meta::name(obj)),
            json!(status),
            json!(text("message")),
            json!(text("error")),
        ]
    }
}
