//! The RBAC evaluator: whether the Roles, ClusterRoles and their bindings allow a user a
//! request, decided as kube-apiserver's RBAC authorizer decides it.
//!
//! A ClusterRoleBinding grants its ClusterRole's rules everywhere; a RoleBinding grants its
//! Role's (or a ClusterRole's) rules in its own namespace. A rule allows a request when its
//! `verbs`, `apiGroups`, `resources` (`plural`, `plural/subresource`, `*/subresource` or `*`)
//! and `resourceNames` (none means every name) all match. Subjects are `User`, `Group` and
//! `ServiceAccount` (its namespace defaulting to the binding's).

use std::sync::Arc;

use serde_json::Value;

use super::identity::Identity;
use crate::sim::cluster::Cluster;
use crate::sim::resources::builtin_index;

/// The RBAC API group.
const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request does, as the authorizer sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `impersonate`, ...
    pub verb: String,
    /// The API group, empty for the core group.
    pub group: String,
    /// The resource's plural name.
    pub resource: String,
    /// The subresource (`status`), empty for none.
    pub subresource: String,
    /// The namespace, empty for a cluster-scoped request.
    pub namespace: String,
    /// The object's name, empty for a collection.
    pub name: String,
}

/// The RBAC objects that can bear on requests in one namespace.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Every ClusterRole.
    pub cluster_roles: Vec<Arc<Value>>,
    /// Every ClusterRoleBinding.
    pub cluster_role_bindings: Vec<Arc<Value>>,
    /// The Roles of the namespace.
    pub roles: Vec<Arc<Value>>,
    /// The RoleBindings of the namespace.
    pub role_bindings: Vec<Arc<Value>>,
}

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// Which binding allowed it, or (denied) the bindings whose role is missing; may be empty.
    pub reason: String,
}

impl Policy {
    /// The RBAC objects stored in `cluster` for a request in `namespace` (empty: cluster scope).
    pub fn of(cluster: &Cluster, namespace: &str) -> Self {
        let all = |plural: &str| cluster.list(builtin_index(RBAC, "v1", plural), None).items;
        let in_namespace = |plural: &str| {
            if namespace.is_empty() {
                Vec::new()
            } else {
                let index = builtin_index(RBAC, "v1", plural);
                cluster.list(index, Some(namespace)).items
            }
        };
        Self {
            cluster_roles: all("clusterroles"),
            cluster_role_bindings: all("clusterrolebindings"),
            roles: in_namespace("roles"),
            role_bindings: in_namespace("rolebindings"),
        }
    }

    /// Whether `who` may do `request`: a superuser always; anyone else when a binding to
    /// them grants a rule that allows it.
    pub fn decide(&self, who: &Identity, request: &Attributes) -> Decision {
        if who.is_superuser() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut missing = Vec::new();
        let bindings = self.cluster_role_bindings.iter().map(|b| (b, "")).chain(
            self.role_bindings
                .iter()
                .map(|b| (b, request.namespace.as_str())),
        );
        for (binding, namespace) in bindings {
            let Some(subject) = bound_subject(binding, who, namespace) else {
                continue;
            };
            let Some(rules) = self.role_rules(binding, namespace) else {
                missing.push(missing_role(binding));
                continue;
            };
            if rules.iter().any(|rule| rule_allows(rule, request)) {
                return Decision {
                    allowed: true,
                    reason: format!("RBAC: allowed by {}", describe(binding, namespace, subject)),
                };
            }
        }
        let reason = match missing.as_slice() {
            [] => String::new(),
            [one] => format!("RBAC: {one}"),
            many => format!("RBAC: [{}]", many.join(", ")),
        };
        Decision {
            allowed: false,
            reason,
        }
    }

