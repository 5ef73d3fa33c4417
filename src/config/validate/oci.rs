//! `oci:`: how plugins named `oci://...` are pulled. A registry that streams without end or
//! never answers must not hold the daemon, so every pull has a connect timeout, a total
//! timeout and a cap on the component; plain HTTP goes only to this machine or to the
//! registries listed here.

use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use crate::config::oci::{OciSpec, is_registry};
use crate::config::schema::OciFile;
use crate::config::units::HumanDuration;

/// The longest timeout accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The largest component cap accepted (1 GiB).
const MAX_LAYER_SIZE: u64 = 1 << 30;

/// Reads and checks `oci:`; its defaults when it is absent or cannot be read.
pub(super) fn build_oci(value: Option<&Value>, errors: &mut Errors) -> OciSpec {
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
    OciSpec {
        connect_timeout,
        timeout,
        max_layer_size,
        insecure_registries,
    }
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
