//! loki: pushes each event as a log line to Grafana Loki's push API
//! (`POST URL/loki/api/v1/push`, JSON), a batch of events per request.
//!
//! ```yaml
//! handlers:
//!   cluster-log:
//!     plugin: loki
//!     batch: {max_events: 500, max_wait: 1s}
//!     config:
//!       url: http://loki.monitoring.svc:3100     # required; the push path is added
//!       tenant: team-a                           # optional: X-Scope-OrgID
//!       labels:                                  # templates; default {source: switchyard, route: "{{route}}"}
//!         source: switchyard
//!         namespace: "{{object.metadata.namespace}}"
//!       line: "{{kind}} {{object.kind}} {{object.metadata.name}}"   # optional; default: the event as JSON
//!       structured_metadata:                     # optional templates, Loki 3's metadata per line
//!         uid: "{{object.metadata.uid}}"
//!       username: {valueFrom: {secretKeyRef: {name: loki, key: username}}}   # or bearer_token
//!       password: {valueFrom: {secretKeyRef: {name: loki, key: password}}}
//!     capabilities:
//!       http: [http://loki.monitoring.svc:3100]
//! ```
//!
//! Events with the same labels go in one stream; each line's timestamp is the time it was
//! sent, in nanoseconds, one more for each line of a request so that they keep their order.
//! A label value that is empty is left out (Loki drops it too). Loki takes or refuses a push
//! whole: a 2xx is done for every event; a 429 or a 5xx retries them all (after at least the
//! `Retry-After` asked for); another 4xx (an entry too old, a label refused, a stream over
//! its limits) moves them all to the dead letters, naming the status and Loki's message.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{answer_for_all, authorization, check_header, check_url, event_json};
use switchyard_sdk::template;
use switchyard_sdk::{Configured, ConfiguredBatch, Event, ItemOutcome, Outcome};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Loki's base URL; `/loki/api/v1/push` is added.
    url: String,
    /// The tenant (`X-Scope-OrgID`), for a multi-tenant Loki.
    #[serde(default)]
    tenant: Option<String>,
    /// Label name to template.
    #[serde(default = "default_labels")]
    labels: BTreeMap<String, String>,
    /// The line's template; the event as JSON without one.
    #[serde(default)]
    line: Option<Value>,
    /// Structured metadata name to template.
    #[serde(default)]
    structured_metadata: BTreeMap<String, String>,
    /// HTTP Basic user.
    #[serde(default)]
    username: Option<String>,
    /// HTTP Basic password.
    #[serde(default)]
    password: Option<String>,
    /// A bearer token, instead of `username` and `password`.
    #[serde(default)]
    bearer_token: Option<String>,
}

fn default_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("source".to_string(), "switchyard".to_string()),
        ("route".to_string(), "{{route}}".to_string()),
    ])
}

/// The handler, built from its `config` once per instance.
struct Loki {
    config: Config,
    push_url: String,
    authorization: Option<String>,
}

impl Configured for Loki {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the loki sink's docs)".into());
        }
        let config: Config = switchyard_sdk::parse_config(text)?;
        let base = check_url(&config.url, "config.url")?;
        for (name, value) in &config.labels {
            if !is_label_name(name) {
                return Err(format!(
                    "config.labels: {name:?} is not a Loki label name ([a-zA-Z_][a-zA-Z0-9_]*)"
                ));
            }
            template::check(&json!(value), &format!("config.labels.{name}"))?;
        }
        for (name, value) in &config.structured_metadata {
            template::check(&json!(value), &format!("config.structured_metadata.{name}"))?;
        }
        if let Some(line) = &config.line {
            template::check(line, "config.line")?;
        }
        if let Some(tenant) = &config.tenant {
            check_header("x-scope-orgid", tenant.trim(), "config.tenant")?;
        }
        let authorization = authorization(
            config.username.as_deref(),
            config.password.as_deref(),
            config.bearer_token.as_deref(),
        )?;
        Ok(Self {
            push_url: format!("{}/loki/api/v1/push", base.trim_end_matches('/')),
            config,
            authorization,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let answer = self.push(&[event])?;
        answer.single()
    }
}

impl ConfiguredBatch for Loki {
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        let answer = self.push(&events)?;
        Ok(vec![answer.outcome; events.len()])
    }
}

/// Whether `name` is a Prometheus (and Loki) label name.
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A template's value as text: a string as it is, anything else as JSON (`null`: empty).
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Loki {
    /// Sends `events` in one push and says what Loki's answer means for them.
    fn push(&self, events: &[Event]) -> Result<switchyard_sdk::sink::Answer, String> {
        let body = self.body(events, now_ns())?;
        let mut request = Request::post(&self.push_url).json(&body);
        if let Some(tenant) = &self.config.tenant {
            request = request.header("x-scope-orgid", tenant.trim());
        }
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        Ok(answer_for_all(&request.send()?))
    }

    /// The push body: `{"streams": [{"stream": {labels}, "values": [[ns, line, {meta}]]}]}`,
    /// the lines stamped `now`, `now + 1`, ... in the events' order.
    fn body(&self, events: &[Event], now: u128) -> Result<Value, String> {
        let mut streams: BTreeMap<Vec<(String, String)>, Vec<Value>> = BTreeMap::new();
        for (i, event) in events.iter().enumerate() {
            let event = event_json(event)?;
            let fill = |t: &String| text(&template::fill(&json!(t), &event));
            let labels: Vec<(String, String)> = self
                .config
                .labels
                .iter()
                .map(|(name, t)| (name.clone(), fill(t)))
                .filter(|(_, value)| !value.is_empty())
                .collect();
            let line = match &self.config.line {
                Some(t) => text(&template::fill(t, &event)),
                None => event.to_string(),
            };
            let mut value = vec![json!((now + i as u128).to_string()), json!(line)];
            let metadata: serde_json::Map<String, Value> = self
                .config
                .structured_metadata
                .iter()
                .map(|(name, t)| (name.clone(), json!(fill(t))))
                .collect();
            if !metadata.is_empty() {
                value.push(Value::Object(metadata));
            }
            streams.entry(labels).or_default().push(Value::Array(value));
        }
        let streams: Vec<Value> = streams
            .into_iter()
            .map(|(labels, values)| {
                let stream: serde_json::Map<String, Value> =
                    labels.into_iter().map(|(k, v)| (k, json!(v))).collect();
                json!({"stream": stream, "values": values})
            })
            .collect();
        Ok(json!({ "streams": streams }))
    }
}

