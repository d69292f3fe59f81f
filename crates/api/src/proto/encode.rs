//! JSON objects encoded as Kubernetes protobuf responses: the inverse of `decode`, by the same
//! schema table. The body is upstream's: the magic `k8s\0`, then a `runtime.Unknown` naming the
//! object's apiVersion and kind whose `raw` is the object's own message. Fields are written in
//! field-number order, as Go's generated marshalers write them; a field absent from the JSON
//! (or null) is left out, which a Go decoder reads as its zero value.

use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::{message_for, schema, Field, Kind, ProtoError, Scalar, MAGIC};

/// Whether objects of this apiVersion and kind have a protobuf form here.
pub fn encodable(api_version: &str, kind: &str) -> bool {
    message_for(api_version, kind).is_some()
}

/// Encodes a JSON object that names its `apiVersion` and `kind` as a whole protobuf body.
pub fn encode(object: &Value) -> Result<Vec<u8>, ProtoError> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let kind = object["kind"].as_str().unwrap_or("");
    let message = message_for(api_version, kind)
        .ok_or_else(|| ProtoError::UnknownType(format!("{api_version}, Kind={kind}")))?;
    let fields = object
        .as_object()
        .ok_or_else(|| ProtoError::Invalid("not an object".into()))?;
    let mut raw = Vec::with_capacity(256);
    encode_message(&message, fields, &mut raw)?;
    Ok(envelope(api_version, kind, &raw))
}

/// Encodes a JSON body (an object naming its `apiVersion` and `kind`) as a whole protobuf body.
/// A list's items are decoded and encoded one at a time, so a list of a hundred thousand pods
/// never exists as one JSON tree.
pub fn encode_json(json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let bad = |e: serde_json::Error| ProtoError::Invalid(format!("not a JSON object: {e}"));
    let top: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(json).map_err(bad)?;
    let text = |k: &str| -> Result<String, ProtoError> {
        match top.get(k) {
            Some(v) => serde_json::from_str(v.get()).map_err(bad),
            None => Ok(String::new()),
        }
    };
    let (api_version, kind) = (text("apiVersion")?, text("kind")?);
    let message = message_for(&api_version, &kind)
        .ok_or_else(|| ProtoError::UnknownType(format!("{api_version}, Kind={kind}")))?;
    let items_field = ordered(&message).and_then(|fields| {
        fields
            .iter()
            .find(|(_, f)| f.json == "items" && f.repeated)
            .and_then(|(tag, f)| match f.kind {
                Kind::Message(inner) => Some((*tag, inner)),
                _ => None,
            })
    });
    let mut rest = Map::new();
    let mut items: Vec<&serde_json::value::RawValue> = Vec::new();
    for (k, v) in &top {
        if k == "items" && items_field.is_some() {
            items = serde_json::from_str(v.get()).map_err(bad)?;
        } else {
            rest.insert(k.clone(), serde_json::from_str(v.get()).map_err(bad)?);
        }
    }
    let mut raw = Vec::with_capacity(json.len() / 2);
    // A list's fields before its items (metadata), then each item.
    encode_message(&message, &rest, &mut raw)?;
    if let Some((tag, inner)) = items_field {
        let mut b = Vec::new();
        for item in items {
            let item: Map<String, Value> = serde_json::from_str(item.get()).map_err(bad)?;
            b.clear();
            encode_message(inner, &item, &mut b)?;
            bytes_field(&mut raw, tag, &b);
        }
    }
    Ok(envelope(&api_version, &kind, &raw))
}

/// The magic and the `runtime.Unknown` around an object's own message.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    bytes_field(&mut type_meta, 1, api_version.as_bytes());
    bytes_field(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(raw.len() + type_meta.len() + 16);
    out.extend_from_slice(MAGIC);
    bytes_field(&mut out, 1, &type_meta);
    bytes_field(&mut out, 2, raw);
    // contentEncoding and contentType: empty, as upstream writes them.
    bytes_field(&mut out, 3, b"");
    bytes_field(&mut out, 4, b"");
    out
}

/// Each message's fields in field-number order.
fn ordered(message: &str) -> Option<&'static [(u32, &'static Field)]> {
    static ORDERED: OnceLock<HashMap<&'static str, Vec<(u32, &'static Field)>>> = OnceLock::new();
    ORDERED
        .get_or_init(|| {
            schema()
                .iter()
                .map(|(name, fields)| {
                    let mut v: Vec<(u32, &'static Field)> =
                        fields.iter().map(|(tag, f)| (*tag, f)).collect();
                    v.sort_unstable_by_key(|(tag, _)| *tag);
                    (*name, v)
                })
                .collect()
        })
        .get(message)
        .map(Vec::as_slice)
}

fn encode_message(
    message: &str,
    object: &Map<String, Value>,
    out: &mut Vec<u8>,
) -> Result<(), ProtoError> {
    let fields = ordered(message).ok_or_else(|| ProtoError::UnknownType(message.to_string()))?;
    for (tag, field) in fields {
        if field.json == "-" {
            // An embedded Go struct: its fields sit in this object.
            let Kind::Message(inner) = field.kind else {
                return Err(invalid(message, field.json, "an inlined scalar"));
            };
            let mut b = Vec::new();
            encode_message(inner, object, &mut b)?;
            bytes_field(out, *tag, &b);
            continue;
        }
        let Some(v) = object.get(field.json).filter(|v| !v.is_null()) else {
            continue;
        };
        match &field.kind {
            Kind::Map(value_kind) => {
                let map = v
                    .as_object()
                    .ok_or_else(|| invalid(message, field.json, "not an object"))?;
                for (k, item) in map {
                    let mut entry = Vec::with_capacity(k.len() + 16);
                    bytes_field(&mut entry, 1, k.as_bytes());
                    encode_value(message, field.json, 2, value_kind, item, &mut entry)?;
                    bytes_field(out, *tag, &entry);
                }
            }
            kind if field.repeated => {
                let items = v
                    .as_array()
                    .ok_or_else(|| invalid(message, field.json, "not an array"))?;
                for item in items {
                    encode_value(message, field.json, *tag, kind, item, out)?;
                }
            }
            kind => encode_value(message, field.json, *tag, kind, v, out)?,
        }
    }
    Ok(())
}

