//! The one decoding pipeline for JSON request bodies: parse (serde_json, which refuses more
//! than 128 levels), then the bounds (`crate::bounds`), and linear-time detection of
//! duplicate keys for `fieldValidation` — paths are built only for what is reported, and at
//! most `MAX_REPORTED` are.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Problems of one kind (duplicate fields, unknown fields) reported for one body.
pub const MAX_REPORTED: usize = 100;

/// A JSON body as a value within the bounds.
pub fn json(raw: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    crate::bounds::check(&v).map_err(|c| c.message)?;
    Ok(v)
}

/// One step of the path to a value.
enum Segment {
    Key(String),
    Index(usize),
}

/// A reported key is cut to this many bytes.
const MAX_KEY_SHOWN: usize = 256;

/// A key as a report shows it: cut to `MAX_KEY_SHOWN` bytes (on a character boundary), with
/// an ellipsis when it was cut.
pub fn push_key(out: &mut String, k: &str) {
    if k.len() > MAX_KEY_SHOWN {
        let mut end = MAX_KEY_SHOWN;
        while !k.is_char_boundary(end) {
            end -= 1;
        }
        out.push_str(&k[..end]);
        out.push('…');
    } else {
        out.push_str(k);
    }
}

fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                push_key(&mut out, k);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

struct Walker<'a> {
    path: &'a mut Vec<Segment>,
    found: &'a mut Vec<String>,
    limit: usize,
}

impl<'de> DeserializeSeed<'de> for Walker<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walker<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let duplicate = seen.contains(&key);
            self.path.push(Segment::Key(key));
            if duplicate && self.found.len() < self.limit {
                self.found.push(render(self.path));
            }
            map.next_value_seed(Walker {
                path: self.path,
                found: self.found,
                limit: self.limit,
            })?;
            if let Some(Segment::Key(key)) = self.path.pop() {
                if !duplicate {
                    seen.insert(key);
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            self.path.push(Segment::Index(i));
            let more = seq.next_element_seed(Walker {
                path: self.path,
                found: self.found,
                limit: self.limit,
            })?;
            self.path.pop();
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Paths (`spec.replicas`, `spec.template.spec.containers[0].name`) of keys that appear twice
/// in one object of the JSON document, at most `limit` of them; empty for valid JSON without
/// duplicates (and for anything that is not JSON: decoding reports that). Linear in the size
/// of the document.
pub fn duplicate_fields(raw: &[u8], limit: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(raw);
    let _ = Walker {
        path: &mut path,
        found: &mut found,
        limit,
    }
    .deserialize(&mut de);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_duplicates_with_their_paths() {
        let raw = br#"{"kind":"Deployment","spec":{"replicas":1,"replicas":2,"template":{"spec":{"containers":[{"name":"a","name":"b"}]}}}}"#;
        assert_eq!(
            duplicate_fields(raw, 10),
            ["spec.replicas", "spec.template.spec.containers[0].name"]
        );
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":[{"b":2},{"b":3}]}"#, 10).is_empty());
        assert!(duplicate_fields(b"not json", 10).is_empty());
    }

    #[test]
    fn a_huge_key_with_many_duplicates_costs_linear_time_and_bounded_memory() {
        // The attack: one ~1 MB key holding 200k duplicate children. Copying the key's path
        // per duplicate needed hundreds of GB.
        let big = "k".repeat(1 << 20);
        let mut raw = format!("{{\"{big}\":{{");
        for i in 0..200_000 {
            if i > 0 {
                raw.push(',');
            }
            raw.push_str("\"d\":1");
        }
        raw.push_str("}}");
        let found = duplicate_fields(raw.as_bytes(), MAX_REPORTED);
        assert_eq!(found.len(), MAX_REPORTED);
        assert!(found[0].ends_with("….d"));
        assert!(found[0].len() < 300);
        // Arrays too.
        let mut arr = format!("{{\"{big}\":[");
        for i in 0..200_000 {
            if i > 0 {
                arr.push(',');
            }
            arr.push_str("{\"a\":1,\"a\":2}");
        }
        arr.push_str("]}");
        assert_eq!(duplicate_fields(arr.as_bytes(), 5).len(), 5);
    }

    #[test]
    fn bodies_are_bounded() {
        let mut deep = String::new();
        for _ in 0..(crate::bounds::MAX_DEPTH + 1) {
            deep.push_str("{\"a\":");
        }
        deep.push('1');
        for _ in 0..(crate::bounds::MAX_DEPTH + 1) {
            deep.push('}');
        }
        assert!(json(deep.as_bytes()).unwrap_err().contains("nested"));
        let mut deeper = "[".repeat(100_000);
        deeper.push_str(&"]".repeat(100_000));
        assert!(json(deeper.as_bytes()).is_err());
    }
}
