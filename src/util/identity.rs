//! How the daemon names itself to the API server: the User-Agent of its client, the field
//! manager of its own writes (finalizers, Leases; a handler's writes use
//! `switchyard-HANDLER`), and which namespace is "the daemon's" when nothing names one.
//!
//! kube-apiserver records the field manager in each object's `managedFields` and the
//! User-Agent in its audit log; without them a write shows as `manager: "unknown"`.

use std::path::{Path, PathBuf};

use kube::api::{PatchParams, PostParams};

/// The User-Agent of every request: `switchyard/VERSION`.
pub const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

/// The field manager of the daemon's own writes.
pub const FIELD_MANAGER: &str = "switchyard";

/// Parameters of a patch by `manager`.
pub fn patch_params(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    }
}

/// Parameters of a create or replace by `manager`.
pub fn post_params(manager: &str) -> PostParams {
    PostParams {
        field_manager: Some(manager.to_string()),
        ..PostParams::default()
    }
}

/// The environment variable a pod's manifest sets to its namespace (the downward API).
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";

/// Where a pod's service account token, CA and namespace are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Moves [`SERVICE_ACCOUNT_DIR`] elsewhere; meant for testing the in-cluster config.
pub const SERVICE_ACCOUNT_DIR_ENV: &str = "SWITCHYARD_SERVICEACCOUNT_DIR";

/// The service account folder of a pod: [`SERVICE_ACCOUNT_DIR`], or where
/// [`SERVICE_ACCOUNT_DIR_ENV`] moves it.
pub fn service_account_dir() -> PathBuf {
    std::env::var_os(SERVICE_ACCOUNT_DIR_ENV)
        .map_or_else(|| PathBuf::from(SERVICE_ACCOUNT_DIR), PathBuf::from)
}

/// [`daemon_namespace`] with the pod's service account folder, and `client`'s default
/// namespace (the kubeconfig context's, or the service account's in a pod).
pub fn namespace_of(client: &kube::Client) -> String {
    daemon_namespace(&service_account_dir(), Some(client.default_namespace()))
}

/// The daemon's namespace, by one rule for the Lease, Secrets without a namespace and
/// `switchyard rbac`: `POD_NAMESPACE`, else the pod's service account namespace file in
/// `service_account_dir` (when running in a pod), else `client_namespace` (the
/// kubeconfig context's namespace, when it names one), else `default`.
pub fn daemon_namespace(service_account_dir: &Path, client_namespace: Option<&str>) -> String {
    let env = std::env::var(POD_NAMESPACE_ENV).ok();
    let file = std::fs::read_to_string(service_account_dir.join("namespace")).ok();
    [env.as_deref(), file.as_deref(), client_namespace]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|ns| !ns.is_empty())
        .unwrap_or("default")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_file_wins_over_the_context_and_default_comes_last() {
        // POD_NAMESPACE is not set where the tests run.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(daemon_namespace(dir.path(), None), "default");
        assert_eq!(daemon_namespace(dir.path(), Some(" team ")), "team");
        std::fs::write(dir.path().join("namespace"), "pods-ns\n").unwrap();
        assert_eq!(daemon_namespace(dir.path(), Some("team")), "pods-ns");
    }

    #[test]
    fn the_user_agent_names_the_version() {
        assert_eq!(
            USER_AGENT,
            format!("switchyard/{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
