//! The cluster's certificates and kubeconfigs (`rkube-pki`): a CA, the apiserver's serving
//! certificate, and one client certificate with its kubeconfig per identity — the admin
//! (`system:masters`), `system:kube-controller-manager`, `system:kube-scheduler` and each node
//! (`system:node:<name>` in `system:nodes`), as kubeadm lays them out; and the store's and
//! kubelet-agents' serving certificates with the client certificates the apiserver presents
//! to them (`apiserver-etcd-client`, `apiserver-kubelet-client`).
//!
//! An existing CA in the directory is kept (so certificates made earlier stay valid); every
//! other file is written afresh.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// What to generate.
#[derive(Clone, Debug)]
pub struct Plan {
    pub dir: PathBuf,
    /// The apiserver URL written into the components' kubeconfigs.
    pub server: String,
    /// The admin kubeconfig's server, when users reach the apiserver by another address
    /// (a published container port); default `server`.
    pub admin_server: Option<String>,
    /// Names and addresses the serving certificate holds besides localhost, 127.0.0.1, ::1
    /// and the `kubernetes.default.svc` names.
    pub hosts: Vec<String>,
    /// Nodes that get a `system:node:<name>` identity.
    pub nodes: Vec<String>,
    /// uid and gid to own the admin's files (when written for a user by a root container).
    pub admin_owner: Option<(u32, u32)>,
}

/// One client identity: its file stem, user name and group.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    pub file: String,
    pub user: String,
    pub group: Option<String>,
}

/// Every identity of a plan, in the order they are written.
pub fn identities(nodes: &[String]) -> Vec<Identity> {
    let id = |file: &str, user: &str, group: Option<&str>| Identity {
        file: file.into(),
        user: user.into(),
        group: group.map(str::to_string),
    };
    let mut out = vec![
        id("admin", "kubernetes-admin", Some("system:masters")),
        id("controller-manager", "system:kube-controller-manager", None),
        id("scheduler", "system:kube-scheduler", None),
    ];
    out.extend(nodes.iter().map(|n| {
        id(
            &format!("node-{n}"),
            &format!("system:node:{n}"),
            Some("system:nodes"),
        )
    }));
    out
}

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Cert(String),
}

fn cert_err(what: &str) -> impl Fn(rcgen::Error) -> PkiError + '_ {
    move |e| PkiError::Cert(format!("{what}: {e}"))
}

const CA_NAME: &str = "rkube-ca";

