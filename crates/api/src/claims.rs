//! The PersistentVolumeClaims a pod uses: those it names, and its generic ephemeral volumes'
//! (`<pod>-<volume>`), as upstream's `ephemeral.VolumeClaimName`.

use k8s_openapi::api::core::v1::Pod;

pub fn claims_of(pod: &Pod) -> Vec<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
                .or_else(|| v.ephemeral.as_ref().map(|_| format!("{name}-{}", v.name)))
        })
        .collect()
}