fn encode_value(
    message: &str,
    json: &str,
    tag: u32,
    kind: &Kind,
    v: &Value,
    out: &mut Vec<u8>,
) -> Result<(), ProtoError> {
    let bad = |what: &str| invalid(message, json, what);
    match kind {
        Kind::Scalar(Scalar::String) => bytes_field(
            out,
            tag,
            v.as_str().ok_or_else(|| bad("not a string"))?.as_bytes(),
        ),
        Kind::Scalar(Scalar::Bytes) => {
            let text = v.as_str().ok_or_else(|| bad("not a string"))?;
            let b = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| bad("not base64"))?;
            bytes_field(out, tag, &b);
        }
        Kind::Scalar(Scalar::Bool) => {
            key(out, tag, 0);
            varint(
                out,
                u64::from(v.as_bool().ok_or_else(|| bad("not a boolean"))?),
            );
        }
        Kind::Scalar(Scalar::Int32 | Scalar::Int64) => {
            let n = v
                .as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| bad("not an integer"))?;
            key(out, tag, 0);
            // Negative numbers as their 64-bit two's complement, int32 too (Go's encoding).
            varint(out, n as u64);
        }
        Kind::Scalar(Scalar::Double) => {
            key(out, tag, 1);
            let f = v.as_f64().ok_or_else(|| bad("not a number"))?;
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Kind::Message(inner) => {
            let b = match special(inner, v).map_err(|what| bad(&what))? {
                Some(b) => b,
                None => {
                    let object = v.as_object().ok_or_else(|| bad("not an object"))?;
                    let mut b = Vec::new();
                    encode_message(inner, object, &mut b)?;
                    b
                }
            };
            bytes_field(out, tag, &b);
        }
        Kind::Map(_) => return Err(bad("a map inside a map")),
    }
    Ok(())
}

/// The wrapper messages whose JSON form is not an object of their fields (see `decode`'s
/// `special`); `None` for every other message.
fn special(message: &str, v: &Value) -> Result<Option<Vec<u8>>, String> {
    let short = message.rsplit('.').next().unwrap_or(message);
    let mut out = Vec::new();
    match message {
        "apimachinery.pkg.apis.meta.v1.Time" | "apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let text = v.as_str().ok_or("not a time")?;
            let t = k8s_openapi::chrono::DateTime::parse_from_rfc3339(text)
                .map_err(|e| format!("not an RFC 3339 time: {e}"))?;
            key(&mut out, 1, 0);
            varint(&mut out, t.timestamp() as u64);
            let nanos = t.timestamp_subsec_nanos();
            if nanos != 0 {
                key(&mut out, 2, 0);
                varint(&mut out, u64::from(nanos));
            }
        }
        "apimachinery.pkg.apis.meta.v1.Duration" => {
            let nanos = parse_go_duration(v.as_str().ok_or("not a duration")?)?;
            key(&mut out, 1, 0);
            varint(&mut out, nanos as u64);
        }
        "apimachinery.pkg.api.resource.Quantity" => match v {
            Value::String(s) => bytes_field(&mut out, 1, s.as_bytes()),
            Value::Number(n) => bytes_field(&mut out, 1, n.to_string().as_bytes()),
            _ => return Err("not a quantity".into()),
        },
        "apimachinery.pkg.util.intstr.IntOrString" => {
            // Go writes all three fields: type, intVal, strVal.
            let (ty, int, text) = match v {
                Value::String(s) => (1u64, 0i64, s.as_str()),
                Value::Number(n) => (0, n.as_i64().ok_or("not an int32")?, ""),
                _ => return Err("neither an integer nor a string".into()),
            };
            key(&mut out, 1, 0);
            varint(&mut out, ty);
            key(&mut out, 2, 0);
            varint(&mut out, int as i32 as i64 as u64);
            bytes_field(&mut out, 3, text.as_bytes());
        }
        "apimachinery.pkg.apis.meta.v1.FieldsV1" | "apimachinery.pkg.runtime.RawExtension" => {
            let raw = serde_json::to_vec(v).map_err(|e| e.to_string())?;
            bytes_field(&mut out, 1, &raw);
        }
        _ if short == "ExtraValue" => {
            for item in v.as_array().ok_or("not a list")? {
                bytes_field(&mut out, 1, item.as_str().ok_or("not a string")?.as_bytes());
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(out))
}

/// Go's `time.ParseDuration`: `1h2m3.5s`, `150ms`, `1.5µs`, `-2s`, `0`.
pub(super) fn parse_go_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("not a duration: {text:?}");
    let (neg, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += n * scale;
    }
    if total > i64::MAX as f64 {
        return Err(bad());
    }
    let nanos = total.round() as i64;
    Ok(if neg { -nanos } else { nanos })
}

fn invalid(message: &str, field: &str, what: &str) -> ProtoError {
    ProtoError::Invalid(format!("{message}.{field}: {what}"))
}

fn key(out: &mut Vec<u8>, tag: u32, wire: u8) {
    varint(out, (u64::from(tag) << 3) | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes_field(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    key(out, tag, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}
