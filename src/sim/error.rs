//! API errors as the API server reports them: a `Status` object with a reason, a code and,
//! where the real server gives them, details (the object's kind and name, causes, how long to
//! wait before retrying) and a `Retry-After` header.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceDef;

/// One cause of an error: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable reason (`FieldValueForbidden`, `ResourceVersionTooLarge`).
    pub reason: String,
    /// What is wrong.
    pub message: String,
    /// The field, when the cause is about one.
    pub field: String,
}

/// An error answered as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// What else the `Status` says, when it says more.
    pub details: Option<Box<Details>>,
}

/// The `details` of a `Status`, plus what goes into its metadata and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    /// The plural resource name (or kind) the error is about; empty for none.
    pub kind: String,
    /// The object's name; empty for none.
    pub name: String,
    /// The API group of `kind`, empty for the core group.
    pub group: String,
    /// The causes, when the server lists them.
    pub causes: Vec<Cause>,
    /// Seconds the client should wait before retrying (`Retry-After`).
    pub retry_after: Option<u64>,
    /// A token to continue an expired list from, inconsistently (`metadata.continue`).
    pub continue_token: Option<String>,
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

    fn details_mut(&mut self) -> &mut Details {
        self.details.get_or_insert_with(Box::default)
    }

    fn about(mut self, def: &ResourceDef, name: &str) -> Self {
        let details = self.details_mut();
        details.kind = def.plural.clone();
        details.name = name.to_string();
        details.group = def.group.clone();
        self
    }

    fn because(mut self, reason: &str, message: &str, field: &str) -> Self {
        self.details_mut().causes.push(Cause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        });
        self
    }

    fn retry_after_seconds(mut self, seconds: Option<u64>) -> Self {
        if seconds.is_some() {
            self.details_mut().retry_after = seconds;
        }
        self
    }

    /// Seconds the client should wait before retrying, if the error says.
    pub fn retry_after(&self) -> Option<u64> {
        self.details.as_ref().and_then(|d| d.retry_after)
    }

    /// 404: the object does not exist.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", def.qualified()),
        )
        .about(def, name)
    }

    /// 404: the namespace an object was created in does not exist.
    pub fn namespace_not_found(namespace: &str) -> Self {
        let mut err = Self::new(
            404,
            "NotFound",
            format!("namespaces {namespace:?} not found"),
        );
        let details = err.details_mut();
        details.kind = "namespaces".into();
        details.name = namespace.into();
        err
    }

    /// 403: the user may not do this; `resource` is the plural without subresource, `group`
    /// its API group, `name` the object's (empty for none), `message` why, as
    /// kube-apiserver's `NewForbidden` words it.
    pub fn forbidden(group: &str, resource: &str, name: &str, message: &str) -> Self {
        let qualified = match (resource, group) {
            ("", _) => String::new(),
            (resource, "") => resource.to_string(),
            (resource, group) => format!("{resource}.{group}"),
        };
        let text = match (qualified.as_str(), name) {
            ("", _) => format!("forbidden: {message}"),
            (qualified, "") => format!("{qualified} is forbidden: {message}"),
            (qualified, name) => format!("{qualified} {name:?} is forbidden: {message}"),
        };
        let mut err = Self::new(403, "Forbidden", text);
        let details = err.details_mut();
        details.kind = resource.into();
        details.name = name.into();
        details.group = group.into();
        err
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
            format!("{} {name:?} already exists", def.qualified()),
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
                def.qualified()
            ),
        )
        .about(def, name)
    }

    /// 409: a delete precondition (uid or resourceVersion) does not hold.
    pub fn precondition_failed(def: &ResourceDef, name: &str, detail: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: Precondition failed: {detail}",
                def.qualified()
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

    /// 422: the list or watch options contradict each other; `problems` are
    /// `(field, message)` pairs, each a forbidden value.
    pub fn invalid_list_options(problems: &[(&str, String)]) -> Self {
        let text: Vec<String> = problems
            .iter()
            .map(|(field, message)| format!("{field}: Forbidden: {message}"))
            .collect();
        let text = match text.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut err = Self::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {text}"),
        );
        let details = err.details_mut();
        details.kind = "ListOptions".into();
        details.group = "meta.k8s.io".into();
        for (field, message) in problems {
            err = err.because(
                "FieldValueForbidden",
                &format!("Forbidden: {message}"),
                field,
            );
        }
        err
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

    /// 410: a continue token whose snapshot is gone. `inconsistent` is a token that continues
    /// the list from the same place at the current resourceVersion.
    pub fn continue_expired(inconsistent: String) -> Self {
        let mut err = Self::expired(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
        );
        err.details_mut().continue_token = Some(inconsistent);
        err
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

    /// 429: too many requests; retry after `seconds`.
    pub fn too_many_requests(seconds: u64) -> Self {
        Self::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.".into(),
        )
        .retry_after_seconds(Some(seconds))
    }

    /// 500: the server failed.
    pub fn internal(message: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .because("", message, "")
    }

    /// 504: a read asked for a resourceVersion the server has not reached in time.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        )
        .because("ResourceVersionTooLarge", "Too large resource version", "")
        .retry_after_seconds(Some(1))
    }

    /// An error with any code, with the reason kube-apiserver gives that code (other 4xx
    /// codes are `BadRequest`, other 5xx `InternalError`); for injected faults.
    pub fn with_code(code: u16, retry_after: Option<u64>) -> Self {
        let err = match code {
            429 => Self::too_many_requests(1),
            500 => Self::internal("injected fault"),
            503 => Self::new(
                503,
                "ServiceUnavailable",
                "The server is currently unable to handle the request".into(),
            ),
            504 => Self::new(
                504,
                "Timeout",
                "The server was unable to return a response in the time allotted, but may still be processing the request".into(),
            ),
            401 => Self::new(401, "Unauthorized", "Unauthorized".into()),
            403 => Self::new(403, "Forbidden", "forbidden: injected fault".into()),
            409 => Self::new(409, "Conflict", "conflict: injected fault".into()),
            410 => Self::expired("injected fault".into()),
            422 => Self::new(422, "Invalid", "invalid: injected fault".into()),
            400..=499 => Self::new(code, "BadRequest", format!("injected fault ({code})")),
            _ => Self::new(code, "InternalError", format!("injected fault ({code})")),
        };
        err.retry_after_seconds(retry_after)
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
        let Some(d) = &self.details else {
            return status;
        };
        if let Some(token) = &d.continue_token {
            status["metadata"]["continue"] = token.clone().into();
        }
        let mut details = serde_json::Map::new();
        if !d.name.is_empty() {
            details.insert("name".into(), d.name.clone().into());
        }
        if !d.group.is_empty() {
            details.insert("group".into(), d.group.clone().into());
        }
        if !d.kind.is_empty() {
            details.insert("kind".into(), d.kind.clone().into());
        }
        if !d.causes.is_empty() {
            let causes: Vec<Value> = d
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"message": c.message});
                    if !c.reason.is_empty() {
                        cause["reason"] = c.reason.clone().into();
                    }
                    if !c.field.is_empty() {
                        cause["field"] = c.field.clone().into();
                    }
                    cause
                })
                .collect();
            details.insert("causes".into(), causes.into());
        }
        if let Some(seconds) = d.retry_after {
            details.insert("retryAfterSeconds".into(), seconds.into());
        }
        if !details.is_empty() {
            status["details"] = details.into();
        }
        status
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
        let mut response = (code, Json(self.status())).into_response();
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_requests_carries_retry_after_in_header_and_details() {
        let err = ApiError::too_many_requests(3);
        assert_eq!(err.status()["details"]["retryAfterSeconds"], 3);
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
    }

    #[test]
    fn invalid_list_options_name_the_field() {
        let err = ApiError::invalid_list_options(&[(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
        )]);
        let status = err.status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["group"], "meta.k8s.io");
        assert_eq!(
            status["details"]["causes"][0]["field"],
            "resourceVersionMatch"
        );
        assert!(err.message.starts_with(
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden:"
        ));
    }
}
