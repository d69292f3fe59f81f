//! What kinds print in kubectl's tables: column definitions and the cell helpers kinds share
//! (ages as kubectl shows them, `<none>` for empty values, selectors and name lists).

use rkube_api::meta;
use serde_json::Value;

/// A Table column: name, type, priority (0 shown by default, 1 with `-o wide`), format.
#[derive(Clone, Copy, Debug)]
pub struct Column(pub &'static str, pub &'static str, pub u8, pub &'static str);

impl Column {
    pub const NAME: Column = Column("Name", "string", 0, "name");
    pub const AGE: Column = Column("Age", "string", 0, "");

    pub const fn text(name: &'static str) -> Column {
        Column(name, "string", 0, "")
    }

    pub const fn wide(name: &'static str) -> Column {
        Column(name, "string", 1, "")
    }

    pub const fn integer(name: &'static str) -> Column {
        Column(name, "integer", 0, "")
    }
}

/// `HumanDuration` as kubectl prints ages.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let s = secs.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        return if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        return if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    if h < 24 * 8 {
        return if h % 24 == 0 {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        };
    }
    if h < 24 * 365 * 2 {
        return format!("{}d", h / 24);
    }
    if h < 24 * 365 * 8 {
        let dy = (h / 24) % 365;
        return if dy == 0 {
            format!("{}y", h / 24 / 365)
        } else {
            format!("{}y{dy}d", h / 24 / 365)
        };
    }
    format!("{}y", h / 24 / 365)
}

/// The object's age.
pub fn age(obj: &Value, now: i64) -> String {
    since(meta::meta_str(obj, "creationTimestamp"), now)
}

/// How long ago the timestamp at `ptr` was.
pub fn age_at(obj: &Value, ptr: &str, now: i64) -> String {
    since(&s(obj, ptr), now)
}

/// Seconds since the epoch of an RFC 3339 timestamp.
pub fn parse_time(ts: &str) -> Option<i64> {
    meta::parse_rfc3339(ts)
}

fn since(ts: &str, now: i64) -> String {
    match meta::parse_rfc3339(ts) {
        Some(t) => human_duration(now.saturating_sub(t)),
        None => "<unknown>".into(),
    }
}

/// The string at `ptr` ("" when absent).
pub fn s(obj: &Value, ptr: &str) -> String {
    obj.pointer(ptr)
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string()
}

/// The integer at `ptr` (0 when absent).
pub fn i(obj: &Value, ptr: &str) -> i64 {
    obj.pointer(ptr).and_then(|v| v.as_i64()).unwrap_or(0)
}

/// A number as kubectl prints it, `<none>` when absent.
pub fn number(obj: &Value, ptr: &str) -> String {
    obj.pointer(ptr)
        .map_or_else(|| "<none>".to_string(), |v| v.to_string())
}

pub fn or_none(v: String) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v
    }
}

/// `field` of every element of the list at `ptr`, comma-joined.
pub fn list_of(obj: &Value, ptr: &str, field: &str) -> String {
    obj.pointer(ptr)
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get(field).and_then(|n| n.as_str()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `k=v,…` of a label map.
pub fn label_map(m: Option<&Value>) -> String {
    m.and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// A workload's `spec.selector.matchLabels` as `k=v,…`.
pub fn selector_string(obj: &Value) -> String {
    label_map(obj.pointer("/spec/selector/matchLabels"))
}

/// The number of entries of the maps at `fields`.
pub fn entries(obj: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| obj.get(*f).and_then(|d| d.as_object()))
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_like_kubectl() {
        assert_eq!(human_duration(8), "8s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 120), "3h2m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
        assert_eq!(human_duration(-5), "<invalid>");
    }
}
