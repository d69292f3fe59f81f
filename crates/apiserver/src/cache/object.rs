//! What the watch cache holds: each object serialized once (with its resourceVersion) plus
//! its labels and selectable fields, and each event, whose wire lines share the object's bytes.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

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
    /// The wire form (`json()`); a version something newer replaced, which only the history
    /// still holds, is kept compressed (`pack`).
    json: Mutex<Json>,
    /// How many older versions are packed in a run against this one, each against the next
    /// (`pack`; a run is bounded so reading its oldest decompresses a bounded number).
    behind: AtomicU8,
    /// The kind's selectable fields beyond the common two (what `fields` holds, in order).
    selectable: &'static [&'static str],
    /// Sorted `(key, value)` label pairs.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The selectable fields' values, `\0`-separated: `COMMON_FIELDS`, then `selectable`.
    fields: Box<str>,
}

/// An object's JSON as it is, or lz4-compressed (its length in front) on its own or against
/// the newer version that replaced it.
#[derive(Debug)]
enum Json {
    Plain(Bytes),
    Packed(Box<[u8]>),
    /// Compressed with `base`'s JSON as the dictionary: a version differs from the next in a
    /// few fields, so it packs to a fraction of what it packs to on its own.
    /// `base` is always newer (a higher resourceVersion), so the chain cannot loop, and the
    /// history drops it after this version, so holding it costs nothing.
    Delta {
        base: Arc<CachedObject>,
        packed: Box<[u8]>,
    },
}

/// Objects smaller than this are not worth compressing.
const PACK_MIN: usize = 512;

/// The longest run of versions packed each against the next: reading the oldest decompresses
/// this many, so every `DELTA_RUN`-th version is packed on its own instead.
const DELTA_RUN: u8 = 8;

/// lz4 reads no further back than this, so a larger base gains nothing as a dictionary.
const DICT_MAX: usize = 64 * 1024;

impl CachedObject {
    /// The object's JSON, the wire form with its resourceVersion.
    pub fn json(&self) -> Bytes {
        let (base, packed) = match &*self.json.lock().unwrap_or_else(|e| e.into_inner()) {
            Json::Plain(b) => return b.clone(),
            Json::Packed(p) => (None, p.clone()),
            Json::Delta { base, packed } => (Some(base.clone()), packed.clone()),
        };
        let unpacked = match base {
            None => lz4_flex::decompress_size_prepended(&packed),
            // At most `DELTA_RUN` deep: a run that long ends at a version packed on its own.
            Some(base) => {
                lz4_flex::block::decompress_size_prepended_with_dict(&packed, &base.json())
            }
        };
        match unpacked {
            Ok(json) => Bytes::from(json),
            // Not reachable: the bytes are ours, compressed by `pack`.
            Err(e) => {
                tracing::error!(key = %self.key, error = %e, "cached object does not decompress");
                Bytes::new()
            }
        }
    }

    /// Keeps the JSON compressed from now on, against `next` (the version that replaced this
    /// one) where it can: for a version that is no longer current, which only a watch
    /// replaying the history reads again (the 75 s history held most of the apiserver's
    /// memory at 10k pods, and consecutive versions of a pod differ in a few fields).
    pub fn pack(&self, next: &Arc<CachedObject>) {
        let plain = match &*self.json.lock().unwrap_or_else(|e| e.into_inner()) {
            Json::Plain(b) if b.len() >= PACK_MIN => b.clone(),
            _ => return,
        };
        let run = self.behind.load(Ordering::Relaxed).saturating_add(1);
        let dict = (next.rv > self.rv && next.key == self.key && run < DELTA_RUN)
            .then(|| next.json())
            .filter(|d| d.len() <= DICT_MAX);
        let packed = match &dict {
            Some(dict) => lz4_flex::block::compress_prepend_size_with_dict(&plain, dict),
            None => lz4_flex::compress_prepend_size(&plain),
        };
        // Worth it only when it saves a quarter.
        if packed.len() * 4 > plain.len() * 3 {
            return;
        }
        let packed = packed.into_boxed_slice();
        let json = match dict {
            Some(_) => {
                // `next` is the event's fresh version, packed against by this one alone: the
                // cache's feed task packs each replaced version once, oldest first.
                next.behind.store(run, Ordering::Relaxed);
                Json::Delta {
                    base: next.clone(),
                    packed,
                }
            }
            None => Json::Packed(packed),
        };
        *self.json.lock().unwrap_or_else(|e| e.into_inner()) = json;
    }

