//! The web view at `/ui/`: its three files, embedded in the binary (no CDN, nothing fetched
//! from elsewhere), served with a Content-Security-Policy that lets the page talk only to
//! this origin. The page does the rest through the API itself (`app.js` says how); `rkube
//! dashboard` serves the same files for clusters a browser cannot authenticate to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use rkube_api::ApiError;

const FILES: [(&str, &str, &str); 3] = [
    ("", "text/html; charset=utf-8", include_str!("index.html")),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("app.css"),
    ),
];

/// The page's only sources: this origin (`'self'` covers WebSocket back to it).
const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

/// What `path` is under `/ui`: `None` when it is not a web view path at all; a 404 for a
/// file the view does not have.
pub fn route(path: &str) -> Option<Result<Response, ApiError>> {
    let rest = path.strip_prefix("/ui")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    Some(serve(rest).ok_or_else(|| {
        ApiError::not_found(
            &rkube_api::GroupResource::new("", ""),
            rest.trim_start_matches('/'),
        )
    }))
}

/// The file at `rest` (what follows `/ui`): `/ui` redirects to `/ui/`; `None` for a file
/// that is not one of them (the caller's 404).
fn serve(rest: &str) -> Option<Response> {
    let Some(name) = rest.strip_prefix('/') else {
        return Some(Redirect::permanent("/ui/").into_response());
    };
    let (_, content_type, body) = FILES.iter().find(|(n, _, _)| *n == name)?;
    Some(
        (
            StatusCode::OK,
            [
                ("content-type", *content_type),
                ("content-security-policy", CSP),
                ("x-content-type-options", "nosniff"),
                ("cache-control", "no-cache"),
            ],
            *body,
        )
            .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_served_with_their_types_and_the_rest_is_404() {
        assert_eq!(serve("/").unwrap().status(), StatusCode::OK);
        let js = serve("/app.js").unwrap();
        assert_eq!(
            js.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert!(js.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'self'"));
        assert_eq!(serve("").unwrap().status(), StatusCode::PERMANENT_REDIRECT);
        assert!(serve("/../Cargo.toml").is_none());
        assert!(serve("/app.jsx").is_none());
        assert!(route("/uix").is_none() && route("/api").is_none());
        assert_eq!(route("/ui/nope").unwrap().unwrap_err().code(), 404);
        assert_eq!(route("/ui/").unwrap().unwrap().status(), StatusCode::OK);
    }
}
