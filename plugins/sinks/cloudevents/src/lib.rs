//! cloudevents: sends each change as a CloudEvent over HTTP, in binary or structured mode,
//! in the format Knative's ApiServerSource gives its own events, so a Knative Broker (and
//! its Triggers' filters on `type`, `kind`, `name`, `namespace`) takes them as from that
//! source. See [`event`] for the attributes.
//!
//! ```yaml
//! handlers:
//!   to-broker:
//!     plugin: cloudevents
//!     config:
//!       url: http://broker-ingress.knative-eventing.svc.cluster.local/default/default
//!       mode: binary              # binary (default) | structured
//!       data: resource            # resource (default): the object | reference
//!       source: https://10.96.0.1:443   # default https://kubernetes.default.svc
//!       headers: {}               # optional, name to value
//!     capabilities:
//!       http: [http://broker-ingress.knative-eventing.svc.cluster.local]
//! ```
//!
//! Anything but a 2xx answer, and a timeout or a failed connection, is an error: the daemon
//! retries the event with backoff and then keeps it as a dead letter, whose error names the
//! status and the start of the answer's body. A retry carries the same `id`. A 4xx other
//! than 429 is permanent (a dead letter at once), and so is a body larger than the
//! handler's `outbound.max_request_body`. A 429, and a 503 with `Retry-After`, are not
//! failures: the event is sent again after the wait the receiver asks for (at most 5
//! minutes; 1 s for a 429 without `Retry-After`), and the wait does not count toward
//! `max_retries`.

mod event;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use switchyard_sdk::http::Request;
use switchyard_sdk::{Configured, Event, Level, Outcome, export_handler, log};

use event::{CloudEvent, Data};

/// How the event travels in the HTTP message (the CloudEvents HTTP binding's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    /// Attributes in `ce-*` headers, the data as the body.
    Binary,
    /// The whole event as one `application/cloudevents+json` body.
    Structured,
}

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Where to send: a Broker's ingress, a Knative Service, any CloudEvents receiver.
    url: String,
    /// `binary` (the default) or `structured`.
    #[serde(default = "binary")]
    mode: Mode,
    /// `resource` (the default) or `reference`.
    #[serde(default = "resource")]
    data: Data,
    /// The events' `source`; ApiServerSource's is the API server's URL.
    #[serde(default = "kubernetes")]
    source: String,
    /// Headers sent with every request, name to value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

fn binary() -> Mode {
    Mode::Binary
}

fn resource() -> Data {
    Data::Resource
}

fn kubernetes() -> String {
    "https://kubernetes.default.svc".into()
}

impl Config {
    /// Reads and checks the config the daemon passes to `init`.
    fn parse(text: &str) -> Result<Config, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the cloudevents sink's docs)".into());
        }
        let mut config: Config = switchyard_sdk::parse_config(text)?;
        // A value from a Secret made with `--from-file` ends in a newline: surrounding
        // whitespace is never part of a URL or a header value (RFC 9110, 5.5).
        config.url = config.url.trim().to_string();
        for value in config.headers.values_mut() {
            *value = value.trim().to_string();
        }
        if !(config.url.starts_with("http://") || config.url.starts_with("https://")) {
            return Err(format!(
                "config.url: {:?} is not an http:// or https:// URL",
                config.url
            ));
        }
        if config.source.is_empty() {
            return Err("config.source: must not be empty (a CloudEvent needs a source)".into());
        }
        for (name, value) in &config.headers {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with("ce-") || lower == "content-type" {
                return Err(format!(
                    "config.headers: {name:?} is set by the sink from the event"
                ));
            }
            if name.is_empty() || value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(format!(
                    "config.headers: {name:?} has an empty name or a control character in its value"
                ));
            }
        }
        Ok(config)
    }
}