    /// How `pack` kept the JSON: `.` plain, `P` packed on its own, `d` against its successor.
    #[cfg(test)]
    fn packing(&self) -> char {
        match *self.json.lock().unwrap_or_else(|e| e.into_inner()) {
            Json::Plain(_) => '.',
            Json::Packed(_) => 'P',
            Json::Delta { .. } => 'd',
        }
    }

    /// The compressed size (the plain size when not packed).
    #[cfg(test)]
    fn packed_len(&self) -> usize {
        match &*self.json.lock().unwrap_or_else(|e| e.into_inner()) {
            Json::Plain(b) => b.len(),
            Json::Packed(p) | Json::Delta { packed: p, .. } => p.len(),
        }
    }

    /// Decodes a stored value and stamps `rv` as its resourceVersion.
    pub fn decode(
        strategy: &dyn Strategy,
        key: String,
        value: &[u8],
        rv: u64,
    ) -> Result<Self, String> {
        if strategy.served_as_stored() {
            if let Some(o) = Self::decode_stored_as_served(strategy, &key, value, rv) {
                return Ok(o);
            }
        }
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

    /// `decode` for a kind served as it is stored, without a second serialization: the
    /// resourceVersion is written into the stored bytes (first in `metadata`), and only what
    /// labels and selectable fields are read from is parsed — everything but
    /// `metadata.managedFields`, often the larger half of an object. `None` when the bytes are
    /// not what this expects (escaped keys, a stored resourceVersion): `decode` parses them
    /// the general way.
    fn decode_stored_as_served(
        strategy: &dyn Strategy,
        key: &str,
        value: &[u8],
        rv: u64,
    ) -> Option<Self> {
        use serde_json::value::RawValue;
        // A watch event is one line: stored bytes with line breaks (whitespace a tool wrote)
        // are re-serialized.
        if memchr::memchr(b'\n', value).is_some() {
            return None;
        }
        let top: Vec<(&str, &RawValue)> = serde_json::from_slice::<Entries>(value).ok()?.0;
        let mut obj = serde_json::Map::new();
        let mut meta_at = None;
        for (k, raw) in top {
            if k != "metadata" {
                obj.insert(k.to_string(), serde_json::from_str(raw.get()).ok()?);
                continue;
            }
            let entries = serde_json::from_str::<Entries>(raw.get()).ok()?.0;
            let mut meta = serde_json::Map::new();
            for (mk, mraw) in entries {
                match mk {
                    "resourceVersion" => return None,
                    "managedFields" => {}
                    _ => {
                        meta.insert(mk.to_string(), serde_json::from_str(mraw.get()).ok()?);
                    }
                }
            }
            // Where the metadata object starts in `value` (`raw` borrows from it).
            let at = raw.get().as_ptr() as usize - value.as_ptr() as usize;
            let empty = raw.get()[1..].trim_start().starts_with('}');
            meta_at = Some((at, empty, meta));
        }
        let (at, empty, meta) = meta_at?;
        obj.insert("metadata".into(), Value::Object(meta));
        let obj = Value::Object(obj);
        let stamp = format!(
            "\"resourceVersion\":\"{rv}\"{}",
            if empty { "" } else { "," }
        );
        let mut json = Vec::with_capacity(value.len() + stamp.len());
        json.extend_from_slice(&value[..at + 1]);
        json.extend_from_slice(stamp.as_bytes());
        json.extend_from_slice(&value[at + 1..]);
        Some(Self::with_json(strategy, key.to_string(), &obj, rv, json))
    }

    pub fn from_value(strategy: &dyn Strategy, key: String, obj: &Value, rv: u64) -> Self {
        let json = serde_json::to_vec(obj).unwrap_or_default();
        Self::with_json(strategy, key, obj, rv, json)
    }

    /// The object `obj` whose wire form is `json`.
    fn with_json(
        strategy: &dyn Strategy,
        key: String,
        obj: &Value,
        rv: u64,
        json: Vec<u8>,
    ) -> Self {
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
            json: Mutex::new(Json::Plain(if json.capacity() == json.len() {
                Bytes::from(json)
            } else {
                Bytes::copy_from_slice(&json)
            })),
            behind: AtomicU8::new(0),
            selectable,
            labels: labels.into_boxed_slice(),
            fields: fields.join("\0").into_boxed_str(),
        }
    }

