//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`): request bodies decoded to the
//! JSON objects the rest of the apiserver works on, and responses encoded from them (`encode`).
//!
//! The wire form is upstream's: the 4-byte magic `k8s\0`, then a `runtime.Unknown` whose
//! `typeMeta` names the object and whose `raw` holds the object's own message. Field numbers and
//! JSON names come from `schema.txt`, generated from upstream's `generated.proto` by
//! `scripts/gen-proto-schema.py`. A few wrapper messages (Time, MicroTime, Duration, Quantity,
//! IntOrString, RawExtension, FieldsV1) have their own JSON forms and are decoded by hand.
//!
//! Go marshals every non-pointer field, so a body carries `generateName: ""`, `hostNetwork:
//! false` and the like. Go's decoder cannot tell those from absent fields; we drop them too, so
//! defaulting sees what it would see from JSON — except the fields in [`KEEP_ZERO`], Go pointers
//! (or fields JSON always shows) where a zero is a value: `replicas: 0`, `immutable: false`.

use std::collections::HashMap;
use std::sync::OnceLock;

mod encode;
pub use encode::{encodable, encode, encode_json};

use base64::Engine as _;
use serde_json::{Map, Value};

/// The media type of a Kubernetes protobuf body.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

/// Integer and boolean fields whose zero is kept (an empty string is always dropped): Go pointers,
/// and fields without `omitempty`; `Message.field` where the name means different things.
pub const KEEP_ZERO: &[&str] = &[
    "activeDeadlineSeconds",
    "allocateLoadBalancerNodePorts",
    "allowPrivilegeEscalation",
    "allowVolumeExpansion",
    "attachRequired",
    "automountServiceAccountToken",
    "averageUtilization",
    "backoffLimit",
    "backoffLimitPerIndex",
    "blockOwnerDeletion",
    "capacity",
    "completions",
    "containerPort",
    "controller",
    "count",
    "currentHealthy",
    "defaultMode",
    "deletionGracePeriodSeconds",
    "desiredHealthy",
    "disruptionsAllowed",
    "enableServiceLinks",
    "exitCode",
    "expectedPods",
    "expirationSeconds",
    "failedJobsHistoryLimit",
    "fsGroup",
    "gid",
    "globalDefault",
    "gracePeriodSeconds",
    "hostUsers",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "immutable",
    "leaseDurationSeconds",
    "leaseTransitions",
    "maxFailedIndexes",
    "maxReplicas",
    "maxSkew",
    "minDomains",
    "minReplicas",
    "mode",
    "number",
    "optional",
    "orphanDependents",
    "parallelism",
    "partition",
    "podInfoOnMount",
    "Port",
    "port",
    "priority",
    "privileged",
    "progressDeadlineSeconds",
    "readOnlyRootFilesystem",
    "ready",
    "DeploymentSpec.replicas",
    "ReplicaSetSpec.replicas",
    "ReplicationControllerSpec.replicas",
    "StatefulSetSpec.replicas",
    "requiresRepublish",
    "restartCount",
    "ControllerRevision.revision",
    "revisionHistoryLimit",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "seconds",
    "seLinuxMount",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "start",
    "started",
    "startingDeadlineSeconds",
    "storageCapacity",
    "successfulJobsHistoryLimit",
    "suspend",
    "terminationGracePeriodSeconds",
    "tolerationSeconds",
    "ttlSecondsAfterFinished",
    "uid",
    "PriorityClass.value",
    "weight",
];

/// Why a protobuf body could not be decoded; the apiserver answers 400 (or 415 for a type with
/// no protobuf form here) with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("the body does not start with the Kubernetes protobuf magic number")]
    NoMagic,
    #[error("truncated or malformed protobuf data in {0}")]
    Malformed(String),
    #[error("no protobuf form is known for {0}")]
    UnknownType(String),
    #[error("unknown protobuf field {field} in {message}")]
    UnknownField { message: String, field: u32 },
    #[error("{0}")]
    Invalid(String),
}

