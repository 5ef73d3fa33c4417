//! The recipes in plugins/recipes, each played through its original tool's own documented
//! scenario against the simulator, with the recipe's config fragment as shipped and the
//! outcome read back through the API or `kubectl`; and each fragment's `switchyard rbac`
//! output checked to be least-privilege.

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

/// The rules of `switchyard rbac`'s output, each as `SCOPE GROUP/RESOURCES: VERBS` (SCOPE is
/// `cluster` or the Role's namespace), sorted: what a recipe's least-privilege check compares.
pub fn rules(rbac: &str) -> Vec<String> {
    let mut found = Vec::new();
    for doc in rbac.split("\n---\n") {
        let scope = if doc.contains("\nkind: ClusterRole\n") {
            "cluster".to_string()
        } else if doc.contains("\nkind: Role\n") {
            let namespace = doc
                .lines()
                .find_map(|l| l.trim().strip_prefix("namespace: "));
            namespace.unwrap_or_default().trim_matches('"').to_string()
        } else {
            continue;
        };
        let list = |line: &str, key: &str| {
            let items = line.trim().strip_prefix(key)?.trim();
            let items = items.strip_prefix('[')?.strip_suffix(']')?;
            Some(items.replace(['"', ' '], ""))
        };
        let lines: Vec<&str> = doc.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(group) = list(line, "- apiGroups:") else {
                continue;
            };
            let resources = list(lines[i + 1], "resources:").expect("resources after apiGroups");
            let verbs = list(lines[i + 2], "verbs:").expect("verbs after resources");
            found.push(format!("{scope} {group}/{resources}: {verbs}"));
        }
    }
    found.sort();
    found
}
