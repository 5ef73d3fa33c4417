//! {{name}}: a switchyard handler. Logs one line per event: the kind of change, the
//! object's kind and namespace/name, after the `prefix` its config may give.

use serde::Deserialize;
use serde_json::Value;
use switchyard_sdk::{Configured, Event, EventKind, Level, Outcome, export_handler, log};

/// The handler, built from its `config` (`handlers.NAME.config` in the daemon's YAML) once
/// per instance. Every field has a default, so a handler without `config:` works; a field
/// the struct does not know is refused, naming it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Plugin {
    /// Written before each line (`config: {prefix: "audit: "}`).
    #[serde(default)]
    prefix: String,
}

impl Configured for Plugin {
    fn new(config: &str) -> Result<Self, String> {
        switchyard_sdk::parse_config(config)
    }

    fn handle(&self, event: Event) -> Result<Outcome, String> {
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("object is not JSON: {e}"))?;
        let change = match event.kind {
            EventKind::Added => "added",
            EventKind::Updated => "updated",
            EventKind::Deleted => "deleted",
            EventKind::Sync => "sync",
        };
        let meta = &object["metadata"];
        let name = meta["name"].as_str().unwrap_or("?");
        let key = match meta["namespace"].as_str() {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        };
        let kind = object["kind"].as_str().unwrap_or("?");
        log(
            Level::Info,
            &format!("{}{change} {kind} {key}", self.prefix),
        );
        Ok(Outcome::Done)
    }
}

export_handler!(Plugin);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::json;
    use switchyard_sdk::Handler;
    use switchyard_sdk::http::{Error as HttpError, Request, Response};
    use switchyard_sdk::testing::{TestHost, event};

    use super::*;

    #[test]
    fn logs_the_change_and_the_object() {
        let configmap = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "demo", "namespace": "default"},
        });
        let report = TestHost::new().handle::<Plugin>(event(EventKind::Added, configmap));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert_eq!(report.lines(), ["added ConfigMap default/demo"]);
        assert!(report.writes.is_empty());
    }

    #[test]
    fn the_config_s_prefix_starts_each_line_and_a_misspelt_field_is_refused() {
        let configmap = json!({"kind": "ConfigMap", "metadata": {"name": "demo"}});
        let report = TestHost::new()
            .config(json!({"prefix": "audit: "}))
            .handle::<Plugin>(event(EventKind::Deleted, configmap.clone()));
        assert_eq!(report.lines(), ["audit: deleted ConfigMap demo"]);
        let report = TestHost::new()
            .config(json!({"prefx": "audit: "}))
            .handle::<Plugin>(event(EventKind::Deleted, configmap));
        let error = report.outcome.unwrap_err();
        assert!(error.contains("unknown field `prefx`"), "{error}");
    }

    /// A handler without settings implements `Handler`. This one tells a webhook of each
    /// change, with `switchyard_sdk::http`. Deployed, it needs `capabilities: {http: ["https://hooks.example.com"]}` in its handler's config.
    struct Notifier;

    impl Handler for Notifier {
        fn handle(event: Event) -> Result<Outcome, String> {
            let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
            Request::post("https://hooks.example.com/notify")
                .json(&json!({"name": object["metadata"]["name"]}))
                .send()?
                .error_for_status()?;
            Ok(Outcome::Done)
        }
    }

    #[test]
    fn what_the_host_answers_and_records_of_http_requests() {
        let added = || event(EventKind::Added, json!({"metadata": {"name": "demo"}}));
        let sent = TestHost::new()
            .http("https://hooks.example.com/", Response::new(200, "ok"))
            .handle::<Notifier>(added());
        assert_eq!(sent.outcome, Ok(Outcome::Done));
        let [request] = sent.requests.as_slice() else {
            panic!("one request: {:?}", sent.requests)
        };
        assert_eq!(request.url, "https://hooks.example.com/notify");
        assert_eq!(request.body, br#"{"name":"demo"}"#);
        // A 5xx is an error: the daemon retries the event with backoff.
        let busy = TestHost::new()
            .http("https://hooks.example.com/", Response::new(503, "busy"))
            .handle::<Notifier>(added());
        assert_eq!(busy.outcome, Err("the receiver answered 503: busy".into()));
        let down = TestHost::new()
            .http_error(
                "https://hooks.example.com/",
                HttpError::Connection("ConnectionRefused".into()),
            )
            .handle::<Notifier>(added());
        assert_eq!(
            down.outcome,
            Err("connection failed: ConnectionRefused".into())
        );
    }
}
