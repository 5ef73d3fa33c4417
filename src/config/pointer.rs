//! JSON pointers (RFC 6901) as the config names fields to drop from objects before caching
//! (`/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration`). Only the
//! shape is checked here; the informer's transform applies them.

/// Why a JSON pointer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// The pointer does not start with '/' or names nothing after it.
    #[error(
        "invalid JSON pointer {pointer:?}: it must start with '/', such as /metadata/annotations/NAME or /status"
    )]
    NotRooted {
        /// The pointer as written.
        pointer: String,
    },
}

/// Checks that `pointer` is a JSON pointer the informer's transform can apply.
pub fn validate_pointer(pointer: &str) -> Result<(), PointerError> {
    if !pointer.starts_with('/') || pointer.len() < 2 {
        return Err(PointerError::NotRooted {
            pointer: pointer.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_must_start_with_a_slash() {
        assert!(validate_pointer("metadata/annotations").is_err());
        assert!(validate_pointer("/").is_err());
        assert!(validate_pointer("/status").is_ok());
    }
}
