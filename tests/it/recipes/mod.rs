//! The recipes in plugins/recipes, each played through its original tool's own documented
//! scenario against the simulator, with the recipe's config fragment as shipped and the
//! outcome read back through the API or `kubectl`; and each fragment's `switchyard rbac`
//! output checked to be least-privilege.

mod cloudevents_source;
mod janitor;
mod namespace_defaults;
mod pods_per_node;
mod reloader;
mod replicator;
mod warning_events;

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

/// Every rule `switchyard rbac` grants for the recipe's fragment, one line each, sorted:
/// `KIND[/NAMESPACE] GROUPS RESOURCES[ names=NAMES] VERBS`, e.g.
/// `ClusterRole core events get,list,watch` or
/// `Role/default core secrets names=hook get,list,watch` (`core` for the empty group).
pub fn granted(name: &str) -> Vec<String> {
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&rbac(name)).expect("rbac prints YAML documents");
    let joined = |value: &serde_json::Value| {
        let items: Vec<&str> = value
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                v.as_str()
                    .map_or("?", |s| if s.is_empty() { "core" } else { s })
            })
            .collect();
        items.join(",")
    };
    let mut lines = Vec::new();
    for document in documents.iter().filter(|d| d["rules"].is_array()) {
        let mut kind = document["kind"].as_str().unwrap_or("?").to_string();
        if let Some(namespace) = document["metadata"]["namespace"].as_str() {
            kind = format!("{kind}/{namespace}");
        }
        for rule in document["rules"].as_array().unwrap() {
            let names = match joined(&rule["resourceNames"]) {
                names if names.is_empty() => String::new(),
                names => format!(" names={names}"),
            };
            lines.push(format!(
                "{kind} {} {}{names} {}",
                joined(&rule["apiGroups"]),
                joined(&rule["resources"]),
                joined(&rule["verbs"]),
            ));
        }
    }
    lines.sort();
    lines
}
