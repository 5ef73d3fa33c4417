//! The plugin contract's version and which plugins it accepts (the policy is in
//! plugins/README.md): a plugin built for `switchyard:plugin@X` runs on a daemon that speaks
//! `@H` when X and H are on the same compatibility line (same major; before 1.0, same minor)
//! and X is not newer than H. Anything else is refused by its version, before the linker
//! would refuse it for a missing import.

/// The contract, as plugins are built against it.
pub const WIT: &str = include_str!("../../plugins/wit/world.wit");

/// The WASI packages the contract uses (`wasi:http` for outbound requests, and what it
/// needs), as `wit/deps/NAME/package.wit` files beside the world.
pub const WIT_DEPS: [(&str, &str); 7] = [
    (
        "cli",
        include_str!("../../plugins/wit/deps/cli/package.wit"),
    ),
    (
        "clocks",
        include_str!("../../plugins/wit/deps/clocks/package.wit"),
    ),
    (
        "filesystem",
        include_str!("../../plugins/wit/deps/filesystem/package.wit"),
    ),
    (
        "http",
        include_str!("../../plugins/wit/deps/http/package.wit"),
    ),
    ("io", include_str!("../../plugins/wit/deps/io/package.wit")),
    (
        "random",
        include_str!("../../plugins/wit/deps/random/package.wit"),
    ),
    (
        "sockets",
        include_str!("../../plugins/wit/deps/sockets/package.wit"),
    ),
];

/// The Python module names componentize-py is given for the world's imports
/// (`--import-interface-name`): the contract's `types` keeps the plain name `types`
/// (`wit_world.imports.types`) although `wasi:http` has a `types` interface too.
pub const PYTHON_MODULE_NAMES: [&str; 2] = [
    "switchyard:plugin/types@0.1.1=types",
    "wasi:http/types@0.2.12=http_types",
];

/// The arguments of `componentize-py` that build the module `app` in the current folder, with
/// the contract in `wit/`, into the file named next (`-o` comes last).
pub fn componentize_py_args() -> Vec<&'static str> {
    let mut args = vec!["-d", "wit", "-w", "handler"];
    for name in PYTHON_MODULE_NAMES {
        args.extend(["--import-interface-name", name]);
    }
    args.extend(["componentize", "-p", ".", "app", "-o"]);
    args
}

/// The package every contract interface belongs to.
const PACKAGE: &str = "switchyard:plugin";

/// A `MAJOR.MINOR.PATCH` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Incompatible changes.
    pub major: u64,
    /// Additions.
    pub minor: u64,
    /// Fixes.
    pub patch: u64,
}

impl Version {
    /// Parses `MAJOR.MINOR.PATCH` (a pre-release or build suffix is not accepted).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.').map(|p| p.parse::<u64>().ok());
        let version = Self {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(version)
    }

    /// The compatibility line: the major, or before 1.0 the minor too.
    fn line(self) -> (u64, u64) {
        if self.major == 0 {
            (0, self.minor)
        } else {
            (self.major, 0)
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the contract this daemon speaks (the one in [`WIT`]).
pub fn version() -> Version {
    WIT.lines()
        .find_map(|line| line.trim().strip_prefix("package switchyard:plugin@"))
        .and_then(|rest| rest.strip_suffix(';'))
        .and_then(Version::parse)
        .expect("the WIT declares package switchyard:plugin@MAJOR.MINOR.PATCH")
}

/// Checks the contract versions a plugin's imports name (`switchyard:plugin/host@0.1.0`,
/// ...) against `host`; the error says what the plugin was built for and what to do.
pub fn check<'a>(imports: impl IntoIterator<Item = &'a str>, host: Version) -> Result<(), String> {
    for name in imports {
        let Some(rest) = name.strip_prefix(PACKAGE).and_then(|r| r.strip_prefix('/')) else {
            continue;
        };
        let Some((_, text)) = rest.split_once('@') else {
            return Err(format!(
                "it imports {name} without a version: build it against the daemon's contract, \
                 {PACKAGE}@{host}"
            ));
        };
        let Some(built) = Version::parse(text) else {
            return Err(format!(
                "it imports {name}: {text:?} is not a contract version"
            ));
        };
        if built.line() != host.line() {
            return Err(format!(
                "it is built for {PACKAGE}@{built}, which this daemon does not speak (it speaks \
                 {PACKAGE}@{host}): rebuild the plugin against the daemon's wit/world.wit, \
                 or run a daemon that speaks {built}"
            ));
        }
        if built > host {
            return Err(format!(
                "it is built for {PACKAGE}@{built}, newer than this daemon's {PACKAGE}@{host}: \
                 upgrade the daemon, or rebuild the plugin against {host}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn the_daemon_speaks_the_version_in_its_wit() {
        assert_eq!(version(), v("0.1.1"));
    }

    #[test]
    fn the_python_module_names_name_the_versions_in_the_wit() {
        let http = WIT_DEPS.iter().find(|(n, _)| *n == "http").unwrap().1;
        let http_version = http
            .lines()
            .find_map(|l| l.strip_prefix("package wasi:http@"))
            .and_then(|rest| rest.strip_suffix(';'))
            .unwrap();
        assert_eq!(
            PYTHON_MODULE_NAMES,
            [
                format!("switchyard:plugin/types@{}=types", version()).as_str(),
                format!("wasi:http/types@{http_version}=http_types").as_str(),
            ]
        );
        assert!(WIT.contains(&format!(
            "import wasi:http/outgoing-handler@{http_version};"
        )));
    }

    #[test]
    fn older_and_equal_versions_on_the_line_pass_others_are_refused_by_version() {
        let host = v("0.2.3");
        let imports = |version: &str| {
            [
                "wasi:io/streams@0.2.6".to_string(),
                format!("switchyard:plugin/types@{version}"),
            ]
        };
        for ok in ["0.2.0", "0.2.3"] {
            let names = imports(ok);
            assert_eq!(
                check(names.iter().map(String::as_str), host),
                Ok(()),
                "{ok}"
            );
        }
        for (bad, says) in [
            ("0.1.9", "which this daemon does not speak"),
            ("0.3.0", "which this daemon does not speak"),
            ("1.0.0", "which this daemon does not speak"),
            ("0.2.4", "newer than this daemon's switchyard:plugin@0.2.3"),
            ("1.x", "is not a contract version"),
        ] {
            let names = imports(bad);
            let error = check(names.iter().map(String::as_str), host).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
        let error = check(["switchyard:plugin/host"], host).unwrap_err();
        assert!(error.contains("without a version"), "{error}");
        // After 1.0 the line is the major alone.
        assert_eq!(check(["switchyard:plugin/host@1.0.0"], v("1.4.0")), Ok(()));
        assert!(check(["switchyard:plugin/host@2.0.0"], v("1.4.0")).is_err());
    }
}
