//! NamespaceLifecycle: nothing new in a namespace that does not exist or is being deleted,
//! and the namespaces a cluster cannot work without (`default`, `kube-system`,
//! `kube-public`) are never deleted.

use rkube_api::{meta, ApiError, GroupResource};
use serde_json::Value;

use crate::kinds::namespace::IMMORTAL;
use crate::registry::{Attributes, Registries};
use crate::storage::{decode, storage_error};

/// A create in `a.namespace`: the namespace must exist and not be terminating.
pub async fn admit_create(
    registries: &Registries,
    a: &Attributes<'_>,
    obj: &Value,
) -> Result<(), ApiError> {
    if !a.def.namespaced {
        return Ok(());
    }
    let Some(namespaces) = registries.get(&("", "namespaces")) else {
        return Ok(());
    };
    let ns = a.namespace;
    let key = namespaces.key("", ns);
    let cached = namespaces
        .cache
        .as_ref()
        .and_then(|c| c.get(&key).ok())
        .and_then(|(o, _)| o)
        .map(|o| o.value());
    let found = match cached {
        Some(v) => Some(v),
        // The cache may lag a namespace created a moment ago: ask storage.
        None => namespaces
            .storage
            .get(&key)
            .await
            .map_err(|e| storage_error(a.def, "create", e))?
            .0
            .map(|s| decode(&s))
            .transpose()?,
    };
    match found {
        None => Err(ApiError::not_found(
            &GroupResource::new("", "namespaces"),
            ns,
        )),
        Some(n) if meta::deletion_timestamp(&n).is_some() => Err(ApiError::forbidden(
            &a.def.group_resource(),
            meta::name(obj),
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// A delete: the immortal namespaces stay.
pub fn admit_delete(a: &Attributes<'_>) -> Result<(), ApiError> {
    if a.def.group.is_empty() && a.def.plural == "namespaces" && IMMORTAL.contains(&a.name) {
        return Err(ApiError::forbidden(
            &a.def.group_resource(),
            a.name,
            "this namespace may not be deleted",
        ));
    }
    Ok(())
}
