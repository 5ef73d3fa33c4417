//! `oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]`: where a plugin lives in an OCI
//! registry (a handler's `plugin:`; pulled by `plugin::oci`). Without a tag or digest the tag is `latest`; with a digest the artifact is
//! pinned and the tag, if any, is only informative.

use std::fmt;

/// The scheme prefix of a plugin reference.
pub const SCHEME: &str = "oci://";

/// A parsed plugin reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository path, e.g. `team/log-events`.
    pub repository: String,
    /// The tag, when given (`latest` when neither tag nor digest is).
    pub tag: Option<String>,
    /// The pinned manifest digest, `sha256:` and 64 hex digits.
    pub digest: Option<String>,
}

impl Reference {
    /// Whether `text` is meant as an OCI reference (starts with `oci://`).
    pub fn is_oci(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// Parses `oci://...`; the error says which part is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("{text:?} does not start with {SCHEME}"))?;
        let (rest, digest) = match rest.split_once('@') {
            Some((rest, digest)) => (rest, Some(parse_digest(digest)?)),
            None => (rest, None),
        };
        let (registry, path) = rest.split_once('/').ok_or_else(|| {
            format!("{text:?} names no repository: use {SCHEME}HOST/REPOSITORY:TAG")
        })?;
        if registry.is_empty() || !registry.chars().all(registry_char) {
            return Err(format!(
                "{text:?}: {registry:?} is not a registry host[:port]"
            ));
        }
        // A tag follows the last ':' after the last '/'.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_string())),
            _ => (path, None),
        };
        if repository.is_empty()
            || repository.split('/').any(|part| {
                part.is_empty()
                    || !part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
            })
        {
            return Err(format!(
                "{text:?}: repository {repository:?} must be lower-case letters, digits, '.', '_', '-' in '/'-separated parts"
            ));
        }
        if let Some(tag) = &tag
            && (tag.is_empty()
                || tag.len() > 128
                || tag.starts_with(['.', '-'])
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)))
        {
            return Err(format!("{text:?}: {tag:?} is not a tag"));
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_string()),
            (tag, _) => tag,
        };
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }

    /// What to ask the registry's manifest endpoint for: the digest if pinned, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// Whether the registry is this machine (spoken to over plain HTTP, as container tools
    /// do for `localhost`); every other registry is spoken to over HTTPS.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => self.registry.as_str(),
        };
        host == "localhost" || host == "[::1]" || host.starts_with("127.")
    }

    /// The registry's base URL.
    pub fn base_url(&self) -> String {
        let scheme = if self.is_loopback() { "http" } else { "https" };
        format!("{scheme}://{}/v2/{}", self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn registry_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || ".-:[]".contains(c)
}

/// `sha256:` and 64 lower-case hex digits.
pub fn parse_digest(text: &str) -> Result<String, String> {
    match text.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) =>
        {
            Ok(text.to_string())
        }
        _ => Err(format!(
            "{text:?} is not a digest: use sha256: and 64 lower-case hex digits"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_into_their_parts() {
        let r = Reference::parse("oci://127.0.0.1:5000/team/log-events:v1").unwrap();
        assert_eq!(
            (
                r.registry.as_str(),
                r.repository.as_str(),
                r.tag.as_deref(),
                r.digest.as_deref()
            ),
            ("127.0.0.1:5000", "team/log-events", Some("v1"), None)
        );
        assert!(r.is_loopback());
        assert_eq!(r.base_url(), "http://127.0.0.1:5000/v2/team/log-events");
        let r = Reference::parse(&format!("oci://ghcr.io/acme/guard@{D}")).unwrap();
        assert_eq!((r.tag, r.digest.as_deref()), (None, Some(D)));
        assert!(
            !Reference::parse("oci://ghcr.io/acme/guard")
                .unwrap()
                .is_loopback()
        );
        let r = Reference::parse("oci://ghcr.io/acme/guard").unwrap();
        assert_eq!(r.manifest_ref(), "latest");
        assert_eq!(r.to_string(), "oci://ghcr.io/acme/guard:latest");
        assert_eq!(
            Reference::parse(&format!("oci://h/r:v2@{D}"))
                .unwrap()
                .to_string(),
            format!("oci://h/r:v2@{D}")
        );
    }

    #[test]
    fn bad_references_say_which_part_is_wrong() {
        for (text, says) in [
            ("oci://host", "names no repository"),
            ("oci:///repo", "is not a registry"),
            ("oci://h/Repo", "must be lower-case"),
            ("oci://h/a//b", "must be lower-case"),
            ("oci://h/r:-x", "is not a tag"),
            ("oci://h/r@sha256:abc", "is not a digest"),
            ("oci://h/r@md5:00", "is not a digest"),
            ("http://h/r", "does not start with oci://"),
        ] {
            let error = Reference::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
