//! The CSR signing controller (upstream's `csrsigning`): approved CertificateSigningRequests
//! for the built-in signers (`kubernetes.io/kube-apiserver-client`,
//! `kubernetes.io/kube-apiserver-client-kubelet`, `kubernetes.io/kubelet-serving`) are signed
//! with the cluster CA (`--cluster-signing-cert-file` / `--cluster-signing-key-file`) for the
//! lifetime asked (at most a year), with the usages the signer allows; `sign` is pure.

use std::sync::Arc;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use rcgen::{
    CertificateParams, CertificateSigningRequestParams, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose,
};
use rkube_client::informer::Change;
use rkube_client::{Api, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::worker::Reconciled;

/// The signers this controller signs for.
pub const SIGNERS: [&str; 3] = [
    "kubernetes.io/kube-apiserver-client",
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
];
/// The longest certificate issued (upstream's `--cluster-signing-duration` default).
pub const MAX_SECONDS: i64 = 365 * 24 * 3600;

/// The cluster CA, as PEM.
#[derive(Clone, Debug)]
pub struct SigningCa {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Signs a PEM CSR for `signer`, valid `seconds` from now; the certificate as PEM.
pub fn sign(csr_pem: &str, ca: &SigningCa, signer: &str, seconds: i64) -> Result<String, String> {
    let mut req = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| format!("the request is not a usable CSR: {e}"))?;
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(|e| format!("cluster signing key: {e}"))?;
    let ca_cert = CertificateParams::from_ca_cert_pem(&ca.cert_pem)
        .map_err(|e| format!("cluster signing certificate: {e}"))?
        .self_signed(&ca_key)
        .map_err(|e| format!("cluster signing certificate: {e}"))?;
    let now = time::OffsetDateTime::now_utc();
    let p = &mut req.params;
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + time::Duration::seconds(seconds.clamp(600, MAX_SECONDS));
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = if signer == "kubernetes.io/kubelet-serving" {
        vec![ExtendedKeyUsagePurpose::ServerAuth]
    } else {
        p.subject_alt_names.clear();
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    p.serial_number = Some(rcgen::SerialNumber::from_slice(&rand::random::<[u8; 16]>()));
    let cert = req
        .signed_by(&ca_cert, &ca_key)
        .map_err(|e| e.to_string())?;
    Ok(cert.pem())
}

pub struct CsrSigner {
    ctx: Arc<Ctx>,
    queue: Arc<WorkQueue<String>>,
    ca: SigningCa,
}

fn condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

impl CsrSigner {
    pub fn new(ctx: Arc<Ctx>, ca: SigningCa) -> Arc<Self> {
        let c = Arc::new(CsrSigner {
            ctx: ctx.clone(),
            queue: WorkQueue::new("csrsigning"),
            ca,
        });
        let q = c.queue.clone();
        ctx.csrs.on_change(move |ch| {
            if let Change::Added(r) | Change::Updated { new: r, .. } = ch {
                q.add(r.metadata.name.clone().unwrap_or_default());
            }
        });
        c
    }

    pub fn start(self: &Arc<Self>, workers: usize, shutdown: CancellationToken) {
        crate::worker::serve!(self, "csrsigning", workers, shutdown);
    }

    async fn sync(&self, name: &str) -> Reconciled {
        let Some(csr) = self.ctx.csrs.get(name) else {
            return Ok(None);
        };
        let signer = csr.spec.signer_name.as_str();
        let issued = csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_some_and(|c| !c.0.is_empty());
        if issued
            || !SIGNERS.contains(&signer)
            || !condition(&csr, "Approved")
            || condition(&csr, "Denied")
            || condition(&csr, "Failed")
        {
            return Ok(None);
        }
        let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
        let seconds = csr.spec.expiration_seconds.map_or(MAX_SECONDS, i64::from);
        let mut next = (*csr).clone();
        let status = next.status.get_or_insert_with(Default::default);
        match sign(&pem, &self.ca, signer, seconds) {
            Ok(cert) => status.certificate = Some(k8s_openapi::ByteString(cert.into_bytes())),
            Err(why) => {
                let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(rkube_client::now());
                status.conditions.get_or_insert_with(Vec::new).push(
                    k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition {
                        type_: "Failed".into(),
                        status: "True".into(),
                        reason: Some("SignerValidationFailure".into()),
                        message: Some(why),
                        last_update_time: Some(now.clone()),
                        last_transition_time: Some(now),
                    },
                );
            }
        }
        Api::<CertificateSigningRequest>::all(&self.ctx.client)
            .replace_status(name, &next)
            .await
            .map(|_| None)
    }
}