    /// The rules of the role a binding refers to, `None` when it does not exist.
    fn role_rules(&self, binding: &Value, namespace: &str) -> Option<Vec<Value>> {
        let role_ref = &binding["roleRef"];
        let name = role_ref["name"].as_str().unwrap_or_default();
        let roles = match role_ref["kind"].as_str() {
            Some("Role") if !namespace.is_empty() => &self.roles,
            Some("ClusterRole") => &self.cluster_roles,
            _ => return None,
        };
        let role = roles.iter().find(|r| r["metadata"]["name"] == name)?;
        Some(role["rules"].as_array().cloned().unwrap_or_default())
    }
}

/// The subject of `binding` that is `who`, if any; `namespace` is the binding's (empty for
/// a ClusterRoleBinding).
fn bound_subject<'a>(binding: &'a Value, who: &Identity, namespace: &str) -> Option<&'a Value> {
    let subjects = binding["subjects"].as_array()?;
    subjects.iter().find(|subject| {
        let name = subject["name"].as_str().unwrap_or_default();
        match subject["kind"].as_str() {
            Some("User") => who.name == name,
            Some("Group") => who.groups.iter().any(|g| g == name),
            Some("ServiceAccount") => {
                let ns = subject["namespace"].as_str().filter(|n| !n.is_empty());
                let ns = ns.unwrap_or(namespace);
                !ns.is_empty() && who.name == format!("system:serviceaccount:{ns}:{name}")
            }
            _ => false,
        }
    })
}

/// Whether one rule allows the request.
fn rule_allows(rule: &Value, request: &Attributes) -> bool {
    let resource = if request.subresource.is_empty() {
        request.resource.clone()
    } else {
        format!("{}/{}", request.resource, request.subresource)
    };
    let any_subresource = format!("*/{}", request.subresource);
    let names = strings(&rule["resourceNames"]);
    strings(&rule["verbs"]).any(|v| v == "*" || v == request.verb)
        && strings(&rule["apiGroups"]).any(|g| g == "*" || g == request.group)
        && strings(&rule["resources"]).any(|r| {
            r == "*" || r == resource || (!request.subresource.is_empty() && r == any_subresource)
        })
        && (names.clone().next().is_none() || names.into_iter().any(|n| n == request.name))
}

