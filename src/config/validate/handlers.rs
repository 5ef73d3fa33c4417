//! `handlers.NAME:`: a plugin and how it is run (workers, limits, retries, resync, the
//! settings passed to `init`, capabilities), with every default filled in.

use std::time::Duration;

use serde_json::Value;

use super::errors::Errors;
use super::names::is_valid_name;
use crate::config::HandlerSpec;
use crate::config::schema::HandlerFile;

/// Builds the handler `name`, reporting each value that is out of bounds.
pub(super) fn build_handler(name: String, h: HandlerFile, errors: &mut Errors) -> HandlerSpec {
    let at = |field: &str| format!("handlers.{name}.{field}");
    let plugin = match h.plugin {
        Some(p) if !is_valid_name(&p) => {
            errors.at(
                at("plugin"),
                format!(
                    "invalid plugin name {p:?}: name the file NAME.wasm in the plugins folder by NAME (lower case letters, digits and '-')"
                ),
            );
            p
        }
        Some(p) => p,
        None => name.clone(),
    };
    let concurrency = match h.concurrency {
        Some(0) => {
            errors.at(at("concurrency"), "concurrency must be at least 1");
            1
        }
        Some(c) => c,
        None => 2,
    };
    let backoff_base = h.backoff_base.map_or(Duration::from_millis(100), |d| d.0);
    let backoff_cap = h.backoff_cap.map_or(Duration::from_secs(30), |d| d.0);
    if backoff_cap < backoff_base {
        errors.at(
            at("backoff_cap"),
            "backoff_cap must not be shorter than backoff_base",
        );
    }
    let capabilities = super::capabilities::build(&name, h.capabilities.as_ref(), errors);
    let qps = match h.qps {
        Some(q) if !(q.is_finite() && q >= 0.0) => {
            errors.at(
                at("qps"),
                "qps must be a non-negative number (0 turns the retry bucket off)",
            );
            None
        }
        Some(0.0) => None,
        Some(q) => Some(q),
        None => Some(10.0),
    };
    HandlerSpec {
        capabilities,
        resync: h.resync.map(|d| d.0).filter(|d| !d.is_zero()),
        qps,
        burst: h.burst.unwrap_or(100).max(1),
        plugin,
        concurrency,
        timeout: h.timeout.map_or(Duration::from_secs(5), |d| d.0),
        memory: h.memory.map_or(64 << 20, |m| m.0),
        max_retries: h.max_retries.unwrap_or(5),
        backoff_base,
        backoff_cap,
        config: h.config.unwrap_or(Value::Null),
        name,
    }
}
