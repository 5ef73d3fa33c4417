//! `handlers.NAME:`: a plugin and how it is run (workers, limits, retries, resync, the
//! settings passed to `init`, capabilities), with every default filled in.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use super::names::is_valid_name;
use crate::config::limits::MAX_WORKERS;
use crate::config::schema::BatchFile;
use crate::config::schema::HandlerFile;
use crate::config::{BatchSpec, HandlerSpec, LogLimits, QuarantineSpec};

/// Builds the handler `name`. Each value was held to its bounds as it was read (see
/// [`crate::config::limits`]); what is left are the checks across values.
pub(super) fn build_handler(
    name: String,
    h: HandlerFile,
    base: &Path,
    errors: &mut Errors,
) -> HandlerSpec {
    let at = |field: &str| format!("handlers.{name}.{field}");
    let quarantine = quarantine(&h, &at, errors);
    let batch = h.batch.as_ref().map(|b| batch(b, &at, errors));
    let logs = log_limits(&h);
    let plugin = match h.plugin {
        Some(p) => checked_plugin(&at("plugin"), p, errors),
        None => name.clone(),
    };
    let shadow = h.shadow.map(|s| checked_plugin(&at("shadow"), s, errors));
    if shadow.as_ref() == Some(&plugin) {
        errors.at(
            at("shadow"),
            format!(
                "shadow {plugin:?} is the handler's own plugin: a shadow runs another plugin (put the new version in the plugins folder under another name)"
            ),
        );
    }
    let backoff_base = h.backoff_base.map_or(Duration::from_millis(100), |d| d.0);
    let backoff_cap = h.backoff_cap.map_or(Duration::from_secs(30), |d| d.0);
    let unreadable =
        errors.unreadable(&at("backoff_base")) || errors.unreadable(&at("backoff_cap"));
    if backoff_cap < backoff_base && !unreadable {
        errors.at(
            at("backoff_cap"),
            "backoff_cap must not be shorter than backoff_base",
        );
    }
    let capabilities = super::capabilities::build(&name, h.capabilities.as_ref(), errors);
    let outbound = super::outbound::build(&name, h.capabilities.as_ref(), h.outbound, base, errors);
    // `qps` was checked as it was read; 0 turns the bucket off.
    let config = h.config.unwrap_or(Value::Null);
    let (value_refs, malformed) = crate::config::value_from::collect(&config);
    for (path, why) in malformed {
        errors.at(at(&format!("config.{path}")), why);
    }
    for r in &value_refs {
        use crate::config::value_from::ValueSource;
        let missing = match &r.source {
            ValueSource::Env(var) if std::env::var_os(var).is_none() => {
                format!(
                    "environment variable {var} is not set here: the handler waits until the daemon runs with it set"
                )
            }
            ValueSource::File(path) if !std::path::Path::new(path).is_file() => {
                format!("file {path} is not here: the handler waits until the daemon can read it")
            }
            _ => continue,
        };
        errors.warn_at(at(&format!("config.{}.valueFrom", r.path)), missing);
    }
    let qps = match h.qps {
        Some(0.0) => None,
        Some(q) => Some(q),
        None => Some(10.0),
    };
    HandlerSpec {
        capabilities,
        reads: h.reads.unwrap_or_default(),
        outbound,
        resync: h.resync.map(|d| d.0).filter(|d| !d.is_zero()),
        qps,
        burst: h.burst.unwrap_or(100).max(1),
        plugin,
        shadow,
        concurrency: h.concurrency.unwrap_or(2),
        timeout: h.timeout.map_or(Duration::from_secs(5), |d| d.0),
        memory: h.memory.map_or(64 << 20, |m| m.0),
        logs,
        max_retries: h.max_retries.unwrap_or(5),
        backoff_base,
        backoff_cap,
        config,
        value_refs,
        quarantine,
        instance: h.instance.unwrap_or_default(),
        batch,
        name,
        owner: None,
    }
}

/// The handler's log limits, defaults filled in (each was held to its bounds as it was
/// read).
fn log_limits(h: &HandlerFile) -> LogLimits {
    let default = LogLimits::default();
    LogLimits {
        line_bytes: h.log_line_max.map_or(default.line_bytes, |b| b.0),
        call_bytes: h.log_call_max.map_or(default.call_bytes, |b| b.0),
        call_lines: h.log_call_lines.unwrap_or(default.call_lines),
    }
}

/// A plugin reference written at `at` (`plugin:` or `shadow:`): a name in the plugins
/// folder, an `oci://` reference or `builtin:NAME`; what is wrong with it is recorded at
/// its place.
fn checked_plugin(at: &str, p: String, errors: &mut Errors) -> String {
    use crate::plugin::builtin;
    if builtin::is_builtin(&p) {
        if !builtin::names().contains(&p) {
            errors.at(at, builtin::unknown(&p));
        }
    } else if crate::config::oci::Reference::is_oci(&p) {
        if let Err(reason) = crate::config::oci::Reference::parse(&p) {
            errors.at(at, format!("invalid plugin reference: {reason}"));
        }
    } else if !is_valid_name(&p) {
        errors.at(
            at,
            format!(
                "invalid plugin name {p:?}: name the file NAME.wasm in the plugins folder by NAME (lower case letters, digits and '-'), a registry artifact by oci://HOST/REPOSITORY:TAG, or a plugin the binary carries by builtin:NAME"
            ),
        );
    }
    p
}