/// Now, in nanoseconds since the Unix epoch.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

switchyard_sdk::export_batch_handler!(Loki);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn cm(namespace: &str, name: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "uid": format!("u-{name}")}})
    }

    fn loki(config: Value) -> Loki {
        Loki::new(&config.to_string()).unwrap()
    }

    #[test]
    fn events_with_the_same_labels_share_a_stream_and_keep_their_order() {
        let sink = loki(json!({
            "url": "http://loki:3100/",
            "labels": {"ns": "{{object.metadata.namespace}}", "team": "{{object.metadata.labels.team}}"},
            "line": "{{kind}} {{object.metadata.name}}",
            "structured_metadata": {"uid": "{{object.metadata.uid}}"},
        }));
        let events = [
            event(EventKind::Added, cm("a", "one")),
            event(EventKind::Deleted, cm("b", "two")),
            event(EventKind::Added, cm("a", "three")),
        ];
        let body = sink.body(&events, 1000).unwrap();
        assert_eq!(
            body,
            json!({"streams": [
                {"stream": {"ns": "a"}, "values": [
                    ["1000", "added one", {"uid": "u-one"}],
                    ["1002", "added three", {"uid": "u-three"}]]},
                {"stream": {"ns": "b"}, "values": [["1001", "deleted two", {"uid": "u-two"}]]},
            ]})
        );
        assert_eq!(sink.push_url, "http://loki:3100/loki/api/v1/push");
    }

    #[test]
    fn a_push_carries_the_tenant_and_the_credentials_and_its_answer_counts_for_all() {
        let config = json!({"url": "http://loki:3100", "tenant": "team-a\n",
                            "username": "u", "password": "p"});
        let host = |response: Response| {
            TestHost::new()
                .config(config.clone())
                .http("http://loki:3100/", response)
        };
        let events = vec![
            event(EventKind::Added, cm("a", "one")),
            event(EventKind::Added, cm("a", "two")),
        ];
        let report = host(Response::new(204, "")).handle_batch::<Loki>(events.clone());
        assert_eq!(
            report.outcome,
            Ok(vec![ItemOutcome::Done, ItemOutcome::Done])
        );
        let request = &report.requests[0];
        assert_eq!(request.url, "http://loki:3100/loki/api/v1/push");
        let headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert!(
            headers.contains(&("x-scope-orgid", "team-a")),
            "{headers:?}"
        );
        assert!(
            headers.contains(&("authorization", "Basic dTpw")),
            "{headers:?}"
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let line: Value =
            serde_json::from_str(body["streams"][0]["values"][0][1].as_str().unwrap()).unwrap();
        assert_eq!(line["object"]["metadata"]["name"], "one");
        let refused =
            host(Response::new(400, "entry too far behind")).handle_batch::<Loki>(events.clone());
        let letter =
            ItemOutcome::DeadLetter("the receiver answered 400: entry too far behind".into());
        assert_eq!(refused.outcome, Ok(vec![letter.clone(), letter]));
        let busy =
            host(Response::new(429, "").header("retry-after", "3")).handle_batch::<Loki>(events);
        assert_eq!(busy.outcome, Ok(vec![ItemOutcome::Retry(Some(3000)); 2]));
        let single = host(Response::new(500, "ingester down"))
            .handle::<Loki>(event(EventKind::Added, cm("a", "one")));
        assert_eq!(
            single.outcome,
            Err("the receiver answered 500: ingester down".into())
        );
    }

    #[test]
    fn a_bad_config_is_refused_naming_the_key() {
        let error = |config: Value| Loki::new(&config.to_string()).err().unwrap();
        assert_eq!(
            error(Value::Null),
            "config: needs at least `url` (see the loki sink's docs)"
        );
        assert_eq!(
            error(json!({"url": "http://l", "lables": {}})),
            "config: unknown field `lables`, expected one of `url`, `tenant`, `labels`, `line`, \
             `structured_metadata`, `username`, `password`, `bearer_token`"
        );
        assert!(error(json!({"url": "loki:3100"})).starts_with("config.url"));
        assert!(
            error(json!({"url": "http://l", "labels": {"a-b": "x"}}))
                .contains("not a Loki label name")
        );
        assert!(error(json!({"url": "http://l", "username": "u"})).contains("go together"));
        assert!(
            error(
                json!({"url": "http://l", "bearer_token": "t", "username": "u", "password": "p"})
            )
            .contains("not both")
        );
    }
}
