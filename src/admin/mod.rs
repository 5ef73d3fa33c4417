//! The admin HTTP API: health probes, status, metrics, dead letters and plugins, served by
//! axum on loopback, with a status page at `/` ([`page`]), for the hosts it answers for
//! ([`host`]); and the probes listener, serving the probe and metrics handlers alone
//! ([`probes_router`]) without a token. Both are served by [`server`], which bounds their
//! connections.

pub mod auth;
mod backend;
mod error;
pub mod host;
pub mod openapi;
pub mod page;
pub mod server;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

pub use backend::{Backend, ReloadFailure};
pub use error::ApiError;

use crate::handler::Handler;

/// The admin API's routes over `shared`, guarded by `policy`, and the status page, open to
/// every caller (it carries no data: its script reads the guarded endpoints); all of it
/// only for the `hosts` it answers for.
pub fn router<B: Backend>(
    shared: Arc<B>,
    policy: auth::AccessPolicy,
    hosts: host::AllowedHosts,
) -> axum::Router {
    routes(shared)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(policy),
            auth::require_token,
        ))
        .merge(page::routes())
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            host::require_allowed_host,
        ))
}

/// The probes and metrics listener's routes over `shared`: `/livez`, `/readyz` and
/// `/metrics`, the same handlers as the admin API's, open to every caller (as
/// controller-runtime serves them) because they change nothing and kubelet and Prometheus
/// carry no token.
pub fn probes_router<B: Backend>(shared: Arc<B>) -> axum::Router {
    axum::Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz::<B>))
        .route("/metrics", get(metrics::<B>))
        .fallback(|uri: axum::http::Uri| async move {
            ApiError::not_found(format!(
                "no such endpoint: {} (this listener serves /livez, /readyz and /metrics)",
                uri.path()
            ))
        })
        .layer(axum::middleware::map_response(error::json_rejections))
        .with_state(shared)
}

fn routes<B: Backend>(shared: Arc<B>) -> axum::Router {
    axum::Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz::<B>))
        .route("/status", get(status::<B>))
        .route("/metrics", get(metrics::<B>))
        .route("/openapi.json", get(|| async { Json(openapi::document()) }))
        .route("/reload", post(reload_config::<B>))
        .route("/plugins", get(plugins::<B>))
        .route("/plugins/{name}/reload", post(reload_plugin::<B>))
        .route("/routes", get(routes_list::<B>))
        .route("/handlers/{name}", get(handler_detail::<B>))
        .route("/handlers/{name}/pause", post(pause_handler::<B>))
        .route("/handlers/{name}/resume", post(resume_handler::<B>))
        .route("/handlers/{name}/dead-letters", get(dead_letters::<B>))
        .route("/handlers/{name}/shadow", get(shadow::<B>))
        .route(
            "/handlers/{name}/dead-letters/retry",
            post(retry_dead_letters::<B>),
        )
        .route(
            "/handlers/{name}/dead-letters/purge",
            post(purge_dead_letters::<B>),
        )
        .fallback(|uri: axum::http::Uri| async move {
            ApiError::not_found(format!("no such endpoint: {}", uri.path()))
        })
        .layer(axum::middleware::map_response(error::json_rejections))
        .with_state(shared)
}

async fn livez() -> &'static str {
    "ok\n"
}

/// 200 once every informer has listed its resource; 503 naming those still listing.
async fn readyz<B: Backend>(
    State(shared): State<Arc<B>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    let informers = shared.informers();
    let missing = shared.waiting();
    let unready = shared.unready();
    let ready = backend::is_ready(&informers, &missing, &unready);
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if query.contains_key("verbose") {
        // For people: one line per informer, then the verdict.
        let mut text = String::new();
        for i in &informers {
            let mark = if i.is_synced() { "[+]" } else { "[-]" };
            let health = i.health();
            let state = match (i.is_synced(), health.last_error_code, &health.last_error) {
                (true, ..) => "synced".to_string(),
                (false, Some(403), Some(error)) => format!("forbidden: {error}"),
                (false, _, _) => match health.listed {
                    Some(n) => format!("listing ({n} objects so far)"),
                    None => "not synced".to_string(),
                },
            };
            text.push_str(&format!("{mark}informer {} {state}\n", i.key()));
        }
        for (watch, why) in &missing {
            text.push_str(&format!("[-]informer {watch} not served: {why}\n"));
        }
        for (what, why) in &unready {
            text.push_str(&format!("[-]{what}: {why}\n"));
        }
        text.push_str(if ready {
            "readyz check passed\n"
        } else {
            "readyz check failed\n"
        });
        return (code, text);
    }
    let mut problems: Vec<String> = informers
        .iter()
        .filter(|i| !i.is_synced())
        .map(|i| format!("not synced: {}", i.key()))
        .collect();
    problems.extend(
        missing
            .iter()
            .map(|(watch, _)| format!("not served: {watch}")),
    );
    problems.extend(unready.iter().map(|(_, why)| why.clone()));
    if problems.is_empty() {
        (code, "ok\n".to_string())
    } else {
        (code, format!("{}\n", problems.join("; ")))
    }
}

async fn status<B: Backend>(State(shared): State<Arc<B>>) -> impl IntoResponse {
    Json(shared.status())
}

