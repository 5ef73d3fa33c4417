//! alertmanager: posts each change as an alert to Alertmanager's API v2
//! (`POST /api/v2/alerts`), and resolves it (the same labels, `endsAt` now) when the object
//! is deleted. See [`alert`] for the labels and annotations.
//!
//! ```yaml
//! handlers:
//!   to-alertmanager:
//!     plugin: builtin:alertmanager
//!     config:
//!       url: http://alertmanager.monitoring.svc:9093
//!       labels: {cluster: prod, team: "{{object.metadata.labels.team}}"}
//!       annotations: {runbook_url: "https://runbooks.example.com/{{object.reason}}"}
//!       generator_url: "https://dashboard.example.com/{{object.metadata.namespace}}"
//!       headers: {authorization: "Bearer s3cr3t"}
//!     capabilities:
//!       http: [http://alertmanager.monitoring.svc:9093]
//! ```
//!
//! Alertmanager resolves an alert nobody sends again within its `resolve_timeout` (5
//! minutes by default): give the route a `resync` shorter than that to keep alerts about
//! objects that stay firing. A 4xx answer is permanent (a dead letter naming Alertmanager's
//! answer); a 5xx, a timeout or a refused connection is retried; a 429 or a 503 with
//! `Retry-After` is sent again after the wait asked (at most 5 minutes).

mod alert;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::json;
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{check_header, check_url, deliver, event_json, now_rfc3339};
use switchyard_sdk::{Configured, Event, EventKind, Outcome, export_handler};

use alert::Templates;

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Alertmanager's base URL; alerts go to `URL/api/v2/alerts`.
    url: String,
    /// Label name to template, laid over the default labels.
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Annotation name to template, laid over the default annotations.
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    /// The alerts' `generatorURL`, a template.
    #[serde(default)]
    generator_url: Option<String>,
    /// Headers sent with every request, name to value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The handler, built from its `config` once per instance.
struct Alertmanager {
    endpoint: String,
    templates: Templates,
    headers: BTreeMap<String, String>,
}

impl Configured for Alertmanager {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the alertmanager sink's docs)".into());
        }
        let config: Config = switchyard_sdk::parse_config(text)?;
        let url = check_url(&config.url, "config.url")?;
        for (name, value) in &config.headers {
            check_header(name, value.trim(), "config.headers")?;
        }
        let templates = Templates {
            labels: config.labels,
            annotations: config.annotations,
            generator_url: config.generator_url,
        };
        templates.check()?;
        Ok(Self {
            endpoint: format!("{}/api/v2/alerts", url.trim_end_matches('/')),
            templates,
            headers: config.headers,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let ends_at = (event.kind == EventKind::Deleted).then(now_rfc3339);
        let alert = alert::build(&event_json(&event)?, &self.templates, ends_at.as_deref());
        let mut request = Request::post(&self.endpoint);
        for (name, value) in &self.headers {
            request = request.header(name, value.trim());
        }
        deliver(request.json(&json!([alert])))
    }
}

export_handler!(Alertmanager);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::Value;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn host(config: Value, response: Response) -> TestHost {
        TestHost::new()
            .config(config)
            .http("http://am:9093/", response)
    }

    fn pod() -> Value {
        json!({"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop"}})
    }

    #[test]
    fn a_change_posts_one_alert_and_a_deletion_resolves_it() {
        let config = json!({"url": "http://am:9093/", "headers": {"authorization": "Bearer t"}});
        let report = host(config.clone(), Response::new(200, ""))
            .handle::<Alertmanager>(event(EventKind::Added, pod()));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(request.url, "http://am:9093/api/v2/alerts");
        assert_eq!(
            request.headers[0],
            ("authorization".into(), "Bearer t".into())
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body[0]["labels"]["alertname"], "Pod");
        assert!(body[0].get("endsAt").is_none());
        let report = host(config, Response::new(200, ""))
            .handle::<Alertmanager>(event(EventKind::Deleted, pod()));
        let body: Value = serde_json::from_slice(&report.requests[0].body).unwrap();
        assert!(body[0]["endsAt"].as_str().unwrap().starts_with("20"));
    }

    #[test]
    fn a_400_is_permanent_and_a_bad_config_names_the_key() {
        let outcome = host(
            json!({"url": "http://am:9093"}),
            Response::new(400, "bad alert"),
        )
        .handle::<Alertmanager>(event(EventKind::Added, pod()))
        .outcome;
        assert_eq!(
            outcome,
            Err("permanent: the receiver answered 400: bad alert".into())
        );
        let init = |config: Value| {
            host(config, Response::new(200, ""))
                .handle::<Alertmanager>(event(EventKind::Added, pod()))
                .outcome
                .unwrap_err()
        };
        assert!(init(Value::Null).contains("needs at least `url`"));
        assert!(init(json!({"url": "am:9093"})).contains("config.url"));
        assert!(init(json!({"url": "http://am", "lables": {}})).contains("unknown field"));
        assert!(init(json!({"url": "http://am", "labels": {"a-b": "x"}})).contains("a-b"));
    }
}
