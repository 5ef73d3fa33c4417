//! The permissions as values of the Helm chart (`deploy/chart/switchyard`,
//! `switchyard rbac --helm-values`): the chart makes the ServiceAccount, the roles and
//! their bindings from these rules, and the Lease rules of its `mode` itself.

use serde_json::{Map, Value, json};

use super::{Permissions, RULE_SETS, Rule, Scope, Subject};
use crate::config::Config;

/// The namespace the permissions are computed for: it stands for the release's, whatever
/// it is at install, and no namespace can be named so.
const RELEASE: &str = "";

/// `{"rbac": {"clusterRules": [...], "namespaceRules": {NS: [...]},
/// "releaseNamespaceRules": [...]}}`: every rule set's rules but the Leases' (the chart
/// writes those from its `mode`), rules in the namespace the daemon runs in (a Secret a
/// handler's config names without a namespace) under `releaseNamespaceRules`.
pub fn helm_values(config: &Config) -> Value {
    let subject = Subject {
        name: "switchyard".into(),
        namespace: RELEASE.into(),
        source: String::new(),
    };
    let mut permissions = Permissions::default();
    for (name, rule_set) in RULE_SETS {
        if *name != "election" {
            rule_set(config, &subject, &mut permissions);
        }
    }
    let (mut cluster, mut release, mut namespaces) = (Vec::new(), Vec::new(), Map::new());
    for (scope, rules) in permissions.scopes() {
        let rules: Vec<Value> = rules.into_iter().map(rule).collect();
        match scope {
            Scope::Cluster => cluster = rules,
            Scope::Namespace(ns) if ns == RELEASE => release = rules,
            Scope::Namespace(ns) => {
                namespaces.insert(ns.clone(), Value::Array(rules));
            }
        }
    }
    json!({"rbac": {
        "clusterRules": cluster,
        "namespaceRules": namespaces,
        "releaseNamespaceRules": release,
    }})
}

/// One rule as a (Cluster)Role holds it.
fn rule(rule: &Rule) -> Value {
    let mut out = json!({
        "apiGroups": [rule.resource.group],
        "resources": [rule.resource.plural],
    });
    if !rule.names.is_empty() {
        out["resourceNames"] = json!(rule.names);
    }
    out["verbs"] = json!(rule.verbs);
    out
}
