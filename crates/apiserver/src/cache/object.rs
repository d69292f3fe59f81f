//! What the watch cache holds: each object serialized once (with its resourceVersion) plus
//! its labels and selectable fields, and each event with its wire lines built at most once.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use rkube_api::{meta, FieldSelector, LabelSelector, ResourceDef};

use crate::kinds::Strategy;
use serde_json::Value;

/// How a decode error caused by a failed conversion between versions starts.
pub const CONVERSION_FAILED: &str = "converting";

/// One object as the cache keeps it. The JSON is the wire form (RV included), so GET, LIST
/// and WATCH copy bytes instead of serializing. Labels and selectable fields are kept compact
/// (one allocation each) so an object costs little beyond its JSON.
#[derive(Debug)]
pub struct CachedObject {
    pub key: String,
    pub rv: u64,
    pub json: Bytes,
    /// The kind's selectable fields beyond the common two (what `fields` holds, in order).
    selectable: &'static [&'static str],
    /// Sorted `(key, value)` label pairs.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The selectable fields' values, `\0`-separated: `COMMON_FIELDS`, then `selectable`.
    fields: Box<str>,
}

impl CachedObject {
    /// Decodes a stored value and stamps `rv` as its resourceVersion.
    pub fn decode(
        strategy: &dyn Strategy,
        key: String,
        value: &[u8],
        rv: u64,
    ) -> Result<Self, String> {
        let mut obj: Value =
            serde_json::from_slice(value).map_err(|e| format!("decoding {key}: {e}"))?;
        if !obj.is_object() {
            return Err(format!("decoding {key}: not a JSON object"));
        }
        meta::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        strategy
            .storage_to_served(&mut obj)
            .map_err(|e| format!("{CONVERSION_FAILED} {key}: {e}"))?;
        Ok(Self::from_value(strategy, key, &obj, rv))
    }

    pub fn from_value(strategy: &dyn Strategy, key: String, obj: &Value, rv: u64) -> Self {
        let labels: Vec<(Box<str>, Box<str>)> = meta::labels(obj)
            .into_iter()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect();
        let selectable = strategy.selectable_fields();
        let fields: Vec<String> = rkube_api::fields::COMMON_FIELDS
            .iter()
            .chain(selectable)
            .map(|f| strategy.field_value(obj, f))
            .collect();
        CachedObject {
            key,
            rv,
            // Exactly sized: serialization grows its buffer by doubling.
            json: Bytes::copy_from_slice(&serde_json::to_vec(obj).unwrap_or_default()),
            selectable,
            labels: labels.into_boxed_slice(),
            fields: fields.join("\0").into_boxed_str(),
        }
    }

    /// The same object re-stamped with another resourceVersion (a DELETED event carries the
    /// revision of the delete).
    pub fn with_rv(&self, rv: u64) -> Self {
        let mut obj: Value = serde_json::from_slice(&self.json).unwrap_or(Value::Null);
        meta::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        CachedObject {
            key: self.key.clone(),
            rv,
            json: Bytes::copy_from_slice(&serde_json::to_vec(&obj).unwrap_or_default()),
            selectable: self.selectable,
            labels: self.labels.clone(),
            fields: self.fields.clone(),
        }
    }

    /// A selectable field's value ("" when absent or not selectable).
    pub fn field(&self, name: &str) -> &str {
        let position = rkube_api::fields::COMMON_FIELDS
            .iter()
            .chain(self.selectable)
            .position(|f| *f == name);
        match position {
            Some(i) => self.fields.split('\0').nth(i).unwrap_or(""),
            None => "",
        }
    }

    pub fn name(&self) -> &str {
        self.field("metadata.name")
    }

    pub fn namespace(&self) -> &str {
        self.field("metadata.namespace")
    }

    /// A pod's `spec.nodeName` ("" for other kinds and unscheduled pods).
    pub fn node(&self) -> &str {
        self.field("spec.nodeName")
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }
}

/// Which objects a list or watch wants.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, o: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace {
            if o.namespace() != ns {
                return false;
            }
        }
        if let Some(n) = &self.name {
            if o.name() != n {
                return false;
            }
        }
        self.labels.matches_with(|k| o.label(k)) && self.fields.matches_with(|f| o.field(f))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change. For DELETED, `obj` is the last state stamped with the delete revision.
#[derive(Debug)]
pub struct CachedEvent {
    pub kind: EventType,
    pub rv: u64,
    pub obj: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
    pub at: std::time::Instant,
    lines: [OnceLock<Bytes>; 3],
    /// The previous state stamped with this event's RV: what a filtered watcher gets as
    /// DELETED when the object stops matching.
    prev_at_rv: OnceLock<Bytes>,
}

pub fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut s = Vec::with_capacity(object.len() + 32);
    s.extend_from_slice(b"{\"type\":\"");
    s.extend_from_slice(kind.as_bytes());
    s.extend_from_slice(b"\",\"object\":");
    s.extend_from_slice(object);
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

impl CachedEvent {
    pub fn new(
        kind: EventType,
        rv: u64,
        obj: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> Self {
        CachedEvent {
            kind,
            rv,
            obj,
            prev,
            at: std::time::Instant::now(),
            lines: Default::default(),
            prev_at_rv: OnceLock::new(),
        }
    }

    /// The line a watcher with `filter` receives for this event, if any, with selector
    /// transitions turned into ADDED / DELETED.
    pub fn line_for(&self, filter: &Filter) -> Option<Bytes> {
        match self.kind {
            EventType::Added => filter
                .matches(&self.obj)
                .then(|| self.line(EventType::Added)),
            EventType::Deleted => filter
                .matches(&self.obj)
                .then(|| self.line(EventType::Deleted)),
            EventType::Modified => {
                let new_m = filter.matches(&self.obj);
                let old_m = self.prev.as_ref().is_some_and(|p| filter.matches(p));
                match (old_m, new_m) {
                    (true, true) => Some(self.line(EventType::Modified)),
                    (false, true) => Some(self.line(EventType::Added)),
                    (true, false) => Some(
                        self.prev_at_rv
                            .get_or_init(|| {
                                let p = self.prev.as_ref().expect("old matched");
                                event_line("DELETED", &p.with_rv(self.rv).json)
                            })
                            .clone(),
                    ),
                    (false, false) => None,
                }
            }
        }
    }

    fn line(&self, as_kind: EventType) -> Bytes {
        let i = as_kind as usize;
        self.lines[i]
            .get_or_init(|| event_line(as_kind.as_str(), &self.obj.json))
            .clone()
    }
}

/// `{"type":"BOOKMARK","object":{"kind":…,"apiVersion":…,"metadata":{"resourceVersion":…}}}`,
/// optionally marked as the end of a streaming list's initial events.
pub fn bookmark_line(def: &ResourceDef, rv: u64, initial_events_end: bool) -> Bytes {
    let annotations = if initial_events_end {
        format!(
            ",\"annotations\":{{\"{}\":\"true\"}}",
            rkube_api::INITIAL_EVENTS_END_ANNOTATION
        )
    } else {
        String::new()
    };
    let obj = format!(
        "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{annotations}}}}}",
        def.kind,
        def.api_version()
    );
    event_line("BOOKMARK", obj.as_bytes())
}

/// A single in-stream ERROR event carrying a Status.
pub fn error_line(status: &rkube_api::Status) -> Bytes {
    event_line("ERROR", &serde_json::to_vec(status).unwrap_or_default())
}
