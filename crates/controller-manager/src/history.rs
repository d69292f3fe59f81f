//! Controller revisions (upstream's `controller/history`), without I/O: a pod template's
//! snapshot as the strategic-merge patch `kubectl rollout undo` applies, its collision-safe
//! hash and name, the equal revision to reuse, and which old revisions to prune.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};

/// The label carrying a revision's hash (on the revision) or its name (on a StatefulSet's
/// pods; a DaemonSet's pods carry the hash).
pub const HASH_LABEL: &str = "controller-revision-hash";

/// `{"spec":{"template":{…,"$patch":"replace"}}}`: what a revision stores, and the patch that
/// restores it.
pub fn patch_of(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if let Some(m) = t.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The template a revision stores.
pub fn template_of(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// Upstream's `HashControllerRevision`: a 32-bit FNV hash over the data and the collision
/// count, its decimal digits safe-encoded (`6c5d4f8b9`-like).
pub fn hash(data: &Value, collision_count: i32) -> String {
    use crate::deployment::logic::{fnv32a, safe_encode};
    let bytes = serde_json::to_vec(data).unwrap_or_default();
    let h = fnv32a(
        collision_count.to_string().as_bytes(),
        fnv32a(&bytes, 2_166_136_261),
    );
    safe_encode(&h.to_string())
}

/// A new revision `number` of the owner (`api_version`/`kind`, `owner`) with `data`, labelled
/// with the template's labels and the hash, named `<owner>-<hash>`.
pub fn new_revision(
    api_version: &str,
    kind: &str,
    owner: &ObjectMeta,
    template_labels: Option<&std::collections::BTreeMap<String, String>>,
    data: Value,
    number: i64,
    collision_count: i32,
) -> ControllerRevision {
    let h = hash(&data, collision_count);
    let mut labels = template_labels.cloned().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), h.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{}-{h}", owner.name.as_deref().unwrap_or_default())),
            namespace: owner.namespace.clone(),
            labels: Some(labels),
            // As upstream, the owner's annotations (its change-cause among them).
            annotations: owner.annotations.clone(),
            owner_references: Some(vec![crate::objects::controller_of(
                api_version,
                kind,
                owner,
            )]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// Oldest first: by revision number, then name.
pub fn sort(revs: &mut [Arc<ControllerRevision>]) {
    revs.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

/// The number the next revision gets (`revs` sorted).
pub fn next_number(revs: &[Arc<ControllerRevision>]) -> i64 {
    revs.last().map_or(1, |r| r.revision + 1)
}

/// Where the owner's current template stands in its history (`revs` sorted).
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The newest revision holds it: nothing to write.
    Latest(usize),
    /// An older revision holds it (a rollback): renumber it to the next number.
    Older(usize),
    /// No revision holds it: create one.
    New,
}

pub fn find(revs: &[Arc<ControllerRevision>], data: &Value) -> Found {
    match revs
        .iter()
        .rposition(|r| r.data.as_ref().is_some_and(|d| &d.0 == data))
    {
        Some(i) if i + 1 == revs.len() => Found::Latest(i),
        Some(i) => Found::Older(i),
        None => Found::New,
    }
}

/// Revisions to delete so at most `limit` non-live ones remain, oldest first (`revs` sorted;
/// `live`: the names the owner and its pods still use).
pub fn to_prune(
    revs: &[Arc<ControllerRevision>],
    live: &HashSet<&str>,
    limit: i32,
) -> Vec<Arc<ControllerRevision>> {
    let old: Vec<_> = revs
        .iter()
        .filter(|r| !live.contains(r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    old.iter()
        .take(old.len().saturating_sub(limit))
        .map(|r| (*r).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(n: i64, name: &str, image: &str) -> Arc<ControllerRevision> {
        let t: PodTemplateSpec = serde_json::from_value(
            json!({"spec": {"containers": [{"name": "c", "image": image}]}}),
        )
        .unwrap();
        let mut r = new_revision(
            "apps/v1",
            "StatefulSet",
            &ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            None,
            patch_of(&t),
            n,
            0,
        );
        r.metadata.name = Some(name.into());
        Arc::new(r)
    }

    #[test]
    fn the_patch_restores_the_template_and_hashes_alike() {
        let t: PodTemplateSpec =
            serde_json::from_value(json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
                .unwrap();
        let data = patch_of(&t);
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        let r = new_revision(
            "apps/v1",
            "StatefulSet",
            &ObjectMeta {
                name: Some("web".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            t.metadata.as_ref().and_then(|m| m.labels.as_ref()),
            data.clone(),
            1,
            0,
        );
        assert_eq!(template_of(&r), Some(t));
        let h = hash(&data, 0);
        assert_eq!(
            r.metadata.name.as_deref(),
            Some(format!("web-{h}").as_str())
        );
        assert!(h
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));
        assert_eq!(h, hash(&data, 0), "stable");
        assert_ne!(h, hash(&data, 1), "a collision changes the name");
        let labels = r.metadata.labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[HASH_LABEL], h);
        assert_eq!(r.metadata.owner_references.unwrap()[0].uid, "u1");
    }

    #[test]
    fn equal_revisions_are_found_latest_or_older() {
        let mut revs = vec![rev(3, "c", "v3"), rev(1, "a", "v1"), rev(2, "b", "v2")];
        sort(&mut revs);
        assert_eq!(next_number(&revs), 4);
        assert_eq!(
            find(&revs, &revs[2].data.clone().unwrap().0),
            Found::Latest(2)
        );
        assert_eq!(
            find(&revs, &revs[0].data.clone().unwrap().0),
            Found::Older(0)
        );
        assert_eq!(find(&revs, &json!({})), Found::New);
        assert_eq!(next_number(&[]), 1);
    }

    #[test]
    fn pruning_keeps_live_revisions_and_the_newest_old_ones() {
        let revs: Vec<_> = (1..=5)
            .map(|n| rev(n, &format!("r{n}"), &format!("v{n}")))
            .collect();
        let live: HashSet<&str> = ["r1", "r5"].into();
        let names = |v: Vec<Arc<ControllerRevision>>| {
            v.iter()
                .map(|r| r.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(to_prune(&revs, &live, 1)), ["r2", "r3"]);
        assert_eq!(names(to_prune(&revs, &live, 0)), ["r2", "r3", "r4"]);
        assert!(to_prune(&revs, &live, 10).is_empty());
        assert!(to_prune(&revs, &live, -1).is_empty());
    }
}
