//! ServiceAccount tokens (upstream's `serviceaccount` token generator and authenticator, and
//! the service account issuer discovery): ES256 JWTs signed with the cluster's key, issued by
//! `serviceaccounts/{name}/token` for audiences and a lifetime, optionally bound to a pod or
//! secret; verified on every request (signature, issuer, audience, expiry, and the account —
//! and bound object — still existing with the same UID); published as an OpenID provider
//! configuration and JWKS.
//!
//! The signing key is `--service-account-signing-key-file` (a PKCS#8 P-256 key), or else one
//! kept in storage under `<prefix>/rkube/serviceaccount-signing-key`, made by the first
//! apiserver and shared by every apiserver on the store, so tokens survive restarts.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};

use crate::storage::Storage;

/// `--service-account-issuer`'s default, as upstream's kubeadm sets it.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Lifetimes a TokenRequest may ask for (upstream: at least 10 minutes, at most a day here —
/// upstream's `--service-account-max-token-expiration` is unset by default; 48 h bounds it).
pub const MIN_EXPIRATION: i64 = 600;
pub const MAX_EXPIRATION: i64 = 48 * 3600;

/// `--service-account-issuer`, `--api-audiences`, and where the key comes from.
#[derive(Clone, Debug, Default)]
pub struct TokenConfig {
    pub issuer: Option<String>,
    pub audiences: Vec<String>,
    /// `--service-account-signing-key-file`: a PKCS#8 PEM P-256 private key.
    pub signing_key_file: Option<std::path::PathBuf>,
}

/// What a token was issued for, as the authenticator reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// (resource, name, uid) of the object the token is bound to (`pods`, `secrets`).
    pub bound: Option<(String, String, String)>,
}

pub struct Issuer {
    key: EcdsaKeyPair,
    kid: String,
    pub issuer: String,
    pub audiences: Vec<String>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Issuer {
    /// Loads the key from the file, or from (or into) storage.
    pub async fn load(
        cfg: &TokenConfig,
        storage: &Storage,
        etcd_prefix: &str,
    ) -> anyhow::Result<Issuer> {
        let pkcs8 = match &cfg.signing_key_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("--service-account-signing-key-file {}: {e}", path.display())
                })?;
                pem_pkcs8(&text).map_err(|e| {
                    anyhow::anyhow!("--service-account-signing-key-file {}: {e}", path.display())
                })?
            }
            None => stored_key(storage, etcd_prefix).await?,
        };
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng)
            .map_err(|_| anyhow::anyhow!("the service account key is not a PKCS#8 P-256 key"))?;
        let issuer = cfg.issuer.clone().unwrap_or_else(|| DEFAULT_ISSUER.into());
        let audiences = if cfg.audiences.is_empty() {
            vec![issuer.clone()]
        } else {
            cfg.audiences.clone()
        };
        let kid = {
            let d = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
            URL_SAFE_NO_PAD.encode(d.as_ref())
        };
        Ok(Issuer {
            key,
            kid,
            issuer,
            audiences,
        })
    }

    /// A signed token for the account, valid `expiration` seconds for `audiences` (the API's
    /// own when empty). Returns the token and its expiry (seconds since the epoch).
    pub fn issue(
        &self,
        claims: &Claims,
        audiences: &[String],
        expiration: i64,
    ) -> Result<(String, i64), String> {
        let iat = now();
        let exp = iat + expiration;
        let aud: Vec<&String> = if audiences.is_empty() {
            self.audiences.iter().collect()
        } else {
            audiences.iter().collect()
        };
        let mut k8s = json!({
            "namespace": claims.namespace,
            "serviceaccount": {"name": claims.name, "uid": claims.uid},
        });
        if let Some((resource, name, uid)) = &claims.bound {
            k8s[resource.trim_end_matches('s')] = json!({"name": name, "uid": uid});
        }
        let payload = json!({
            "aud": aud,
            "exp": exp,
            "iat": iat,
            "nbf": iat,
            "iss": self.issuer,
            "jti": rkube_api::meta::new_uid(&mut || rand::random::<u64>()),
            "sub": format!("system:serviceaccount:{}:{}", claims.namespace, claims.name),
            "kubernetes.io": k8s,
        });
        let header = json!({"alg": "ES256", "kid": self.kid});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        let sig = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| "signing failed".to_string())?;
        Ok((
            format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())),
            exp,
        ))
    }

    /// The claims of a token this issuer signed, if it is one and is valid now for the API's
    /// audiences (or `audiences`, when given).
    pub fn verify(&self, token: &str, audiences: &[String]) -> Option<Claims> {
        if token.len() > 16 * 1024 {
            return None;
        }
        let mut parts = token.split('.');
        let (h, p, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).ok()?).ok()?;
        if header.get("alg").and_then(Value::as_str) != Some("ES256") {
            return None;
        }
        let sig = URL_SAFE_NO_PAD.decode(s).ok()?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref())
            .verify(format!("{h}.{p}").as_bytes(), &sig)
            .ok()?;
        let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).ok()?).ok()?;
        if payload.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return None;
        }
        let t = now();
        let exp = payload.get("exp").and_then(Value::as_i64)?;
        let nbf = payload.get("nbf").and_then(Value::as_i64).unwrap_or(0);
        if t >= exp || t + 60 < nbf {
            return None;
        }
        let wanted = if audiences.is_empty() {
            &self.audiences
        } else {
            audiences
        };
        let aud: Vec<&str> = match payload.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !aud.iter().any(|a| wanted.iter().any(|w| w == a)) {
            return None;
        }
        let k8s = payload.get("kubernetes.io")?;
        let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(String::from);
        let bound = ["pod", "secret", "node"].iter().find_map(|key| {
            let b = k8s.get(*key)?;
            let name = b.get("name")?.as_str()?.to_string();
            let uid = b
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            Some((format!("{key}s"), name, uid))
        });
        Some(Claims {
            namespace: s(k8s, "/namespace")?,
            name: s(k8s, "/serviceaccount/name")?,
            uid: s(k8s, "/serviceaccount/uid").unwrap_or_default(),
            bound,
        })
    }

    /// `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`: the public key.
    pub fn jwks(&self) -> Value {
        let point = self.key.public_key().as_ref();
        let (x, y) = point[1..].split_at(32);
        json!({"keys": [{
            "use": "sig", "kty": "EC", "kid": self.kid, "crv": "P-256", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }]})
    }
}