async fn metrics<B: Backend>(State(shared): State<Arc<B>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics_text(),
    )
}

/// Reads the config file again and applies the difference. 200 with what changed; 422 with
/// every mistake (file, line, column, path) or the reason, the running config staying.
async fn reload_config<B: Backend>(
    State(shared): State<Arc<B>>,
) -> Result<impl IntoResponse, ApiError> {
    match shared.reload().await {
        Ok(plan) => Ok(Json(json!({"reloaded": true, "plan": plan}))),
        Err(e) => {
            let errors: Vec<serde_json::Value> = e
                .config_errors()
                .iter()
                .map(|c| {
                    json!({
                        "file": c.file.display().to_string(),
                        "line": c.line,
                        "column": c.column,
                        "path": c.path,
                        "message": c.message,
                    })
                })
                .collect();
            Err(ApiError::unprocessable(e.to_string()).with_details(json!({"errors": errors})))
        }
    }
}

/// Every plugin in use: file, running version, last error, handlers using it.
async fn plugins<B: Backend>(State(shared): State<Arc<B>>) -> impl IntoResponse {
    Json(json!({
        "plugins_dir": shared.plugins().dir().display().to_string(),
        "watching": shared.plugins().is_watched(),
        "plugins": shared.plugins().views(),
    }))
}

/// Loads a plugin from its file (or registry) now. 404 for a plugin no handler uses; 422
/// with the error when the file cannot be read, pulled or compiled (the running version
/// stays); 503 when the daemon shuts down meanwhile.
async fn reload_plugin<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    match shared.plugins().load(&name, true).await {
        Ok(outcome) => Ok(Json(json!({
            "reloaded": outcome,
            "plugin": shared.plugins().view(&name),
        }))),
        Err(e @ crate::plugin::Error::Unknown(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ crate::plugin::Error::Abandoned(_)) => Err(ApiError::unavailable(e.to_string())),
        Err(e) => Err(ApiError::unprocessable(e.to_string())),
    }
}

fn find_handler<B: Backend>(shared: &B, name: &str) -> Result<Arc<Handler>, ApiError> {
    shared
        .handler(name)
        .ok_or_else(|| ApiError::not_found(format!("no handler named {name:?}")))
}

async fn routes_list<B: Backend>(State(shared): State<Arc<B>>) -> impl IntoResponse {
    Json(json!({"routes": shared.routes()}))
}

async fn handler_detail<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(Json(find_handler(shared.as_ref(), &name)?.detail()))
}

async fn pause_handler<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let was_running = find_handler(shared.as_ref(), &name)?.pause();
    Ok(Json(
        json!({"handler": name, "paused": true, "changed": was_running}),
    ))
}

async fn resume_handler<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let was_paused = find_handler(shared.as_ref(), &name)?.resume();
    Ok(Json(
        json!({"handler": name, "paused": false, "changed": was_paused}),
    ))
}

async fn dead_letters<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let handler = find_handler(shared.as_ref(), &name)?;
    Ok(Json(
        json!({"handler": name, "dead_letters": handler.dead_letters()}),
    ))
}

/// The handler's shadow plugin: its version, the comparison counts and the recent
/// differences. 404 for an unknown handler or one without a shadow.
async fn shadow<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let handler = find_handler(shared.as_ref(), &name)?;
    let mut view = handler.shadow_view().ok_or_else(|| {
        ApiError::not_found(format!(
            "handler {name:?} has no shadow (set handlers.{name}.shadow to a plugin in the config)"
        ))
    })?;
    if let Some(plugin) = shared.plugins().view(&view.status.plugin) {
        view.sha256 = plugin.sha256;
        view.loaded_at = plugin.loaded_at;
    }
    Ok(Json(view))
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

async fn retry_dead_letters<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body?;
    let handler = find_handler(shared.as_ref(), &name)?;
    let selection = parse_selection(&body)?;
    let unknown = unknown_ids(&handler, &selection);
    let retried = handler.retry_dead_letters(selection.ids.as_deref());
    let mut answer = json!({"handler": name, "retried": retried});
    if let Some(unknown) = unknown {
        answer["unknown"] = json!(unknown);
    }
    Ok(Json(answer))
}

/// The ids `selection` names that are no dead letter of `handler` now, each once; `None`
/// when it names none (all letters).
fn unknown_ids(handler: &crate::handler::Handler, selection: &Selection) -> Option<Vec<String>> {
    let ids = selection.ids.as_ref()?;
    let letters: std::collections::HashSet<String> =
        handler.dead_letters().into_iter().map(|l| l.id).collect();
    let mut unknown: Vec<String> = ids
        .iter()
        .filter(|id| !letters.contains(*id))
        .cloned()
        .collect();
    unknown.sort();
    unknown.dedup();
    Some(unknown)
}

async fn purge_dead_letters<B: Backend>(
    State(shared): State<Arc<B>>,
    Path(name): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body?;
    let handler = find_handler(shared.as_ref(), &name)?;
    let selection = parse_selection(&body)?;
    let unknown = unknown_ids(&handler, &selection);
    let purged = handler.purge_dead_letters(selection.ids.as_deref());
    let mut answer = json!({"handler": name, "purged": purged});
    if let Some(unknown) = unknown {
        answer["unknown"] = json!(unknown);
    }
    Ok(Json(answer))
}
