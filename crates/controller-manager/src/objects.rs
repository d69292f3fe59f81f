//! Helpers over API objects that every controller shares: an object's controller reference,
//! its labels, a workload's label selector (an empty one selects nothing), and the events a
//! pure decision asks for.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use rkube_api::LabelSelector as Selector;

pub fn controller_ref(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// What a controller with `uid` may claim in `ns`: the objects it controls and the
/// namespace's uncontrolled ones (upstream's controller-UID index with its orphan entries),
/// never every object in the namespace — a sync costs what the controller owns.
pub fn claim_candidates<K: rkube_client::Resource>(
    store: &rkube_client::informer::Store<K>,
    uid: &str,
    ns: &str,
) -> Vec<std::sync::Arc<K>> {
    use rkube_client::informer::index;
    let mut out: Vec<std::sync::Arc<K>> = store
        .by_index(index::OWNER_UID, uid)
        .into_iter()
        .filter(|o| {
            o.metadata().namespace.as_deref().unwrap_or_default() == ns
                && controller_ref(o.metadata()).is_some_and(|r| r.uid == uid)
        })
        .collect();
    out.extend(store.by_index(index::ORPHANS, ns));
    out
}

/// Parses a `metav1.LabelSelector`; an empty or absent one selects nothing here (a controller
/// must never adopt everything).
pub fn selector(s: Option<&LabelSelector>) -> Option<Selector> {
    let s = s?;
    let empty = s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty());
    if empty {
        return None;
    }
    Selector::from_api(s).ok()
}

pub fn labels_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// An event a controller's pure core decided on; its I/O side records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Records `events` about `regarding`.
pub fn record(
    recorder: &rkube_client::events::Recorder,
    regarding: k8s_openapi::api::core::v1::ObjectReference,
    events: &[Event],
) {
    for e in events {
        if e.warning {
            recorder.warning(regarding.clone(), e.reason, e.message.clone());
        } else {
            recorder.normal(regarding.clone(), e.reason, e.message.clone());
        }
    }
}

/// The controller reference a controller puts on what it creates (`controller` and
/// `blockOwnerDeletion` set, as upstream's `NewControllerRef`).
pub fn controller_of(
    api_version: &str,
    kind: &str,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
