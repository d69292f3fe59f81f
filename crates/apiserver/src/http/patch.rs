//! PATCH of an object or its `status`: merge, JSON and strategic merge patches, and
//! server-side apply (which may create), by the patch's content type.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::ApiError;

use super::body::{media_type, read_body, read_patch, FieldValidation};
use super::{json_value, options_invalid, Scope};
use crate::registry::PatchType;

/// The patch type a content type names.
pub fn patch_type(s: &Scope<'_>) -> Result<PatchType, ApiError> {
    let pt = match media_type(&s.content_type) {
        "application/merge-patch+json" => PatchType::Merge,
        "application/json-patch+json" => PatchType::Json,
        "application/strategic-merge-patch+json" if s.reg.strategy.strategic_merge() => {
            PatchType::Strategic
        }
        "application/strategic-merge-patch+json" => {
            // Custom resources have no patch strategies: upstream's 415.
            return Err(ApiError::strategic_merge_unsupported());
        }
        "application/apply-patch+yaml" => PatchType::Apply {
            force: s.query.flag("force"),
        },
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if s.query.has("force") && !matches!(pt, PatchType::Apply { .. }) {
        return Err(options_invalid(
            "PatchOptions",
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    Ok(pt)
}

pub async fn patch(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let pt = patch_type(s)?;
    let strict = FieldValidation::from_query(s.query)? == FieldValidation::Strict;
    let patch = read_patch(
        matches!(pt, PatchType::Apply { .. }),
        &read_body(body).await?,
    )?;
    // Apply names its manager explicitly; other patches fall back to the client's.
    let manager = match pt {
        PatchType::Apply { .. } => s.field_manager.as_deref(),
        _ => s.update_manager.as_deref(),
    };
    let admission = s.admission();
    let (obj, created) = s
        .reg
        .patch(
            s.ns,
            s.name(),
            pt,
            &patch,
            s.subresource,
            strict,
            s.write(&admission, dry, manager),
        )
        .await?;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(super::admitted(
        json_value(code, &obj),
        Vec::new(),
        &admission,
    ))
}
