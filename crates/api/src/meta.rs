//! Object metadata helpers over JSON objects (`serde_json::Value`): the generic registry works
//! on JSON so that every resource shares one code path. Also RFC 3339 timestamps and
//! `generateName` suffixes as upstream makes them.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

pub fn metadata(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(|m| m.as_object())
}

/// The metadata map, created if missing.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(|m| m.is_object()) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    metadata(obj)
        .and_then(|m| m.get(field))
        .and_then(|v| v.as_str())
        .unwrap_or("")
}

pub fn set_meta(obj: &mut Value, field: &str, v: Value) {
    metadata_mut(obj).insert(field.to_string(), v);
}

pub fn remove_meta(obj: &mut Value, field: &str) {
    metadata_mut(obj).remove(field);
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion")
}

pub fn generation(obj: &Value) -> i64 {
    metadata(obj)
        .and_then(|m| m.get("generation"))
        .and_then(|v| v.as_i64())
        .unwrap_or(0)
}

pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    string_map(obj, "labels")
}

pub fn annotations(obj: &Value) -> BTreeMap<String, String> {
    string_map(obj, "annotations")
}

fn string_map(obj: &Value, field: &str) -> BTreeMap<String, String> {
    metadata(obj)
        .and_then(|m| m.get(field))
        .and_then(|l| l.as_object())
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(|f| f.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, f: &[String]) {
    if f.is_empty() {
        remove_meta(obj, "finalizers");
    } else {
        set_meta(obj, "finalizers", Value::from(f.to_vec()));
    }
}

pub fn deletion_timestamp(obj: &Value) -> Option<&str> {
    metadata(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .and_then(|v| v.as_str())
}

pub fn deletion_grace_period(obj: &Value) -> Option<i64> {
    metadata(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(|v| v.as_i64())
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2026-11-22T01:08:51Z` for a Unix time in seconds (metav1.Time's wire form).
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `2026-11-22T01:08:51.123456Z` (metav1.MicroTime's wire form).
pub fn rfc3339_micros(d: std::time::Duration) -> String {
    let base = rfc3339(d.as_secs() as i64);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), d.subsec_micros())
}

pub fn now_rfc3339() -> String {
    rfc3339(unix_now())
}

/// The current time as a MicroTime.
pub fn now_rfc3339_micros() -> String {
    rfc3339_micros(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// The strings of a JSON array (others skipped); empty when it is absent or not an array.
pub fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let mut rest = &s[19..];
    if rest.starts_with('.') {
        let end = rest[1..]
            .find(|c: char| !c.is_ascii_digit())
            .map(|i| i + 1)
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        r if r.len() == 6 => {
            let sign = if r.starts_with('-') { -1 } else { 1 };
            sign * (r[1..3].parse::<i64>().ok()? * 3600 + r[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset)
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The alphabet of `utilrand.String` (no vowels, no confusable characters).
pub const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` suffixes are 5 characters from `NAME_ALPHABET`.
pub fn random_suffix(rng: &mut impl FnMut() -> u64) -> String {
    (0..5)
        .map(|_| NAME_ALPHABET[(rng() % NAME_ALPHABET.len() as u64) as usize] as char)
        .collect()
}

/// A random RFC 4122 version 4 UUID.
pub fn new_uid(rng: &mut impl FnMut() -> u64) -> String {
    let (a, b) = (rng(), rng());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_roundtrip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_309_731), "2026-11-22T01:08:51Z");
        assert_eq!(parse_rfc3339("2026-11-22T01:08:51Z"), Some(1_795_309_731));
        assert_eq!(
            parse_rfc3339("2026-11-22T02:08:51+01:00"),
            Some(1_795_309_731)
        );
        assert_eq!(parse_rfc3339("2026-11-22T01:08:51.5Z"), Some(1_795_309_731));
        assert_eq!(parse_rfc3339("garbage"), None);
        assert_eq!(
            rfc3339_micros(std::time::Duration::from_micros(1_500_000)),
            "1970-01-01T00:00:01.500000Z"
        );
    }

    #[test]
    fn metadata_access() {
        let mut o = json!({"metadata": {"name": "a", "labels": {"app": "x"}, "finalizers": ["f"]}});
        assert_eq!(name(&o), "a");
        assert_eq!(labels(&o).get("app").map(String::as_str), Some("x"));
        set_finalizers(&mut o, &[]);
        assert!(finalizers(&o).is_empty());
        let mut n = 7u64;
        let mut rng = || {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            n >> 11
        };
        let s = random_suffix(&mut rng);
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|c| NAME_ALPHABET.contains(&c)));
        let u = new_uid(&mut rng);
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
