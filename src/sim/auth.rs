//! A bearer token the simulator can demand, as kube-apiserver does of a service account:
//! every request without it is answered 401 with a `Status`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::util::{bearer_token, token_matches};

/// Middleware: the request passes when its `Authorization` is `Bearer TOKEN`.
pub async fn require_token(
    State(token): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if given.is_some_and(|given| token_matches(given, &token)) {
        next.run(request).await
    } else {
        ApiError::with_code(401, None).into_response()
    }
}
