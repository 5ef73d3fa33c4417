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

mod proto;
mod record;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::json;
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{Sent, change_key, check_header, check_url, event_json, object, send};
use switchyard_sdk::{Configured, Event, Outcome, export_handler, template};

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
        let key = change_key(event.kind, &object(&event)?);
        let record = record::build(&event_json(&event)?, &key, &self.extra);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut request = Request::post(&self.endpoint);
        for (name, value) in &self.headers {
            request = request.header(name, value.trim());
        }
        let request = request
            .header("content-type", "application/x-protobuf")
            .body(record::encode(&record, now));
        match send(request)? {
            Sent::Answered(response) => match rejected(&response.body) {
                Some(why) => Err(switchyard_sdk::permanent(&format!(
                    "the receiver rejected the log record: {why}"
                ))),
                None => Ok(Outcome::Done),
            },
            Sent::Later(outcome) => Ok(outcome),
        }
    }
}

/// Why a 2xx answer (an `ExportLogsServiceResponse`) rejected the record, if its
/// `partial_success` (field 1) says it did: `rejected_log_records` (1) above 0, with its
/// `error_message` (2). An empty or unreadable answer rejects nothing.
fn rejected(body: &[u8]) -> Option<String> {
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
    (count > 0).then(|| format!("{count} rejected: {message}"))
}

export_handler!(Otlp);

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
}
