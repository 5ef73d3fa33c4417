//! `admin:`: where the admin API listens and where its bearer token comes from, the host
//! names it answers for, and how both listeners bound their connections. The token is read
//! here, so a missing or empty one is reported at its place, as is an API that would listen
//! beyond loopback with no token at all; the daemon checks both again when it starts.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use crate::config::schema::AdminFile;
use crate::config::{DEFAULT_ADMIN_LISTEN, DEFAULT_PROBES_LISTEN, HostPattern, TokenSource};

/// How long a connection gets to send a request's headers when the config does not say:
/// far longer than any real client needs, short enough that connections left half-open
/// go within seconds.
const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The admin API's connection limit when the config does not say: people, the status page
/// and scripts need a handful.
const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 128;
/// The probes listener's when the config does not say: kubelet and a few scrapers.
const DEFAULT_PROBES_MAX_CONNECTIONS: usize = 256;
/// The most connections a listener may be given: each holds a file descriptor and buffers.
const MAX_CONNECTIONS: usize = 65_536;
/// The longest header read timeout: longer would leave half-open connections for good.
const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(600);

/// The admin API's settings, with defaults filled in.
pub(super) struct Admin {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where its token comes from, if anywhere.
    pub token: Option<TokenSource>,
    /// Where the probes and metrics listener listens, if anywhere.
    pub probes_listen: Option<SocketAddr>,
    /// Host names it answers besides its address and loopback's.
    pub allowed_hosts: Vec<HostPattern>,
    /// How long a connection gets to send a request's headers.
    pub header_read_timeout: Duration,
    /// Most connections it keeps open.
    pub max_connections: usize,
    /// Most connections the probes listener keeps open.
    pub probes_max_connections: usize,
}

/// Reads `admin:`; its defaults when it is absent or cannot be read.
pub(super) fn read_admin(value: Option<&Value>, errors: &mut Errors) -> AdminFile {
    match value {
        Some(value) => errors.read("admin", value).unwrap_or_default(),
        None => AdminFile::default(),
    }
}

/// Builds the admin settings; a token file is relative to `base`, the config's folder.
pub(super) fn build_admin(admin: AdminFile, base: &Path, errors: &mut Errors) -> Admin {
    let configured = admin.token_file.is_some() || admin.token_env.is_some();
    let token = match (admin.token_file, admin.token_env) {
        (Some(_), Some(_)) => {
            errors.at("admin.token_env", "set token_file or token_env, not both");
            None
        }
        (Some(path), None) => {
            super::expand_at(&path, "admin.token_file", base, errors).map(TokenSource::File)
        }
        (None, Some(var)) => Some(TokenSource::Env(var)),
        (None, None) => None,
    };
    if let Some(source) = &token
        && let Err(e) = source.read()
    {
        let field = match source {
            TokenSource::File(_) => "admin.token_file",
            TokenSource::Env(_) => "admin.token_env",
        };
        errors.at(field, e);
    }
    let listen = admin.listen.unwrap_or(DEFAULT_ADMIN_LISTEN);
    if !listen.ip().is_loopback() && !configured {
        errors.at(
            "admin.listen",
            format!(
                "the admin API would listen on {listen}, beyond loopback, without a token: set admin.token_file or admin.token_env, or listen on 127.0.0.1"
            ),
        );
    }
    let probes_listen = admin.probes_listen.unwrap_or(Some(DEFAULT_PROBES_LISTEN));
    if let Some(probes) = probes_listen
        && probes == listen
        && probes.port() != 0
    {
        errors.at(
            "admin.probes_listen",
            format!("{probes} is admin.listen too: the probes need a port of their own (or null for none)"),
        );
    }
    let allowed_hosts = allowed_hosts(admin.allowed_hosts.unwrap_or_default(), errors);
    let header_read_timeout = admin
        .header_read_timeout
        .map_or(DEFAULT_HEADER_READ_TIMEOUT, |d| d.0);
    if header_read_timeout.is_zero() || header_read_timeout > MAX_HEADER_READ_TIMEOUT {
        errors.at(
            "admin.header_read_timeout",
            format!(
                "{} is not a header read timeout: give one longer than 0 and at most 10m (default 10s)",
                crate::config::units::HumanDuration(header_read_timeout)
            ),
        );
    }
    let max_connections = connections(
        admin.max_connections,
        DEFAULT_ADMIN_MAX_CONNECTIONS,
        "admin.max_connections",
        errors,
    );
    let probes_max_connections = connections(
        admin.probes_max_connections,
        DEFAULT_PROBES_MAX_CONNECTIONS,
        "admin.probes_max_connections",
        errors,
    );
    Admin {
        listen,
        token,
        probes_listen,
        allowed_hosts,
        header_read_timeout,
        max_connections,
        probes_max_connections,
    }
}

/// Reads `admin.allowed_hosts`, each entry that is not a host an error at its place.
fn allowed_hosts(written: Vec<String>, errors: &mut Errors) -> Vec<HostPattern> {
    let mut hosts = Vec::new();
    for (i, entry) in written.iter().enumerate() {
        match entry.parse::<HostPattern>() {
            Ok(host) => hosts.push(host),
            Err(e) => errors.at(
                format!("admin.allowed_hosts[{i}]"),
                format!("{e}: list host names as NAME (any port) or NAME:PORT, or * for any host"),
            ),
        }
    }
    hosts
}

