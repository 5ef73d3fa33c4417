//! webhook: sends each event it gets as JSON to one URL, with the headers its config names.
//!
//! ```yaml
//! handlers:
//!   audit-hook:
//!     plugin: webhook
//!     config:
//!       url: https://hooks.example.com/kubernetes
//!       headers: {authorization: "Bearer s3cr3t"}
//!       body:                               # optional; default: the whole event
//!         change: "{{kind}}"
//!         name: "{{object.metadata.name}}"
//!         labels: "{{object.metadata.labels}}"
//!     capabilities:
//!       http: [https://hooks.example.com]
//! ```
//!
//! The event, as the template sees it (and as the body is without one):
//! `{"kind": "added|updated|deleted|sync", "route", "attempt", "object", "oldObject",
//! "finalStateUnknown"}`. See `switchyard_sdk::template` for the
//! placeholders.
//!
//! Each request carries an `Idempotency-Key` header (unless `headers` sets one):
//! `UID.RESOURCEVERSION.CHANGE` (`add`, `update`, `delete`), the same for every attempt at
//! one change, across retries and restarts, so a receiver can drop a duplicate.
//!
//! Anything but a 2xx answer, and a timeout or a failed connection, is an error: the daemon
//! retries the event with backoff and then keeps it as a dead letter, whose error names the
//! status and the start of the answer's body. A 4xx other than 429 is permanent (a dead
//! letter at once), and so is a body larger than the handler's
//! `outbound.max_request_body`. A 429, and a 503 with `Retry-After`, are not failures: the
//! event is sent again after the wait the receiver asks for (at most 5 minutes; 1 s for a
//! 429 without `Retry-After`), and the wait does not count toward `max_retries`.
//!
//! With the handler's `batch:`, one request carries the batch's events (each its body, as
//! above): `batch_format: json_array` (the default) sends a JSON array of them,
//! `ndjson` one per line (`application/x-ndjson`). The answer decides for every event of the
//! request alike: a 2xx is done; a 429 or a 5xx retries them (counted toward `max_retries`)
//! after at least the `Retry-After` asked for, capped as above; any other answer (a 4xx)
//! moves them to the dead letters naming the status and the start of the body, as does a
//! body larger than `outbound.max_request_body`. A timeout or a failed connection retries
//! them with backoff. A batch request has no `Idempotency-Key` unless `headers` sets one.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{change_key, check_header, event_json_reading};
use switchyard_sdk::template;
use switchyard_sdk::{
    Configured, ConfiguredBatch, Event, ItemOutcome, Level, Outcome, export_batch_handler, log,
};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Where to send: `http(s)://host[:port]/path?query`.
    url: String,
    /// `POST` (the default), `PUT` or `PATCH`.
    #[serde(default = "post")]
    method: String,
    /// Headers sent with every request, name to value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The body's template; the whole event without one.
    #[serde(default)]
    body: Option<Value>,
    /// How a batch's bodies go in one request (`batch:` handlers).
    #[serde(default)]
    batch_format: BatchFormat,
}

/// `batch_format`: how a batch's bodies are put in one request.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BatchFormat {
    /// A JSON array of the bodies (`application/json`).
    #[default]
    JsonArray,
    /// One body per line (`application/x-ndjson`).
    Ndjson,
}

fn post() -> String {
    "POST".into()
}

impl Config {
    /// Reads and checks the config the daemon passes to `init`.
    fn parse(text: &str) -> Result<Config, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the webhook sink's docs)".into());
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
        config.method = config.method.to_ascii_uppercase();
        if !["POST", "PUT", "PATCH"].contains(&config.method.as_str()) {
            return Err(format!(
                "config.method: {:?} is not POST, PUT or PATCH",
                config.method
            ));
        }
        for (name, value) in &config.headers {
            check_header(name, value, "config.headers")?;
        }
        if let Some(body) = &config.body {
            template::check(body, "config.body")?;
        }
        Ok(config)
    }
}

