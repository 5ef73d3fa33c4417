//! The admin HTTP API: health probes, status, metrics, dead letters and plugins, served by
//! axum on loopback.

pub mod auth;
mod error;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

pub use error::ApiError;

use crate::daemon::Shared;
use crate::handler::Handler;

/// The admin API's routes, guarded by `policy`.
pub fn router(shared: Arc<Shared>, policy: auth::AccessPolicy) -> axum::Router {
    routes(shared).layer(axum::middleware::from_fn_with_state(
        Arc::new(policy),
        auth::require_token,
    ))
}

fn routes(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/plugins", get(plugins))
        .route("/plugins/{name}/reload", post(reload_plugin))
        .route("/handlers/{name}/dead-letters", get(dead_letters))
        .route(
            "/handlers/{name}/dead-letters/retry",
            post(retry_dead_letters),
        )
        .route(
            "/handlers/{name}/dead-letters/purge",
            post(purge_dead_letters),
        )
        .fallback(|uri: axum::http::Uri| async move {
            ApiError::not_found(format!("no such endpoint: {}", uri.path()))
        })
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

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics_text(),
    )
}

/// Every plugin in use: file, running version, last error, handlers using it.
async fn plugins(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    Json(json!({
        "plugins_dir": shared.plugins.dir().display().to_string(),
        "watching": shared.plugins.is_watched(),
        "plugins": shared.plugins.views(),
    }))
}

/// Loads a plugin from its file now. 404 for a plugin no handler uses; 422 with the error
/// when the file cannot be read or compiled (the running version stays).
async fn reload_plugin(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    match shared.plugins.load(&name, true).await {
        Ok(outcome) => Ok(Json(json!({
            "reloaded": outcome,
            "plugin": shared.plugins.view(&name),
        }))),
        Err(e @ crate::plugin::Error::Unknown(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e) => Err(ApiError::unprocessable(e.to_string())),
    }
}

fn find_handler<'a>(shared: &'a Shared, name: &str) -> Result<&'a Arc<Handler>, ApiError> {
    shared
        .handler(name)
        .ok_or_else(|| ApiError::not_found(format!("no handler named {name:?}")))
}

async fn dead_letters(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let handler = find_handler(&shared, &name)?;
    Ok(Json(
        json!({"handler": name, "dead_letters": handler.dead_letters()}),
    ))
}

/// Which dead letters a retry or purge applies to: `{"ids": [...]}`, or all without a body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Selection {
    ids: Option<Vec<String>>,
}

fn parse_selection(body: &[u8]) -> Result<Selection, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Selection::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be empty or {{\"ids\": [\"route/namespace/name\", ...]}}: {e}"
        ))
    })
}

async fn retry_dead_letters(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let handler = find_handler(&shared, &name)?;
    let selection = parse_selection(&body)?;
    let retried = handler.retry_dead_letters(selection.ids.as_deref());
    Ok(Json(json!({"handler": name, "retried": retried})))
}

async fn purge_dead_letters(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let handler = find_handler(&shared, &name)?;
    let selection = parse_selection(&body)?;
    let purged = handler.purge_dead_letters(selection.ids.as_deref());
    Ok(Json(json!({"handler": name, "purged": purged})))
}
