//! Writing a controller's revision history, shared by the StatefulSet and DaemonSet
//! controllers (upstream's `controller/history` client): the revision equal to the owner's
//! template reused, renumbered when it is an older one (a rollback), or created (a name taken
//! by other data counts a hash collision), and the history pruned to `revisionHistoryLimit`.
//! The decisions are `history`'s.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkube_client::informer::index;
use rkube_client::{Api, DeleteParams, Error, Patch};
use serde_json::json;

use crate::context::Ctx;
use crate::history::{self, Found};
use crate::objects::controller_ref;

/// The owner of a history: `apps/v1` `kind`, its metadata, its template and the collision
/// count in its status.
pub struct Owner<'a> {
    pub kind: &'a str,
    pub meta: &'a ObjectMeta,
    pub template: &'a PodTemplateSpec,
    pub collisions: i32,
}

/// The owner's revisions, oldest first.
pub fn owned(ctx: &Ctx, meta: &ObjectMeta) -> Vec<Arc<ControllerRevision>> {
    let uid = meta.uid.as_deref().unwrap_or_default();
    let mut revs: Vec<Arc<ControllerRevision>> = ctx
        .revisions
        .by_index(index::OWNER_UID, uid)
        .into_iter()
        .filter(|r| controller_ref(&r.metadata).is_some_and(|c| c.uid == uid))
        .collect();
    history::sort(&mut revs);
    revs
}

/// The revision of the owner's template, and the collision count to record; `None` while a
/// revision just written is not yet in the cache (the caller retries shortly).
pub async fn update_revision(
    ctx: &Ctx,
    owner: &Owner<'_>,
    revs: &[Arc<ControllerRevision>],
) -> Result<Option<(Arc<ControllerRevision>, i32)>, Error> {
    let ns = owner.meta.namespace.as_deref().unwrap_or_default();
    let uid = owner.meta.uid.as_deref().unwrap_or_default();
    let data = history::patch_of(owner.template);
    let api: Api<ControllerRevision> = Api::namespaced(&ctx.client, ns);
    let next = history::next_number(revs);
    let mut collisions = owner.collisions;
    match history::find(revs, &data) {
        Found::Latest(i) => return Ok(Some((revs[i].clone(), collisions))),
        Found::Older(i) => {
            let name = revs[i].metadata.name.clone().unwrap_or_default();
            let patch = Patch::Merge(json!({"revision": next}));
            return Ok(Some((
                Arc::new(api.patch(&name, &patch).await?),
                collisions,
            )));
        }
        Found::New => {}
    }
    let labels = owner
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    for _ in 0..5 {
        let rev = history::new_revision(
            "apps/v1",
            owner.kind,
            owner.meta,
            labels,
            data.clone(),
            next,
            collisions,
        );
        match api.create(&rev).await {
            Ok(r) => return Ok(Some((Arc::new(r), collisions))),
            Err(e) if e.is_already_exists() => {
                let name = rev.metadata.name.clone().unwrap_or_default();
                let existing = api.get(&name).await?;
                if existing.data.as_ref().map(|d| &d.0) == Some(&data) {
                    match controller_ref(&existing.metadata) {
                        // Ours, not yet in the cache.
                        Some(c) if c.uid == uid => return Ok(None),
                        // An orphan of an earlier owner of this name (deleted with
                        // `--cascade=orphan`): adopted, so its pods need no replacing.
                        None => {
                            let mut refs = existing.metadata.owner_references.unwrap_or_default();
                            refs.extend(rev.metadata.owner_references.unwrap_or_default());
                            let patch = Patch::Merge(json!({"metadata": {
                                "ownerReferences": refs,
                                "resourceVersion": existing.metadata.resource_version,
                            }}));
                            api.patch(&name, &patch).await?;
                            return Ok(None);
                        }
                        Some(_) => {}
                    }
                }
                collisions += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Deletes revisions past `limit` that nothing in `live` (revision names) still uses.
pub async fn prune(
    ctx: &Ctx,
    ns: &str,
    revs: &[Arc<ControllerRevision>],
    live: &HashSet<&str>,
    limit: i32,
) -> Result<(), Error> {
    let api: Api<ControllerRevision> = Api::namespaced(&ctx.client, ns);
    for r in history::to_prune(revs, live, limit) {
        match api
            .delete(
                r.metadata.name.as_deref().unwrap_or_default(),
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
