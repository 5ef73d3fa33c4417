//! Secret values the daemon has read, and their removal from text on its way out.
//!
//! A value a handler's config takes from a Secret or an environment variable reaches the
//! plugin's `init` only. The plugin may still echo it: in a log line, an error it returns,
//! an outbound request that a shadow run or `replay` captures. Every such piece of text
//! passes through [`redact`] before the daemon logs, stores or serves it, and each value
//! remembered with [`remember`] is replaced by [`REDACTED`] there. Values once read are
//! kept for the life of the process: an instance made before a rotation still holds the
//! old one.

use std::borrow::Cow;
use std::sync::RwLock;

/// What a secret value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// The shortest value redacted: a shorter one (`1`, `on`) would blank out ordinary text
/// too, and is no secret.
pub const MIN_LEN: usize = 4;

/// The most values kept; the oldest go first beyond it (a Secret rotated every few
/// seconds for days).
const MAX_VALUES: usize = 4096;

static VALUES: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers `value` as a secret: from now on [`redact`] removes it.
pub fn remember(value: &str) {
    if value.len() < MIN_LEN {
        return;
    }
    let mut values = super::write(&VALUES);
    if values.iter().any(|v| v == value) {
        return;
    }
    if values.len() == MAX_VALUES {
        values.remove(0);
    }
    values.push(value.to_string());
    // Longest first, so a value that contains another is replaced whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
}

/// `text` with every remembered secret value replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let values = super::read(&VALUES);
    let mut out = Cow::Borrowed(text);
    for value in values.iter() {
        if out.contains(value.as_str()) {
            out = Cow::Owned(out.replace(value.as_str(), REDACTED));
        }
    }
    out
}

/// [`redact`] for an owned string, which it returns as it is when it holds no secret.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_values_are_replaced_and_short_ones_ignored() {
        remember("s3cr3t-value-for-redact-test");
        remember("s3cr3t-value-for-redact-test-longer");
        remember("ab");
        assert_eq!(
            redact("a s3cr3t-value-for-redact-test-longer and s3cr3t-value-for-redact-test, ab"),
            "a <redacted> and <redacted>, ab"
        );
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }
}