/// The request carrying `event` in `mode`.
fn request(config: &Config, event: CloudEvent) -> Request {
    let mut request = Request::post(&config.url);
    for (name, value) in &config.headers {
        request = request.header(name, value);
    }
    match config.mode {
        Mode::Binary => {
            for (name, value) in &event.attributes {
                request = request.header(&format!("ce-{name}"), &event::header_value(value));
            }
            request.json(&event.data)
        }
        Mode::Structured => {
            let mut envelope = Map::new();
            for (name, value) in event.attributes {
                envelope.insert(name.to_string(), Value::String(value));
            }
            envelope.insert("datacontenttype".into(), "application/json".into());
            envelope.insert("data".into(), event.data);
            request
                .header("content-type", "application/cloudevents+json")
                .body(Value::Object(envelope).to_string())
        }
    }
}

/// The handler, built from its `config` once per instance.
struct CloudEvents {
    config: Config,
}

impl Configured for CloudEvents {
    fn new(config: &str) -> Result<Self, String> {
        Ok(Self {
            config: Config::parse(config)?,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("the event's object: {e}"))?;
        let cloud_event = event::build(event.kind, &object, &config.source, config.data);
        let id = cloud_event.attributes[1].1.clone();
        let response = request(config, cloud_event).send().map_err(|e| {
            let too_large = e.is_request_too_large();
            let message = String::from(e);
            if too_large && config.data == Data::Resource {
                format!("{message}: or `data: reference`, which sends a reference, not the object")
            } else {
                message
            }
        })?;
        if let Some(wait) = response.retry_later() {
            log(
                Level::Warn,
                &format!(
                    "the receiver answered {}: sending {id} again in {} ms, as it asked",
                    response.status,
                    wait.as_millis()
                ),
            );
            return Ok(Outcome::RequeueAfter(
                u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            ));
        }
        let response = response.error_for_status()?;
        log(
            Level::Debug,
            &format!("delivered {id}: {}", response.status),
        );
        Ok(Outcome::Done)
    }
}

export_handler!(CloudEvents);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::json;
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{Report, TestHost, event};

    use super::*;

    const URL: &str = "http://broker-ingress.knative-eventing.svc/default/default";

