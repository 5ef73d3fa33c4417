//! elasticsearch: indexes each event as a document into Elasticsearch or OpenSearch with
//! the `_bulk` API (`POST URL/_bulk`, NDJSON), a batch of events per request.
//!
//! ```yaml
//! handlers:
//!   cluster-index:
//!     plugin: elasticsearch
//!     batch: {max_events: 500, max_bytes: 5Mi, max_wait: 1s}
//!     config:
//!       url: https://es.example.com:9200        # required; `/_bulk` is added
//!       index: "k8s-{{object.kind}}"            # template; default switchyard (lower case in ES)
//!       action: create                          # index (default) or create
//!       document:                               # optional template; default: the event and @timestamp
//!         kind: "{{kind}}"
//!         name: "{{object.metadata.name}}"
//!       api_key: {valueFrom: {secretKeyRef: {name: es, key: api-key}}}   # or username/password, bearer_token
//!     capabilities:
//!       http: [https://es.example.com:9200]
//! ```
//!
//! Each document's `_id` is the change's idempotency key (`UID.RESOURCEVERSION.CHANGE`,
//! the same on every attempt), so a retried event overwrites its document (`index`) or is
//! refused as already there (`create`: a 409, taken as done) rather than stored twice.
//!
//! The bulk answer has an outcome per document: 2xx is done (and 409 for `create`); a 429
//! or a 5xx retries that event; any other status moves that event to the dead letters,
//! naming the status and the error's `type` and `reason`. An answer to the whole request
//! other than 2xx counts for every event: a 429 or a 5xx retries them all (after at least
//! its `Retry-After`), another 4xx moves them all to the dead letters.

use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::sink::{
    Answer, answer_for_all, authorization, change_key, check_url, event_json, now_rfc3339,
};
use switchyard_sdk::template;
use switchyard_sdk::{Configured, ConfiguredBatch, Event, ItemOutcome, Level, Outcome, log};

/// The handler's `config`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The cluster's base URL; `/_bulk` is added.
    url: String,
    /// The index's template.
    #[serde(default = "default_index")]
    index: String,
    /// The bulk action: `index` or `create`.
    #[serde(default)]
    action: Action,
    /// The document's template; the event with `@timestamp` without one.
    #[serde(default)]
    document: Option<Value>,
    /// HTTP Basic user.
    #[serde(default)]
    username: Option<String>,
    /// HTTP Basic password.
    #[serde(default)]
    password: Option<String>,
    /// A bearer token.
    #[serde(default)]
    bearer_token: Option<String>,
    /// An Elasticsearch API key (the base64 `encoded` value), sent as `ApiKey KEY`.
    #[serde(default)]
    api_key: Option<String>,
}

fn default_index() -> String {
    "switchyard".into()
}

/// The bulk action each document is sent with.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    /// Adds or replaces the document.
    #[default]
    Index,
    /// Adds the document; one already there is a 409.
    Create,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Index => "index",
            Action::Create => "create",
        }
    }
}

/// The handler, built from its `config` once per instance.
struct Elasticsearch {
    config: Config,
    bulk_url: String,
    authorization: Option<String>,
}

impl Configured for Elasticsearch {
    fn new(text: &str) -> Result<Self, String> {
        if text.trim() == "null" {
            return Err("config: needs at least `url` (see the elasticsearch sink's docs)".into());
        }
        let config: Config = switchyard_sdk::parse_config(text)?;
        let base = check_url(&config.url, "config.url")?;
        template::check(&json!(config.index), "config.index")?;
        if let Some(document) = &config.document {
            template::check(document, "config.document")?;
        }
        let mut authorization = authorization(
            config.username.as_deref(),
            config.password.as_deref(),
            config.bearer_token.as_deref(),
        )?;
        if let Some(key) = &config.api_key {
            if authorization.is_some() {
                return Err("config: `api_key` or another credential, not both".into());
            }
            authorization = Some(format!("ApiKey {}", key.trim()));
        }
        Ok(Self {
            bulk_url: format!("{}/_bulk", base.trim_end_matches('/')),
            config,
            authorization,
        })
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let mut answers = self.bulk(&[event])?;
        answers.remove(0).single()
    }
}

