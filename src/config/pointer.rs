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
    /// A `~` not followed by `0` (for `~`) or `1` (for `/`).
    #[error(
        "invalid JSON pointer {pointer:?}: '~' must be followed by 0 (for '~') or 1 (for '/'), as in /metadata/annotations/example.com~1name"
    )]
    BadEscape {
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
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(PointerError::BadEscape {
                pointer: pointer.to_string(),
            });
        }
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

    #[test]
    fn a_tilde_must_escape_a_tilde_or_a_slash() {
        assert!(validate_pointer("/metadata/annotations/a~1b~0c").is_ok());
        for bad in ["/metadata/~2bad", "/metadata/trailing~"] {
            let error = validate_pointer(bad).unwrap_err().to_string();
            assert!(
                error.contains("'~' must be followed by 0"),
                "{bad}: {error}"
            );
        }
    }
}
