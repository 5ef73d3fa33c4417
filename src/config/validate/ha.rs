//! `ha:`: whether replicas elect a leader through a Lease or share the objects through a
//! Lease each (sharded), and the Leases' timing. The
//! timing follows client-go's leader election: a leader renews every `retry_period` and
//! steps down once `renew_deadline` passes without a renewal, before its lease of
//! `lease_duration` can run out for the others.

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use crate::config::schema::{HaFile, HaModeFile};
use crate::config::{HaMode, HaSpec};

/// Default name of the Lease.
const DEFAULT_LEASE_NAME: &str = "switchyard";
/// Default lease duration.
const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default renew deadline.
const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default retry period.
const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Reads and checks `ha:`; its defaults when it is absent or cannot be read.
pub(super) fn build_ha(value: Option<&Value>, errors: &mut Errors) -> HaSpec {
    let file: HaFile = match value {
        Some(value) => errors.read("ha", value).unwrap_or_default(),
        None => HaFile::default(),
    };
    let mode = match file.mode.unwrap_or(HaModeFile::Single) {
        HaModeFile::Single => HaMode::Single,
        HaModeFile::Leader => HaMode::Leader,
        HaModeFile::Sharded => HaMode::Sharded,
    };
    let lease_duration = duration(
        file.lease_duration,
        DEFAULT_LEASE_DURATION,
        "ha.lease_duration",
        errors,
    );
    let renew_deadline = duration(
        file.renew_deadline,
        DEFAULT_RENEW_DEADLINE,
        "ha.renew_deadline",
        errors,
    );
    let retry_period = duration(
        file.retry_period,
        DEFAULT_RETRY_PERIOD,
        "ha.retry_period",
        errors,
    );
    if !renew_deadline.is_zero() && !lease_duration.is_zero() && renew_deadline >= lease_duration {
        errors.at(
            "ha.renew_deadline",
            format!(
                "renew_deadline ({renew_deadline:?}) must be shorter than lease_duration ({lease_duration:?}), so a leader steps down before others may take over"
            ),
        );
    }
    if !retry_period.is_zero() && !renew_deadline.is_zero() && retry_period >= renew_deadline {
        errors.at(
            "ha.retry_period",
            format!(
                "retry_period ({retry_period:?}) must be shorter than renew_deadline ({renew_deadline:?}), so a leader gets to retry a renewal"
            ),
        );
    }
    let lease_name = file
        .lease_name
        .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_string());
    if mode == HaMode::Sharded && lease_name.len() > 63 {
        errors.at(
            "ha.lease_name",
            format!(
                "in sharded mode the lease name is also the value of the member Leases' label, so at most 63 characters, not {}",
                lease_name.len()
            ),
        );
    } else if !is_dns_subdomain(&lease_name) {
        errors.at(
            "ha.lease_name",
            format!(
                "invalid Lease name {lease_name:?}: use lower case letters, digits, '-' and '.'"
            ),
        );
    }
    let lease_namespace_written = file.lease_namespace.is_some();
    let lease_namespace = file.lease_namespace.unwrap_or_else(pod_namespace);
    if !is_dns_label(&lease_namespace) {
        errors.at(
            "ha.lease_namespace",
            format!(
                "invalid namespace {lease_namespace:?}: use lower case letters, digits and '-'"
            ),
        );
    }
    let identity = file
        .identity
        .unwrap_or_else(|| default_identity().to_string());
    if identity.is_empty() {
        errors.at("ha.identity", "the identity must not be empty");
    }
    HaSpec {
        mode,
        lease_namespace,
        lease_namespace_written,
        lease_name,
        lease_duration,
        renew_deadline,
        retry_period,
        identity,
    }
}

/// The duration written, or `default`; a zero one is an error at `at`.
fn duration(
    value: Option<crate::config::units::HumanDuration>,
    default: Duration,
    at: &str,
    errors: &mut Errors,
) -> Duration {
    let d = value.map_or(default, |d| d.0);
    if d.is_zero() {
        errors.at(at, "must be longer than 0");
    }
    d
}

/// The pod's namespace: `POD_NAMESPACE`, else the service account's, else `default`. The
/// daemon puts the kubeconfig context's namespace before `default` when it has a client
/// (`daemon::client::with_lease_namespace`).
fn pod_namespace() -> String {
    let dir = crate::util::identity::service_account_dir();
    crate::util::identity::daemon_namespace(&dir, None)
}

/// This process's default identity: `POD_NAME`, else the host name and a random suffix,
/// chosen once so that a reload sees the same one.
fn default_identity() -> &'static str {
    static IDENTITY: OnceLock<String> = OnceLock::new();
    IDENTITY.get_or_init(|| {
        if let Ok(name) = std::env::var("POD_NAME")
            && !name.trim().is_empty()
        {
            return name.trim().to_string();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "switchyard".to_string());
        format!("{host}_{:08x}", rand::random::<u32>())
    })
}

