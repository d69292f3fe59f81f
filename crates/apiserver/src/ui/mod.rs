//! The web view at `/ui/`: its three files, embedded in the binary (no CDN, nothing fetched
//! from elsewhere), served with a Content-Security-Policy that lets the page talk only to
//! this origin. The page does the rest through the API itself (`app.js` says how); `rkube
//! dashboard` serves the same files for clusters a browser cannot authenticate to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

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

/// The page's only sources: this origin, and WebSocket back to it.
const CSP: &str =
    "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'";

/// The file at `rest` (what follows `/ui`): `/ui` redirects to `/ui/`; `None` for a file
/// that is not one of them (the caller's 404).
pub fn serve(rest: &str) -> Option<Response> {
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
    }
}
