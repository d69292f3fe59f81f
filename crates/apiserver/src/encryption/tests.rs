use super::*;

const K32: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // "0123456789abcdef0123456789abcdef"
const K16: &str = "MDEyMzQ1Njc4OWFiY2RlZg=="; // "0123456789abcdef"

fn config(providers: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets, configmaps]\n  providers:\n{providers}"
    )
}

fn transformer(providers: &str) -> Transformer {
    Transformer::from_config(&config(providers), "/registry", rkube_api::RESOURCES).unwrap()
}

const KEY: &[u8] = b"/registry/secrets/default/s1";

#[test]
fn every_provider_round_trips_with_upstreams_prefix() {
    for (name, providers) in [
        (
            "aesgcm",
            format!("  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"),
        ),
        (
            "aesgcm",
            format!("  - aesgcm: {{keys: [{{name: k1, secret: {K16}}}]}}\n"),
        ),
        (
            "aescbc",
            format!("  - aescbc: {{keys: [{{name: k1, secret: {K32}}}]}}\n"),
        ),
        (
            "secretbox",
            format!("  - secretbox: {{keys: [{{name: k1, secret: {K32}}}]}}\n"),
        ),
    ] {
        let t = transformer(&providers);
        let plain = br#"{"data":{"password":"aHVudGVyMg=="}}"#.to_vec();
        let stored = t.to_storage(KEY, plain.clone()).unwrap();
        let prefix = format!("k8s:enc:{name}:v1:k1:");
        assert!(stored.starts_with(prefix.as_bytes()), "{name}");
        assert!(
            !stored.windows(8).any(|w| w == b"password"),
            "{name}: no plaintext"
        );
        assert_ne!(
            stored,
            t.to_storage(KEY, plain.clone()).unwrap(),
            "{name}: fresh nonce each write"
        );
        assert_eq!(t.from_storage(KEY, stored).unwrap(), plain, "{name}");
    }
}

#[test]
fn aesgcm_binds_the_value_to_its_storage_key() {
    let t = transformer(&format!(
        "  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"
    ));
    let stored = t.to_storage(KEY, b"{}".to_vec()).unwrap();
    let moved = b"/registry/secrets/default/other";
    let err = t.from_storage(moved, stored).unwrap_err();
    assert!(err.contains("authentication failed"), "{err}");
}

#[test]
fn the_first_key_writes_and_every_key_reads() {
    let old = transformer(&format!(
        "  - aesgcm: {{keys: [{{name: old, secret: {K32}}}]}}\n"
    ));
    let written_before = old.to_storage(KEY, b"before".to_vec()).unwrap();
    let plain_before = b"{\"plain\":true}".to_vec();
    // Rotation: a new first key; the old one still reads; identity reads unencrypted data.
    let rotated = transformer(&format!(
        "  - aesgcm: {{keys: [{{name: new, secret: {K16}}}, {{name: old, secret: {K32}}}]}}\n  - identity: {{}}\n"
    ));
    assert_eq!(
        rotated.from_storage(KEY, written_before).unwrap(),
        b"before"
    );
    assert_eq!(
        rotated.from_storage(KEY, plain_before.clone()).unwrap(),
        plain_before
    );
    assert!(rotated
        .to_storage(KEY, b"after".to_vec())
        .unwrap()
        .starts_with(b"k8s:enc:aesgcm:v1:new:"));
    // Decryption turned off (identity first): new writes are plain, old values still read.
    let off = transformer(&format!(
        "  - identity: {{}}\n  - aesgcm: {{keys: [{{name: new, secret: {K16}}}]}}\n"
    ));
    let w = rotated.to_storage(KEY, b"x".to_vec()).unwrap();
    assert_eq!(off.from_storage(KEY, w).unwrap(), b"x");
    assert_eq!(off.to_storage(KEY, b"y".to_vec()).unwrap(), b"y");
    // A key nobody has any more is an error, not garbage.
    let other = transformer(&format!(
        "  - secretbox: {{keys: [{{name: sb, secret: {K32}}}]}}\n"
    ));
    let err = other
        .from_storage(KEY, rotated.to_storage(KEY, b"z".to_vec()).unwrap())
        .unwrap_err();
    assert!(err.contains("no key can decrypt"), "{err}");
}

#[test]
fn resources_are_matched_by_name_group_and_wildcards() {
    let t = Transformer::from_config(
        &format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [\"*.apps\"]\n  providers:\n  - aesgcm: {{keys: [{{name: k, secret: {K32}}}]}}\n"
        ),
        "/registry",
        rkube_api::RESOURCES,
    )
    .unwrap();
    assert!(t
        .to_storage(b"/registry/deployments/d/x", b"{}".to_vec())
        .unwrap()
        .starts_with(b"k8s:enc:"));
    assert!(t
        .to_storage(b"/registry/replicasets/d/x", b"{}".to_vec())
        .unwrap()
        .starts_with(b"k8s:enc:"));
    assert_eq!(t.to_storage(KEY, b"{}".to_vec()).unwrap(), b"{}");
}

#[test]
fn bad_configurations_say_what_is_wrong() {
    let err = |providers: &str| {
        Transformer::from_config(&config(providers), "/registry", rkube_api::RESOURCES)
            .err()
            .unwrap()
    };
    assert!(
        err("  - aesgcm: {keys: [{name: k, secret: c2hvcnQ=}]}\n").contains("not a valid key size")
    );
    assert!(
        err("  - aesgcm: {keys: [{name: k, secret: \"not base64!\"}]}\n").contains("not base64")
    );
    assert!(err("  - rot13: {}\n").contains("rot13"));
    assert!(err("  - aesgcm: {keys: []}\n").contains("at least one key"));
    let wrong_kind = "apiVersion: v1\nkind: ConfigMap\n";
    assert!(
        Transformer::from_config(wrong_kind, "/registry", rkube_api::RESOURCES)
            .err()
            .unwrap()
            .contains("EncryptionConfiguration")
    );
    let unknown = format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [widgets]\n  providers:\n  - aesgcm: {{keys: [{{name: k, secret: {K32}}}]}}\n");
    assert!(
        Transformer::from_config(&unknown, "/registry", rkube_api::RESOURCES)
            .err()
            .unwrap()
            .contains("widgets")
    );
}
