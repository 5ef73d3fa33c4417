//! `oci:`: how plugins named `oci://...` are pulled. A registry that streams without end or
//! never answers must not hold the daemon, so every pull has a connect timeout, a total
//! timeout and a cap on the component; plain HTTP goes only to this machine or to the
//! registries listed here. A registry's own certificate authorities are read here, so a
//! file that is missing or holds no certificate is a config error (in `check` and in a
//! reload's answer), not a pull that fails later.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use crate::config::document::join;
use crate::config::oci::{OciSpec, is_registry, read_ca_file};
use crate::config::schema::{OciFile, OciRegistryFile};
use crate::config::units::HumanDuration;

/// The longest timeout accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The largest component cap accepted (1 GiB).
const MAX_LAYER_SIZE: u64 = 1 << 30;

/// Reads and checks `oci:`; its defaults when it is absent or cannot be read. Paths are
/// relative to `base`, the config's folder.
pub(super) fn build_oci(value: Option<&Value>, base: &Path, errors: &mut Errors) -> OciSpec {
    let file: OciFile = match value {
        Some(value) => errors.read("oci", value).unwrap_or_default(),
        None => OciFile::default(),
    };
    let defaults = OciSpec::default();
    let connect_timeout = timeout(
        file.connect_timeout,
        defaults.connect_timeout,
        "oci.connect_timeout",
        errors,
    );
    let timeout = timeout(file.timeout, defaults.timeout, "oci.timeout", errors);
    let max_layer_size = file.max_layer_size.map_or(defaults.max_layer_size, |s| s.0);
    if max_layer_size == 0 || max_layer_size > MAX_LAYER_SIZE {
        errors.at(
            "oci.max_layer_size",
            format!("must be above 0 and at most 1Gi, not {max_layer_size} bytes"),
        );
    }
    let insecure_registries = file.insecure_registries.unwrap_or_default();
    for (i, registry) in insecure_registries.iter().enumerate() {
        if !is_registry(registry) {
            errors.at(
                format!("oci.insecure_registries[{i}]"),
                format!(
                    "{registry:?} is not a registry: write it as a reference does, host or host:port (no scheme, no path)"
                ),
            );
        }
    }
    let cache_dir = file
        .cache_dir
        .and_then(|dir| super::expand_at(&dir, "oci.cache_dir", base, errors));
    let ca_files = ca_files(file.registries, &insecure_registries, base, errors);
    OciSpec {
        connect_timeout,
        timeout,
        max_layer_size,
        insecure_registries,
        cache_dir,
        ca_files,
    }
}

/// Reads `oci.registries`: each registry's `ca_file`, which must hold a PEM certificate.
fn ca_files(
    registries: Option<BTreeMap<String, Value>>,
    insecure: &[String],
    base: &Path,
    errors: &mut Errors,
) -> BTreeMap<String, PathBuf> {
    let mut ca_files = BTreeMap::new();
    for (registry, value) in registries.unwrap_or_default() {
        let at = join("oci.registries", &registry);
        if !is_registry(&registry) {
            errors.at_key(
                &at,
                format!(
                    "{registry:?} is not a registry: write it as a reference does, host or host:port (no scheme, no path)"
                ),
            );
        }
        let Some(settings) = errors.read::<OciRegistryFile>(&at, &value) else {
            continue;
        };
        let Some(path) = settings.ca_file else {
            continue;
        };
        let at = join(&at, "ca_file");
        let Some(path) = super::expand_at(&path, &at, base, errors) else {
            continue;
        };
        if insecure.contains(&registry) {
            errors.at(
                &at,
                format!(
                    "{registry} is also in oci.insecure_registries: a registry with a ca_file is spoken to over HTTPS; list it in one place only"
                ),
            );
        }
        if let Err(reason) = read_ca_file(&path) {
            errors.at(&at, reason);
        }
        ca_files.insert(registry, path);
    }
    ca_files
}

