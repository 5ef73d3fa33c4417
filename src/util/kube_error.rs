//! Kubernetes errors as people read them.

/// A kube error as people read it: a Kubernetes `Status` by its message and code, never as
/// a debug dump (kube's own `Display` appends one).
pub fn kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}
