//! slack: posts a message to a Slack incoming webhook (or a Slack-compatible one:
//! Mattermost, Rocket.Chat, ...) for each change it gets; made for Warning Events, as
//! kubernetes-event-exporter's Slack receiver is. See [`message`] for what it says.
//!
//! ```yaml
//! handlers:
//!   warnings-to-slack:
//!     plugin: slack
//!     config:
//!       url: https://hooks.slack.com/services/T000/B000/XXXX
//!       cluster: prod             # optional, shown under each message
//!       channel: "#alerts"        # optional: username, icon_emoji, icon_url likewise,
//!                                 # for webhooks that let a message choose them
//!     capabilities:
//!       http: [https://hooks.slack.com]
//! routes:
//!   - name: warnings
//!     resource: v1/events
//!     fields: type=Warning
//!     events: [added, updated]
//!     handler: warnings-to-slack
//! ```
//!
//! Anything but a 2xx answer, and a timeout or a failed connection, is an error: the daemon
//! retries the event with backoff and then keeps it as a dead letter, whose error names the
//! status and Slack's answer (`invalid_payload`, `no_service`, ...). A 4xx other than 429
//! is permanent (a dead letter at once). A 429 (Slack's rate limit), and a 503 with
//! `Retry-After`, are not failures: the event is sent again after the wait Slack asks for
//! (at most 5 minutes; 1 s for a 429 without `Retry-After`), and the wait does not count
//! toward `max_retries`. The webhook's URL is never logged: it is the credential.

mod message;

use serde::Deserialize;
use serde_json::Value;
use switchyard_sdk::http::Request;
use switchyard_sdk::{Configured, Event, Level, Outcome, export_handler, log};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The incoming webhook's URL.
    url: String,
    /// A name for the cluster, shown under each message.
    #[serde(default)]
    cluster: Option<String>,
    /// The channel to post to, where the webhook lets a message choose.
    #[serde(default)]
    channel: Option<String>,
    /// The name to post as, likewise.
    #[serde(default)]
    username: Option<String>,
    /// An emoji (`:rotating_light:`) to post with, likewise.
    #[serde(default)]
    icon_emoji: Option<String>,
    /// An image URL to post with, likewise.
    #[serde(default)]
    icon_url: Option<String>,
}

impl Config {
    /// Reads and checks the config the daemon passes to `init`.
    fn parse(text: &str) -> Result<Config, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("config: {e}"))?;
        if value.is_null() {
            return Err("config: needs at least `url` (see the slack sink's docs)".into());
        }
        let mut config: Config =
            serde_json::from_value(value).map_err(|e| format!("config: {e}"))?;
        // A URL from a Secret made with `--from-file` ends in a newline.
        config.url = config.url.trim().to_string();
        if !(config.url.starts_with("https://") || config.url.starts_with("http://")) {
            // Not the URL itself in the message: it is the webhook's secret.
            return Err("config.url: not an http:// or https:// URL".into());
        }
        Ok(config)
    }
}

/// The handler, built from its `config` once per instance.
struct Slack {
    config: Config,
}

impl Configured for Slack {
    fn new(config: &str) -> Result<Self, String> {
        Ok(Self {
            config: Config::parse(config)?,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("the event's object: {e}"))?;
        let Some(mut body) = message::build(event.kind, &object, config.cluster.as_deref()) else {
            log(Level::Debug, "nothing to post for this change");
            return Ok(Outcome::Done);
        };
        for (key, value) in [
            ("channel", &config.channel),
            ("username", &config.username),
            ("icon_emoji", &config.icon_emoji),
            ("icon_url", &config.icon_url),
        ] {
            if let Some(value) = value {
                body[key] = value.as_str().into();
            }
        }
        let response = Request::post(&config.url).json(&body).send()?;
        if let Some(wait) = response.retry_later() {
            log(
                Level::Warn,
                &format!(
                    "slack answered {}: posting again in {} ms, as it asked",
                    response.status,
                    wait.as_millis()
                ),
            );
            return Ok(Outcome::RequeueAfter(
                u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            ));
        }
        response.error_for_status()?;
        Ok(Outcome::Done)
    }
}

export_handler!(Slack);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::json;
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::{Error, Response};
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    const URL: &str = "https://hooks.slack.com/services/T0/B0/secret";

    fn warning() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"},
            "metadata": {"name": "web-1.17", "namespace": "shop"}
        })
    }

    fn host(response: Response) -> TestHost {
        TestHost::new()
            .config(json!({"url": URL, "channel": "#alerts", "icon_emoji": ":k8s:"}))
            .http("https://hooks.slack.com/", response)
    }

    #[test]
    fn a_warning_event_is_posted_as_text_and_blocks() {
        let report =
            host(Response::new(200, "ok")).handle::<Slack>(event(EventKind::Added, warning()));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(
            (request.method.as_str(), request.url.as_str()),
            ("POST", URL)
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body["text"],
            "Warning BackOff on Pod shop/web-1: Back-off restarting failed container"
        );
        assert_eq!(body["blocks"].as_array().unwrap().len(), 2);
        assert_eq!(
            (body["channel"].as_str(), body["icon_emoji"].as_str()),
            (Some("#alerts"), Some(":k8s:"))
        );
        assert!(body.get("username").is_none());
    }

    #[test]
    fn an_expired_event_posts_nothing() {
        let report =
            host(Response::new(200, "ok")).handle::<Slack>(event(EventKind::Deleted, warning()));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert!(report.requests.is_empty());
    }

    #[test]
    fn slack_s_refusals_and_failures_are_errors_with_its_answer() {
        let outcome = |response| {
            host(response)
                .handle::<Slack>(event(EventKind::Added, warning()))
                .outcome
        };
        assert_eq!(
            outcome(Response::new(404, "no_service")),
            Err("permanent: the receiver answered 404: no_service".into())
        );
        assert_eq!(
            outcome(Response::new(429, "rate_limited").header("Retry-After", "30")),
            Ok(Outcome::RequeueAfter(30_000))
        );
        assert_eq!(
            outcome(Response::new(503, "down")),
            Err("the receiver answered 503: down".into())
        );
        let timeout = TestHost::new()
            .config(json!({"url": URL}))
            .http_error(
                "https://hooks.slack.com/",
                Error::Timeout("HttpResponseTimeout".into()),
            )
            .handle::<Slack>(event(EventKind::Added, warning()))
            .outcome;
        assert_eq!(
            timeout,
            Err("request timed out: HttpResponseTimeout".into())
        );
    }

    #[test]
    fn a_bad_config_is_an_init_error_that_never_shows_the_url() {
        let error = |config: Value| {
            TestHost::new()
                .config(config)
                .handle::<Slack>(event(EventKind::Added, warning()))
                .outcome
                .unwrap_err()
        };
        assert!(error(Value::Null).contains("needs at least `url`"));
        assert!(error(json!({"url": URL, "chanel": "#a"})).contains("unknown field `chanel`"));
        let error = error(json!({"url": "hooks.slack.com/services/secret"}));
        assert!(
            error.contains("config.url") && !error.contains("secret"),
            "{error}"
        );
    }
}
