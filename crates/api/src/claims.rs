//! The PersistentVolumeClaims a pod uses: those it names, and its generic ephemeral volumes'
//! (`<pod>-<volume>`), as upstream's `ephemeral.VolumeClaimName`.

use k8s_openapi::api::core::v1::Volume;

/// The claims a pod named `pod` uses through its `volumes`: each persistentVolumeClaim's, and
/// each generic ephemeral volume's (named `<pod>-<volume>`).
pub fn claims_of(pod: &str, volumes: &[Volume]) -> Vec<String> {
    volumes
        .iter()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
                .or_else(|| v.ephemeral.as_ref().map(|_| format!("{pod}-{}", v.name)))
        })
        .collect()
}
