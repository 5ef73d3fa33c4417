// READ /work/wt-recipes-a/READ-FIRST.md FIRST: the rest of your instructions. Remove this line before committing.
//! The recipes in plugins/recipes, each played through its original tool's own documented
//! scenario against the simulator, with the recipe's config fragment as shipped and the
//! outcome read back through the API or `kubectl`; and each fragment's `switchyard rbac`
//! output checked to be least-privilege.

mod janitor;
mod namespace_defaults;
mod reloader;
mod replicator;

use std::path::PathBuf;

use crate::support::process::switchyard;

/// The recipe `name`'s folder.
pub fn folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("plugins/recipes")
        .join(name)
}

/// The recipe's config fragment (`switchyard.yaml`), as shipped.
pub fn fragment(name: &str) -> String {
    let path = folder(name).join("switchyard.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// What `switchyard rbac` prints for the recipe's fragment; panics if it fails.
pub fn rbac(name: &str) -> String {
    let path = folder(name).join("switchyard.yaml");
    let (code, out, err) = switchyard(&["rbac", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "switchyard rbac on {}: {err}", path.display());
    out
}

/// The rules `switchyard rbac` grants for the recipe's fragment, one entry per rule:
/// `"ClusterRole GROUP/PLURAL"` (or `"Role NAMESPACE GROUP/PLURAL"`; the core group is
/// empty) and its verbs, sorted. Panics on anything but ServiceAccounts, (Cluster)Roles
/// and their bindings.
pub fn rbac_rules(name: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut rules = std::collections::BTreeMap::new();
    for document in rbac(name).split("\n---\n") {
        let object: serde_json::Value =
            serde_saphyr::from_str(document).unwrap_or_else(|e| panic!("{e}:\n{document}"));
        let kind = object["kind"].as_str().unwrap_or_default();
        let scope = match kind {
            "ClusterRole" => "ClusterRole".to_string(),
            "Role" => format!("Role {}", object["metadata"]["namespace"].as_str().unwrap()),
            "ServiceAccount" | "ClusterRoleBinding" | "RoleBinding" => continue,
            other => panic!("switchyard rbac printed a {other}:\n{document}"),
        };
        for rule in object["rules"].as_array().into_iter().flatten() {
            let texts = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .unwrap_or_else(|| panic!("a rule without {field}: {rule}"))
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            let [group] = texts("apiGroups").try_into().expect("one group per rule");
            for plural in texts("resources") {
                let mut verbs = texts("verbs");
                verbs.sort();
                rules.insert(format!("{scope} {group}/{plural}"), verbs);
            }
        }
    }
    rules
}