/// Decodes a whole `application/vnd.kubernetes.protobuf` body into a JSON object with its
/// `apiVersion` and `kind`.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut r = Reader::new(rest, "runtime.Unknown");
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 2) => {
                let mut tm = Reader::new(r.bytes()?, "runtime.TypeMeta");
                while let Some((f, w)) = tm.key()? {
                    match (f, w) {
                        (1, 2) => api_version = tm.string()?,
                        (2, 2) => kind = tm.string()?,
                        _ => tm.skip(w)?,
                    }
                }
            }
            (2, 2) => raw = r.bytes()?,
            (3, 2) => {
                let encoding = r.string()?;
                if !encoding.is_empty() {
                    return Err(ProtoError::Invalid(format!(
                        "unsupported contentEncoding {encoding:?}"
                    )));
                }
            }
            _ => r.skip(wire)?,
        }
    }
    let message = message_for(&api_version, &kind)
        .ok_or_else(|| ProtoError::UnknownType(format!("{api_version}, Kind={kind}")))?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    decode_into(&message, raw, &mut object)?;
    Ok(Value::Object(object))
}

/// The message of a group/version's kind: `apps/v1` `Deployment` → `api.apps.v1.Deployment`.
fn message_for(api_version: &str, kind: &str) -> Option<String> {
    let name = if kind == "DeleteOptions"
        || (kind == "Status" && matches!(api_version, "v1" | "meta.k8s.io/v1"))
    {
        format!("apimachinery.pkg.apis.meta.v1.{kind}")
    } else {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        // Upstream's groups only (`apps`, `networking.k8s.io`, `rbac.authorization.k8s.io`,
        // …): a custom resource's `apps.example.com` is not `apps`.
        let group = match group {
            "" => "core",
            g => match g.split_once('.') {
                None => g,
                Some((first, "k8s.io" | "authorization.k8s.io" | "apiserver.k8s.io")) => first,
                Some(_) => return None,
            },
        };
        format!("api.{group}.{version}.{kind}")
    };
    schema().contains_key(name.as_str()).then_some(name)
}

#[derive(Debug)]
enum Kind {
    Scalar(Scalar),
    Message(&'static str),
    Map(Box<Kind>),
}

#[derive(Debug, Clone, Copy)]
enum Scalar {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    Bytes,
}

#[derive(Debug)]
struct Field {
    json: &'static str,
    repeated: bool,
    kind: Kind,
}

type Schema = HashMap<&'static str, HashMap<u32, Field>>;

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| parse_schema(include_str!("schema.txt")))
}

fn parse_schema(text: &'static str) -> Schema {
    let mut schema: Schema = HashMap::new();
    let mut current: Option<&'static str> = None;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let parts: Vec<&'static str> = line.split(' ').collect();
        if parts[0] == "message" {
            current = Some(parts[1]);
            schema.entry(parts[1]).or_default();
            continue;
        }
        let (Some(message), Ok(tag)) = (current, parts[0].parse::<u32>()) else {
            panic!("schema.txt: bad line {line:?}");
        };
        let (repeated, code) = match parts[2].strip_prefix('*') {
            Some(code) => (true, code),
            None => (false, parts[2]),
        };
        let kind = |code: &str, reference: Option<&&'static str>| match code {
            "m" => Kind::Message(reference.expect("schema.txt: message field without a type")),
            other => {
                Kind::Scalar(scalar(other).unwrap_or_else(|| panic!("schema.txt: kind {other}")))
            }
        };
        let kind = match code.strip_prefix("map:") {
            Some(value) => Kind::Map(Box::new(kind(value, parts.get(3)))),
            None => kind(code, parts.get(3)),
        };
        schema.entry(message).or_default().insert(
            tag,
            Field {
                json: parts[1],
                repeated,
                kind,
            },
        );
    }
    schema
}

fn scalar(code: &str) -> Option<Scalar> {
    Some(match code {
        "s" => Scalar::String,
        "b" => Scalar::Bool,
        "i32" => Scalar::Int32,
        "i64" => Scalar::Int64,
        "d" => Scalar::Double,
        "y" => Scalar::Bytes,
        _ => return None,
    })
}

