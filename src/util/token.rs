//! Bearer credentials, as the admin API and the simulator check them.

/// The token of a `Bearer` credential (`Authorization: Bearer TOKEN`); the scheme is
/// case-insensitive (RFC 9110 §11.1).
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Whether `given` is `expected`, compared without stopping at the first difference so
/// timing does not reveal the token.
pub fn token_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive_and_other_schemes_are_not_bearer() {
        for header in ["Bearer abc", "bearer abc", "BEARER  abc "] {
            assert_eq!(bearer_token(header), Some("abc"), "{header}");
        }
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(token_matches("secret", "secret"));
        assert!(!token_matches("secret", "secreT"));
        assert!(!token_matches("secret", "secret2"));
    }
}
