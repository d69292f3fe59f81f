//! What the registry asks of admission, and when (upstream's `admission.Interface` as the
//! generic store sees it): every write — POST, PUT (also when it creates), PATCH and
//! server-side apply (also when it creates), subresources, deletes — runs
//! **mutating admission → the kind's strategy → validating admission → storage**. The
//! registry defines the hooks; `crate::admission` implements them, so the registry never
//! calls up into admission by name.

use futures_util::future::BoxFuture;
use rkube_api::{ApiError, ResourceDef};
use serde_json::Value;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// As admission requests name it (`CREATE`, `UPDATE`, `DELETE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What is being written (upstream's `admission.Attributes`, minus the user, which the
/// `Admit` implementation carries).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub operation: Operation,
    pub def: &'static ResourceDef,
    pub subresource: Option<&'a str>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub dry_run: bool,
    /// The request's verb: a create reached by `update` or `patch` (PUT or apply creating an
    /// object) also needs `create` permission.
    pub verb: &'a str,
}

/// The two admission phases.
pub trait Admit: Send + Sync {
    /// Mutating admission of the object about to be written (`old`: the stored one, for
    /// updates), before the kind's strategy.
    fn mutate<'a>(
        &'a self,
        a: &'a Attributes<'a>,
        obj: &'a mut Value,
        old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>>;

    /// Validating admission of the object as the strategy left it (for deletes, the object
    /// being deleted), right before storage. Quota is charged here, after validation passed.
    fn validate<'a>(
        &'a self,
        a: &'a Attributes<'a>,
        obj: &'a Value,
        old: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>>;
}

/// No admission: the apiserver's own writes (bootstrap objects, quota status) and tests.
pub struct Unadmitted;

impl Admit for Unadmitted {
    fn mutate<'a>(
        &'a self,
        _: &'a Attributes<'a>,
        _: &'a mut Value,
        _: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }

    fn validate<'a>(
        &'a self,
        _: &'a Attributes<'a>,
        _: &'a Value,
        _: Option<&'a Value>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
}
