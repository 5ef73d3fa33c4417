//! `oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]`: where a plugin lives in an OCI
//! registry (a handler's `plugin:`; pulled by `plugin::oci`). Without a tag or digest the
//! tag is `latest`; with a digest the artifact is pinned and the tag, if any, is only
//! informative. [`OciSpec`] holds the `oci:` settings every pull follows.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scheme prefix of a plugin reference.
pub const SCHEME: &str = "oci://";

/// Default of `oci.connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `oci.timeout`.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `oci.max_layer_size` (64 MiB, the cap on a plugin file in the plugins folder).
pub const DEFAULT_MAX_LAYER_SIZE: u64 = 64 << 20;

/// The `oci:` settings, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciSpec {
    /// How long connecting to a registry may take.
    pub connect_timeout: Duration,
    /// How long one whole pull may take.
    pub timeout: Duration,
    /// The largest component layer pulled, in bytes.
    pub max_layer_size: u64,
    /// Registries (`host` or `host:port`, as references write them) spoken to over plain
    /// HTTP although they are not this machine, never with credentials.
    pub insecure_registries: Vec<String>,
    /// Where pulled manifests and components are cached (`oci.cache_dir`); `None` for
    /// [`DEFAULT_CACHE_DIR`] in the plugins folder.
    pub cache_dir: Option<PathBuf>,
    /// PEM files of certificate authorities trusted for a registry besides the public
    /// roots (`oci.registries.HOST.ca_file`), by registry as references write it.
    pub ca_files: BTreeMap<String, PathBuf>,
}

/// The cache's folder in the plugins folder when `oci.cache_dir` is not set.
pub const DEFAULT_CACHE_DIR: &str = ".oci";

impl Default for OciSpec {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout: DEFAULT_PULL_TIMEOUT,
            max_layer_size: DEFAULT_MAX_LAYER_SIZE,
            insecure_registries: Vec::new(),
            cache_dir: None,
            ca_files: BTreeMap::new(),
        }
    }
}

impl OciSpec {
    /// Whether the config lists `registry` (`host[:port]`) as spoken to over plain HTTP.
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure_registries.iter().any(|r| r == registry)
    }

    /// The folder pulls are cached in, for the plugins folder `plugins_dir`.
    pub fn cache_dir(&self, plugins_dir: &Path) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(|| plugins_dir.join(DEFAULT_CACHE_DIR))
    }

    /// The certificate authorities the config gives for `registry` (`host[:port]`), if any.
    pub fn ca_file(&self, registry: &str) -> Option<&Path> {
        self.ca_files.get(registry).map(PathBuf::as_path)
    }
}

/// The certificates of the PEM file `path` (DER), failing unless it can be read and holds
/// at least one: a registry's own certificate authorities (`oci.registries.HOST.ca_file`).
pub fn read_ca_file(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .map(|cert| cert.map(|der| der.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the CA file {} is not PEM: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!(
            "the CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certificates)
}

/// Whether `text` is a registry as a reference writes it: `host` or `host:port`, `[v6]`
/// with brackets.
pub fn is_registry(text: &str) -> bool {
    !text.is_empty() && text.chars().all(registry_char)
}

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
        if !is_registry(registry) {
            return Err(format!(
                "{text:?}: {registry:?} is not a registry host[:port]"
            ));
        }
        // A tag follows the last ':' after the last '/'.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_string())),
            _ => (path, None),
        };
        if repository.is_empty() || !repository.split('/').all(is_repository_part) {
            return Err(format!(
                "{text:?}: repository {repository:?} must be lower-case letters, digits, '.', '_', '-' in '/'-separated parts, each beginning and ending with a letter or digit"
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

    /// The registry's host, without the port (`[::1]` keeps its brackets).
    pub fn host(&self) -> &str {
        self.split_port().0
    }

    /// The registry's port, when the reference names one.
    pub fn port(&self) -> Option<u16> {
        self.split_port().1
    }

    fn split_port(&self) -> (&str, Option<u16>) {
        match self.registry.rsplit_once(':') {
            Some((host, port)) if !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => {
                (host, port.parse().ok())
            }
            _ => (self.registry.as_str(), None),
        }
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

/// Whether `part` is one part of a repository path (the distribution spec's grammar,
/// loosely): lower-case letters and digits, with '.', '_' and '-' only between them, so no
/// part is `.` or `..`.
fn is_repository_part(part: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    part.starts_with(alphanumeric)
        && part.ends_with(alphanumeric)
        && part.chars().all(|c| alphanumeric(c) || "._-".contains(c))
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
        assert_eq!((r.host(), r.port()), ("127.0.0.1", Some(5000)));
        let r = Reference::parse(&format!("oci://ghcr.io/acme/guard@{D}")).unwrap();
        assert_eq!((r.tag, r.digest.as_deref()), (None, Some(D)));
        let r = Reference::parse("oci://ghcr.io/acme/guard").unwrap();
        assert_eq!((r.host(), r.port()), ("ghcr.io", None));
        let r = Reference::parse("oci://[::1]:5000/guard").unwrap();
        assert_eq!((r.host(), r.port()), ("[::1]", Some(5000)));
        let r = Reference::parse("oci://[::1]/guard").unwrap();
        assert_eq!((r.host(), r.port()), ("[::1]", None));
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
            ("oci://h/../x", "must be lower-case"),
            (
                "oci://h/a/.x",
                "each beginning and ending with a letter or digit",
            ),
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
