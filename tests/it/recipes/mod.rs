//! The recipes in plugins/recipes, each played through its original tool's own documented
//! scenario against the simulator, with the recipe's config fragment as shipped and the
//! outcome read back through the API or `kubectl`; and each fragment's `switchyard rbac`
//! output checked to be least-privilege.

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
