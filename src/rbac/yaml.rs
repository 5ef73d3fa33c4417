//! The permissions as multi-document YAML that `kubectl apply -f -` takes: the
//! ServiceAccount, then a ClusterRole and its ClusterRoleBinding, then a Role and a
//! RoleBinding per namespace, each rule with a comment saying what needs it.
//!
//! Written by hand rather than through a serializer for the comments; every string is
//! written JSON-quoted, which YAML reads as the same string whatever it holds.

use std::fmt::Write;

use super::{Permissions, Rule, Scope};

/// The group of the RBAC kinds.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Who the permissions are for, and what they were made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// Name of the ServiceAccount, (Cluster)Roles and bindings.
    pub name: String,
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// The config the permissions were derived from, as the header names it.
    pub source: String,
}

/// A JSON-quoted string, which YAML reads as the same string.
fn q(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A flow sequence of quoted strings.
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(q).collect();
    format!("[{}]", items.join(", "))
}

/// The `metadata:` block, with a namespace when given.
fn metadata(out: &mut String, subject: &Subject, namespace: Option<&str>) {
    out.push_str("metadata:\n");
    let _ = writeln!(out, "  name: {}", q(&subject.name));
    if let Some(ns) = namespace {
        let _ = writeln!(out, "  namespace: {}", q(ns));
    }
    out.push_str("  labels:\n");
    out.push_str("    app.kubernetes.io/name: \"switchyard\"\n");
    let _ = writeln!(out, "    app.kubernetes.io/instance: {}", q(&subject.name));
}

/// A Role (in `namespace`) or ClusterRole (none) holding `rules`.
fn role(out: &mut String, subject: &Subject, namespace: Option<&str>, rules: &[&Rule]) {
    let kind = if namespace.is_some() {
        "Role"
    } else {
        "ClusterRole"
    };
    let _ = writeln!(out, "---\napiVersion: {RBAC_GROUP}/v1\nkind: {kind}");
    metadata(out, subject, namespace);
    out.push_str("rules:\n");
    for rule in rules {
        for reason in &rule.reasons {
            let _ = writeln!(out, "  # {reason}");
        }
        let _ = writeln!(
            out,
            "  - apiGroups: {}",
            list([rule.resource.group.as_str()])
        );
        let _ = writeln!(
            out,
            "    resources: {}",
            list([rule.resource.plural.as_str()])
        );
        if !rule.names.is_empty() {
            let names = list(rule.names.iter().map(String::as_str));
            let _ = writeln!(out, "    resourceNames: {names}");
        }
        let _ = writeln!(out, "    verbs: {}", list(rule.verbs.iter().copied()));
    }
}

/// The binding of the ServiceAccount to the role of the same name.
fn binding(out: &mut String, subject: &Subject, namespace: Option<&str>) {
    let (kind, role_kind) = match namespace {
        Some(_) => ("RoleBinding", "Role"),
        None => ("ClusterRoleBinding", "ClusterRole"),
    };
    let _ = writeln!(out, "---\napiVersion: {RBAC_GROUP}/v1\nkind: {kind}");
    metadata(out, subject, namespace);
    let _ = writeln!(
        out,
        "roleRef:\n  apiGroup: {RBAC_GROUP}\n  kind: {role_kind}\n  name: {}",
        q(&subject.name)
    );
    let _ = writeln!(
        out,
        "subjects:\n  - kind: ServiceAccount\n    name: {}\n    namespace: {}",
        q(&subject.name),
        q(&subject.namespace)
    );
}

/// The YAML documents: the ServiceAccount, then each scope's role and binding (the cluster
/// first, then namespaces by name).
pub fn render(permissions: &Permissions, subject: &Subject) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# What switchyard needs to run {} as ServiceAccount {}/{}: made by `switchyard rbac`.",
        subject.source, subject.namespace, subject.name
    );
    out.push_str(
        "# API discovery needs no rule here: Kubernetes grants it to every authenticated user\n\
         # (ClusterRole system:discovery).\n",
    );
    out.push_str("apiVersion: v1\nkind: ServiceAccount\n");
    metadata(&mut out, subject, Some(&subject.namespace));
    for (scope, rules) in permissions.scopes() {
        let namespace = match scope {
            Scope::Cluster => None,
            Scope::Namespace(ns) => Some(ns.as_str()),
        };
        role(&mut out, subject, namespace, &rules);
        binding(&mut out, subject, namespace);
    }
    out
}