    fn cm() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a",
               "namespace": "shop", "uid": "u-1", "resourceVersion": "7"}, "data": {"v": "1"}})
    }

    fn send(config: Value, kind: EventKind) -> Report {
        TestHost::new()
            .config(config)
            .http("http://broker-ingress", Response::new(202, ""))
            .handle::<CloudEvents>(event(kind, cm()))
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn binary_mode_puts_the_attributes_in_ce_headers_and_the_object_in_the_body() {
        let report = send(
            json!({"url": URL, "headers": {"authorization": "Bearer t"}}),
            EventKind::Added,
        );
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        let h = &request.headers;
        assert_eq!(header(h, "ce-specversion"), Some("1.0"));
        assert_eq!(header(h, "ce-id"), Some("u-1.7.add"));
        assert_eq!(
            header(h, "ce-type"),
            Some("dev.knative.apiserver.resource.add")
        );
        assert_eq!(
            header(h, "ce-source"),
            Some("https://kubernetes.default.svc")
        );
        assert_eq!(
            header(h, "ce-subject"),
            Some("/apis/v1/namespaces/shop/configmaps/a")
        );
        assert_eq!(header(h, "ce-kind"), Some("ConfigMap"));
        assert_eq!(header(h, "ce-name"), Some("a"));
        assert_eq!(header(h, "ce-namespace"), Some("shop"));
        assert_eq!(header(h, "content-type"), Some("application/json"));
        assert_eq!(header(h, "authorization"), Some("Bearer t"));
        assert_eq!(
            serde_json::from_slice::<Value>(&request.body).unwrap(),
            cm()
        );
    }

    #[test]
    fn structured_mode_sends_one_json_envelope() {
        let config = json!({"url": URL, "mode": "structured", "data": "reference",
                            "source": "https://10.96.0.1:443"});
        let report = send(config, EventKind::Deleted);
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(
            header(&request.headers, "content-type"),
            Some("application/cloudevents+json")
        );
        assert!(header(&request.headers, "ce-id").is_none());
        assert_eq!(
            serde_json::from_slice::<Value>(&request.body).unwrap(),
            json!({
                "specversion": "1.0",
                "id": "u-1.7.delete",
                "source": "https://10.96.0.1:443",
                "type": "dev.knative.apiserver.ref.delete",
                "subject": "/apis/v1/namespaces/shop/configmaps/a",
                "kind": "ConfigMap",
                "name": "a",
                "namespace": "shop",
                "datacontenttype": "application/json",
                "data": {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "namespace": "shop"},
            })
        );
    }

    #[test]
    fn a_retry_carries_the_first_attempt_s_id() {
        let first = TestHost::new()
            .config(json!({"url": URL}))
            .http("http://broker-ingress", Response::new(503, "overloaded"))
            .handle::<CloudEvents>(event(EventKind::Updated, cm()));
        assert_eq!(
            first.outcome,
            Err("the receiver answered 503: overloaded".into())
        );
        let retry = TestHost::new()
            .config(json!({"url": URL}))
            .http("http://broker-ingress", Response::new(200, ""))
            .handle::<CloudEvents>(Event {
                attempt: 2,
                ..event(EventKind::Updated, cm())
            });
        assert_eq!(retry.outcome, Ok(Outcome::Done));
        let id = |r: &Report| header(&r.requests[0].headers, "ce-id").map(str::to_string);
        assert_eq!(id(&first), id(&retry));
        assert_eq!(id(&first).as_deref(), Some("u-1.7.update"));
    }

    #[test]
    fn a_429_comes_back_after_its_retry_after_with_the_same_id() {
        let report = TestHost::new()
            .config(json!({"url": URL}))
            .http(
                "http://broker-ingress",
                Response::new(429, "").header("Retry-After", "2"),
            )
            .handle::<CloudEvents>(event(EventKind::Updated, cm()));
        assert_eq!(report.outcome, Ok(Outcome::RequeueAfter(2000)));
        let busy = TestHost::new()
            .config(json!({"url": URL}))
            .http(
                "http://broker-ingress",
                Response::new(503, "").header("Retry-After", "5"),
            )
            .handle::<CloudEvents>(event(EventKind::Updated, cm()));
        assert_eq!(busy.outcome, Ok(Outcome::RequeueAfter(5000)));
    }

    #[test]
    fn a_request_too_large_is_permanent_and_suggests_a_reference() {
        let error = TestHost::new()
            .config(json!({"url": URL}))
            .http_error(
                "http://broker-ingress",
                switchyard_sdk::http::Error::TooLarge("HttpRequestBodySize(Some(10))".into()),
            )
            .handle::<CloudEvents>(event(EventKind::Added, cm()))
            .outcome
            .unwrap_err();
        assert!(error.starts_with("permanent: too large:"), "{error}");
        assert!(error.contains("outbound.max_request_body"), "{error}");
        assert!(error.contains("`data: reference`"), "{error}");
    }

    #[test]
    fn a_4xx_is_an_error_with_the_status_and_the_answer() {
        let outcome = TestHost::new()
            .config(json!({"url": URL}))
            .http(
                "http://broker-ingress",
                Response::new(400, "unknown content type"),
            )
            .handle::<CloudEvents>(event(EventKind::Added, cm()))
            .outcome;
        assert_eq!(
            outcome,
            Err("permanent: the receiver answered 400: unknown content type".into())
        );
    }

    #[test]
    fn a_bad_config_is_an_init_error_that_names_the_key() {
        let error = |config: Value| send(config, EventKind::Added).outcome.unwrap_err();
        assert!(error(Value::Null).contains("needs at least `url`"));
        assert_eq!(
            error(json!({"url": URL, "sorce": "x"})),
            "init: config: unknown field `sorce`, expected one of `url`, `mode`, `data`, `source`, `headers`"
        );
        assert!(error(json!({"url": URL, "mode": "batch"})).contains("unknown variant `batch`"));
        assert!(error(json!({"url": URL, "data": "ref"})).contains("unknown variant `ref`"));
        assert!(error(json!({"url": URL, "headers": {"ce-id": "x"}})).contains("\"ce-id\""));
        assert!(error(json!({"url": "broker"})).contains("config.url"));
        assert!(error(json!({"url": URL, "source": ""})).contains("config.source"));
    }
}