/// Every handler's shadow that names a plugin in the plugins folder names a file that is
/// there (an `oci://` reference is pulled when the daemon loads it).
pub(super) fn check_shadows(handlers: &[HandlerSpec], plugins_dir: &Path, errors: &mut Errors) {
    for h in handlers {
        let Some(shadow) = &h.shadow else { continue };
        // An `oci://` reference is pulled at load; a bad name or the handler's own plugin
        // is reported already.
        if crate::config::oci::Reference::is_oci(shadow)
            || !is_valid_name(shadow)
            || *shadow == h.plugin
        {
            continue;
        }
        let file = plugins_dir.join(format!("{shadow}.wasm"));
        if !file.is_file() {
            errors.at(
                format!("handlers.{}.shadow", h.name),
                format!(
                    "shadow plugin {shadow:?} not found: there is no {} (plugins_dir is {})",
                    file.display(),
                    plugins_dir.display()
                ),
            );
        }
    }
}

/// The handler's quarantine settings, defaults filled in.
fn quarantine(h: &HandlerFile, at: &dyn Fn(&str) -> String, errors: &mut Errors) -> QuarantineSpec {
    let default = QuarantineSpec::default();
    let window = h.quarantine_window.map_or(default.window, |d| d.0);
    let backoff = h.quarantine_backoff.map_or(default.backoff, |d| d.0);
    if window.is_zero() {
        errors.at(
            at("quarantine_window"),
            "quarantine_window must be longer than 0",
        );
    }
    if backoff.is_zero() || backoff > QuarantineSpec::MAX_BACKOFF {
        errors.at(
            at("quarantine_backoff"),
            "quarantine_backoff must be longer than 0 and at most 10m",
        );
    }
    QuarantineSpec {
        after: h.quarantine_after.unwrap_or(default.after),
        window,
        backoff,
    }
}

/// The handler's `batch:` settings, defaults filled in; values out of bounds are recorded
/// at their place.
fn batch(b: &BatchFile, at: &dyn Fn(&str) -> String, errors: &mut Errors) -> BatchSpec {
    let default = BatchSpec::default();
    let max_events = b.max_events.unwrap_or(default.max_events);
    if !(1..=BatchSpec::MAX_EVENTS).contains(&max_events) {
        errors.at(
            at("batch.max_events"),
            format!(
                "batch.max_events must be 1 to {}, not {max_events}",
                BatchSpec::MAX_EVENTS
            ),
        );
    }
    let max_bytes = b.max_bytes.map_or(default.max_bytes, |m| m.0);
    if max_bytes == 0 {
        errors.at(at("batch.max_bytes"), "batch.max_bytes must be more than 0");
    }
    let max_wait = b.max_wait.map_or(default.max_wait, |d| d.0);
    if max_wait > BatchSpec::MAX_WAIT {
        errors.at(
            at("batch.max_wait"),
            "batch.max_wait must be at most 1m: a worker holds its first event that long",
        );
    }
    BatchSpec {
        max_events,
        max_bytes,
        max_wait,
    }
}