/// Whether `name` is a DNS-1123 subdomain, as object names must be.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// Whether `name` is a DNS-1123 label, as namespaces must be.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{HaMode, validate};

    const ROUTES: &str =
        "handlers:\n  h: {}\nroutes:\n  - {name: a, resource: configmaps, handler: h}\n";

    fn errors(ha: &str) -> Vec<String> {
        let text = format!("ha:\n{ha}{ROUTES}");
        match validate(std::path::Path::new("/tmp/c.yaml"), &text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn defaults_are_single_mode_with_client_go_timing() {
        let config = validate(std::path::Path::new("/tmp/c.yaml"), ROUTES).unwrap();
        assert_eq!(config.ha.mode, HaMode::Single);
        assert_eq!(config.ha.lease_name, "switchyard");
        assert_eq!(config.ha.lease_duration, Duration::from_secs(15));
        assert_eq!(config.ha.renew_deadline, Duration::from_secs(10));
        assert_eq!(config.ha.retry_period, Duration::from_secs(2));
        assert!(!config.ha.identity.is_empty());
        let again = validate(std::path::Path::new("/tmp/c.yaml"), ROUTES).unwrap();
        assert_eq!(config.ha, again.ha, "the default identity is chosen once");
    }

    #[test]
    fn leader_mode_reads_every_field() {
        let text = format!(
            "ha:\n  mode: leader\n  lease_namespace: ops\n  lease_name: router\n  lease_duration: 2s\n  renew_deadline: 1500ms\n  retry_period: 300ms\n  identity: a\n{ROUTES}"
        );
        let ha = validate(std::path::Path::new("/tmp/c.yaml"), &text)
            .unwrap()
            .ha;
        assert_eq!(ha.mode, HaMode::Leader);
        assert_eq!(
            (ha.lease_namespace.as_str(), ha.lease_name.as_str()),
            ("ops", "router")
        );
        assert_eq!(ha.renew_deadline, Duration::from_millis(1500));
        assert_eq!(ha.retry_period, Duration::from_millis(300));
        assert_eq!(ha.identity, "a");
    }

    #[test]
    fn sharded_mode_is_read_with_each_informers_shard_field() {
        let text = "ha:\n  mode: sharded\ninformers:\n  cms: {resource: configmaps, shard_by: namespace}\n  pods: {resource: pods}\nhandlers:\n  h: {}\nroutes:\n  - {name: r, informer: cms, handler: h}\n";
        let config = validate(std::path::Path::new("/tmp/c.yaml"), text).unwrap();
        assert_eq!(config.ha.mode, HaMode::Sharded);
        let by: Vec<_> = config.informers.iter().map(|i| i.shard_by).collect();
        assert_eq!(
            by,
            vec![
                crate::config::ShardBy::Namespace,
                crate::config::ShardBy::Uid
            ]
        );
        let long = format!(
            "ha:\n  mode: sharded\n  lease_name: {}\n{ROUTES}",
            "a".repeat(64)
        );
        let e = validate(std::path::Path::new("/tmp/c.yaml"), &long)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":3:15: ha.lease_name: in sharded mode the lease name is also the value"),
            "{e}"
        );
        // Each replica compares its records within the ranges it owns (docs/state.md).
        let with_state = format!("state_dir: /var/lib/s\nha:\n  mode: sharded\n{ROUTES}");
        let config = validate(std::path::Path::new("/tmp/c.yaml"), &with_state).unwrap();
        assert_eq!(config.ha.mode, HaMode::Sharded);
        assert!(config.state.is_some());
        let bad = "informers:\n  cms: {resource: configmaps, shard_by: name}\nhandlers:\n  h: {}\nroutes:\n  - {name: r, informer: cms, handler: h}\n";
        let e = validate(std::path::Path::new("/tmp/c.yaml"), bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("informers.cms.shard_by") && e.contains("unknown variant `name`"),
            "{e}"
        );
    }

    #[test]
    fn bad_timing_is_reported_all_at_once_at_each_place() {
        let e = errors("  lease_duration: 2s\n  renew_deadline: 2s\n  retry_period: 3s\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains(":3:19: ha.renew_deadline: renew_deadline (2s) must be shorter than lease_duration (2s)"), "{e:?}");
        assert!(
            e[1].contains(
                ":4:17: ha.retry_period: retry_period (3s) must be shorter than renew_deadline (2s)"
            ),
            "{e:?}"
        );
        let zero = errors("  lease_duration: 0s\n  retry_period: 0ms\n  mode: single\n");
        assert_eq!(zero.len(), 2, "{zero:?}");
        assert!(
            zero[0].contains(":2:19: ha.lease_duration: must be longer than 0"),
            "{zero:?}"
        );
        assert!(
            zero[1].contains(":3:17: ha.retry_period: must be longer than 0"),
            "{zero:?}"
        );
    }

    #[test]
    fn unknown_fields_and_modes_are_refused() {
        let e = errors("  mode: follower\n  lease: x\n");
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e.iter().any(|m| m.contains("ha.mode")), "{e:?}");
        assert!(e.iter().any(|m| m.contains("ha.lease")), "{e:?}");
    }
}
