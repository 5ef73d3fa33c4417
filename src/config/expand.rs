//! `~` and environment variables in the paths a config names (kubeconfig, plugins folder,
//! token file), so one file serves a laptop (`~/.kube/config`) and a pod
//! (`${CONFIG_DIR}/plugins`).
//!
//! Expansion is strict: a variable that is not set is an error at its place rather than an
//! empty string, because `$UNSET/plugins` silently becoming `/plugins` loads the wrong folder.

use std::path::PathBuf;

/// Why a path cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// A variable the path names is not set (or not valid Unicode).
    #[error("the variable {0} in this path is not set")]
    Unset(String),
    /// `${` without its closing `}`, or `${}`.
    #[error("unterminated or empty `${{...}}` in this path")]
    Malformed,
    /// `~` at the start but no home folder is known.
    #[error("`~` in this path, but HOME is not set")]
    NoHome,
    /// The path is not valid Unicode, so it cannot be expanded.
    #[error("the path is not valid Unicode")]
    NotUnicode,
}

/// `path` with a leading `~` (alone or before `/`) replaced by `$HOME`, and `$NAME` and
/// `${NAME}` replaced by the variable's value; `$$` is a literal `$`, and a `$` before any
/// other character stays as it is.
pub fn expand_path(path: &std::path::Path) -> Result<PathBuf, ExpandError> {
    let text = path.to_str().ok_or(ExpandError::NotUnicode)?;
    expand_with(text, |name| std::env::var(name).ok()).map(PathBuf::from)
}

/// [`expand_path`] on text, with variables looked up by `lookup`.
pub fn expand_with(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    if rest == "~" || rest.starts_with("~/") {
        out.push_str(&lookup("HOME").ok_or(ExpandError::NoHome)?);
        rest = &rest[1..];
    }
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').ok_or(ExpandError::Malformed)?;
            let name = &braced[..end];
            if name.is_empty() {
                return Err(ExpandError::Malformed);
            }
            out.push_str(&lookup(name).ok_or_else(|| ExpandError::Unset(name.to_string()))?);
            rest = &braced[end + 1..];
        } else {
            let len = name_len(after);
            if len == 0 {
                out.push('$');
            } else {
                let name = &after[..len];
                out.push_str(&lookup(name).ok_or_else(|| ExpandError::Unset(name.to_string()))?);
            }
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The length of the variable name at the start of `text`: a letter or `_`, then letters,
/// digits and `_`.
fn name_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => bytes
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(text: &str) -> Result<String, ExpandError> {
        expand_with(text, |name| match name {
            "HOME" => Some("/home/op".into()),
            "DIR" => Some("/etc/sy".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        })
    }

    #[test]
    fn tilde_and_variables_are_expanded() {
        assert_eq!(expand("~/.kube/config").unwrap(), "/home/op/.kube/config");
        assert_eq!(expand("~").unwrap(), "/home/op");
        assert_eq!(expand("$DIR/plugins").unwrap(), "/etc/sy/plugins");
        assert_eq!(expand("${DIR}x/y").unwrap(), "/etc/syx/y");
        assert_eq!(expand("a${EMPTY}b").unwrap(), "ab");
        assert_eq!(expand("cost$$5/$-x/$").unwrap(), "cost$5/$-x/$");
        assert_eq!(expand("a~b/~").unwrap(), "a~b/~", "only a leading ~");
        assert_eq!(
            expand("~user/x").unwrap(),
            "~user/x",
            "no other users' homes"
        );
    }

    #[test]
    fn an_unset_or_malformed_variable_is_an_error() {
        assert_eq!(expand("$NOPE/x"), Err(ExpandError::Unset("NOPE".into())));
        assert_eq!(expand("${NOPE}"), Err(ExpandError::Unset("NOPE".into())));
        assert_eq!(expand("${DIR"), Err(ExpandError::Malformed));
        assert_eq!(expand("${}"), Err(ExpandError::Malformed));
        let no_home = expand_with("~/x", |_| None);
        assert_eq!(no_home, Err(ExpandError::NoHome));
    }
}
