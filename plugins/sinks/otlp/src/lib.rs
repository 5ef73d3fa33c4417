//! otlp: sends each change as an OpenTelemetry log record over OTLP/HTTP in protobuf
//! (`POST URL/v1/logs`, an `ExportLogsServiceRequest`), to an OpenTelemetry Collector or
//! any backend that takes OTLP. See [`record`] for the resource, attributes and body.
//!
//! ```yaml
//! handlers:
//!   to-collector:
//!     plugin: builtin:otlp
//!     config:
//!       url: http://otel-collector.observability.svc:4318   # /v1/logs is added
//!       resource_attributes: {service.name: kubernetes-events, k8s.cluster.name: prod}
//!       attributes: {team: "{{object.metadata.labels.team}}"}
//!       headers: {authorization: "Bearer s3cr3t"}
//!     capabilities:
//!       http: [http://otel-collector.observability.svc:4318]
//! ```
//!
//! A 4xx is permanent (a dead letter naming the answer); a 5xx, a timeout or a refused
//! connection is retried; a 429 or a 503 with `Retry-After` is sent again after the wait
//! asked (at most 5 minutes), as the OTLP specification asks of a client. A 2xx whose
//! `partial_success` rejects the record is permanent too (a dead letter naming the
//! receiver's `error_message`). Each record's `log.record.uid` is the change's idempotency
//! key.
//!
//! With `batch:` in the handler's config, a batch of changes is one request: a
//! `ResourceLogs` per object, each holding the records of the changes about it. The answer
//! counts for every change of the batch alike; a `partial_success` says how many records
//! were rejected but not which, and OTLP forbids retrying it, so the changes are done (a
//! warning names the count and the message) unless every record was rejected (each a dead
//! letter).

mod proto;
mod record;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::json;
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{
    Sent, answer_for_all, change_key, check_header, check_url, event_json, send,
};
use switchyard_sdk::{
    Configured, ConfiguredBatch, Event, ItemOutcome, Level, Outcome, log, template,
};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The OTLP/HTTP endpoint's base URL (`/v1/logs` is added unless it ends so).
    url: String,
    /// Resource attributes, name to template.
    #[serde(default)]
    resource_attributes: BTreeMap<String, String>,
    /// Log record attributes, name to template.
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    /// Headers sent with every request, name to value.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The handler, built from its `config` once per instance.
struct Otlp {
    endpoint: String,
    extra: record::Extra,
    headers: BTreeMap<String, String>,
}

impl Configured for Otlp {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the otlp sink's docs)".into());
        }
        let config: Config = switchyard_sdk::parse_config(text)?;
        let url = check_url(&config.url, "config.url")?;
        for (name, value) in &config.headers {
            check_header(name, value.trim(), "config.headers")?;
        }
        for (at, map) in [
            ("config.resource_attributes", &config.resource_attributes),
            ("config.attributes", &config.attributes),
        ] {
            for (name, value) in map {
                template::check(&json!(value), &format!("{at}.{name}"))?;
            }
        }
        let url = url.trim_end_matches('/');
        let endpoint = if url.ends_with("/v1/logs") {
            url.to_string()
        } else {
            format!("{url}/v1/logs")
        };
        let mut resource = BTreeMap::from([("service.name".to_string(), "switchyard".into())]);
        resource.extend(config.resource_attributes);
        Ok(Self {
            endpoint,
            extra: record::Extra {
                resource,
                attributes: config.attributes,
            },
            headers: config.headers,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let record = self.record(&event)?;
        match send(self.request(&[record]))? {
            Sent::Answered(response) => match rejected(&response.body) {
                Some((count, why)) => Err(switchyard_sdk::permanent(&format!(
                    "the receiver rejected the log record: {count} rejected: {why}"
                ))),
                None => Ok(Outcome::Done),
            },
            Sent::Later(outcome) => Ok(outcome),
        }
    }
}

impl ConfiguredBatch for Otlp {
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        let mut outcomes = vec![ItemOutcome::Done; events.len()];
        let mut records = Vec::new();
        let mut sent = Vec::new();
        for (i, event) in events.iter().enumerate() {
            match self.record(event) {
                Ok(record) => {
                    records.push(record);
                    sent.push(i);
                }
                Err(error) => outcomes[i] = ItemOutcome::DeadLetter(error),
            }
        }
        if records.is_empty() {
            return Ok(outcomes);
        }
        let response = self.request(&records).send()?;
        let outcome = if response.is_success() {
            partial_success(&response.body, records.len())
        } else {
            answer_for_all(&response).outcome
        };
        for i in sent {
            outcomes[i] = outcome.clone();
        }
        Ok(outcomes)
    }
}