impl ConfiguredBatch for Elasticsearch {
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        Ok(self.bulk(&events)?.into_iter().map(|a| a.outcome).collect())
    }
}

impl Elasticsearch {
    /// Sends `events` in one bulk request; what became of each.
    fn bulk(&self, events: &[Event]) -> Result<Vec<Answer>, String> {
        let mut request = Request::post(&self.bulk_url)
            .header("content-type", "application/x-ndjson")
            .body(self.body(events)?);
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let response = request.send()?;
        if !response.is_success() {
            return Ok(vec![answer_for_all(&response); events.len()]);
        }
        let answer: Value = serde_json::from_slice(&response.body)
            .map_err(|e| format!("the bulk answer is not JSON: {e}"))?;
        let items = answer["items"].as_array().cloned().unwrap_or_default();
        if items.len() != events.len() {
            return Err(format!(
                "the bulk answer has {} items for {} documents",
                items.len(),
                events.len()
            ));
        }
        Ok(items.iter().map(|item| self.item(item)).collect())
    }

    /// The NDJSON body: an action line and a document line per event.
    fn body(&self, events: &[Event]) -> Result<String, String> {
        let mut body = String::new();
        for event in events {
            let kind = event.kind;
            let event = event_json(event)?;
            let id = change_key(kind, &event["object"]);
            let index = match template::fill(&json!(self.config.index), &event) {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let document = match &self.config.document {
                Some(t) => template::fill(t, &event),
                None => {
                    let mut document = event;
                    document["@timestamp"] = json!(now_rfc3339());
                    document
                }
            };
            let action = json!({ self.config.action.name(): {"_index": index, "_id": id} });
            body.push_str(&format!("{action}\n{document}\n"));
        }
        Ok(body)
    }

    /// What one item of the bulk answer means for its event.
    fn item(&self, item: &Value) -> Answer {
        let result = item.as_object().and_then(|o| o.values().next()).cloned();
        let result = result.unwrap_or(Value::Null);
        let status = result["status"].as_u64().unwrap_or(0);
        let error = &result["error"];
        let message = format!(
            "the bulk item answered {status}: {}: {}",
            error["type"].as_str().unwrap_or("unknown"),
            error["reason"].as_str().unwrap_or("")
        );
        let outcome = match status {
            200..=299 => ItemOutcome::Done,
            409 if self.config.action == Action::Create => ItemOutcome::Done,
            429 | 500..=599 => {
                log(Level::Warn, &format!("{message}: sending it again"));
                ItemOutcome::Retry(None)
            }
            _ => ItemOutcome::DeadLetter(message.clone()),
        };
        Answer { outcome, message }
    }
}

switchyard_sdk::export_batch_handler!(Elasticsearch);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use switchyard_sdk::EventKind;
    use switchyard_sdk::http::Response;
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    fn cm(name: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": "default",
               "uid": format!("u-{name}"), "resourceVersion": "7"}})
    }

    const URL: &str = "http://es:9200";

    #[test]
    fn a_bulk_request_names_each_document_by_its_change_and_each_item_decides_for_its_event() {
        let answer = json!({"took": 3, "errors": true, "items": [
            {"create": {"_index": "k8s-configmap", "_id": "u-a.7.add", "status": 201, "result": "created"}},
            {"create": {"_index": "k8s-configmap", "_id": "u-b.7.add", "status": 409,
                        "error": {"type": "version_conflict_engine_exception", "reason": "document already exists"}}},
            {"create": {"_index": "k8s-configmap", "_id": "u-c.7.add", "status": 400,
                        "error": {"type": "mapper_parsing_exception", "reason": "failed to parse field [name]"}}},
            {"create": {"_index": "k8s-configmap", "_id": "u-d.7.add", "status": 429,
                        "error": {"type": "es_rejected_execution_exception", "reason": "rejected"}}},
        ]});
        let report = TestHost::new()
            .config(
                json!({"url": URL, "index": "k8s-{{object.kind}}", "action": "create",
                           "document": {"name": "{{object.metadata.name}}"}, "api_key": "a2V5"}),
            )
            .http("http://es:9200/", Response::new(200, answer.to_string()))
            .handle_batch::<Elasticsearch>(
                ["a", "b", "c", "d"]
                    .map(|n| event(EventKind::Added, cm(n)))
                    .to_vec(),
            );
        assert_eq!(
            report.outcome,
            Ok(vec![
                ItemOutcome::Done,
                ItemOutcome::Done,
                ItemOutcome::DeadLetter(
                    "the bulk item answered 400: mapper_parsing_exception: failed to parse field [name]".into()
                ),
                ItemOutcome::Retry(None),
            ])
        );
        let request = &report.requests[0];
        assert_eq!(request.url, "http://es:9200/_bulk");
        assert!(
            request
                .headers
                .contains(&("authorization".into(), "ApiKey a2V5".into()))
        );
        let lines: Vec<Value> = String::from_utf8(request.body.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 8);
        assert_eq!(
            lines[0],
            json!({"create": {"_index": "k8s-ConfigMap", "_id": "u-a.7.add"}})
        );
        assert_eq!(lines[1], json!({"name": "a"}));
    }

    #[test]
    fn a_whole_answer_other_than_2xx_counts_for_every_event() {
        let host = |response: Response| {
            TestHost::new()
                .config(json!({"url": URL}))
                .http("http://es:9200/", response)
                .handle_batch::<Elasticsearch>(vec![event(EventKind::Added, cm("a")); 2])
                .outcome
        };
        assert_eq!(
            host(Response::new(503, "").header("retry-after", "2")),
            Ok(vec![ItemOutcome::Retry(Some(2000)); 2])
        );
        let letter =
            ItemOutcome::DeadLetter("the receiver answered 401: missing authentication".into());
        assert_eq!(
            host(Response::new(401, "missing authentication")),
            Ok(vec![letter.clone(), letter])
        );
        assert!(
            host(Response::new(200, "{\"items\": []}"))
                .unwrap_err()
                .contains("0 items for 2")
        );
    }

    #[test]
    fn the_default_document_is_the_event_with_a_timestamp() {
        let sink = Elasticsearch::new(&json!({"url": URL}).to_string()).unwrap();
        let body = sink.body(&[event(EventKind::Deleted, cm("a"))]).unwrap();
        let lines: Vec<Value> = body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            json!({"index": {"_index": "switchyard", "_id": "u-a.7.delete"}})
        );
        assert_eq!(lines[1]["kind"], "deleted");
        assert!(lines[1]["@timestamp"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn a_bad_config_is_refused_naming_the_key() {
        let error = |config: Value| Elasticsearch::new(&config.to_string()).err().unwrap();
        assert_eq!(
            error(Value::Null),
            "config: needs at least `url` (see the elasticsearch sink's docs)"
        );
        assert_eq!(
            error(json!({"url": URL, "idnex": "k8s"})),
            "config: unknown field `idnex`, expected one of `url`, `index`, `action`, `document`, \
             `username`, `password`, `bearer_token`, `api_key`"
        );
        assert_eq!(
            error(json!({"url": URL, "action": "upsert"})),
            "config: unknown variant `upsert`, expected `index` or `create`"
        );
        assert!(error(json!({"url": "es:9200"})).starts_with("config.url"));
        assert_eq!(
            error(json!({"url": URL, "api_key": "k", "bearer_token": "t"})),
            "config: `api_key` or another credential, not both"
        );
    }
}
