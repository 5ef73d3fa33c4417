//! The admin HTTP API: health probes and the daemon's status, served by axum on loopback.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::daemon::Shared;

/// The admin API's routes.
pub fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(shared)
}

async fn livez() -> &'static str {
    "ok\n"
}

/// 200 once every informer has listed its resource; 503 naming those still listing.
async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let waiting: Vec<String> = shared
        .informers
        .informers()
        .iter()
        .filter(|i| !i.is_synced())
        .map(|i| i.key().to_string())
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not synced: {}\n", waiting.join("; ")),
        )
    }
}

async fn status(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    Json(shared.status())
}
