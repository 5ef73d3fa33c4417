//! rabbitmq: publishes each change to a RabbitMQ exchange through the management plugin's
//! HTTP API (`POST /api/exchanges/VHOST/EXCHANGE/publish`), no AMQP connection needed.
//!
//! ```yaml
//! handlers:
//!   to-rabbitmq:
//!     plugin: builtin:rabbitmq
//!     config:
//!       url: http://rabbitmq.messaging.svc:15672
//!       vhost: /                          # default /
//!       exchange: k8s.changes             # required; amq.topic, amq.direct, ... or your own
//!       routing_key: "{{object.kind}}.{{object.metadata.namespace}}.{{kind}}"
//!       username: switchyard
//!       password: {valueFrom: {secretKeyRef: {name: rabbitmq, key: password}}}
//!       body:                             # optional template; default: the whole event
//!         change: "{{kind}}"
//!         name: "{{object.metadata.name}}"
//!     capabilities:
//!       http: [http://rabbitmq.messaging.svc:15672]
//! ```
//!
//! Each message is persistent (`delivery_mode: 2`), `application/json`, and carries the
//! change's idempotency key as its `message_id` (`UID.RESOURCEVERSION.CHANGE`, the same on
//! every attempt) and the change (`added`, ...) as its `type`. An answer `{"routed": false}`
//! (no queue bound to the exchange for that routing key: the message is gone) is an error,
//! retried like a failure and then a dead letter, so a message nobody could read is never
//! counted as delivered. A 4xx (an exchange that does not exist, bad credentials) is
//! permanent; a 5xx, a timeout or a refused connection is retried.

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{
    Sent, basic_auth, change_key, check_url, event_json, path_segment, send,
};
use switchyard_sdk::{Configured, Event, Outcome, export_handler, template};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The management API's base URL (`http://HOST:15672`).
    url: String,
    /// The virtual host.
    #[serde(default = "root")]
    vhost: String,
    /// The exchange to publish to.
    exchange: String,
    /// The routing key, a template.
    #[serde(default)]
    routing_key: String,
    /// The user to authenticate as (HTTP Basic).
    #[serde(default)]
    username: Option<String>,
    /// Its password.
    #[serde(default)]
    password: Option<String>,
    /// The message's template; the whole event without one.
    #[serde(default)]
    body: Option<Value>,
}

fn root() -> String {
    "/".into()
}

/// The handler, built from its `config` once per instance.
struct Rabbitmq {
    endpoint: String,
    exchange: String,
    routing_key: String,
    authorization: Option<String>,
    body: Option<Value>,
}

impl Configured for Rabbitmq {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs `url` and `exchange` (see the rabbitmq sink's docs)".into());
        }
        let config: Config = switchyard_sdk::parse_config(text)?;
        let url = check_url(&config.url, "config.url")?;
        if config.exchange.is_empty() {
            return Err(
                "config.exchange: must name an exchange (the default exchange \
                        cannot be published to by name here; use amq.direct)"
                    .into(),
            );
        }
        template::check(&json!(config.routing_key), "config.routing_key")?;
        if let Some(body) = &config.body {
            template::check(body, "config.body")?;
        }
        let authorization = match (&config.username, &config.password) {
            (Some(user), Some(password)) => Some(basic_auth(user.trim(), password.trim())),
            (None, None) => None,
            _ => return Err("config: `username` and `password` go together".into()),
        };
        Ok(Self {
            endpoint: format!(
                "{}/api/exchanges/{}/{}/publish",
                url.trim_end_matches('/'),
                path_segment(&config.vhost),
                path_segment(&config.exchange)
            ),
            exchange: config.exchange,
            routing_key: config.routing_key,
            authorization,
            body: config.body,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let kind = event.kind;
        let event = event_json(&event)?;
        let key = change_key(kind, &event["object"]);
        let body = match &self.body {
            Some(template) => template::fill(template, &event),
            None => event.clone(),
        };
        let routing_key = match template::fill(&json!(self.routing_key), &event) {
            Value::String(text) => text,
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let message = json!({
            "properties": {"delivery_mode": 2, "content_type": "application/json",
                           "message_id": key, "type": event["kind"], "app_id": "switchyard"},
            "routing_key": routing_key,
            "payload": body.to_string(),
            "payload_encoding": "string",
        });
        let mut request = Request::post(&self.endpoint);
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let response = match send(request.json(&message))? {
            Sent::Answered(response) => response,
            Sent::Later(outcome) => return Ok(outcome),
        };
        let answer: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        if answer["routed"] != json!(true) {
            return Err(format!(
                "RabbitMQ routed the message to no queue (exchange {:?}, routing key \
                 {routing_key:?}; it answered {}): bind a queue that takes it",
                self.exchange,
                response.excerpt(200)
            ));
        }
        Ok(Outcome::Done)
    }
}

export_handler!(Rabbitmq);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn pod() -> Value {
        json!({"kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop",
               "uid": "u-1", "resourceVersion": "5"}})
    }

    fn handle(config: Value, answer: Response) -> switchyard_sdk::testing::Report {
        TestHost::new()
            .config(config)
            .http("http://mq:15672/", answer)
            .handle::<Rabbitmq>(event(EventKind::Added, pod()))
    }

    #[test]
    fn a_change_is_published_with_its_key_and_routing_key() {
        let config = json!({"url": "http://mq:15672", "vhost": "/", "exchange": "amq.topic",
                            "routing_key": "{{object.kind}}.{{object.metadata.namespace}}",
                            "username": "guest", "password": "guest\n",
                            "body": {"name": "{{object.metadata.name}}"}});
        let report = handle(config, Response::new(200, r#"{"routed":true}"#));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(
            request.url,
            "http://mq:15672/api/exchanges/%2F/amq.topic/publish"
        );
        assert_eq!(
            request.headers[0],
            ("authorization".into(), "Basic Z3Vlc3Q6Z3Vlc3Q=".into())
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["routing_key"], "Pod.shop");
        assert_eq!(body["payload"], r#"{"name":"web-1"}"#);
        assert_eq!(body["properties"]["message_id"], "u-1.5.add");
        assert_eq!(body["properties"]["type"], "added");
    }

    #[test]
    fn an_unrouted_message_is_an_error_and_a_4xx_permanent() {
        let config = json!({"url": "http://mq:15672", "exchange": "x"});
        let unrouted = handle(config.clone(), Response::new(200, r#"{"routed":false}"#));
        let error = unrouted.outcome.unwrap_err();
        assert!(
            error.starts_with("RabbitMQ routed the message to no queue"),
            "{error}"
        );
        assert!(!error.starts_with("permanent"));
        let refused = handle(config, Response::new(404, "no exchange 'x'"));
        assert_eq!(
            refused.outcome,
            Err("permanent: the receiver answered 404: no exchange 'x'".into())
        );
    }

    #[test]
    fn a_bad_config_names_the_key() {
        let init = |config: Value| handle(config, Response::new(200, "")).outcome.unwrap_err();
        assert!(init(Value::Null).contains("needs `url` and `exchange`"));
        assert!(init(json!({"url": "http://mq"})).contains("missing field `exchange`"));
        assert!(init(json!({"url": "http://mq", "exchange": ""})).contains("config.exchange"));
        let half = json!({"url": "http://mq", "exchange": "x", "username": "u"});
        assert!(init(half).contains("go together"));
        let bad = json!({"url": "http://mq", "exchange": "x", "routing_key": "{{kind"});
        assert!(init(bad).starts_with("init: config.routing_key"));
    }
}
