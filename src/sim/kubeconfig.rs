//! The kubeconfig file that points kubectl and kube-rs at a running simulator.

use std::io;
use std::path::Path;

/// The name of the cluster, user and context the kubeconfig defines.
pub const CONTEXT: &str = "switchyard-sim";

/// A kubeconfig for the simulator at `url` (plain HTTP on loopback, no credentials).
pub fn kubeconfig_yaml(url: &str) -> String {
    kubeconfig_yaml_with(url, None, None)
}

/// A kubeconfig for the simulator at `url`, trusting the CA `ca_pem` (for HTTPS) and
/// sending `token`, when given.
pub fn kubeconfig_yaml_with(url: &str, ca_pem: Option<&str>, token: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem.map_or(String::new(), |pem| {
        let data = base64::engine::general_purpose::STANDARD.encode(pem);
        format!("\n    certificate-authority-data: {data}")
    });
    // JSON strings are YAML strings: the token is quoted whatever it holds.
    let user = token.map_or("{}".to_string(), |t| {
        format!("\n    token: {}", serde_json::Value::from(t))
    });
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {url}{ca}
users:
- name: {CONTEXT}
  user: {user}
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
    write_kubeconfig_yaml(path, &kubeconfig_yaml(url))
}

/// Writes the kubeconfig `yaml` to `path`, through a temporary file.
pub fn write_kubeconfig_yaml(path: &Path, yaml: &str) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml)?;
    std::fs::rename(&tmp, path)
}
