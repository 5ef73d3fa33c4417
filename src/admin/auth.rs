//! Who may call the admin API: a bearer token guards every mutating endpoint, and every
//! endpoint when the API listens beyond loopback. The status page's files are outside
//! these rules (see [`super::page`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::util::{bearer_token, token_matches};

/// Why an access rule cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API would listen beyond loopback with no token to guard it.
    #[error(
        "the admin API would listen on {listen}, beyond loopback, without a token: set admin.token_file or admin.token_env, or listen on 127.0.0.1"
    )]
    Unprotected {
        /// The address it would listen on.
        listen: SocketAddr,
    },
}

/// The admin API's access rule.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    token: Option<Arc<str>>,
    loopback_only: bool,
}

impl AccessPolicy {
    /// The rule for an API listening on `listen` with `token` (if any). Listening beyond
    /// loopback without a token is refused.
    pub fn new(listen: SocketAddr, token: Option<String>) -> Result<Self, Error> {
        let loopback_only = listen.ip().is_loopback();
        let token = token
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        if !loopback_only && token.is_none() {
            return Err(Error::Unprotected { listen });
        }
        Ok(Self {
            token: token.map(Arc::from),
            loopback_only,
        })
    }

    /// Whether a request with this method needs the token.
    pub fn requires_token(&self, method: &Method) -> bool {
        !self.loopback_only || !(method == Method::GET || method == Method::HEAD)
    }

    /// Checks a request's `Authorization` header value.
    pub fn check(&self, method: &Method, authorization: Option<&str>) -> Result<(), ApiError> {
        if !self.requires_token(method) {
            return Ok(());
        }
        let Some(token) = &self.token else {
            return Err(ApiError::unauthorized(
                "this endpoint changes the daemon and needs a bearer token, but none is configured: set admin.token_file or admin.token_env".into(),
            ));
        };
        let given = authorization.and_then(bearer_token);
        match given {
            Some(given) if token_matches(given, token) => Ok(()),
            Some(_) => Err(ApiError::unauthorized(
                "the bearer token is not valid".into(),
            )),
            None if authorization.is_some() => Err(ApiError::unauthorized(
                "the `Authorization` header must be `Bearer TOKEN`".into(),
            )),
            None => Err(ApiError::unauthorized(
                "missing `Authorization: Bearer TOKEN` header".into(),
            )),
        }
    }
}

/// Middleware applying the policy to every request.
pub async fn require_token(
    State(policy): State<Arc<AccessPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match policy.check(request.method(), authorization) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let policy = AccessPolicy::new(addr("127.0.0.1:9470"), Some("s3cret".into())).unwrap();
        for header in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
            assert!(
                policy.check(&Method::POST, Some(header)).is_ok(),
                "{header}"
            );
        }
        let basic = policy.check(&Method::POST, Some("Basic czNjcmV0"));
        let error = basic.unwrap_err();
        let message = error.message();
        assert!(message.contains("must be `Bearer TOKEN`"), "{message}");
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn beyond_loopback_a_token_is_required_to_start_and_for_every_request() {
        let err = AccessPolicy::new(addr("0.0.0.0:9470"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("beyond loopback, without a token"), "{err}");
        let policy = AccessPolicy::new(addr("0.0.0.0:9470"), Some("s3cret\n".into())).unwrap();
        assert!(policy.check(&Method::GET, None).is_err());
        assert!(policy.check(&Method::GET, Some("Bearer s3cret")).is_ok());
    }

    #[test]
    fn on_loopback_reads_are_open_and_writes_need_the_token() {
        let policy = AccessPolicy::new(addr("127.0.0.1:9470"), Some("t".into())).unwrap();
        assert!(policy.check(&Method::GET, None).is_ok());
        assert!(policy.check(&Method::POST, None).is_err());
        assert!(policy.check(&Method::POST, Some("Bearer x")).is_err());
        assert!(policy.check(&Method::POST, Some("Bearer t")).is_ok());
        let open = AccessPolicy::new(addr("127.0.0.1:9470"), None).unwrap();
        assert!(
            open.check(&Method::POST, Some("Bearer t")).is_err(),
            "no token configured: writes refused"
        );
    }
}