impl Otlp {
    /// The record for `event`.
    fn record(&self, event: &Event) -> Result<record::Record, String> {
        let json = event_json(event)?;
        let key = change_key(event.kind, &json["object"]);
        Ok(record::build(&json, &key, &self.extra))
    }

    /// The request exporting `records` in one `ExportLogsServiceRequest`.
    fn request(&self, records: &[record::Record]) -> Request {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut request = Request::post(&self.endpoint);
        for (name, value) in &self.headers {
            request = request.header(name, value.trim());
        }
        request
            .header("content-type", "application/x-protobuf")
            .body(record::encode(records, now))
    }
}

/// What a 2xx answer to `count` records means for each: done, unless its `partial_success`
/// rejected some. OTLP says how many, not which, and that the client must not retry a
/// partial success: so when it rejected all `count`, each is a dead letter naming the
/// receiver's message; when fewer, each is done and a warning says how many were lost.
fn partial_success(body: &[u8], count: usize) -> ItemOutcome {
    let Some((rejected, why)) = rejected(body) else {
        return ItemOutcome::Done;
    };
    if usize::try_from(rejected).is_ok_and(|r| r >= count) {
        return ItemOutcome::DeadLetter(format!(
            "the receiver rejected the log records: {rejected} rejected: {why}"
        ));
    }
    log(
        Level::Warn,
        &format!(
            "the receiver rejected {rejected} of {count} log records without saying which \
             (OTLP's partial success, not retried): {why}"
        ),
    );
    ItemOutcome::Done
}

/// How many records a 2xx answer (an `ExportLogsServiceResponse`) rejected and why, if its
/// `partial_success` (field 1) says it rejected some: `rejected_log_records` (1) above 0,
/// with its `error_message` (2). An empty or unreadable answer rejects nothing.
fn rejected(body: &[u8]) -> Option<(u64, String)> {
    let partial = proto::fields(body)?
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (1, proto::Field::Bytes(b)) => Some(b),
            _ => None,
        })?;
    let (mut count, mut message) = (0, String::new());
    for (n, value) in proto::fields(partial)? {
        match (n, value) {
            (1, proto::Field::Varint(c)) => count = c,
            (2, proto::Field::Bytes(b)) => message = String::from_utf8_lossy(b).into_owned(),
            _ => {}
        }
    }
    (count > 0).then_some((count, message))
}

