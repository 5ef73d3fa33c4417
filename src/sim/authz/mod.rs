//! Authentication and authorization as kube-apiserver does them, when the simulator is told
//! to: bearer tokens name the admin or a configured user ([`Identity`]), `Impersonate-*`
//! headers switch to another identity when the requester may impersonate it, and RBAC
//! ([`rbac`]) decides each resource request from the Roles, ClusterRoles and bindings stored
//! in the simulator. A denied request is answered 403 with kube-apiserver's message.
//! SubjectAccessReviews ([`review`]) ask the same evaluator.
//!
//! Discovery, OpenAPI and the `/_switchyard` control endpoint are open to every
//! authenticated user, as kube-apiserver's `system:discovery` role opens its discovery.

pub mod identity;
mod impersonate;
pub mod rbac;
pub mod review;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use identity::Identity;
pub use rbac::{Attributes, Decision, Policy};

use super::cluster::Cluster;
use super::config::{AuthorizationMode, UserConfig};
use super::error::ApiError;
use crate::util::{bearer_token, token_matches};

/// Who may call the simulator and what they may do.
pub struct Access {
    /// The admin's token; without one, a request without a token is the admin's.
    admin_token: Option<Arc<str>>,
    /// Each configured user's token and identity.
    users: Vec<(String, Identity)>,
    /// Whether RBAC decides (otherwise every request is allowed).
    rbac: bool,
    /// Where the RBAC objects are.
    cluster: Arc<Cluster>,
}

impl Access {
    /// Access to `cluster` for the admin (`admin_token`) and `users`, authorized by `mode`.
    pub fn new(
        cluster: Arc<Cluster>,
        admin_token: Option<&str>,
        users: &[UserConfig],
        mode: AuthorizationMode,
    ) -> Self {
        let users = users
            .iter()
            .map(|u| {
                let identity = Identity::authenticated(&u.name, u.uid.clone(), &u.groups);
                (u.token.trim().to_string(), identity)
            })
            .collect();
        Self {
            admin_token: admin_token.map(Arc::from),
            users,
            rbac: mode == AuthorizationMode::RBAC,
            cluster,
        }
    }

    /// Who a bearer token (or its absence) authenticates; `None` when nobody.
    fn identify(&self, token: Option<&str>) -> Option<Identity> {
        let Some(token) = token else {
            return self.admin_token.is_none().then(Identity::admin);
        };
        if self
            .admin_token
            .as_deref()
            .is_some_and(|admin| token_matches(token, admin))
        {
            return Some(Identity::admin());
        }
        self.users
            .iter()
            .find(|(t, _)| token_matches(token, t))
            .map(|(_, identity)| identity.clone())
    }

    /// Whether `who` may do `request`: always when RBAC is off.
    pub fn decide(&self, who: &Identity, request: &Attributes) -> Decision {
        if !self.rbac || who.is_superuser() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        Policy::of(&self.cluster, &request.namespace).decide(who, request)
    }

    /// [`Access::decide`], a denial as kube-apiserver's 403.
    pub fn authorize(&self, who: &Identity, request: &Attributes) -> Result<(), ApiError> {
        let decision = self.decide(who, request);
        if decision.allowed {
            Ok(())
        } else {
            Err(forbidden(who, request, &decision.reason))
        }
    }
}

/// kube-apiserver's 403 for a denied request:
/// `configmaps "x" is forbidden: User "u" cannot update resource "configmaps" in API group ""
/// in the namespace "ns"`, then `: REASON` when there is one.
pub fn forbidden(who: &Identity, request: &Attributes, reason: &str) -> ApiError {
    let mut resource = request.resource.clone();
    if !request.subresource.is_empty() {
        resource = format!("{resource}/{}", request.subresource);
    }
    let scope = if request.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", request.namespace)
    };
    let mut message = format!(
        "User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        who.name, request.verb, request.group
    );
    if !reason.is_empty() {
        message = format!("{message}: {reason}");
    }
    ApiError::forbidden(&request.group, &request.resource, &request.name, &message)
}

/// Middleware: authenticates the request by its bearer token (401 when it names nobody),
/// applies `Impersonate-*` headers (403 when the requester may not), and hands the identity
/// on as a request extension (`Arc<Identity>`).
pub async fn authenticate(
    State(access): State<Arc<Access>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let Some(requester) = access.identify(token) else {
        return ApiError::with_code(401, None).into_response();
    };
    match impersonate::impersonate(&access, requester, request.headers()) {
        Ok(identity) => {
            request.extensions_mut().insert(Arc::new(identity));
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forbidden_message_is_kube_apiservers() {
        let who = Identity::authenticated("system:serviceaccount:team-a:runner", None, &[]);
        let request = Attributes {
            verb: "update".into(),
            resource: "configmaps".into(),
            namespace: "team-b".into(),
            name: "x".into(),
            ..Attributes::default()
        };
        let err = forbidden(&who, &request, "");
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            r#"configmaps "x" is forbidden: User "system:serviceaccount:team-a:runner" cannot update resource "configmaps" in API group "" in the namespace "team-b""#
        );
        let cluster = Attributes {
            verb: "list".into(),
            group: "example.com".into(),
            resource: "widgets".into(),
            subresource: "status".into(),
            ..Attributes::default()
        };
        assert_eq!(
            forbidden(
                &who,
                &cluster,
                "RBAC: role.rbac.authorization.k8s.io \"r\" not found"
            )
            .message,
            r#"widgets.example.com is forbidden: User "system:serviceaccount:team-a:runner" cannot list resource "widgets/status" in API group "example.com" at the cluster scope: RBAC: role.rbac.authorization.k8s.io "r" not found"#
        );
    }
}