/// A listener's connection limit: the one written, or `default`; out of range an error at `at`.
fn connections(written: Option<usize>, default: usize, at: &str, errors: &mut Errors) -> usize {
    let max = written.unwrap_or(default);
    if max == 0 || max > MAX_CONNECTIONS {
        errors.at(
            at,
            format!(
                "{max} is not a connection limit: give 1 to {MAX_CONNECTIONS} (default {default})"
            ),
        );
    }
    max
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::{TokenSource, validate};

    const ROUTES: &str =
        "handlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n";

    fn errors(dir: &Path, admin: &str) -> Vec<String> {
        let text = format!("admin:\n{admin}{ROUTES}");
        match validate(&dir.join("c.yaml"), &text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn an_admin_api_beyond_loopback_without_a_token_is_refused_at_its_address() {
        let dir = tempfile::tempdir().unwrap();
        let found = errors(dir.path(), "  listen: 0.0.0.0:9470\n");
        let shown = dir.path().join("c.yaml");
        assert_eq!(
            found,
            [format!(
                "{}:2:11: admin.listen: the admin API would listen on 0.0.0.0:9470, beyond loopback, without a token: set admin.token_file or admin.token_env, or listen on 127.0.0.1",
                shown.display()
            )]
        );
        assert!(errors(dir.path(), "  listen: 127.0.0.1:9470\n").is_empty());
    }

    #[test]
    fn a_missing_or_empty_token_is_refused_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let missing = errors(dir.path(), "  listen: 0.0.0.0:9470\n  token_file: token\n");
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains(":3:15: admin.token_file: cannot read the admin token file"),
            "{missing:?}"
        );
        std::fs::write(dir.path().join("token"), " \n").unwrap();
        let empty = errors(dir.path(), "  token_file: token\n");
        assert_eq!(empty.len(), 1, "{empty:?}");
        assert!(
            empty[0].ends_with(&format!(
                ":2:15: admin.token_file: the admin token file {} is empty",
                dir.path().join("token").display()
            )),
            "{empty:?}"
        );
        std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
        assert!(errors(dir.path(), "  listen: 0.0.0.0:9470\n  token_file: token\n").is_empty());
        let unset = errors(dir.path(), "  token_env: SWITCHYARD_TEST_TOKEN_NEVER_SET\n");
        assert_eq!(unset.len(), 1, "{unset:?}");
        assert!(
            unset[0].ends_with(
                ":2:14: admin.token_env: the admin token variable SWITCHYARD_TEST_TOKEN_NEVER_SET is not set"
            ),
            "{unset:?}"
        );
    }

    #[test]
    fn the_probes_address_defaults_to_9471_can_be_null_and_is_checked_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let load = |admin: &str| {
            validate(
                &dir.path().join("c.yaml"),
                &format!("admin:\n{admin}{ROUTES}"),
            )
        };
        let default = load("  listen: 127.0.0.1:9470\n").unwrap();
        assert_eq!(
            default.probes_listen,
            Some("127.0.0.1:9471".parse().unwrap())
        );
        let off = load("  probes_listen: null\n").unwrap();
        assert_eq!(off.probes_listen, None);
        let open = load("  probes_listen: 0.0.0.0:8080\n").unwrap();
        assert_eq!(open.probes_listen, Some("0.0.0.0:8080".parse().unwrap()));
        let bad = errors(dir.path(), "  probes_listen: localhost:none\n");
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains(":2:18: admin.probes_listen: "), "{bad:?}");
        let same = errors(
            dir.path(),
            "  listen: 127.0.0.1:9000\n  probes_listen: 127.0.0.1:9000\n",
        );
        assert_eq!(same.len(), 1, "{same:?}");
        assert!(
            same[0].contains(":3:18: admin.probes_listen: 127.0.0.1:9000 is admin.listen too"),
            "{same:?}"
        );
    }

    #[test]
    fn connection_limits_and_allowed_hosts_have_defaults_and_are_checked_at_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let load = |admin: &str| {
            validate(
                &dir.path().join("c.yaml"),
                &format!("admin:\n{admin}{ROUTES}"),
            )
        };
        let default = load("  listen: 127.0.0.1:9470\n").unwrap();
        assert_eq!(default.header_read_timeout, Duration::from_secs(10));
        assert_eq!(default.admin_max_connections, 128);
        assert_eq!(default.probes_max_connections, 256);
        assert!(default.admin_allowed_hosts.is_empty());
        let set = load(
            "  allowed_hosts: [switchyard.ops.svc, 'admin.example:443', '*']\n  header_read_timeout: 2s\n  max_connections: 8\n  probes_max_connections: 16\n",
        )
        .unwrap();
        let hosts: Vec<String> = set
            .admin_allowed_hosts
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(hosts, ["switchyard.ops.svc", "admin.example:443", "*"]);
        assert_eq!(set.header_read_timeout, Duration::from_secs(2));
        assert_eq!(
            (set.admin_max_connections, set.probes_max_connections),
            (8, 16)
        );
        let bad = errors(
            dir.path(),
            "  allowed_hosts: [ok, 'http://x/']\n  header_read_timeout: 0s\n  max_connections: 0\n  probes_max_connections: 100000\n",
        );
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(
            bad[0].contains(":2:23: admin.allowed_hosts[1]: \"http://x/\" is not a host name"),
            "{bad:?}"
        );
        assert!(bad[0].contains("NAME:PORT, or * for any host"), "{bad:?}");
        assert!(
            bad[1].contains(":3:24: admin.header_read_timeout: 0s is not a header read timeout"),
            "{bad:?}"
        );
        assert!(
            bad[2].contains(":4:20: admin.max_connections: 0 is not a connection limit: give 1 to 65536 (default 128)"),
            "{bad:?}"
        );
        assert!(
            bad[3]
                .contains(":5:27: admin.probes_max_connections: 100000 is not a connection limit"),
            "{bad:?}"
        );
    }

    #[test]
    fn an_empty_token_is_refused_when_read_at_start_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "\n").unwrap();
        let err = TokenSource::File(path).read().unwrap_err();
        assert!(err.to_string().ends_with("is empty"), "{err}");
    }
}
