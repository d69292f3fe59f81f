//! Encryption at rest (`--encryption-provider-config`, an `apiserver.config.k8s.io/v1`
//! EncryptionConfiguration): for each listed resource, the first provider's first key
//! encrypts what is written, and every provider and key can read. Stored values are upstream's:
//! `k8s:enc:<provider>:v1:<key name>:` then, for `aesgcm`, a 12-byte nonce and AES-GCM
//! sealed with the storage key as authenticated data; for `aescbc`, a 16-byte IV and AES-CBC
//! with PKCS#7 padding; for `secretbox`, a 24-byte nonce and XSalsa20-Poly1305. `identity`
//! stores plain bytes (and reads anything without a prefix).

use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use base64::Engine as _;
use rkube_api::ResourceDef;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceConfig {
    resources: Vec<String>,
    providers: Vec<ProviderConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderConfig {
    aesgcm: Option<KeysConfig>,
    aescbc: Option<KeysConfig>,
    secretbox: Option<KeysConfig>,
    identity: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysConfig {
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyConfig {
    name: String,
    secret: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cipher {
    AesGcm,
    AesCbc,
    SecretBox,
}

impl Cipher {
    fn name(self) -> &'static str {
        match self {
            Cipher::AesGcm => "aesgcm",
            Cipher::AesCbc => "aescbc",
            Cipher::SecretBox => "secretbox",
        }
    }
}

struct Key {
    cipher: Cipher,
    name: String,
    secret: Vec<u8>,
    /// `k8s:enc:<provider>:v1:<name>:`
    prefix: Vec<u8>,
}

enum Provider {
    Keys(Vec<Key>),
    Identity,
}

/// The providers of one set of resources, in order.
pub struct Chain {
    providers: Vec<Provider>,
}

/// Which storage keys get which provider chain.
#[derive(Default)]
pub struct Transformer {
    /// (storage key prefix, providers); the longest matching prefix wins.
    by_prefix: Vec<(String, Arc<Chain>)>,
}

const ENC_PREFIX: &[u8] = b"k8s:enc:";

impl Transformer {
    /// Parses the configuration and maps it onto the served resources stored under
    /// `etcd_prefix`. Errors say what is wrong (bad YAML, unknown provider, key sizes, base64).
    pub fn from_config(
        text: &str,
        etcd_prefix: &str,
        served: &[ResourceDef],
    ) -> Result<Self, String> {
        let doc: ConfigDoc = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        if doc.kind != "EncryptionConfiguration" || doc.api_version != "apiserver.config.k8s.io/v1"
        {
            return Err(format!(
                "want apiVersion apiserver.config.k8s.io/v1, kind EncryptionConfiguration; got {}, {}",
                doc.api_version, doc.kind
            ));
        }
        let mut by_prefix: Vec<(String, Arc<Chain>)> = Vec::new();
        for (i, rc) in doc.resources.iter().enumerate() {
            if rc.providers.is_empty() {
                return Err(format!(
                    "resources[{i}].providers: at least one provider is required"
                ));
            }
            let chain = Arc::new(Chain {
                providers: rc
                    .providers
                    .iter()
                    .enumerate()
                    .map(|(j, p)| {
                        provider(p).map_err(|e| format!("resources[{i}].providers[{j}]: {e}"))
                    })
                    .collect::<Result<_, _>>()?,
            });
            for pattern in &rc.resources {
                let mut matched = false;
                for def in served.iter().filter(|d| covers(pattern, d)) {
                    matched = true;
                    let prefix = format!(
                        "{}/{}/",
                        etcd_prefix.trim_end_matches('/'),
                        def.storage_prefix
                    );
                    // The first configuration naming a resource wins, as upstream.
                    if !by_prefix.iter().any(|(p, _)| *p == prefix) {
                        by_prefix.push((prefix, chain.clone()));
                    }
                }
                if !matched && !pattern.contains('*') {
                    return Err(format!(
                        "resources[{i}].resources: {pattern:?} is not a served resource"
                    ));
                }
            }
        }
        by_prefix.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        Ok(Transformer { by_prefix })
    }

    fn chain(&self, key: &[u8]) -> Option<&Chain> {
        self.by_prefix
            .iter()
            .find(|(p, _)| key.starts_with(p.as_bytes()))
            .map(|(_, c)| c.as_ref())
    }

    /// Whether any resource is encrypted.
    pub fn is_active(&self) -> bool {
        !self.by_prefix.is_empty()
    }

    /// The bytes to store for `value` at `key`.
    pub fn to_storage(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, String> {
        match self.chain(key).and_then(|c| c.providers.first()) {
            Some(Provider::Keys(keys)) => seal(&keys[0], key, &value),
            Some(Provider::Identity) | None => Ok(value),
        }
    }

    /// The plain bytes of a stored `value` at `key`.
    pub fn from_storage(&self, key: &[u8], value: Vec<u8>) -> Result<Vec<u8>, String> {
        if !value.starts_with(ENC_PREFIX) {
            return Ok(value);
        }
        let all_keys = self
            .by_prefix
            .iter()
            .flat_map(|(_, c)| c.providers.iter())
            .filter_map(|p| match p {
                Provider::Keys(keys) => Some(keys.iter()),
                Provider::Identity => None,
            });
        let preferred = self
            .chain(key)
            .into_iter()
            .flat_map(|c| c.providers.iter())
            .filter_map(|p| match p {
                Provider::Keys(keys) => Some(keys.iter()),
                Provider::Identity => None,
            });
        for k in preferred.chain(all_keys).flatten() {
            if let Some(body) = value.strip_prefix(k.prefix.as_slice()) {
                return open(k, key, body);
            }
        }
        let end = value.len().min(64);
        Err(format!(
            "no key can decrypt the value stored at {} (it starts {:?})",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(&value[..end])
                .split(':')
                .take(5)
                .collect::<Vec<_>>()
                .join(":")
        ))
    }
}

/// `secrets`, `deployments.apps`, `*.apps`, `*.` (the core group), `*.*`.
fn covers(pattern: &str, def: &ResourceDef) -> bool {
    let (resource, group) = pattern.split_once('.').unwrap_or((pattern, ""));
    (resource == "*" || resource == def.plural) && (group == "*" || group == def.group)
}

fn provider(p: &ProviderConfig) -> Result<Provider, String> {
    let set = [
        p.aesgcm.is_some(),
        p.aescbc.is_some(),
        p.secretbox.is_some(),
        p.identity.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        return Err("exactly one of aesgcm, aescbc, secretbox, identity per provider".into());
    }
    let (cipher, keys) = match (&p.aesgcm, &p.aescbc, &p.secretbox) {
        (Some(k), _, _) => (Cipher::AesGcm, k),
        (_, Some(k), _) => (Cipher::AesCbc, k),
        (_, _, Some(k)) => (Cipher::SecretBox, k),
        _ => return Ok(Provider::Identity),
    };
    if keys.keys.is_empty() {
        return Err(format!("{}: at least one key is required", cipher.name()));
    }
    let keys = keys
        .keys
        .iter()
        .map(|k| {
            let secret = base64::engine::general_purpose::STANDARD
                .decode(k.secret.trim())
                .map_err(|e| {
                    format!(
                        "{} key {:?}: secret is not base64: {e}",
                        cipher.name(),
                        k.name
                    )
                })?;
            let ok = match cipher {
                Cipher::AesGcm | Cipher::AesCbc => matches!(secret.len(), 16 | 24 | 32),
                Cipher::SecretBox => secret.len() == 32,
            };
            if !ok {
                return Err(format!(
                    "{} key {:?}: {} bytes is not a valid key size ({})",
                    cipher.name(),
                    k.name,
                    secret.len(),
                    if cipher == Cipher::SecretBox {
                        "32"
                    } else {
                        "16, 24 or 32"
                    }
                ));
            }
            if k.name.is_empty() || k.name.contains(':') {
                return Err(format!(
                    "{} key name {:?} must be non-empty without ':'",
                    cipher.name(),
                    k.name
                ));
            }
            Ok(Key {
                cipher,
                prefix: format!("k8s:enc:{}:v1:{}:", cipher.name(), k.name).into_bytes(),
                name: k.name.clone(),
                secret,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Provider::Keys(keys))
}

fn seal(k: &Key, storage_key: &[u8], plain: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = k.prefix.clone();
    match k.cipher {
        Cipher::AesGcm => {
            let nonce: [u8; 12] = rand::random();
            let sealed = gcm_encrypt(&k.secret, &nonce, plain, storage_key)?;
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&sealed);
        }
        Cipher::AesCbc => {
            let iv: [u8; 16] = rand::random();
            out.extend_from_slice(&iv);
            out.extend_from_slice(&cbc_encrypt(&k.secret, &iv, plain)?);
        }
        Cipher::SecretBox => {
            let nonce: [u8; 24] = rand::random();
            let cipher = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&k.secret)
                .map_err(|e| e.to_string())?;
            let sealed = cipher
                .encrypt(&nonce.into(), plain)
                .map_err(|_| "secretbox: encryption failed".to_string())?;
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&sealed);
        }
    }
    Ok(out)
}

fn open(k: &Key, storage_key: &[u8], body: &[u8]) -> Result<Vec<u8>, String> {
    let fail = |what: &str| {
        format!(
            "{} key {:?} cannot decrypt the value at {}: {what}",
            k.cipher.name(),
            k.name,
            String::from_utf8_lossy(storage_key)
        )
    };
    match k.cipher {
        Cipher::AesGcm => {
            if body.len() < 12 {
                return Err(fail("too short"));
            }
            let (nonce, sealed) = body.split_at(12);
            gcm_decrypt(&k.secret, nonce, sealed, storage_key)
                .map_err(|_| fail("authentication failed"))
        }
        Cipher::AesCbc => {
            if body.len() < 32 || !body.len().is_multiple_of(16) {
                return Err(fail("not whole blocks"));
            }
            let (iv, data) = body.split_at(16);
            cbc_decrypt(&k.secret, iv, data).map_err(|_| fail("bad padding"))
        }
        Cipher::SecretBox => {
            if body.len() < 24 {
                return Err(fail("too short"));
            }
            let (nonce, sealed) = body.split_at(24);
            let cipher = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&k.secret)
                .map_err(|e| e.to_string())?;
            cipher
                .decrypt(crypto_secretbox::Nonce::from_slice(nonce), sealed)
                .map_err(|_| fail("authentication failed"))
        }
    }
}

fn gcm_encrypt(key: &[u8], nonce: &[u8], plain: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
    let payload = Payload { msg: plain, aad };
    let nonce = aes_gcm::Nonce::from_slice(nonce);
    match key.len() {
        16 => aes_gcm::Aes128Gcm::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .encrypt(nonce, payload),
        24 => aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .encrypt(nonce, payload),
        _ => aes_gcm::Aes256Gcm::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .encrypt(nonce, payload),
    }
    .map_err(|_| "aesgcm: encryption failed".into())
}

fn gcm_decrypt(key: &[u8], nonce: &[u8], sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
    let payload = Payload { msg: sealed, aad };
    let nonce = aes_gcm::Nonce::from_slice(nonce);
    match key.len() {
        16 => aes_gcm::Aes128Gcm::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .decrypt(nonce, payload),
        24 => aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .decrypt(nonce, payload),
        _ => aes_gcm::Aes256Gcm::new_from_slice(key)
            .map_err(|e| e.to_string())?
            .decrypt(nonce, payload),
    }
    .map_err(|_| "aesgcm: decryption failed".into())
}

fn cbc_encrypt(key: &[u8], iv: &[u8], plain: &[u8]) -> Result<Vec<u8>, String> {
    use cbc::cipher::{block_padding::Pkcs7, BlockEncryptMut, KeyIvInit};
    Ok(match key.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
        _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .encrypt_padded_vec_mut::<Pkcs7>(plain),
    })
}

fn cbc_decrypt(key: &[u8], iv: &[u8], data: &[u8]) -> Result<Vec<u8>, String> {
    use cbc::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
    match key.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data),
        24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data),
        _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|e| e.to_string())?
            .decrypt_padded_vec_mut::<Pkcs7>(data),
    }
    .map_err(|_| "aescbc: bad padding".into())
}

#[cfg(test)]
mod tests;