    /// The same object re-stamped with another resourceVersion (a DELETED event carries the
    /// revision of the delete).
    pub fn with_rv(&self, rv: u64) -> Self {
        let mut obj: Value = serde_json::from_slice(&self.json()).unwrap_or(Value::Null);
        meta::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        CachedObject {
            key: self.key.clone(),
            rv,
            json: Mutex::new(Json::Plain(Bytes::from(
                serde_json::to_vec(&obj).unwrap_or_default(),
            ))),
            behind: AtomicU8::new(0),
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
        serde_json::from_slice(&self.json()).unwrap_or(Value::Null)
    }
}

/// A JSON object's members in order, keys and values borrowed from the input (keys with
/// escapes do not borrow: the decode fails and the caller takes the general path).
struct Entries<'a>(Vec<(&'a str, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for Entries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = m.next_entry::<&'de str, &'de serde_json::value::RawValue>()? {
                    out.push(e);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
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
    /// The previous state stamped with this event's RV: what a filtered watcher gets as
    /// DELETED when the object stops matching.
    prev_at_rv: OnceLock<Bytes>,
}

/// One watch event on the wire: `{"type":"…","object":` + the object + `}\n`. The object is
/// the cache's own JSON (shared, not copied): history and the watchers' queues hold no second
/// copy of it, and the stream writes the three parts as they are.
#[derive(Clone, Debug)]
pub struct Line {
    head: &'static [u8],
    pub object: Bytes,
}

impl Line {
    const TAIL: &'static [u8] = b"}\n";

    pub fn event(kind: EventType, object: Bytes) -> Self {
        let head: &'static [u8] = match kind {
            EventType::Added => br#"{"type":"ADDED","object":"#,
            EventType::Modified => br#"{"type":"MODIFIED","object":"#,
            EventType::Deleted => br#"{"type":"DELETED","object":"#,
        };
        Line { head, object }
    }

    pub fn bookmark(object: Bytes) -> Self {
        Line {
            head: BOOKMARK_HEAD,
            object,
        }
    }

    pub fn is_bookmark(&self) -> bool {
        self.head == BOOKMARK_HEAD
    }

    /// ADDED, MODIFIED or DELETED (not a bookmark or an error).
    pub fn is_change(&self) -> bool {
        !self.is_bookmark() && self.head != ERROR_HEAD
    }

    /// The same event carrying another object (a table row).
    pub fn with_object(self, object: Bytes) -> Self {
        Line { object, ..self }
    }

    pub(crate) fn len(&self) -> usize {
        self.head.len() + self.object.len() + Self::TAIL.len()
    }

    /// The line in the three pieces it is written as.
    pub fn frames(self) -> [Bytes; 3] {
        [
            Bytes::from_static(self.head),
            self.object,
            Bytes::from_static(Self::TAIL),
        ]
    }

    /// The whole line in one buffer (a WebSocket message, a table row's event).
    pub fn to_bytes(&self) -> Bytes {
        let mut s = Vec::with_capacity(self.len());
        s.extend_from_slice(self.head);
        s.extend_from_slice(&self.object);
        s.extend_from_slice(Self::TAIL);
        Bytes::from(s)
    }
}

