//! opsgenie: creates an Opsgenie alert (`POST /v2/alerts`) for each change, its `alias` the
//! object's uid (so Opsgenie counts every change of one object on one open alert), and
//! closes it by that alias (`POST /v2/alerts/ALIAS/close?identifierType=alias`) when the
//! object is deleted.
//!
//! ```yaml
//! handlers:
//!   to-opsgenie:
//!     plugin: builtin:opsgenie
//!     config:
//!       api_key: {valueFrom: {secretKeyRef: {name: opsgenie, key: api-key}}}
//!       url: https://api.opsgenie.com   # default; https://api.eu.opsgenie.com in the EU
//!       priority: P3                    # optional: P1 ... P5
//!       tags: [kubernetes, prod]        # optional
//!     capabilities:
//!       http: [https://api.opsgenie.com]
//! ```
//!
//! The message is cut to Opsgenie's 130 characters, the description to 15,000, the entity
//! to 512, each detail value to 8,000. A 4xx (a wrong key, an invalid alert) is permanent;
//! a 5xx, a timeout or a refused connection is retried; a 429 is sent again after its
//! `Retry-After` (1 s without one, at most 5 minutes).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{check_url, cut, deliver, event_json, path_segment, summary};
use switchyard_sdk::{Configured, Event, EventKind, Outcome, export_handler};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// An API integration's key.
    api_key: String,
    /// The API's base URL.
    #[serde(default = "api")]
    url: String,
    /// The alerts' priority, P1 to P5 (Opsgenie's default, P3, without one).
    #[serde(default)]
    priority: Option<String>,
    /// Tags on every alert.
    #[serde(default)]
    tags: Vec<String>,
}

fn api() -> String {
    "https://api.opsgenie.com".into()
}

/// The handler, built from its `config` once per instance.
struct Opsgenie {
    config: Config,
}

impl Configured for Opsgenie {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs `api_key` (see the opsgenie sink's docs)".into());
        }
        let mut config: Config = switchyard_sdk::parse_config(text)?;
        config.url = check_url(&config.url, "config.url")?
            .trim_end_matches('/')
            .to_string();
        config.api_key = config.api_key.trim().to_string();
        if config.api_key.is_empty() {
            return Err("config.api_key: must not be empty".into());
        }
        if let Some(priority) = &config.priority
            && !["P1", "P2", "P3", "P4", "P5"].contains(&priority.as_str())
        {
            return Err(format!("config.priority: {priority:?} is not P1 ... P5"));
        }
        Ok(Self { config })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let summary = summary(&event_json(&event)?);
        let alias = cut(&summary.uid, 512);
        let (url, body) = if event.kind == EventKind::Deleted {
            let url = format!(
                "{}/v2/alerts/{}/close?identifierType=alias",
                config.url,
                path_segment(&alias)
            );
            let note = format!("{} was deleted", summary.title);
            (
                url,
                json!({"source": "switchyard", "note": cut(&note, 25_000)}),
            )
        } else {
            let details: Map<String, Value> = summary
                .facts
                .iter()
                .map(|(k, v)| (k.to_string(), json!(cut(v, 8000))))
                .collect();
            let entity = summary.facts.iter().take(3).map(|(_, v)| v.as_str());
            let mut alert = json!({
                "message": cut(&summary.title, 130),
                "alias": alias,
                "description": cut(&summary.text, 15_000),
                "details": details,
                "entity": cut(&entity.collect::<Vec<_>>().join("/"), 512),
                "source": "switchyard",
                "tags": config.tags,
            });
            if let Some(priority) = &config.priority {
                alert["priority"] = json!(priority);
            }
            (format!("{}/v2/alerts", config.url), alert)
        };
        let request = Request::post(&url)
            .header("authorization", &format!("GenieKey {}", config.api_key))
            .json(&body);
        deliver(request)
    }
}

export_handler!(Opsgenie);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn send(config: Value, kind: EventKind) -> switchyard_sdk::http::Request {
        let pod = json!({"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop",
                         "uid": "p-1"}});
        let report = TestHost::new()
            .config(config)
            .http("https://api.opsgenie.com/", Response::new(202, "{}"))
            .handle::<Opsgenie>(event(kind, pod));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        report.requests[0].clone()
    }

    #[test]
    fn a_change_creates_an_alert_and_a_deletion_closes_it_by_alias() {
        let config = json!({"api_key": "k-1", "priority": "P2", "tags": ["prod"]});
        let create = send(config.clone(), EventKind::Added);
        assert_eq!(create.url, "https://api.opsgenie.com/v2/alerts");
        assert_eq!(
            create.headers[0],
            ("authorization".into(), "GenieKey k-1".into())
        );
        let body: Value = serde_json::from_slice(&create.body).unwrap();
        assert_eq!(body["alias"], "p-1");
        assert_eq!(body["message"], "Pod shop/web-1 was added");
        assert_eq!(body["entity"], "Pod/shop/web-1");
        assert_eq!(
            (&body["priority"], &body["tags"]),
            (&json!("P2"), &json!(["prod"]))
        );
        let close = send(config, EventKind::Deleted);
        assert_eq!(
            close.url,
            "https://api.opsgenie.com/v2/alerts/p-1/close?identifierType=alias"
        );
    }

    #[test]
    fn a_bad_config_names_the_key() {
        let init = |config: Value| {
            TestHost::new()
                .config(config)
                .handle::<Opsgenie>(event(EventKind::Added, json!({})))
                .outcome
                .unwrap_err()
        };
        assert!(init(Value::Null).contains("needs `api_key`"));
        assert!(init(json!({"api_key": "k", "priority": "high"})).contains("config.priority"));
    }
}
