//! Kubernetes errors as people read them, and which of them are refusals.

/// A kube error as people read it: a Kubernetes `Status` by its message and code, never as
/// a debug dump (kube's own `Display` appends one).
pub fn kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// Whether the API server answered `error` with a refusal that asking again will not
/// change: a 4xx status other than 409 Conflict and 429 Too Many Requests (403 Forbidden
/// when a Role is missing, 404 when a namespace is). A server that could not be reached,
/// or answered 5xx, has not refused anything.
pub fn is_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}
