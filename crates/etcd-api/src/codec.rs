//! serde adapters for the proto3 JSON mapping: int64-as-string, base64 bytes, and enums that
//! accept either their name or their number.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};
use std::fmt;

pub fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
pub fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
pub fn is_false(v: &bool) -> bool {
    !*v
}

/// bool fields: `null` reads as false, as in proto3 JSON.
pub fn null_false<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(<Option<bool> as serde::Deserialize>::deserialize(d)?.unwrap_or(false))
}

/// Decodes standard padded base64 with Go's error wording (`illegal base64 data at input byte N`).
pub fn decode_b64(s: &str) -> Result<Vec<u8>, String> {
    STANDARD.decode(s).map_err(|e| {
        let pos = match e {
            base64::DecodeError::InvalidByte(p, _) => p,
            base64::DecodeError::InvalidLength(n) => n,
            base64::DecodeError::InvalidLastSymbol(p, _) => p,
            base64::DecodeError::InvalidPadding => s.find('=').unwrap_or(s.len()),
        };
        // Go reports the start of an incomplete final quantum (missing padding).
        let incomplete = s.len() & 3 != 0 && !s.contains('=');
        let pos = if matches!(e, base64::DecodeError::InvalidLength(_))
            || matches!(e, base64::DecodeError::InvalidPadding) && incomplete
        {
            s.len() / 4 * 4
        } else {
            pos
        };
        format!("illegal base64 data at input byte {pos}")
    })
}

pub fn encode_b64(b: &[u8]) -> String {
    STANDARD.encode(b)
}

/// int64 fields: out as a JSON string, in as a string or a number.
pub mod i64s {
    use super::*;

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        d.deserialize_any(IntVisitor).and_then(|v: i128| {
            i64::try_from(v).map_err(|_| de::Error::custom(format!("value out of range: {v}")))
        })
    }
}

/// uint64 fields (cluster_id, member_id, raft_term): same mapping as int64.
pub mod u64s {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(IntVisitor).and_then(|v: i128| {
            u64::try_from(v).map_err(|_| de::Error::custom(format!("value out of range: {v}")))
        })
    }
}

struct IntVisitor;

/// Errors worded as Go's `encoding/json` words them, since etcd's gateway returns those.
fn go_number_error<E: de::Error>(literal: impl fmt::Display) -> E {
    E::custom(format!(
        "json: cannot unmarshal number {literal} into Go value of type int64"
    ))
}

impl Visitor<'_> for IntVisitor {
    type Value = i128;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or a string holding one")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i128, E> {
        Ok(v as i128)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i128, E> {
        Ok(v as i128)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i128, E> {
        // Go echoes the literal; `{:?}` keeps the ".0" of "1.0" that Display drops.
        Err(go_number_error(format!("{v:?}")))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<i128, E> {
        Err(E::custom(
            "json: cannot unmarshal bool into Go value of type int64",
        ))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i128, E> {
        let t = v.trim();
        if t.is_empty() {
            return Err(E::custom("unexpected end of JSON input"));
        }
        match t.parse::<i128>() {
            Ok(n) if n >= i64::MIN as i128 && n <= u64::MAX as i128 => Ok(n),
            Ok(_) => Err(go_number_error(t)),
            Err(_)
                if t.bytes()
                    .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
            {
                Err(go_number_error(t))
            }
            Err(_) => Err(E::custom(format!(
                "invalid character '{}' looking for beginning of value",
                t.chars().next().unwrap_or(' ')
            ))),
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<i128, E> {
        Ok(0)
    }
}

/// bytes fields: standard base64 both ways; `null` reads as empty.
pub mod b64 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode_b64(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a base64 string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
                decode_b64(v).map_err(E::custom)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Vec<u8>, E> {
                Ok(Vec::new())
            }
        }
        d.deserialize_any(V)
    }
}

/// `repeated bytes` (lease time-to-live keys).
pub mod b64_vec {
    use super::*;
    use serde::ser::SerializeSeq;

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for b in v {
            seq.serialize_element(&encode_b64(b))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let raw: Option<Vec<String>> = serde::Deserialize::deserialize(d)?;
        raw.unwrap_or_default()
            .iter()
            .map(|s| decode_b64(s).map_err(de::Error::custom))
            .collect()
    }
}

/// Declares a proto enum that serializes as its name and deserializes from its name or number;
/// `$go` is the Go type name etcd's gateway uses in its "unknown value" error.
#[macro_export]
macro_rules! proto_enum {
    ($(#[$m:meta])* $name:ident ($go:literal) { $($variant:ident = $num:literal => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
        pub enum $name { #[default] $($variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            pub fn is_default(&self) -> bool {
                *self == $name::default()
            }
            /// From a protobuf enum number; unknown numbers are the default.
            pub fn from_i32(v: i32) -> Self {
                match v { $($num => $name::$variant,)+ _ => $name::default() }
            }
            pub fn as_i32(self) -> i32 {
                match self { $($name::$variant => $num),+ }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " name or number"))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        match v { $($text => Ok($name::$variant),)+
                            _ => Err(E::custom(format!("unknown value {:?} for enum {}", v, $go))) }
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$name, E> {
                        // Unknown numbers are accepted as the default, as protobuf does.
                        match v { $($num => Ok($name::$variant),)+ _ => Ok($name::default()) }
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$name, E> {
                        self.visit_i64(v as i64)
                    }
                    fn visit_unit<E: serde::de::Error>(self) -> Result<$name, E> {
                        Ok($name::default())
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_errors_use_go_wording() {
        assert_eq!(
            decode_b64("!!!!").unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(decode_b64("YWJj").unwrap(), b"abc");
    }
}
