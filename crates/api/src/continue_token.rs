//! The list `continue` token in upstream's public format: base64url (no padding) of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key relative to the list prefix>\u0000"}`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
}

/// A decoded token: the list's resourceVersion (`-1` = continue at the latest) and the key
/// (relative to the list prefix) to start from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continue {
    pub resource_version: i64,
    pub start_key: String,
}

/// Encodes a token that resumes after `last_key` (relative to the prefix) at `rv`.
pub fn encode(last_key: &str, rv: i64) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: format!("{last_key}\u{0}"),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
}

/// Decodes a token, with upstream's messages (callers prefix `invalid continue token: `).
pub fn decode(s: &str) -> Result<Continue, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|e| format!("continue key is not valid: {e}"))?;
    let t: Token =
        serde_json::from_slice(&bytes).map_err(|e| format!("continue key is not valid: {e}"))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(
            "continue key is not valid: server does not recognize this encoded version".into(),
        );
    }
    if t.rv == 0 {
        return Err("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into());
    }
    if t.start.is_empty() {
        return Err(
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into(),
        );
    }
    let cleaned = t.start.trim_start_matches('/');
    if cleaned.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err("continue key is not valid".into());
    }
    Ok(Continue {
        resource_version: t.rv,
        start_key: t.start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_upstream_encoding() {
        // The example token from the API semantics reference.
        assert_eq!(
            encode("default/nginx-1", 10245),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAyNDUsInN0YXJ0IjoiZGVmYXVsdC9uZ2lueC0xXHUwMDAwIn0"
        );
        let c = decode("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAyNDUsInN0YXJ0IjoiZGVmYXVsdC9uZ2lueC0xXHUwMDAwIn0").unwrap();
        assert_eq!(
            c,
            Continue {
                resource_version: 10245,
                start_key: "default/nginx-1\u{0}".into()
            }
        );
        assert!(decode("!!").is_err());
        assert!(
            decode(&URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#))
                .unwrap_err()
                .contains("incorrect encoded start")
        );
        assert!(decode(
            &URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":5,"start":"../x"}"#)
        )
        .is_err());
    }
}
