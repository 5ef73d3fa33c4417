//! Errors of the admin API: a status code and a JSON body that says what was wrong.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered as `{"error": "...", "status": N}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    details: Option<serde_json::Value>,
}

impl ApiError {
    /// 404: no such endpoint or object.
    pub fn not_found(message: String) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message,
            details: None,
        }
    }

    /// 401: the request lacks a valid bearer token.
    pub fn unauthorized(message: String) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message,
            details: None,
        }
    }

    /// 422: the request is understood but what it refers to cannot be used (a plugin file
    /// that does not compile).
    pub fn unprocessable(message: String) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message,
            details: None,
        }
    }

    /// 503: the daemon cannot do it now (it is shutting down).
    pub fn unavailable(message: String) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message,
            details: None,
        }
    }

    /// 421: the request names a host this API does not answer for.
    pub fn misdirected(message: String) -> Self {
        Self {
            status: StatusCode::MISDIRECTED_REQUEST,
            message,
            details: None,
        }
    }

    /// 400: the request is malformed.
    pub fn bad_request(message: String) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message,
            details: None,
        }
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    /// A body that could not be read (too large: 413) answered as JSON like every other error.
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        Self {
            status: rejection.status(),
            message: rejection.body_text(),
            details: None,
        }
    }
}

impl ApiError {
    /// The message the body carries.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Adds the fields of `details` (a JSON object) to the body.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.message, "status": self.status.as_u16()});
        if let (Some(serde_json::Value::Object(extra)), Some(fields)) =
            (self.details, body.as_object_mut())
        {
            fields.extend(extra);
        }
        (self.status, Json(body)).into_response()
    }
}

/// The largest body of axum's own rejections read back to be said as JSON.
const REJECTION_BODY_LIMIT: usize = 64 << 10;

/// Says axum's own 4xx answers (a method the endpoint does not take, a path segment that
/// is not UTF-8, a body that cannot be read) as this API's JSON errors, keeping their
/// status and headers; JSON answers and other statuses pass as they are.
pub async fn json_rejections(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !status.is_client_error() || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, REJECTION_BODY_LIMIT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match (text.is_empty(), status) {
        (false, _) => text,
        // axum sets `Allow` after every layer, so it is named, not listed.
        (true, StatusCode::METHOD_NOT_ALLOWED) => {
            "method not allowed on this endpoint; the Allow header lists those it takes".into()
        }
        (true, _) => status
            .canonical_reason()
            .unwrap_or("bad request")
            .to_string(),
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.remove(axum::http::header::CONTENT_TYPE);
    let json = Json(json!({"error": message, "status": status.as_u16()}));
    (parts, json).into_response()
}