const BOOKMARK_HEAD: &[u8] = br#"{"type":"BOOKMARK","object":"#;
const ERROR_HEAD: &[u8] = br#"{"type":"ERROR","object":"#;

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
            prev_at_rv: OnceLock::new(),
        }
    }

    /// The line a watcher with `filter` receives for this event, if any, with selector
    /// transitions turned into ADDED / DELETED.
    pub fn line_for(&self, filter: &Filter) -> Option<Line> {
        let this = |kind| Line::event(kind, self.obj.json());
        match self.kind {
            EventType::Added | EventType::Deleted => {
                filter.matches(&self.obj).then(|| this(self.kind))
            }
            EventType::Modified => {
                let new_m = filter.matches(&self.obj);
                let old_m = self.prev.as_ref().is_some_and(|p| filter.matches(p));
                match (old_m, new_m) {
                    (true, true) => Some(this(EventType::Modified)),
                    (false, true) => Some(this(EventType::Added)),
                    (true, false) => Some(Line::event(
                        EventType::Deleted,
                        self.prev_at_rv
                            .get_or_init(|| {
                                let p = self.prev.as_ref().expect("old matched");
                                p.with_rv(self.rv).json()
                            })
                            .clone(),
                    )),
                    (false, false) => None,
                }
            }
        }
    }
}

/// `{"type":"BOOKMARK","object":{"kind":…,"apiVersion":…,"metadata":{"resourceVersion":…}}}`,
/// optionally marked as the end of a streaming list's initial events.
pub fn bookmark_line(def: &ResourceDef, rv: u64, initial_events_end: bool) -> Line {
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
    Line::bookmark(Bytes::from(obj))
}

