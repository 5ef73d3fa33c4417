//! Whether a team's ServiceAccount may read what its Route watches, asked of the API server
//! (a SubjectAccessReview) rather than read from RBAC objects by us: the API server's
//! authorizers (RBAC, webhooks, node) have the last word.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use crate::util::kube_error;

/// The verbs a route's watch needs.
const WATCH_VERBS: [&str; 2] = ["list", "watch"];

/// `Ok(())` when `user` may list and watch `resource` (plural) of `group` in `namespace`;
/// otherwise what the API server said, for the Route's condition.
pub async fn may_watch(
    client: &kube::Client,
    user: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> Result<(), String> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    for verb in WATCH_VERBS {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_string()),
                groups: Some(service_account_groups(user, namespace)),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.to_string()),
                    namespace: Some(namespace.to_string()),
                    verb: Some(verb.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| {
                format!(
                    "cannot ask the API server (SubjectAccessReview): {}",
                    kube_error(&e)
                )
            })?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed {
            let reason = status
                .reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let shown = if group.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}.{group}")
            };
            return Err(format!(
                "{user} may not {verb} {shown} in namespace {namespace} (SubjectAccessReview){reason}"
            ));
        }
    }
    Ok(())
}

/// The groups the API server gives a ServiceAccount's token: a review names them itself.
fn service_account_groups(user: &str, namespace: &str) -> Vec<String> {
    let mut groups = vec!["system:authenticated".to_string()];
    if user.starts_with("system:serviceaccount:") {
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{namespace}"));
    }
    groups
}