/// The strings of a JSON array (nothing for anything else).
fn strings(value: &Value) -> impl Iterator<Item = &str> + Clone {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// kube-apiserver's words for a binding whose role does not exist.
fn missing_role(binding: &Value) -> String {
    let role_ref = &binding["roleRef"];
    let kind = role_ref["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = role_ref["name"].as_str().unwrap_or_default();
    format!("{kind}.{RBAC} {name:?} not found")
}

/// kube-apiserver's words for the binding that allowed a request:
/// `RoleBinding "NAME/NS" of Role "ROLE" to ServiceAccount "SA/NS"`.
fn describe(binding: &Value, namespace: &str, subject: &Value) -> String {
    let name = binding["metadata"]["name"].as_str().unwrap_or_default();
    let (kind, name) = if namespace.is_empty() {
        ("ClusterRoleBinding", name.to_string())
    } else {
        ("RoleBinding", format!("{name}/{namespace}"))
    };
    let role_ref = &binding["roleRef"];
    let role_kind = role_ref["kind"].as_str().unwrap_or_default();
    let role_name = role_ref["name"].as_str().unwrap_or_default();
    let subject_kind = subject["kind"].as_str().unwrap_or_default();
    let mut subject_name = subject["name"].as_str().unwrap_or_default().to_string();
    if subject_kind == "ServiceAccount" {
        let ns = subject["namespace"].as_str().filter(|n| !n.is_empty());
        subject_name = format!("{subject_name}/{}", ns.unwrap_or(namespace));
    }
    format!("{kind} {name:?} of {role_kind} {role_name:?} to {subject_kind} {subject_name:?}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const RUNNER: &str = "system:serviceaccount:team-a:runner";

    fn request(verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn role(name: &str, rules: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "namespace": "team-a"}, "rules": rules}))
    }

    fn binding(name: &str, kind: &str, role: &str, subjects: Value) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "namespace": "team-a"},
            "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
            "subjects": subjects,
        }))
    }

    /// team-a's runner may write configmaps in team-a, and read the status of one.
    fn team_a() -> Policy {
        Policy {
            roles: vec![role(
                "writer",
                json!([
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update", "create"]},
                    {"apiGroups": [""], "resources": ["configmaps/status"], "verbs": ["update"], "resourceNames": ["one"]},
                ]),
            )],
            role_bindings: vec![binding(
                "writers",
                "Role",
                "writer",
                json!([{"kind": "ServiceAccount", "name": "runner"}]),
            )],
            ..Policy::default()
        }
    }

    fn runner() -> Identity {
        Identity::authenticated(RUNNER, None, &[])
    }

    #[test]
    fn a_role_binding_allows_its_rules_in_its_namespace() {
        let decision = team_a().decide(&runner(), &request("update", "configmaps", "team-a", "x"));
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            r#"RBAC: allowed by RoleBinding "writers/team-a" of Role "writer" to ServiceAccount "runner/team-a""#
        );
        let other = Identity::authenticated("system:serviceaccount:team-b:runner", None, &[]);
        assert!(
            !team_a()
                .decide(&other, &request("update", "configmaps", "team-a", "x"))
                .allowed
        );
        assert!(
            !team_a()
                .decide(&runner(), &request("delete", "configmaps", "team-a", "x"))
                .allowed
        );
        assert!(
            !team_a()
                .decide(&runner(), &request("update", "secrets", "team-a", "x"))
                .allowed
        );
    }

    #[test]
    fn a_subresource_needs_its_own_rule_and_names_limit_a_rule() {
        let policy = team_a();
        assert!(
            policy
                .decide(
                    &runner(),
                    &request("update", "configmaps/status", "team-a", "one")
                )
                .allowed
        );
        assert!(
            !policy
                .decide(
                    &runner(),
                    &request("update", "configmaps/status", "team-a", "two")
                )
                .allowed
        );
        assert!(
            !policy
                .decide(
                    &runner(),
                    &request("get", "configmaps/status", "team-a", "one")
                )
                .allowed
        );
    }

    #[test]
    fn wildcards_and_groups_and_cluster_bindings() {
        let policy = Policy {
            cluster_roles: vec![role(
                "viewer",
                json!([{"apiGroups": ["*"], "resources": ["*/status", "pods"], "verbs": ["*"]}]),
            )],
            cluster_role_bindings: vec![binding(
                "viewers",
                "ClusterRole",
                "viewer",
                json!([{"kind": "Group", "name": "system:serviceaccounts:team-a"}]),
            )],
            ..Policy::default()
        };
        let decision = policy.decide(&runner(), &request("list", "pods", "", ""));
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            r#"RBAC: allowed by ClusterRoleBinding "viewers" of ClusterRole "viewer" to Group "system:serviceaccounts:team-a""#
        );
        assert!(
            policy
                .decide(&runner(), &request("patch", "deployments/status", "x", "d"))
                .allowed
        );
        assert!(
            !policy
                .decide(&runner(), &request("patch", "deployments", "x", "d"))
                .allowed
        );
        let alice = Identity::authenticated("alice", None, &[]);
        assert!(
            !policy
                .decide(&alice, &request("list", "pods", "", ""))
                .allowed
        );
    }

    #[test]
    fn a_binding_to_a_missing_role_is_the_reason_of_a_denial() {
        let policy = Policy {
            role_bindings: vec![binding(
                "b",
                "Role",
                "gone",
                json!([{"kind": "User", "name": "alice"}]),
            )],
            ..Policy::default()
        };
        let alice = Identity::authenticated("alice", None, &[]);
        let decision = policy.decide(&alice, &request("get", "pods", "team-a", "p"));
        assert!(!decision.allowed);
        assert_eq!(
            decision.reason,
            r#"RBAC: role.rbac.authorization.k8s.io "gone" not found"#
        );
    }

    #[test]
    fn a_superuser_is_allowed_everything() {
        let decision =
            Policy::default().decide(&Identity::admin(), &request("delete", "nodes", "", "n"));
        assert!(decision.allowed);
    }
}
