//! The kubeconfig file that points kubectl and kube-rs at a running simulator.

use std::io;
use std::path::Path;

/// The name of the cluster, user and context the kubeconfig defines.
pub const CONTEXT: &str = "switchyard-sim";

/// A kubeconfig for the simulator at `url` (plain HTTP on loopback, no credentials).
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {url}
users:
- name: {CONTEXT}
  user: {{}}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {CONTEXT}
    namespace: default
current-context: {CONTEXT}
"
    )
}

/// Writes the kubeconfig to `path`, through a temporary file so readers never see half of it.
pub fn write_kubeconfig(path: &Path, url: &str) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, kubeconfig_yaml(url))?;
    std::fs::rename(&tmp, path)
}
