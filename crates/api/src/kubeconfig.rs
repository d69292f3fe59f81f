//! The kubeconfig documents rkube writes for kubectl and its own components (the apiserver's
//! `--write-kubeconfig`, `rkube-pki`, the up script, the test clusters).

use base64::Engine;

/// A kubeconfig with one cluster/user/context named `name`, pointing at `server`.
pub fn kubeconfig_yaml(name: &str, server: &str, token: Option<&str>) -> String {
    let user = match token {
        Some(t) => format!("    token: {t}\n"),
        None => "    {}\n".to_string(),
    };
    document(name, &format!("    server: {server}\n"), &user)
}

/// A kubeconfig for an HTTPS `server` trusted through `ca_pem`, authenticating with the PEM
/// client certificate and key (all embedded as `-data`, so the file works wherever it is
/// copied, e.g. into a container).
pub fn kubeconfig_yaml_x509(
    name: &str,
    server: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = format!(
        "    server: {server}\n    certificate-authority-data: {}\n",
        b64(ca_pem)
    );
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(cert_pem),
        b64(key_pem)
    );
    document(name, &cluster, &user)
}

fn document(name: &str, cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n{cluster}\
         users:\n- name: {name}\n  user:\n{user}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n\
         current-context: {name}\n"
    )
}
