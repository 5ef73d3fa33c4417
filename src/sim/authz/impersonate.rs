//! Impersonation: `Impersonate-User`, `Impersonate-Group` (repeatable) and `Impersonate-Uid`
//! make a request act as another identity, when the requester may `impersonate` it: the
//! `users` (or, for a ServiceAccount's username, the `serviceaccounts` object in its
//! namespace), each of the `groups`, and the `uids`, as kube-apiserver checks them.

use axum::http::HeaderMap;

use super::identity::{AUTHENTICATED, service_account};
use super::{Access, Attributes, Identity};
use crate::sim::error::ApiError;

/// The identity a request acts as: the requester's own without `Impersonate-*` headers, the
/// impersonated one when the requester may impersonate it, a 403 otherwise.
pub(super) fn impersonate(
    access: &Access,
    requester: Identity,
    headers: &HeaderMap,
) -> Result<Identity, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(String::from)
            .collect()
    };
    let user = values("impersonate-user").into_iter().next();
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    let Some(user) = user else {
        if groups.is_empty() && uid.is_none() {
            return Ok(requester);
        }
        return Err(ApiError::bad_request(
            "Impersonate-Group and Impersonate-Uid need Impersonate-User".into(),
        ));
    };
    let mut as_user = impersonation("users", &user);
    let mut impersonated_groups = groups.clone();
    if let Some((namespace, name)) = service_account(&user) {
        as_user = impersonation("serviceaccounts", name);
        as_user.namespace = namespace.into();
        if groups.is_empty() {
            impersonated_groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ];
        }
    }
    access.authorize(&requester, &as_user)?;
    for group in &groups {
        access.authorize(&requester, &impersonation("groups", group))?;
    }
    if let Some(uid) = &uid {
        access.authorize(&requester, &impersonation("uids", uid))?;
    }
    let mut identity = Identity {
        name: user,
        uid,
        groups: impersonated_groups,
    };
    if identity.name == "system:anonymous" {
        identity.add_group("system:unauthenticated");
    } else {
        identity.add_group(AUTHENTICATED);
    }
    Ok(identity)
}

/// The request to impersonate the `resource` named `name`, at cluster scope.
fn impersonation(resource: &str, name: &str) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}
