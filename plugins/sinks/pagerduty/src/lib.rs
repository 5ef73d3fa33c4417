//! pagerduty: triggers a PagerDuty incident through the Events API v2
//! (`POST https://events.pagerduty.com/v2/enqueue`) for each change, and resolves it when
//! the object is deleted. The `dedup_key` is the object's uid (an Event's own uid: one Event
//! counted again is the same incident), so every change of one object lands on one
//! incident and its deletion resolves it.
//!
//! ```yaml
//! handlers:
//!   to-pagerduty:
//!     plugin: builtin:pagerduty
//!     config:
//!       routing_key: {valueFrom: {secretKeyRef: {name: pagerduty, key: routing-key}}}
//!       severity: error     # optional: critical | error | warning | info;
//!                           # default warning for a Warning Event, info otherwise
//!       source: prod        # optional, the payload's source; default kubernetes
//!     capabilities:
//!       http: [https://events.pagerduty.com]
//! ```
//!
//! The summary is cut to PagerDuty's 1,024 characters. A 4xx (an invalid event, a wrong
//! routing key) is permanent; a 5xx, a timeout or a refused connection is retried; a 429
//! is sent again after its `Retry-After` (1 s without one, at most 5 minutes).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{check_url, cut, deliver, event_json, summary};
use switchyard_sdk::{Configured, Event, EventKind, Outcome, export_handler};

/// The longest `summary` PagerDuty takes.
const MAX_SUMMARY: usize = 1024;

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The integration's routing key (a service's Events API v2 integration).
    routing_key: String,
    /// The Events API's URL.
    #[serde(default = "enqueue")]
    url: String,
    /// The incidents' severity; from the change without one.
    #[serde(default)]
    severity: Option<String>,
    /// The payload's `source`.
    #[serde(default = "kubernetes")]
    source: String,
}

fn enqueue() -> String {
    "https://events.pagerduty.com/v2/enqueue".into()
}

fn kubernetes() -> String {
    "kubernetes".into()
}

/// The handler, built from its `config` once per instance.
struct Pagerduty {
    config: Config,
}

impl Configured for Pagerduty {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs `routing_key` (see the pagerduty sink's docs)".into());
        }
        let mut config: Config = switchyard_sdk::parse_config(text)?;
        config.url = check_url(&config.url, "config.url")?;
        config.routing_key = config.routing_key.trim().to_string();
        if config.routing_key.is_empty() {
            return Err("config.routing_key: must not be empty".into());
        }
        if let Some(severity) = &config.severity
            && !["critical", "error", "warning", "info"].contains(&severity.as_str())
        {
            return Err(format!(
                "config.severity: {severity:?} is not critical, error, warning or info"
            ));
        }
        Ok(Self { config })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let summary = summary(&event_json(&event)?);
        let mut body = json!({
            "routing_key": config.routing_key,
            "dedup_key": summary.uid,
            "event_action": "resolve",
            "client": "switchyard",
        });
        if event.kind != EventKind::Deleted {
            let details: Map<String, Value> = summary
                .facts
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .chain((!summary.text.is_empty()).then(|| ("Message".into(), json!(summary.text))))
                .collect();
            body["event_action"] = json!("trigger");
            body["payload"] = json!({
                "summary": cut(&summary.title, MAX_SUMMARY),
                "source": config.source,
                "severity": config.severity.as_deref().unwrap_or(summary.severity),
                "custom_details": details,
            });
        }
        deliver(Request::post(&config.url).json(&body))
    }
}

export_handler!(Pagerduty);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn send(config: Value, kind: EventKind) -> Value {
        let pod = json!({"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop",
                         "uid": "p-1"}});
        let report = TestHost::new()
            .config(config)
            .http("https://events.pagerduty.com/", Response::new(202, "{}"))
            .handle::<Pagerduty>(event(kind, pod));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        serde_json::from_slice(&report.requests[0].body).unwrap()
    }

    #[test]
    fn a_change_triggers_and_a_deletion_resolves_one_dedup_key() {
        let config = json!({"routing_key": "R0\n", "severity": "error"});
        let trigger = send(config.clone(), EventKind::Added);
        assert_eq!(trigger["event_action"], "trigger");
        assert_eq!(trigger["routing_key"], "R0");
        assert_eq!(trigger["dedup_key"], "p-1");
        assert_eq!(trigger["payload"]["summary"], "Pod shop/web-1 was added");
        assert_eq!(trigger["payload"]["severity"], "error");
        assert_eq!(trigger["payload"]["custom_details"]["Namespace"], "shop");
        let resolve = send(config, EventKind::Deleted);
        assert_eq!(resolve["event_action"], "resolve");
        assert_eq!(resolve["dedup_key"], "p-1");
        assert!(resolve.get("payload").is_none());
    }

    #[test]
    fn a_bad_config_names_the_key() {
        let init = |config: Value| {
            TestHost::new()
                .config(config)
                .handle::<Pagerduty>(event(EventKind::Added, json!({})))
                .outcome
                .unwrap_err()
        };
        assert!(init(Value::Null).contains("needs `routing_key`"));
        assert!(init(json!({"routing_key": " "})).contains("config.routing_key"));
        assert!(init(json!({"routing_key": "r", "severity": "high"})).contains("config.severity"));
    }
}