/// A single in-stream ERROR event carrying a Status.
pub fn error_line(status: &rkube_api::Status) -> Line {
    Line {
        head: ERROR_HEAD,
        object: Bytes::from(serde_json::to_vec(status).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static dyn Strategy {
        crate::kinds::KINDS
            .iter()
            .find(|(g, k, _)| g.is_empty() && *k == "Pod")
            .map(|(_, _, s)| *s)
            .unwrap()
    }

    /// The general way: parse, stamp, serialize.
    fn slow(stored: &Value, rv: u64) -> CachedObject {
        let mut v = stored.clone();
        meta::set_meta(&mut v, "resourceVersion", json!(rv.to_string()));
        CachedObject::from_value(pods(), "k".into(), &v, rv)
    }

    /// A pod with enough repeated text to be worth packing, its `app` label and phase given.
    fn big_pod(app: &str, phase: &str) -> Value {
        let annotations: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("label-{i}"), json!("value")))
            .collect();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": app},
                "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": phase}})
    }

    #[test]
    fn a_packed_version_serves_the_same_bytes() {
        let old = Arc::new(slow(&big_pod("web", "Pending"), 7));
        let plain = old.json();
        let new = Arc::new(slow(&big_pod("db", "Pending"), 9));
        old.pack(&new);
        assert_eq!(old.packing(), 'd', "{} bytes pack", plain.len());
        assert_eq!(old.json(), plain);
        assert_eq!(old.value()["metadata"]["labels"]["app"], "web");
        assert_eq!(old.with_rv(9).value()["metadata"]["resourceVersion"], "9");
        // A watcher whose selector the object leaves gets the packed version, re-stamped.
        let ev = CachedEvent::new(EventType::Modified, 9, new, Some(old));
        let filter = Filter {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        let line = ev.line_for(&filter).expect("a DELETED line");
        let sent: Value = serde_json::from_slice(&line.object).unwrap();
        assert_eq!(sent["metadata"]["labels"]["app"], "web");
        assert_eq!(sent["metadata"]["resourceVersion"], "9");
        // Small objects stay as they are.
        let small = slow(&json!({"metadata": {"name": "s"}}), 1);
        small.pack(&Arc::new(slow(&json!({"metadata": {"name": "s"}}), 2)));
        assert_eq!(small.packing(), '.');
        // Against a version that is not newer, or another object's, it packs on its own.
        let other = Arc::new(slow(&big_pod("web", "Running"), 3));
        let older = slow(&big_pod("web", "Pending"), 5);
        older.pack(&other);
        assert_eq!(older.packing(), 'P');
        assert_eq!(older.value()["status"]["phase"], "Pending");
    }

    #[test]
    fn a_run_of_versions_packs_each_against_the_next_and_reads_back_alone() {
        let phases = ["Pending", "Running", "Succeeded", "Failed"];
        let versions: Vec<Arc<CachedObject>> = (0..20u64)
            .map(|i| {
                Arc::new(slow(
                    &big_pod(&format!("v{i}"), phases[i as usize % 4]),
                    10 + i,
                ))
            })
            .collect();
        let plain: Vec<Bytes> = versions.iter().map(|v| v.json()).collect();
        // As the cache does: each version is packed when the next replaces it.
        for pair in versions.windows(2) {
            pair[0].pack(&pair[1]);
        }
        let packing: String = versions.iter().map(|v| v.packing()).collect();
        assert_eq!(
            packing, "dddddddPdddddddPddd.",
            "runs of DELTA_RUN - 1, then one alone"
        );
        let alone = lz4_flex::compress_prepend_size(&plain[0]).len();
        assert!(
            versions[0].packed_len() * 3 < alone,
            "against its successor {} bytes, alone {alone}",
            versions[0].packed_len()
        );
        // The oldest keeps what it needs alive when the history lets go of the newer ones.
        let oldest = versions[0].clone();
        let second = versions[9].clone();
        drop(versions);
        assert_eq!(oldest.json(), plain[0]);
        assert_eq!(second.json(), plain[9]);
    }

    #[test]
    fn stored_bytes_are_served_with_the_resource_version_written_in() {
        let stored = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": "web", "tier": "x"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:x": {}}}}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.9"}]}
        });
        let bytes = serde_json::to_vec(&stored).unwrap();
        let fast = CachedObject::decode_stored_as_served(pods(), "k", &bytes, 42).unwrap();
        let slow = slow(&stored, 42);
        let parsed = |j: &[u8]| serde_json::from_slice::<Value>(j).unwrap();
        assert_eq!(
            parsed(&fast.json()),
            parsed(&slow.json()),
            "same object, RV included"
        );
        assert_eq!(parsed(&fast.json())["metadata"]["resourceVersion"], "42");
        assert_eq!(fast.labels, slow.labels);
        assert_eq!(fast.fields, slow.fields);
        assert_eq!(fast.node(), "n1");
        assert_eq!(fast.field("status.podIP"), "10.0.0.9");
        assert_eq!(fast.label("tier"), Some("x"));
        // Through `decode`, the way the feed calls it.
        let via = CachedObject::decode(pods(), "k".into(), &bytes, 42).unwrap();
        assert_eq!(via.json(), fast.json());
    }

    #[test]
    fn unusual_stored_bytes_take_the_general_way() {
        let p = pods();
        let empty = br#"{"kind":"Pod","metadata":{ },"spec":{}}"#;
        let o = CachedObject::decode_stored_as_served(p, "k", empty, 7).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&o.json()).unwrap()["metadata"],
            json!({"resourceVersion": "7"})
        );
        for odd in [
            // A resourceVersion kept in storage: written once, not twice.
            &br#"{"metadata":{"name":"p","resourceVersion":"3"}}"#[..],
            // An escaped key does not borrow.
            br#"{"metad\u0061ta":{"name":"p"}}"#,
            // Line breaks would split a watch line.
            b"{\"metadata\":{\"name\":\"p\"},\n\"spec\":{}}",
            b"not json",
        ] {
            assert!(CachedObject::decode_stored_as_served(p, "k", odd, 9).is_none());
        }
        let o = CachedObject::decode(
            p,
            "k".into(),
            b"{\"metadata\":{\"name\":\"p\",\"labels\":{\"a\\u0062\":\"c\"}},\n\"spec\":{}}",
            9,
        )
        .unwrap();
        assert!(!o.json().contains(&b'\n'));
        assert_eq!(o.label("ab"), Some("c"));
        let o = CachedObject::decode(
            p,
            "k".into(),
            br#"{"metadata":{"name":"p","resourceVersion":"3"}}"#,
            9,
        )
        .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&o.json()).unwrap()["metadata"]["resourceVersion"],
            "9"
        );
    }

    #[test]
    fn views_of_another_version_are_never_served_as_stored() {
        for (g, v, k, s) in crate::kinds::VIEWS {
            assert!(!s.served_as_stored(), "{g}/{v} {k} converts what it serves");
        }
    }
}