/// The DER of a `PRIVATE KEY` PEM block.
fn pem_pkcs8(text: &str) -> Result<Vec<u8>, String> {
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    if body.is_empty() {
        return Err(
            "no PKCS#8 \"PRIVATE KEY\" PEM block (an EC key in PKCS#8 form is needed)".into(),
        );
    }
    STANDARD.decode(body.trim()).map_err(|e| e.to_string())
}

/// The key kept in storage, made (compare-and-swap) if there is none yet.
async fn stored_key(storage: &Storage, etcd_prefix: &str) -> anyhow::Result<Vec<u8>> {
    let key = format!(
        "{}/rkube/serviceaccount-signing-key",
        etcd_prefix.trim_end_matches('/')
    );
    for _ in 0..3 {
        let (stored, _) = storage.get(&key).await?;
        if let Some(s) = stored {
            return Ok(STANDARD.decode(&s.value)?);
        }
        let made =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .map_err(|_| anyhow::anyhow!("generating the service account key"))?;
        let encoded = STANDARD.encode(made.as_ref()).into_bytes();
        if storage.create(&key, encoded, 0).await?.is_some() {
            tracing::info!("made the service account signing key");
            return Ok(made.as_ref().to_vec());
        }
    }
    anyhow::bail!("could not read or store the service account signing key")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> Issuer {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &SystemRandom::new(),
        )
        .unwrap();
        Issuer {
            key,
            kid: "k".into(),
            issuer: DEFAULT_ISSUER.into(),
            audiences: vec![DEFAULT_ISSUER.into()],
        }
    }

    #[test]
    fn tokens_verify_only_as_issued() {
        let i = issuer();
        let claims = Claims {
            namespace: "ns".into(),
            name: "robot".into(),
            uid: "u1".into(),
            bound: Some(("pods".into(), "p".into(), "pu".into())),
        };
        let (token, _) = i.issue(&claims, &[], 3600).unwrap();
        assert_eq!(i.verify(&token, &[]), Some(claims.clone()));
        assert_eq!(
            i.verify(&token, &["vault".into()]),
            None,
            "another audience"
        );
        let (vault, _) = i.issue(&claims, &["vault".into()], 3600).unwrap();
        assert!(i.verify(&vault, &[]).is_none());
        assert!(i.verify(&vault, &["vault".into()]).is_some());
        let mut forged = token.clone();
        forged.replace_range(token.len() - 5.., "AAAAA");
        assert!(i.verify(&forged, &[]).is_none());
        let (expired, _) = i.issue(&claims, &[], -10).unwrap();
        assert!(i.verify(&expired, &[]).is_none());
        assert!(issuer().verify(&token, &[]).is_none(), "another key");
        assert_eq!(i.jwks()["keys"][0]["crv"], "P-256");
    }
}
