//! PUT of an object or its `status` / `finalize` subresource (a PUT may create, for kinds
//! that allow it).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::ApiError;

use super::body::{read_body, read_object, FieldValidation};
use super::{json_value, Scope};

pub async fn update(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let fv = FieldValidation::from_query(s.query)?;
    let (raw, obj) = read_object(&s.content_type, read_body(body).await?)?;
    let warnings = fv.check(s.reg, &raw, &obj)?;
    let admission = s.admission();
    let (obj, created) = s
        .reg
        .update(
            s.ns,
            s.name(),
            obj,
            s.subresource,
            s.write(&admission, dry, s.update_manager.as_deref()),
        )
        .await?;
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(super::admitted(
        json_value(code, &obj),
        warnings,
        &admission,
    ))
}
