//! The fault control endpoint, under `/_switchyard` (a path no Kubernetes client uses), so
//! that a test or a person can inject faults into a running `switchyard sim` with curl:
//!
//! | request | effect |
//! |---|---|
//! | `GET /_switchyard/faults` | the faults in force |
//! | `DELETE /_switchyard/faults` | remove every fault |
//! | `POST /_switchyard/faults/close-watches` | end every open watch |
//! | `POST /_switchyard/faults/expire-watches` `{"count": N}` | answer the next N watches 410 Expired |
//! | `POST /_switchyard/faults/fail-requests` `{"count": N, "code": 429, "retryAfterSeconds": 1, "verbs": ["list"], "resources": ["leases"]}` | answer the next N requests (of those verbs and resources; default all) with that code |
//! | `POST /_switchyard/faults/delay` `{"ms": D}` | delay every API request by D ms (0 ends it) |
//! | `POST /_switchyard/faults/watch-list-storage` `{"fail": true}` | accept streaming lists (`sendInitialEvents`), then fail them with an ERROR event, 500, as kube-apiserver over an etcd without `RequestWatchProgress` (`false` ends it) |
//! | `POST /_switchyard/faults/compact` | drop the change history: older versions get 410 |
//! | `POST /_switchyard/faults/restart` `{"downMs": D}` | stop the server, stay down D ms, serve again on the same port with the same state |
//! | `POST /_switchyard/faults/restart` `{"downMs": D, "empty": true}` | the same, but the server comes back empty, its resourceVersions starting from zero again (etcd wiped or restored from an old backup) |
//!
//! Every answer is JSON: the faults in force, or `{"error": "..."}` with status 400.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::ServerCommand;
use super::api::ApiState;
use super::faults::RequestFailure;

/// The control routes, to be nested under `/_switchyard`.
pub fn router() -> axum::Router<ApiState> {
    axum::Router::new()
        .route("/faults", get(status).delete(clear))
        .route("/faults/close-watches", post(close_watches))
        .route("/faults/expire-watches", post(expire_watches))
        .route("/faults/fail-requests", post(fail_requests))
        .route("/faults/delay", post(delay))
        .route("/faults/watch-list-storage", post(watch_list_storage))
        .route("/faults/compact", post(compact))
        .route("/faults/restart", post(restart))
}

/// A control request whose body is not the JSON its endpoint takes.
#[derive(Debug, thiserror::Error)]
#[error("invalid body: {0}")]
struct InvalidBody(#[source] serde_json::Error);

fn bad_request(message: impl std::fmt::Display) -> Response {
    let message = message.to_string();
    (StatusCode::BAD_REQUEST, Json(json!({"error": message}))).into_response()
}

/// Parses a JSON body; an empty body is `{}`.
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, InvalidBody> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(InvalidBody)
}

fn current(state: &ApiState) -> Response {
    Json(state.faults.status()).into_response()
}

async fn status(State(state): State<ApiState>) -> Response {
    current(&state)
}

async fn clear(State(state): State<ApiState>) -> Response {
    state.faults.clear();
    current(&state)
}

async fn close_watches(State(state): State<ApiState>) -> Response {
    state.watches.close_all();
    current(&state)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Count {
    #[serde(default = "one")]
    count: u64,
}

fn one() -> u64 {
    1
}

async fn expire_watches(State(state): State<ApiState>, bytes: Bytes) -> Response {
    match body::<Count>(&bytes) {
        Ok(Count { count }) => {
            state.faults.expire_next_watches(count);
            current(&state)
        }
        Err(message) => bad_request(message),
    }
}

async fn fail_requests(State(state): State<ApiState>, bytes: Bytes) -> Response {
    let failure = match body::<RequestFailure>(&bytes) {
        Ok(f) => f,
        Err(message) => return bad_request(message),
    };
    match state.faults.fail_next_requests(failure) {
        Ok(()) => current(&state),
        Err(message) => bad_request(message),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Delay {
    ms: u64,
}

async fn delay(State(state): State<ApiState>, bytes: Bytes) -> Response {
    match body::<Delay>(&bytes) {
        Ok(Delay { ms }) => {
            state.faults.set_delay(Duration::from_millis(ms));
            current(&state)
        }
        Err(message) => bad_request(message),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fail {
    #[serde(default = "yes")]
    fail: bool,
}

fn yes() -> bool {
    true
}

async fn watch_list_storage(State(state): State<ApiState>, bytes: Bytes) -> Response {
    match body::<Fail>(&bytes) {
        Ok(Fail { fail }) => {
            state.faults.fail_watch_lists_in_storage(fail);
            current(&state)
        }
        Err(message) => bad_request(message),
    }
}

async fn compact(State(state): State<ApiState>) -> Response {
    state.cluster.compact();
    Json(json!({"compactedResourceVersion": state.cluster.resource_version().to_string()}))
        .into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Restart {
    #[serde(default)]
    down_ms: u64,
    /// Come back with an empty cluster ([`super::Cluster::reset`]).
    #[serde(default)]
    empty: bool,
}

async fn restart(State(state): State<ApiState>, bytes: Bytes) -> Response {
    let Restart { down_ms, empty } = match body::<Restart>(&bytes) {
        Ok(r) => r,
        Err(message) => return bad_request(message),
    };
    let command = ServerCommand::Restart {
        down: Duration::from_millis(down_ms),
        done: None,
    };
    if state.server.send(command).is_err() {
        return bad_request("the server is stopping");
    }
    if empty {
        // The server's graceful stop waits for this request, so the reset lands while it
        // stops: requests after the restart see the emptied cluster, and every watch open
        // on the old state ends.
        state.cluster.reset();
    }
    (
        StatusCode::ACCEPTED,
        Json(json!({"restarting": true, "downMs": down_ms, "empty": empty})),
    )
        .into_response()
}