impl Config {
    /// Whether the config sets the header `name` (any case).
    fn has_header(&self, name: &str) -> bool {
        self.headers.keys().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// The error for a request that failed; one too large also names `hint`, what else helps.
fn too_large_hint(error: switchyard_sdk::http::Error, hint: &str) -> String {
    let too_large = error.is_request_too_large();
    let message = String::from(error);
    if too_large {
        format!("{message}: {hint}")
    } else {
        message
    }
}

/// `requeue-after` for an answer that asks to come back later (see
/// `Response::retry_later`), logged.
fn retry_later(response: &switchyard_sdk::http::Response) -> Option<Outcome> {
    let wait = response.retry_later()?;
    log(
        Level::Warn,
        &format!(
            "the receiver answered {}: sending again in {} ms, as it asked",
            response.status,
            wait.as_millis()
        ),
    );
    Some(Outcome::RequeueAfter(
        u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
    ))
}

/// The handler, built from its `config` once per instance.
struct Webhook {
    config: Config,
    /// Whether a body needs the event's `oldObject` (no template, or one that reads it).
    reads_old: bool,
}

impl Configured for Webhook {
    fn new(config: &str) -> Result<Self, String> {
        let config = Config::parse(config)?;
        let reads_old = config
            .body
            .as_ref()
            .is_none_or(|body| template::reads(body, "oldObject"));
        Ok(Self { config, reads_old })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let config = &self.config;
        let kind = event.kind;
        let event = event_json_reading(&event, self.reads_old)?;
        let key = change_key(kind, &event["object"]);
        let body = self.body(event);
        let mut request = self.request();
        if !config.has_header("idempotency-key") {
            request = request.header("idempotency-key", &key);
        }
        let typed = config.has_header("content-type");
        request = if typed {
            request.body(body.to_string())
        } else {
            request.json(&body)
        };
        let response = request.send().map_err(|e| {
            too_large_hint(
                e,
                "or a `body:` template that sends only what the receiver needs (the \
                 default body is the whole event, object and old object)",
            )
        })?;
        if let Some(later) = retry_later(&response) {
            return Ok(later);
        }
        let response = response.error_for_status()?;
        log(Level::Debug, &format!("delivered: {}", response.status));
        Ok(Outcome::Done)
    }
}

impl Webhook {
    /// The body for one event (as `event_json_reading` gives it): the template filled in,
    /// or the whole event.
    fn body(&self, event: Value) -> Value {
        match &self.config.body {
            Some(template) => template::fill(template, &event),
            None => event,
        }
    }

    /// A request to the configured URL with the configured method and headers.
    fn request(&self) -> Request {
        let mut request = Request::new(&self.config.method, &self.config.url);
        for (name, value) in &self.config.headers {
            request = request.header(name, value);
        }
        request
    }
}

impl ConfiguredBatch for Webhook {
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        let bodies = events
            .iter()
            .map(|e| event_json_reading(e, self.reads_old).map(|e| self.body(e)))
            .collect::<Result<Vec<_>, _>>()?;
        let (payload, content_type) = match self.config.batch_format {
            BatchFormat::JsonArray => (Value::Array(bodies).to_string(), "application/json"),
            BatchFormat::Ndjson => {
                let lines: String = bodies.iter().map(|b| format!("{b}\n")).collect();
                (lines, "application/x-ndjson")
            }
        };
        let mut request = self.request();
        if !self.config.has_header("content-type") {
            request = request.header("content-type", content_type);
        }
        let outcome = match request.body(payload).send() {
            Ok(response) => switchyard_sdk::sink::answer_for_all(&response).outcome,
            Err(e) if e.is_request_too_large() => ItemOutcome::DeadLetter(too_large_hint(
                e,
                "or a smaller batch (`batch.max_bytes`, `batch.max_events`), or a `body:` \
                 template that sends only what the receiver needs",
            )),
            Err(e) => return Err(e.into()),
        };
        Ok(vec![outcome; events.len()])
    }
}

export_batch_handler!(Webhook);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::json;
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::{Error, Response};
    use switchyard_sdk::testing::{Report, TestHost, event, updated};