/// Decodes one message's fields into `out` (a parent's object for an inlined message).
fn decode_into(message: &str, data: &[u8], out: &mut Map<String, Value>) -> Result<(), ProtoError> {
    let fields = schema()
        .get(message)
        .ok_or_else(|| ProtoError::UnknownType(message.to_string()))?;
    let mut r = Reader::new(data, message);
    while let Some((tag, wire)) = r.key()? {
        let field = fields.get(&tag).ok_or_else(|| ProtoError::UnknownField {
            message: message.to_string(),
            field: tag,
        })?;
        if field.json == "-" {
            let Kind::Message(inner) = field.kind else {
                return Err(r.malformed());
            };
            decode_into(inner, r.bytes()?, out)?;
            continue;
        }
        match &field.kind {
            Kind::Map(value_kind) => {
                let (key, value) = map_entry(value_kind, r.bytes()?, message)?;
                let map = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            kind if field.repeated => {
                let values = out
                    .entry(field.json)
                    .or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(values) = values else {
                    return Err(r.malformed());
                };
                match kind {
                    // A packed run of varints.
                    Kind::Scalar(s @ (Scalar::Int32 | Scalar::Int64 | Scalar::Bool))
                        if wire == 2 =>
                    {
                        let mut packed = Reader::new(r.bytes()?, message);
                        while !packed.done() {
                            values.push(varint_value(*s, packed.varint()?));
                        }
                    }
                    kind => values.push(value(kind, wire, &mut r)?),
                }
            }
            kind => {
                let v = value(kind, wire, &mut r)?;
                let kept = !v.is_string() && keeps_zero(message, field.json);
                if v.is_null() || (is_zero(&v) && !kept) {
                    out.remove(field.json);
                } else {
                    out.insert(field.json.to_string(), v);
                }
            }
        }
    }
    Ok(())
}

fn keeps_zero(message: &str, field: &str) -> bool {
    let short = message.rsplit('.').next().unwrap_or(message);
    KEEP_ZERO.iter().any(|k| match k.split_once('.') {
        Some((m, f)) => m == short && f == field,
        None => *k == field,
    })
}

/// Go's zero values of the scalars it always marshals.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn map_entry(value_kind: &Kind, data: &[u8], message: &str) -> Result<(String, Value), ProtoError> {
    let mut r = Reader::new(data, message);
    let (mut key, mut value) = (String::new(), None);
    while let Some((tag, wire)) = r.key()? {
        match tag {
            1 => key = r.string()?,
            2 => value = Some(self::value(value_kind, wire, &mut r)?),
            _ => r.skip(wire)?,
        }
    }
    let value = match value {
        Some(v) => v,
        None => match value_kind {
            Kind::Scalar(Scalar::Bytes | Scalar::String) => Value::String(String::new()),
            Kind::Message(inner) => special(inner, &[])?.unwrap_or(Value::Object(Map::new())),
            _ => Value::Null,
        },
    };
    Ok((key, value))
}

fn value(kind: &Kind, wire: u8, r: &mut Reader<'_>) -> Result<Value, ProtoError> {
    Ok(match (kind, wire) {
        (Kind::Scalar(Scalar::String), 2) => Value::String(r.string()?),
        (Kind::Scalar(Scalar::Bytes), 2) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(r.bytes()?))
        }
        (Kind::Scalar(s @ (Scalar::Bool | Scalar::Int32 | Scalar::Int64)), 0) => {
            varint_value(*s, r.varint()?)
        }
        (Kind::Scalar(Scalar::Double), 1) => {
            serde_json::Number::from_f64(f64::from_bits(r.fixed64()?))
                .map_or(Value::Null, Value::Number)
        }
        (Kind::Message(inner), 2) => {
            let data = r.bytes()?;
            match special(inner, data)? {
                Some(v) => v,
                None => {
                    let mut object = Map::new();
                    decode_into(inner, data, &mut object)?;
                    Value::Object(object)
                }
            }
        }
        _ => return Err(r.malformed()),
    })
}

fn varint_value(s: Scalar, v: u64) -> Value {
    match s {
        Scalar::Bool => Value::Bool(v != 0),
        Scalar::Int32 => Value::from(v as i64 as i32),
        _ => Value::from(v as i64),
    }
}