switchyard_sdk::export_batch_handler!(Otlp);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::Value;
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn handle(config: Value, answer: Response) -> switchyard_sdk::testing::Report {
        TestHost::new()
            .config(config)
            .http("http://otel:4318/", answer)
            .handle::<Otlp>(event(EventKind::Added, json!({"kind": "Pod"})))
    }

    #[test]
    fn a_change_is_posted_as_protobuf_to_v1_logs() {
        let report = handle(json!({"url": "http://otel:4318/"}), Response::new(200, ""));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let request = &report.requests[0];
        assert_eq!(request.url, "http://otel:4318/v1/logs");
        assert_eq!(
            request.headers,
            [("content-type".into(), "application/x-protobuf".into())]
        );
        // ExportLogsServiceRequest: field 1, a ResourceLogs.
        assert_eq!(request.body[0], 0x0a);
        let explicit = handle(
            json!({"url": "http://otel:4318/v1/logs"}),
            Response::new(200, ""),
        );
        assert_eq!(explicit.requests[0].url, "http://otel:4318/v1/logs");
    }

    #[test]
    fn a_partial_success_that_rejects_the_record_is_permanent() {
        let partial = proto::Message::new().uint(1, 1).string(2, "too old");
        let answer = proto::Message::new().message(1, &partial).0;
        let refused = handle(
            json!({"url": "http://otel:4318"}),
            Response::new(200, answer),
        );
        assert_eq!(
            refused.outcome,
            Err("permanent: the receiver rejected the log record: 1 rejected: too old".into())
        );
        // A partial_success that rejects nothing (a warning) is a success.
        let warning = proto::Message::new().string(2, "slow down");
        let answer = proto::Message::new().message(1, &warning).0;
        let ok = handle(
            json!({"url": "http://otel:4318"}),
            Response::new(200, answer),
        );
        assert_eq!(ok.outcome, Ok(Outcome::Done));
    }

    #[test]
    fn a_400_is_permanent_and_a_bad_config_names_the_key() {
        let refused = handle(
            json!({"url": "http://otel:4318"}),
            Response::new(400, "bad"),
        );
        assert_eq!(
            refused.outcome,
            Err("permanent: the receiver answered 400: bad".into())
        );
        let init = |config: Value| handle(config, Response::new(200, "")).outcome.unwrap_err();
        assert!(init(Value::Null).contains("needs at least `url`"));
        let bad = json!({"url": "http://otel", "attributes": {"a": "{{x"}});
        assert!(init(bad).contains("config.attributes.a"));
    }

    fn batch(
        answer: Response,
        events: Vec<Event>,
    ) -> switchyard_sdk::testing::Report<Vec<ItemOutcome>> {
        TestHost::new()
            .config(json!({"url": "http://otel:4318"}))
            .http("http://otel:4318/", answer)
            .handle_batch::<Otlp>(events)
    }

    fn pod(name: &str) -> Value {
        json!({"kind": "Pod", "metadata": {"name": name, "namespace": "shop", "uid": name,
               "resourceVersion": "1"}})
    }

    /// The messages under field 1 (a request's `ResourceLogs`) and, in each, the records
    /// (field 2 of its `ScopeLogs`, field 2).
    fn records_per_resource(body: &[u8]) -> Vec<usize> {
        let bytes = |fields: Vec<(u32, proto::Field<'_>)>, n: u32| -> Vec<Vec<u8>> {
            fields
                .into_iter()
                .filter_map(|(f, v)| match (f, v) {
                    (f, proto::Field::Bytes(b)) if f == n => Some(b.to_vec()),
                    _ => None,
                })
                .collect()
        };
        bytes(proto::fields(body).unwrap(), 1)
            .iter()
            .map(|resource_logs| {
                let scopes = bytes(proto::fields(resource_logs).unwrap(), 2);
                scopes
                    .iter()
                    .map(|s| bytes(proto::fields(s).unwrap(), 2).len())
                    .sum()
            })
            .collect()
    }

    #[test]
    fn a_batch_is_one_request_with_a_resource_per_object() {
        let events = vec![
            event(EventKind::Added, pod("a")),
            event(EventKind::Added, pod("b")),
            event(EventKind::Deleted, pod("a")),
        ];
        let report = batch(Response::new(200, ""), events);
        assert_eq!(report.outcome, Ok(vec![ItemOutcome::Done; 3]));
        assert_eq!(report.requests.len(), 1);
        assert_eq!(records_per_resource(&report.requests[0].body), [2, 1]);
        let one = handle(json!({"url": "http://otel:4318"}), Response::new(200, ""));
        assert_eq!(records_per_resource(&one.requests[0].body), [1]);
    }

    #[test]
    fn a_partial_success_is_done_with_a_warning_unless_it_rejects_every_record() {
        let answer = |count: u64| {
            let partial = proto::Message::new().uint(1, count).string(2, "too old");
            Response::new(200, proto::Message::new().message(1, &partial).0)
        };
        let events = || {
            vec![
                event(EventKind::Added, pod("a")),
                event(EventKind::Added, pod("b")),
            ]
        };
        let some = batch(answer(1), events());
        assert_eq!(some.outcome, Ok(vec![ItemOutcome::Done; 2]));
        assert!(
            some.logs.iter().any(|(_, l)| l
                .starts_with("the receiver rejected 1 of 2 log records")
                && l.ends_with(": too old")),
            "{:?}",
            some.logs
        );
        let all = batch(answer(2), events());
        let letter = ItemOutcome::DeadLetter(
            "the receiver rejected the log records: 2 rejected: too old".into(),
        );
        assert_eq!(all.outcome, Ok(vec![letter.clone(), letter]));
        let refused = batch(Response::new(400, "bad"), events());
        let letter = ItemOutcome::DeadLetter("the receiver answered 400: bad".into());
        assert_eq!(refused.outcome, Ok(vec![letter.clone(), letter]));
        let later = batch(Response::new(503, "").header("retry-after", "3"), events());
        assert_eq!(later.outcome, Ok(vec![ItemOutcome::Retry(Some(3000)); 2]));
    }
}