    use super::*;

    const URL: &str = "https://hooks.example.com/k8s?team=a";

    fn cm(name: &str, value: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": "default",
               "labels": {"app": "shop"}}, "data": {"v": value}})
    }

    fn host(config: Value) -> TestHost {
        TestHost::new()
            .config(config)
            .http("https://hooks.example.com/", Response::new(200, "ok"))
    }

    #[test]
    fn without_a_template_the_whole_event_goes_with_the_headers() {
        let report = host(json!({"url": URL, "headers": {"authorization": "Bearer t"}}))
            .handle::<Webhook>(updated(cm("a", "1"), cm("a", "2")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let [request] = report.requests.as_slice() else {
            panic!("one request: {:?}", report.requests)
        };
        assert_eq!(
            (request.method.as_str(), request.url.as_str()),
            ("POST", URL)
        );
        assert_eq!(
            request.headers,
            [
                ("authorization".to_string(), "Bearer t".to_string()),
                (
                    "idempotency-key".to_string(),
                    "default/a..update".to_string()
                ),
                ("content-type".to_string(), "application/json".to_string()),
            ]
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body,
            json!({"kind": "updated", "route": "test", "attempt": 1, "object": cm("a", "2"),
                   "oldObject": cm("a", "1"), "finalStateUnknown": false})
        );
    }

    #[test]
    fn a_template_reading_the_old_object_gets_it_and_one_without_it_the_same_key() {
        let config = json!({"url": URL, "body": {"was": "{{oldObject.data.v}}",
                                                  "is": "{{object.data.v}}"}});
        let report = host(config).handle::<Webhook>(updated(cm("a", "1"), cm("a", "2")));
        let body: Value = serde_json::from_slice(&report.requests[0].body).unwrap();
        assert_eq!(body, json!({"was": "1", "is": "2"}));
        let config = json!({"url": URL, "body": {"is": "{{object.data.v}}"}});
        let report = host(config).handle::<Webhook>(updated(cm("a", "1"), cm("a", "2")));
        let request = &report.requests[0];
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body, json!({"is": "2"}));
        assert!(
            request
                .headers
                .contains(&("idempotency-key".into(), "default/a..update".into())),
            "{:?}",
            request.headers
        );
    }

    #[test]
    fn a_template_sends_the_subset_it_names() {
        let config = json!({
            "url": URL,
            "method": "put",
            "headers": {"Content-Type": "application/vnd.audit+json"},
            "body": {"change": "{{kind}}", "name": "{{object.metadata.name}}",
                     "labels": "{{object.metadata.labels}}", "cluster": "prod",
                     "text": "{{object.kind}} {{object.metadata.name}} was {{kind}}"},
        });
        let report = host(config).handle::<Webhook>(event(EventKind::Added, cm("a", "1")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(request.method, "PUT");
        assert_eq!(
            request.headers,
            [
                (
                    "Content-Type".to_string(),
                    "application/vnd.audit+json".to_string()
                ),
                ("idempotency-key".to_string(), "default/a..add".to_string()),
            ]
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body,
            json!({"change": "added", "name": "a", "labels": {"app": "shop"},
                   "cluster": "prod", "text": "ConfigMap a was added"})
        );
    }

    #[test]
    fn the_idempotency_key_names_the_change_unless_the_config_sets_one() {
        let mut object = cm("a", "1");
        object["metadata"]["uid"] = json!("u-1");
        object["metadata"]["resourceVersion"] = json!("9");
        let key = |config: Value, kind| {
            let report = host(config).handle::<Webhook>(event(kind, object.clone()));
            let request = &report.requests[0];
            let found = request
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("idempotency-key"));
            found.map(|(_, v)| v.clone()).collect::<Vec<_>>()
        };
        assert_eq!(key(json!({"url": URL}), EventKind::Added), ["u-1.9.add"]);
        assert_eq!(
            key(json!({"url": URL}), EventKind::Deleted),
            ["u-1.9.delete"]
        );
        let own = json!({"url": URL, "headers": {"Idempotency-Key": "mine"}});
        assert_eq!(key(own, EventKind::Added), ["mine"]);
    }

    fn batch_of_two(config: Value, response: Response) -> Report<Vec<ItemOutcome>> {
        TestHost::new()
            .config(config)
            .http("https://hooks.example.com/", response)
            .handle_batch::<Webhook>(vec![
                event(EventKind::Added, cm("a", "1")),
                updated(cm("b", "1"), cm("b", "2")),
            ])
    }

    #[test]
    fn a_batch_goes_in_one_request_as_a_json_array_or_as_ndjson() {
        let config =
            json!({"url": URL, "body": {"name": "{{object.metadata.name}}", "change": "{{kind}}"}});
        let report = batch_of_two(config.clone(), Response::new(200, "ok"));
        assert_eq!(
            report.outcome,
            Ok(vec![ItemOutcome::Done, ItemOutcome::Done])
        );
        let [request] = report.requests.as_slice() else {
            panic!("one request: {:?}", report.requests)
        };
        assert_eq!(
            request.headers,
            [("content-type".to_string(), "application/json".to_string())]
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body,
            json!([{"name": "a", "change": "added"}, {"name": "b", "change": "updated"}])
        );
        let mut ndjson = config;
        ndjson["batch_format"] = json!("ndjson");
        let report = batch_of_two(ndjson, Response::new(204, ""));
        assert_eq!(
            report.outcome,
            Ok(vec![ItemOutcome::Done, ItemOutcome::Done])
        );
        let request = &report.requests[0];
        assert_eq!(
            request.headers,
            [(
                "content-type".to_string(),
                "application/x-ndjson".to_string()
            )]
        );
        assert_eq!(
            String::from_utf8(request.body.clone()).unwrap(),
            "{\"change\":\"added\",\"name\":\"a\"}\n{\"change\":\"updated\",\"name\":\"b\"}\n"
        );
    }

    #[test]
    fn a_batch_answer_decides_for_every_event_alike() {
        let outcome = |response: Response| batch_of_two(json!({"url": URL}), response).outcome;
        let both = |o: ItemOutcome| Ok(vec![o.clone(), o]);
        assert_eq!(
            outcome(Response::new(503, "busy").header("retry-after", "7")),
            both(ItemOutcome::Retry(Some(7000)))
        );
        assert_eq!(
            outcome(Response::new(500, "")),
            both(ItemOutcome::Retry(None))
        );
        assert_eq!(
            outcome(Response::new(429, "")),
            both(ItemOutcome::Retry(Some(1000)))
        );
        assert_eq!(
            outcome(Response::new(429, "").header("Retry-After", "86400")),
            both(ItemOutcome::Retry(Some(300_000)))
        );
        assert_eq!(
            outcome(Response::new(400, "field `x` is required")),
            both(ItemOutcome::DeadLetter(
                "the receiver answered 400: field `x` is required".into()
            ))
        );
        let refused = TestHost::new()
            .config(json!({"url": URL}))
            .http_error(
                "https://hooks.example.com/",
                Error::Connection("refused".into()),
            )
            .handle_batch::<Webhook>(vec![event(EventKind::Added, cm("a", "1"))]);
        assert_eq!(refused.outcome, Err("connection failed: refused".into()));
    }

    #[test]
    fn a_429_and_a_503_with_retry_after_come_back_when_asked_capped() {
        let answer = |response: Response| {
            TestHost::new()
                .config(json!({"url": URL}))
                .http("https://hooks.example.com/", response)
                .handle::<Webhook>(event(EventKind::Added, cm("a", "1")))
        };
        let report = answer(Response::new(503, "busy").header("retry-after", "7"));
        assert_eq!(report.outcome, Ok(Outcome::RequeueAfter(7000)));
        assert!(
            report
                .logs
                .iter()
                .any(|(_, l)| l.contains("sending again in 7000 ms"))
        );
        assert_eq!(
            answer(Response::new(429, "slow down").header("Retry-After", "2")).outcome,
            Ok(Outcome::RequeueAfter(2000))
        );
        assert_eq!(
            answer(Response::new(429, "")).outcome,
            Ok(Outcome::RequeueAfter(1000))
        );
        assert_eq!(
            answer(Response::new(429, "").header("Retry-After", "86400")).outcome,
            Ok(Outcome::RequeueAfter(300_000))
        );
    }

    #[test]
    fn a_request_too_large_is_permanent_and_says_what_to_change() {
        let outcome = TestHost::new()
            .config(json!({"url": URL}))
            .http_error(
                "https://hooks.example.com/",
                Error::TooLarge("HttpRequestBodySize(Some(1048576))".into()),
            )
            .handle::<Webhook>(event(EventKind::Added, cm("a", "1")))
            .outcome
            .unwrap_err();
        assert!(outcome.starts_with("permanent: too large:"), "{outcome}");
        assert!(outcome.contains("outbound.max_request_body"), "{outcome}");
        assert!(outcome.contains("`body:` template"), "{outcome}");
    }

    #[test]
    fn a_5xx_a_4xx_a_timeout_and_a_refused_connection_are_errors() {
        let config = json!({"url": URL});
        let answer = |response: Response| {
            TestHost::new()
                .config(config.clone())
                .http("https://hooks.example.com/", response)
                .handle::<Webhook>(event(EventKind::Added, cm("a", "1")))
                .outcome
        };
        assert_eq!(
            answer(Response::new(503, "busy")),
            Err("the receiver answered 503: busy".into())
        );
        assert_eq!(
            answer(Response::new(400, r#"{"error": "unknown field x"}"#)),
            Err(r#"permanent: the receiver answered 400: {"error": "unknown field x"}"#.into())
        );
        for error in [
            Error::Timeout("HttpResponseTimeout".into()),
            Error::Connection("ConnectionRefused".into()),
        ] {
            let outcome = TestHost::new()
                .config(config.clone())
                .http_error("https://hooks.example.com/", error.clone())
                .handle::<Webhook>(event(EventKind::Added, cm("a", "1")))
                .outcome;
            assert_eq!(outcome, Err(error.to_string()));
        }
    }

    #[test]
    fn a_url_and_headers_from_a_file_lose_their_final_newline() {
        let config =
            json!({"url": format!("{URL}\n"), "headers": {"authorization": " Bearer t\n"}});
        let report = host(config).handle::<Webhook>(event(EventKind::Added, cm("a", "1")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert_eq!(report.requests[0].url, URL);
        assert_eq!(report.requests[0].headers[0].1, "Bearer t");
    }

    #[test]
    fn a_bad_config_is_an_init_error_that_names_the_key() {
        let outcome = |config: Value| {
            host(config)
                .handle::<Webhook>(event(EventKind::Added, cm("a", "1")))
                .outcome
                .unwrap_err()
        };
        assert!(outcome(Value::Null).contains("needs at least `url`"));
        assert_eq!(
            outcome(json!({"url": URL, "hedaers": {}})),
            "init: config: unknown field `hedaers`, expected one of `url`, `method`, `headers`, \
             `body`, `batch_format`"
        );
        assert!(outcome(json!({"url": "hooks.example.com"})).contains("config.url"));
        assert!(outcome(json!({"url": URL, "method": "GET"})).contains("config.method"));
        assert!(outcome(json!({"url": URL, "headers": {"x y": "1"}})).contains("\"x y\""));
        assert!(
            outcome(json!({"url": URL, "headers": {"x": "a\r\nb"}})).contains("config.headers.x")
        );
        assert!(outcome(json!({"url": URL, "body": {"n": "{{kind"}})).contains("config.body.n"));
        assert!(outcome(json!({"url": URL, "headers": {"x": 1}})).contains("invalid type"));
    }
}
