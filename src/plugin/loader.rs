//! Loads plugins from the plugins folder: `NAME.wasm` is the plugin `NAME`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Error, Plugin, PluginHost, Result};

/// The file the plugin `name` is loaded from.
pub fn plugin_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.wasm"))
}

/// Reads and compiles the plugin `name` from `dir`.
pub async fn load(host: &Arc<PluginHost>, dir: &Path, name: &str) -> Result<Plugin> {
    let path = plugin_path(dir, name);
    let bytes = tokio::fs::read(&path).await.map_err(|e| Error::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    host.compile(name, bytes).await
}