/// The wrapper messages whose JSON form is not an object of their fields.
fn special(message: &str, data: &[u8]) -> Result<Option<Value>, ProtoError> {
    let short = message.rsplit('.').next().unwrap_or(message);
    let known = matches!(
        message,
        "apimachinery.pkg.apis.meta.v1.Time"
            | "apimachinery.pkg.apis.meta.v1.MicroTime"
            | "apimachinery.pkg.apis.meta.v1.Duration"
            | "apimachinery.pkg.apis.meta.v1.FieldsV1"
            | "apimachinery.pkg.api.resource.Quantity"
            | "apimachinery.pkg.util.intstr.IntOrString"
            | "apimachinery.pkg.runtime.RawExtension"
            | "api.authentication.v1.ExtraValue"
            | "api.authorization.v1.ExtraValue"
            | "api.certificates.v1.ExtraValue"
    );
    if !known {
        return Ok(None);
    }
    if short == "ExtraValue" {
        // `repeated string items = 1`, whose JSON is the bare list.
        let mut items = Vec::new();
        let mut r = Reader::new(data, message);
        while let Some((tag, wire)) = r.key()? {
            match (tag, wire) {
                (1, 2) => items.push(Value::String(
                    String::from_utf8(r.bytes()?.to_vec())
                        .map_err(|_| ProtoError::Malformed(message.to_string()))?,
                )),
                _ => r.skip(wire)?,
            }
        }
        return Ok(Some(Value::Array(items)));
    }
    // Every wrapper's fields are numbered from 1; read them all as (varint | bytes).
    let mut ints = [0i64; 4];
    let mut bytes: [&[u8]; 4] = [&[]; 4];
    let mut r = Reader::new(data, message);
    while let Some((tag, wire)) = r.key()? {
        let i = (tag as usize).min(3);
        match wire {
            0 => ints[i] = r.varint()? as i64,
            2 => bytes[i] = r.bytes()?,
            _ => r.skip(wire)?,
        }
    }
    let text = |b: &[u8]| {
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Malformed(message.to_string()))
    };
    Ok(Some(match short {
        // Go marshals a zero time as an empty message; its JSON is null.
        "Time" | "MicroTime" if data.is_empty() => Value::Null,
        "Time" | "MicroTime" => {
            let format = if short == "Time" {
                k8s_openapi::chrono::SecondsFormat::Secs
            } else {
                k8s_openapi::chrono::SecondsFormat::Micros
            };
            let t = k8s_openapi::chrono::DateTime::from_timestamp(ints[1], ints[2] as u32)
                .ok_or_else(|| ProtoError::Invalid(format!("{short} out of range")))?;
            Value::String(t.to_rfc3339_opts(format, true))
        }
        "Duration" => Value::String(go_duration(ints[1])),
        "Quantity" => Value::String(text(bytes[1])?),
        "IntOrString" if ints[1] == 1 => Value::String(text(bytes[3])?),
        "IntOrString" => Value::from(ints[2] as i32),
        // FieldsV1 and RawExtension carry JSON.
        _ if bytes[1].is_empty() => Value::Object(Map::new()),
        _ => serde_json::from_slice(bytes[1])
            .map_err(|e| ProtoError::Invalid(format!("{short} does not hold JSON: {e}")))?,
    }))
}

/// Go's `time.Duration.String()` of a nanosecond count: `1h2m3.5s`, `150ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (unit, div) = match n {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{sign}{}{unit}", trim_fraction(n, div));
    }
    let (h, rem) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
    let (m, s) = (rem / 60_000_000_000, rem % 60_000_000_000);
    let mut out = sign.to_string();
    if h > 0 {
        out += &format!("{h}h");
    }
    if h > 0 || m > 0 {
        out += &format!("{m}m");
    }
    out + &format!("{}s", trim_fraction(s, 1_000_000_000))
}

fn trim_fraction(n: u64, div: u64) -> String {
    let (whole, frac) = (n / div, n % div);
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A cursor over protobuf wire data.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    message: &'a str,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], message: &'a str) -> Self {
        Reader {
            data,
            at: 0,
            message,
        }
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    fn malformed(&self) -> ProtoError {
        ProtoError::Malformed(self.message.to_string())
    }

    /// The next field's number and wire type, or None at the end.
    fn key(&mut self) -> Result<Option<(u32, u8)>, ProtoError> {
        if self.done() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
        if field == 0 {
            return Err(self.malformed());
        }
        Ok(Some((field, wire)))
    }

    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.data.get(self.at).ok_or_else(|| self.malformed())?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.malformed())
    }

    fn fixed64(&mut self) -> Result<u64, ProtoError> {
        let b = self
            .data
            .get(self.at..self.at + 8)
            .ok_or_else(|| self.malformed())?;
        self.at += 8;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| self.malformed())?,
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let len = usize::try_from(self.varint()?).map_err(|_| self.malformed())?;
        let end = self.at.checked_add(len).ok_or_else(|| self.malformed())?;
        let b = self
            .data
            .get(self.at..end)
            .ok_or_else(|| self.malformed())?;
        self.at = end;
        Ok(b)
    }

    fn string(&mut self) -> Result<String, ProtoError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| self.malformed())
    }

    fn skip(&mut self, wire: u8) -> Result<(), ProtoError> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.fixed64().map(|_| ()),
            2 => self.bytes().map(|_| ()),
            5 => {
                self.at += 4;
                if self.at > self.data.len() {
                    return Err(self.malformed());
                }
                Ok(())
            }
            _ => Err(self.malformed()),
        }
    }
}

#[cfg(test)]
mod tests;
