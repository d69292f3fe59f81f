//! POST of a new object: decoded by the body pipeline, checked for undeclared and duplicate
//! fields (`fieldValidation`), then the registry's create (admission, strategy, storage).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use rkube_api::ApiError;

use super::body::{read_body, read_object, FieldValidation};
use super::{json_value, Scope};

pub async fn create(s: &Scope<'_>, body: Body) -> Result<Response, ApiError> {
    let dry = s.dry_run()?;
    let fv = FieldValidation::from_query(s.query)?;
    let (raw, obj) = read_object(&s.content_type, read_body(body).await?)?;
    let warnings = fv.check(s.reg, &raw, &obj)?;
    let admission = s.admission();
    let obj = s
        .reg
        .create(
            s.ns,
            obj,
            s.write(&admission, dry, s.update_manager.as_deref()),
        )
        .await?;
    Ok(super::admitted(
        json_value(StatusCode::CREATED, &obj),
        warnings,
        &admission,
    ))
}
