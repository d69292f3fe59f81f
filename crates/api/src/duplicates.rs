//! Duplicate keys in a JSON body (`{"replicas": 1, "replicas": 2}`), which a JSON decoder would
//! silently resolve to the last one; `fieldValidation=Strict` refuses them, `Warn` reports them.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

struct Walker<'a> {
    path: String,
    found: &'a mut Vec<String>,
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
            let path = format!("{}{key}", self.path);
            if !seen.insert(key) {
                self.found.push(path.clone());
            }
            map.next_value_seed(Walker {
                path: format!("{path}."),
                found: self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        let base = self.path.trim_end_matches('.').to_string();
        while seq
            .next_element_seed(Walker {
                path: format!("{base}[{i}]."),
                found: self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
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
/// in one object of the JSON document; empty for valid JSON without duplicates (and for
/// anything that is not JSON: decoding reports that).
pub fn duplicate_fields(raw: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(raw);
    let _ = Walker {
        path: String::new(),
        found: &mut found,
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
            duplicate_fields(raw),
            ["spec.replicas", "spec.template.spec.containers[0].name"]
        );
        assert!(duplicate_fields(br#"{"a":{"b":1},"c":[{"b":2},{"b":3}]}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }
}
