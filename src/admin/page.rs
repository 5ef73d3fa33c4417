//! The status page at `/`: one HTML file, a stylesheet and a script embedded in the binary,
//! served with a strict Content-Security-Policy. The page holds no data of its own; its
//! script reads `/status`, `/handlers/{name}` and `/plugins` like any other client, so the
//! assets are served to every caller and the JSON keeps the access rules.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

/// The page's path, then its stylesheet's, script's and icon's.
pub const PATHS: [&str; 4] = ["/", "/page/style.css", "/page/app.js", "/page/icon.svg"];

/// Scripts and styles from this origin only, no inline code, no frames, requests to this
/// origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const HTML: &str = include_str!("page/index.html");
const CSS: &str = include_str!("page/style.css");
const JS: &str = include_str!("page/app.js");
const ICON: &str = include_str!("page/icon.svg");

/// The page and its assets, open to every caller (see the module docs).
pub fn routes() -> axum::Router {
    axum::Router::new()
        .route(
            PATHS[0],
            get(|| async { asset("text/html; charset=utf-8", HTML) }),
        )
        .route(
            PATHS[1],
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            PATHS[2],
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(PATHS[3], get(|| async { asset("image/svg+xml", ICON) }))
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}