/// The workers of all handlers together fit the plugin instance pool.
pub(super) fn check_workers(handlers: &[HandlerSpec], errors: &mut Errors) {
    let workers: usize = handlers.iter().map(|h| h.concurrency).sum();
    if workers > MAX_WORKERS {
        errors.at_key(
            "handlers",
            format!(
                "the handlers' concurrency adds up to {workers} workers, more than the plugin instance pool can hold: at most {MAX_WORKERS} in all"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::validate;

    /// (line, column, path) of each problem, and all of them as text for a failure message.
    fn places(text: &str) -> (Vec<(u64, u64, String)>, String) {
        let errors = validate(Path::new("c.yaml"), text).unwrap_err().0;
        let all = errors.iter().map(|e| format!("{e}\n")).collect();
        let places = errors
            .into_iter()
            .map(|e| (e.line, e.column, e.path))
            .collect();
        (places, all)
    }

    #[test]
    fn every_wrong_field_of_a_handler_is_reported_not_only_the_first() {
        let text = "\
handlers:
  h:
    concurrency: lots
    timeout: forever
    memory: 12XB
    max_retries: -1
routes:
  - {name: a, resource: configmaps, handler: h}
";
        let (found, all) = places(text);
        assert_eq!(
            found,
            [
                (3, 18, "handlers.h.concurrency".to_string()),
                (4, 14, "handlers.h.timeout".to_string()),
                (5, 13, "handlers.h.memory".to_string()),
                (6, 18, "handlers.h.max_retries".to_string()),
            ],
            "{all}"
        );
        assert!(all.contains("invalid size \"12XB\""), "{all}");
        assert!(all.contains("invalid duration \"forever\""), "{all}");
    }

    #[test]
    fn values_beyond_what_the_plugin_engine_can_give_are_refused_where_they_are() {
        let text = "\
handlers:
  big:
    memory: 1000Gi
    concurrency: 100000
    timeout: 0s
  small:
    memory: 0
routes:
  - {name: a, resource: configmaps, handler: big}
  - {name: b, resource: configmaps, handler: small}
";
        let (found, all) = places(text);
        assert_eq!(
            found,
            [
                (3, 13, "handlers.big.memory".to_string()),
                (4, 18, "handlers.big.concurrency".to_string()),
                (5, 14, "handlers.big.timeout".to_string()),
                (7, 13, "handlers.small.memory".to_string()),
            ],
            "{all}"
        );
        assert!(
            all.contains("handlers.big.memory: memory of 1073741824000 bytes is more than a plugin instance can address: at most 4Gi"),
            "{all}"
        );
        assert!(
            all.contains("handlers.big.concurrency: concurrency 100000 is more than the plugin instance pool can hold: at most 1024 workers"),
            "{all}"
        );
        assert!(
            all.contains("handlers.big.timeout: timeout must be longer than 0s"),
            "{all}"
        );
        assert!(
            all.contains("handlers.small.memory: memory must be at least 64Ki"),
            "{all}"
        );
    }

    #[test]
    fn log_limits_are_read_with_defaults_and_a_line_cut_too_short_is_refused_where_it_is() {
        let text = "\
handlers:
  set: {log_line_max: 1Ki, log_call_max: 1Mi, log_call_lines: 20}
  default: {}
routes:
  - {name: a, resource: configmaps, handler: set}
  - {name: b, resource: configmaps, handler: default}
";
        let config = validate(Path::new("c.yaml"), text).unwrap();
        let logs = |name: &str| {
            config
                .handlers
                .iter()
                .find(|h| h.name == name)
                .unwrap()
                .logs
        };
        assert_eq!(
            logs("set"),
            crate::config::LogLimits {
                line_bytes: 1 << 10,
                call_bytes: 1 << 20,
                call_lines: 20,
            }
        );
        assert_eq!(logs("default"), crate::config::LogLimits::default());

        let (found, all) = places(&text.replace("log_line_max: 1Ki", "log_line_max: 10"));
        assert_eq!(
            found,
            [(2, 23, "handlers.set.log_line_max".to_string())],
            "{all}"
        );
        assert!(
            all.contains("log_line_max must be at least 64 bytes, not 10"),
            "{all}"
        );
    }

    #[test]
    fn the_workers_of_all_handlers_must_fit_the_instance_pool() {
        let text = "\
routes:
  - {name: a, resource: configmaps, handler: a}
handlers:
  a: {concurrency: 600}
  b: {concurrency: 600}
";
        let (found, all) = places(text);
        assert_eq!(found, [(3, 1, "handlers".to_string())], "{all}");
        assert!(all.contains("adds up to 1200 workers"), "{all}");
        let fits = text.replace("600}", "512}");
        assert!(validate(Path::new("c.yaml"), &fits).is_ok());
    }

    #[test]
    fn a_shadow_naming_a_missing_plugin_or_the_handlers_own_is_refused_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("plugins")).unwrap();
        std::fs::write(dir.path().join("plugins/guard-v2.wasm"), b"").unwrap();
        let file = dir.path().join("c.yaml");
        let text = "\
handlers:
  a:
    plugin: guard
    shadow: guard-v3
  b:
    plugin: guard
    shadow: guard
  c:
    plugin: guard
    shadow: guard-v2
routes:
  - {name: a, resource: configmaps, handler: a}
";
        let errors = validate(&file, text).unwrap_err().0;
        let found: Vec<(u64, u64, String)> = errors
            .iter()
            .map(|e| (e.line, e.column, e.path.clone()))
            .collect();
        let all: String = errors.iter().map(|e| format!("{e}\n")).collect();
        assert_eq!(
            found,
            [
                (4, 13, "handlers.a.shadow".to_string()),
                (7, 13, "handlers.b.shadow".to_string()),
            ],
            "{all}"
        );
        assert!(
            all.contains("shadow \"guard\" is the handler's own plugin"),
            "{all}"
        );
        assert!(
            all.contains("shadow plugin \"guard-v3\" not found"),
            "{all}"
        );
        let fixed = text
            .replace("guard-v3", "guard-v2")
            .replace("    shadow: guard\n", "");
        let config = validate(&file, &fixed).unwrap();
        assert_eq!(config.handlers[2].shadow.as_deref(), Some("guard-v2"));
        assert_eq!(config.handlers[1].shadow, None);
    }
}
