//! API errors as the API server reports them: a `Status` object with a reason and a code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceDef;

/// An error answered as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The kind and name the error is about, when there is one.
    pub details: Option<(String, String)>,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: String) -> Self {
        Self {
            code,
            reason: reason.into(),
            message,
            details: None,
        }
    }

    fn about(mut self, def: &ResourceDef, name: &str) -> Self {
        self.details = Some((def.plural.to_string(), name.to_string()));
        self
    }

    /// 404: the object does not exist.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified(def)),
        )
        .about(def, name)
    }

    /// 404: the namespace an object was created in does not exist.
    pub fn namespace_not_found(namespace: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces {namespace:?} not found"),
        )
    }

    /// 404: the URL names no resource the server serves.
    pub fn no_such_resource(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409: an object with that name already exists.
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", qualified(def)),
        )
        .about(def, name)
    }

    /// 409: the write was based on a stale resourceVersion.
    pub fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                qualified(def)
            ),
        )
        .about(def, name)
    }

    /// 422: the object is invalid.
    pub fn invalid(def: &ResourceDef, name: &str, cause: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {cause}", def.kind),
        )
        .about(def, name)
    }

    /// 400: the request itself is malformed.
    pub fn bad_request(message: String) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405: the verb is not supported on that URL.
    pub fn method_not_allowed(message: String) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 410: the requested resourceVersion is older than the server keeps.
    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415: the patch type is not supported.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"
            ),
        )
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((kind, name)) = &self.details {
            status["details"] = json!({"name": name, "kind": kind});
        }
        status
    }
}

fn qualified(def: &ResourceDef) -> String {
    if def.group.is_empty() {
        def.plural.to_string()
    } else {
        format!("{}.{}", def.plural, def.group)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, Json(self.status())).into_response()
    }
}