/// Writes the CA (unless present), the serving certificate and every identity's certificate
/// and kubeconfig; returns the files written.
pub fn generate(plan: &Plan) -> Result<Vec<PathBuf>, PkiError> {
    for n in &plan.nodes {
        if n.is_empty() || n.contains(['/', ':', ' ']) {
            return Err(PkiError::Cert(format!("invalid node name {n:?}")));
        }
    }
    let dir = &plan.dir;
    std::fs::create_dir_all(dir).map_err(|source| PkiError::Io {
        path: dir.clone(),
        source,
    })?;
    let mut written = Vec::new();
    let (ca_key_path, ca_cert_path) = (dir.join("ca.key"), dir.join("ca.crt"));
    // A new CA only where there is none: a CA half there, or unreadable, is an error rather
    // than something to replace (which would invalidate every certificate made from it).
    let existing = match (ca_cert_path.exists(), ca_key_path.exists()) {
        (true, true) => {
            let pem = std::fs::read_to_string(&ca_key_path).map_err(|source| PkiError::Io {
                path: ca_key_path.clone(),
                source,
            })?;
            Some(KeyPair::from_pem(&pem).map_err(cert_err("ca.key"))?)
        }
        (false, false) => None,
        (cert, _) => {
            return Err(PkiError::Cert(format!(
                "{} has {} but not {}; restore it or remove both",
                dir.display(),
                if cert { "ca.crt" } else { "ca.key" },
                if cert { "ca.key" } else { "ca.crt" }
            )))
        }
    };
    let fresh = existing.is_none();
    let ca_key = match existing {
        Some(k) => k,
        None => KeyPair::generate().map_err(cert_err("CA key"))?,
    };
    // The issuer is rebuilt from the same name and key, so leaves chain to ca.crt either way.
    let ca = ca_params()?.self_signed(&ca_key).map_err(cert_err("CA"))?;
    if fresh {
        write(&ca_key_path, &ca_key.serialize_pem(), true, &mut written)?;
        write(&ca_cert_path, &ca.pem(), false, &mut written)?;
    }
    let ca_pem = std::fs::read_to_string(&ca_cert_path).map_err(|source| PkiError::Io {
        path: ca_cert_path.clone(),
        source,
    })?;

    let leaf = |cn: &str,
                group: Option<&str>,
                sans: Vec<String>,
                usage: ExtendedKeyUsagePurpose|
     -> Result<(String, String), PkiError> {
        let key = KeyPair::generate().map_err(cert_err(cn))?;
        let mut p = CertificateParams::new(sans).map_err(cert_err(cn))?;
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(g) = group {
            p.distinguished_name.push(DnType::OrganizationName, g);
        }
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![usage];
        p.use_authority_key_identifier_extension = true;
        let cert = p.signed_by(&key, &ca, &ca_key).map_err(cert_err(cn))?;
        Ok((cert.pem(), key.serialize_pem()))
    };

    let mut sans: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for h in &plan.hosts {
        if !sans.contains(h) {
            sans.push(h.clone());
        }
    }
    let (crt, key) = leaf(
        "kube-apiserver",
        None,
        sans,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    write(&dir.join("apiserver.crt"), &crt, false, &mut written)?;
    write(&dir.join("apiserver.key"), &key, true, &mut written)?;

    // Serving certificates of the store and the kubelet-agents, and the client certificates
    // the apiserver presents to them (kubeadm's `apiserver-etcd-client` and
    // `apiserver-kubelet-client`; the latter in `system:masters`, which kubelets allow).
    let mut peers: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for h in plan.hosts.iter().chain(&plan.nodes) {
        if !peers.contains(h) {
            peers.push(h.clone());
        }
    }
    for (stem, cn, group, sans, usage) in [
        (
            "store",
            "rkube-store",
            None,
            peers.clone(),
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        (
            "kubelet",
            "rkube-kubelet-agent",
            None,
            peers,
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        (
            "apiserver-etcd-client",
            "kube-apiserver-etcd-client",
            None,
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
        (
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            Some("system:masters"),
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
    ] {
        let (crt, key) = leaf(cn, group, sans, usage)?;
        write(&dir.join(format!("{stem}.crt")), &crt, false, &mut written)?;
        write(&dir.join(format!("{stem}.key")), &key, true, &mut written)?;
    }

    for id in identities(&plan.nodes) {
        let (crt, key) = leaf(
            &id.user,
            id.group.as_deref(),
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        write(
            &dir.join(format!("{}.crt", id.file)),
            &crt,
            false,
            &mut written,
        )?;
        write(
            &dir.join(format!("{}.key", id.file)),
            &key,
            true,
            &mut written,
        )?;
        let server = match (&plan.admin_server, id.file.as_str()) {
            (Some(s), "admin") => s.as_str(),
            _ => plan.server.as_str(),
        };
        let yaml =
            rkube_api::kubeconfig::kubeconfig_yaml_x509("rkube", server, &ca_pem, &crt, &key);
        write(
            &dir.join(format!("{}.kubeconfig", id.file)),
            &yaml,
            true,
            &mut written,
        )?;
    }
    if let Some((uid, gid)) = plan.admin_owner {
        for f in ["admin.crt", "admin.key", "admin.kubeconfig"] {
            let path = dir.join(f);
            #[cfg(unix)]
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .map_err(|source| PkiError::Io { path, source })?;
        }
    }
    Ok(written)
}

fn ca_params() -> Result<CertificateParams, PkiError> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(cert_err("CA"))?;
    p.distinguished_name.push(DnType::CommonName, CA_NAME);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

/// Writes a file (keys and kubeconfigs readable by the owner only).
fn write(
    path: &Path,
    text: &str,
    private: bool,
    written: &mut Vec<PathBuf>,
) -> Result<(), PkiError> {
    let io = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    {
        use std::io::Write;
        // A fresh file (never one left behind, whatever its mode), created with its own mode.
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = opts.open(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    written.push(path.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dir: &Path) -> Plan {
        Plan {
            dir: dir.to_path_buf(),
            server: "https://apiserver:6443".into(),
            admin_server: Some("https://127.0.0.1:6443".into()),
            hosts: vec!["apiserver".into(), "10.0.0.9".into()],
            nodes: vec!["n1".into(), "n2".into()],
            admin_owner: None,
        }
    }

    fn subject(pem: &str) -> (String, Vec<String>, Vec<String>) {
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn = c
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let o = c
            .subject()
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        let sans = c
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|s| {
                s.value
                    .general_names
                    .iter()
                    .map(|n| n.to_string())
                    .collect()
            })
            .unwrap_or_default();
        (cn, o, sans)
    }

    #[test]
    fn writes_every_identity_and_keeps_the_ca() {
        let d = tempfile::tempdir().unwrap();
        let p = plan(d.path());
        generate(&p).unwrap();
        let read = |f: &str| std::fs::read_to_string(d.path().join(f)).unwrap();
        let (cn, o, _) = subject(&read("node-n2.crt"));
        assert_eq!(
            (cn.as_str(), o),
            ("system:node:n2", vec!["system:nodes".to_string()])
        );
        let (cn, o, _) = subject(&read("admin.crt"));
        assert_eq!(
            (cn.as_str(), o),
            ("kubernetes-admin", vec!["system:masters".to_string()])
        );
        let (cn, o, _) = subject(&read("scheduler.crt"));
        assert_eq!((cn.as_str(), o.len()), ("system:kube-scheduler", 0));
        let (_, _, sans) = subject(&read("apiserver.crt"));
        for want in [
            "DNSName(apiserver)",
            "IPAddress(0a:00:00:09)",
            "IPAddress(7f:00:00:01)",
            "DNSName(localhost)",
        ] {
            assert!(sans.iter().any(|s| s == want), "{want} in {sans:?}");
        }
        assert!(read("admin.kubeconfig").contains("server: https://127.0.0.1:6443"));
        assert!(read("controller-manager.kubeconfig").contains("server: https://apiserver:6443"));
        let cfg = rkube_api::kubeconfig::kubeconfig_yaml_x509("x", "https://a", "C", "D", "E");
        assert!(cfg.contains("certificate-authority-data: Qw=="));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(d.path().join("ca.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A second run keeps the CA, so earlier certificates stay valid.
        let ca = read("ca.crt");
        let ca_key = read("ca.key");
        let again = generate(&p).unwrap();
        assert_eq!(read("ca.crt"), ca);
        assert_eq!(read("ca.key"), ca_key);
        assert!(!again.contains(&d.path().join("ca.key")));
    }

    #[test]
    fn half_a_ca_is_an_error_not_a_new_ca() {
        let d = tempfile::tempdir().unwrap();
        generate(&plan(d.path())).unwrap();
        std::fs::remove_file(d.path().join("ca.key")).unwrap();
        let e = generate(&plan(d.path())).unwrap_err().to_string();
        assert!(e.contains("has ca.crt but not ca.key"), "{e}");
    }

    #[test]
    fn refuses_node_names_that_are_not_names() {
        let d = tempfile::tempdir().unwrap();
        let mut p = plan(d.path());
        p.nodes = vec!["a/b".into()];
        let e = generate(&p).unwrap_err().to_string();
        assert!(e.contains("invalid node name \"a/b\""), "{e}");
    }
}
