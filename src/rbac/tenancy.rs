//! Rule set: what `tenancy:` needs. Reading the team resources and writing their status and
//! Events; reading what team Routes may watch (`tenancy.resources`) in every namespace;
//! asking the API server about a team's ServiceAccount (SubjectAccessReviews); and making
//! team handlers' requests as their ServiceAccounts (`impersonate` on serviceaccounts only:
//! never on users or groups).

use super::{Permissions, READ_VERBS, Resource, Scope, Subject, events_resource};
use crate::config::Config;
use crate::config::crds::GROUP;

/// Adds the rules `config`'s `tenancy:` needs.
pub(super) fn tenancy(config: &Config, _: &Subject, permissions: &mut Permissions) {
    let Some(tenancy) = &config.tenancy else {
        return;
    };
    let cluster = [Scope::Cluster];
    let resource = |group: &str, plural: &str| Resource {
        group: group.into(),
        plural: plural.into(),
    };
    for plural in ["routes", "handlers"] {
        let reason = format!("tenancy: team {plural} read");
        permissions.allow(&cluster, &resource(GROUP, plural), READ_VERBS, &reason);
        let reason = format!("tenancy: the status of team {plural} written");
        permissions.allow(
            &cluster,
            &resource(GROUP, &format!("{plural}/status")),
            &["patch"],
            &reason,
        );
    }
    permissions.allow(
        &cluster,
        &events_resource(),
        &["create"],
        "tenancy: an Event on a refused team resource",
    );
    for name in &tenancy.resources {
        let reason =
            format!("tenancy.resources: {name} watched for team Routes, in their namespaces");
        permissions.allow(
            &cluster,
            &resource(&name.group, &name.plural),
            READ_VERBS,
            &reason,
        );
    }
    if tenancy.namespaces.is_some() {
        permissions.allow(
            &cluster,
            &resource("", "namespaces"),
            READ_VERBS,
            "tenancy.namespaces: the namespaces the selector picks",
        );
    }
    permissions.allow(
        &cluster,
        &resource("authorization.k8s.io", "subjectaccessreviews"),
        &["create"],
        "tenancy: asks whether a team's ServiceAccount may list and watch what its Route watches",
    );
    permissions.allow(
        &cluster,
        &resource("", "serviceaccounts"),
        &["impersonate"],
        "tenancy: a team handler's Kubernetes requests are made as its ServiceAccount (serviceaccounts only, not users or groups; Kubernetes cannot narrow this to a namespace selector: bind it per namespace with RoleBindings to narrow it)",
    );
}
