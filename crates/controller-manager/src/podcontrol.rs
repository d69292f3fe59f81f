//! Creating and deleting a controller's pods (upstream's `PodControl`), shared by the Job and
//! DaemonSet controllers: expectations raised first and lowered for what will never be
//! observed, creations in slow-start batches (1, 2, 4 … while they succeed), deletions with a
//! UID precondition, an event per pod.

use std::sync::Arc;

use futures_util::future::join_all;
use k8s_openapi::api::core::v1::{self, ObjectReference};
use rkube_client::events::Recorder;
use rkube_client::informer::{key_of, Change};
use rkube_client::pod::Pod;
use rkube_client::{Api, DeleteParams, Error};

use crate::expectations::Expectations;
use crate::objects::controller_ref;

/// The pods' owner as the controllers see it: where its events go, what it expects.
pub struct Owner<'a> {
    pub key: &'a str,
    pub regarding: ObjectReference,
    pub recorder: &'a Recorder,
    pub expectations: &'a Expectations,
}

/// Creates `pods` (k8s-openapi's full type: built from a template, not read from the cache).
pub async fn create(owner: &Owner<'_>, api: &Api<v1::Pod>, pods: &[v1::Pod]) -> Result<(), Error> {
    owner.expectations.expect_creations(owner.key, pods.len());
    let mut failure = None;
    let mut left = pods;
    for batch in crate::replicaset::logic::slow_start_batches(pods.len()) {
        let (now, rest) = left.split_at(batch.min(left.len()));
        left = rest;
        for r in join_all(now.iter().map(|p| api.create(p))).await {
            match r {
                Ok(p) => owner.recorder.normal(
                    owner.regarding.clone(),
                    "SuccessfulCreate",
                    format!("Created pod: {}", p.metadata.name.unwrap_or_default()),
                ),
                Err(e) => {
                    owner.expectations.creation_observed(owner.key);
                    owner.recorder.warning(
                        owner.regarding.clone(),
                        "FailedCreate",
                        format!("Error creating: {e}"),
                    );
                    failure = Some(e);
                }
            }
        }
        if failure.is_some() {
            for _ in 0..left.len() {
                owner.expectations.creation_observed(owner.key);
            }
            break;
        }
    }
    failure.map_or(Ok(()), Err)
}

pub async fn delete(owner: &Owner<'_>, api: &Api<Pod>, pods: &[Arc<Pod>]) -> Result<(), Error> {
    owner
        .expectations
        .expect_deletions(owner.key, pods.iter().map(|p| key_of(&**p)));
    let results = join_all(pods.iter().map(|p| async move {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let dp = DeleteParams::with_uid(p.metadata.uid.as_deref().unwrap_or_default());
        (p, api.delete(name, &dp).await)
    }))
    .await;
    let mut failure = None;
    for (p, r) in results {
        let name = p.metadata.name.clone().unwrap_or_default();
        match r {
            Ok(_) => owner.recorder.normal(
                owner.regarding.clone(),
                "SuccessfulDelete",
                format!("Deleted pod: {name}"),
            ),
            Err(e) => {
                owner
                    .expectations
                    .deletion_observed(owner.key, &key_of(&**p));
                if !e.is_not_found() && e.code() != Some(409) {
                    failure = Some(e);
                }
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// A pod event for a controller of `group`/`kind`: the owner's key (`ns/name` from the
/// controller reference) with its expectations lowered for what the event shows, and the pod
/// — or `None` when another kind (or a same-named kind of another group) controls it.
pub fn observe<'a>(
    expectations: &Expectations,
    (group, kind): (&str, &str),
    ch: &'a Change<Pod>,
) -> Option<(String, &'a Pod, bool)> {
    let (p, added, gone) = match ch {
        Change::Added(p) => (p, true, false),
        Change::Updated { new, .. } => (new, false, false),
        Change::Deleted(p) => (p, false, true),
    };
    let r = controller_ref(&p.metadata).filter(|r| {
        r.kind == kind && r.api_version.split_once('/').map_or("", |(g, _)| g) == group
    })?;
    let key = format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        r.name
    );
    if added {
        expectations.creation_observed(&key);
    }
    if gone || p.metadata.deletion_timestamp.is_some() {
        expectations.deletion_observed(&key, &key_of(&**p));
    }
    Some((key, &**p, gone))
}