/// The timeout written at `at`, or `default`; above 0 and at most an hour.
fn timeout(
    value: Option<HumanDuration>,
    default: Duration,
    at: &str,
    errors: &mut Errors,
) -> Duration {
    let d = value.map_or(default, |d| d.0);
    if d.is_zero() || d > MAX_TIMEOUT {
        errors.at(at, format!("must be above 0 and at most 1h, not {d:?}"));
    }
    d
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn load(oci: &str) -> Result<crate::config::Config, Vec<String>> {
        let text = format!(
            "oci:\n{oci}handlers:\n  h: {{}}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: h\n"
        );
        crate::config::validate::validate(Path::new("c.yaml"), &text)
            .map_err(|e| e.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn defaults_fill_in_and_each_setting_is_read() {
        let config = load("  {}\n").unwrap();
        assert_eq!(config.oci, crate::config::oci::OciSpec::default());
        let config = load(
            "  connect_timeout: 2s\n  timeout: 5m\n  max_layer_size: 8Mi\n  insecure_registries: [registry.lan:5000]\n",
        )
        .unwrap();
        assert_eq!(config.oci.connect_timeout.as_secs(), 2);
        assert_eq!(config.oci.timeout.as_secs(), 300);
        assert_eq!(config.oci.max_layer_size, 8 << 20);
        assert!(config.oci.is_insecure("registry.lan:5000"));
        assert!(!config.oci.is_insecure("registry.lan"));
    }

    /// A self-signed certificate, PEM-encoded.
    fn test_ca_pem() -> String {
        rcgen::generate_simple_self_signed(vec!["registry.lan".to_string()])
            .unwrap()
            .cert
            .pem()
    }

    #[test]
    fn the_cache_and_a_registry_ca_are_relative_to_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, test_ca_pem()).unwrap();
        let text = "oci:\n  cache_dir: cache/oci\n  registries:\n    registry.lan:5000:\n      ca_file: ca.pem\nhandlers:\n  h: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: h\n";
        let config = crate::config::validate::validate(&dir.path().join("c.yaml"), text).unwrap();
        assert_eq!(config.oci.cache_dir, Some(dir.path().join("cache/oci")));
        assert_eq!(
            config.oci.cache_dir(Path::new("/plugins")),
            dir.path().join("cache/oci")
        );
        assert_eq!(config.oci.ca_file("registry.lan:5000"), Some(ca.as_path()));
        assert_eq!(config.oci.ca_file("registry.lan"), None);
        let defaults = crate::config::oci::OciSpec::default();
        assert_eq!(
            defaults.cache_dir(Path::new("/plugins")),
            Path::new("/plugins/.oci")
        );
    }

    #[test]
    fn a_registry_ca_that_is_missing_not_pem_or_also_insecure_is_named_at_its_place() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty.pem"), "no certificate here\n").unwrap();
        std::fs::write(dir.path().join("ca.pem"), test_ca_pem()).unwrap();
        let text = "oci:\n  insecure_registries: [plain.lan]\n  registries:\n    a.lan:\n      ca_file: missing.pem\n    b.lan:\n      ca_file: empty.pem\n    plain.lan:\n      ca_file: ca.pem\n    \"https://c.lan\":\n      ca: x\nhandlers:\n  h: {}\nroutes:\n  - name: r\n    resource: configmaps\n    handler: h\n";
        let errors: Vec<String> =
            crate::config::validate::validate(&dir.path().join("c.yaml"), text)
                .unwrap_err()
                .0
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(
            errors[0].contains(":5:16: oci.registries.a.lan.ca_file: cannot read the CA file"),
            "{errors:#?}"
        );
        assert!(
            errors[1].contains(":7:16: oci.registries.b.lan.ca_file: the CA file")
                && errors[1].contains("empty.pem holds no PEM certificate"),
            "{errors:#?}"
        );
        assert!(
            errors[2].contains(":9:16: oci.registries.plain.lan.ca_file: plain.lan is also in oci.insecure_registries"),
            "{errors:#?}"
        );
        assert!(
            errors[3].contains(
                ":10:5: oci.registries.https://c.lan: \"https://c.lan\" is not a registry"
            ),
            "{errors:#?}"
        );
        assert!(
            errors[4].contains(":11:7: oci.registries.https://c.lan.ca: unknown field `ca`"),
            "{errors:#?}"
        );
    }

    #[test]
    fn bad_settings_are_named_at_their_place() {
        let errors = load(
            "  timeout: 0s\n  max_layer_size: 2Gi\n  insecure_registries: [ok:1, \"http://x:5000\"]\n",
        )
        .unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].contains(":2:12: oci.timeout: must be above 0"),
            "{errors:?}"
        );
        assert!(
            errors[1].contains(":3:19: oci.max_layer_size: must be above 0 and at most 1Gi"),
            "{errors:?}"
        );
        assert!(
            errors[2].contains("oci.insecure_registries[1]: \"http://x:5000\" is not a registry"),
            "{errors:?}"
        );
    }
}
