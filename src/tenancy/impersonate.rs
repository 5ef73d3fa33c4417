//! A client that makes every request as another user: the daemon's own client with an
//! `Impersonate-User` header on each request, so the API server authorizes it by that
//! user's RBAC and its audit log names both.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response};
use kube::client::Body;

/// A client for `user` (`system:serviceaccount:NS:NAME`) over `base`'s connection and
/// credentials. The API server adds a ServiceAccount's groups itself. A name that cannot be
/// a header value is made `system:anonymous`, who may do nothing.
pub fn impersonating(base: &kube::Client, user: &str) -> kube::Client {
    let user = HeaderValue::from_str(user)
        .unwrap_or_else(|_| HeaderValue::from_static("system:anonymous"));
    let service = Impersonate {
        base: base.clone(),
        user,
    };
    kube::Client::new(service, base.default_namespace().to_string())
}

/// The service under an impersonating client.
#[derive(Clone)]
struct Impersonate {
    base: kube::Client,
    user: HeaderValue,
}

impl tower_service::Service<Request<Body>> for Impersonate {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let headers = request.headers_mut();
        for name in ["impersonate-group", "impersonate-uid"] {
            headers.remove(name);
        }
        headers.insert("impersonate-user", self.user.clone());
        let base = self.base.clone();
        Box::pin(async move { base.send(request).await })
    }
}
