//! Posts each event (kind, namespace, name, resourceVersion, attempt) as JSON to the URL in
//! its config, `{"url": "http://127.0.0.1:PORT/path"}`, and fails the call on anything but
//! a 2xx, so the daemon retries it; a 4xx other than 429 fails it as permanent, so the event
//! goes to the dead letters at once. With `"timeout_ms"`, waits at most that long for the
//! response's first byte. `"headers"` adds headers; with `"log_config": true`, `init`
//! logs the config it was given (what the daemon must redact when it holds secrets). With
//! `"mark": "RESOURCE"`, a delivered object not marked yet is then marked with a
//! merge patch (the annotation `switchyard.test/delivered`): a call that both sends and
//! writes. The tests' outbound HTTP plugin.

use std::cell::RefCell;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::{Event, EventKind, Handler, Level, Outcome, export_handler, log};

thread_local! {
    static CONFIG: RefCell<Value> = const { RefCell::new(Value::Null) };
}

/// The annotation `"mark"` puts on a delivered object.
const MARK: &str = "switchyard.test/delivered";

struct Outbound;

impl Handler for Outbound {
    fn init(config: String) -> Result<(), String> {
        let config: Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        if config["log_config"] == true {
            log(Level::Info, &format!("init with config {config}"));
        }
        CONFIG.with(|c| *c.borrow_mut() = config);
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        let config = CONFIG.with(|c| c.borrow().clone());
        let url = config["url"].as_str().ok_or("config has no url")?;
        let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        let meta = &object["metadata"];
        let body = json!({
            "kind": match event.kind {
                EventKind::Added => "added",
                EventKind::Updated => "updated",
                EventKind::Deleted => "deleted",
                EventKind::Sync => "sync",
            },
            "namespace": meta["namespace"],
            "name": meta["name"],
            "resourceVersion": meta["resourceVersion"],
            "attempt": event.attempt,
        });
        let mut request = Request::post(url)
            .header("x-attempt", &event.attempt.to_string())
            .header("authorization", "Bearer test-token")
            .json(&body);
        if let Some(headers) = config["headers"].as_object() {
            for (name, value) in headers {
                request = request.header(name, value.as_str().unwrap_or_default());
            }
        }
        if let Some(ms) = config["timeout_ms"].as_u64() {
            request = request.timeout(Duration::from_millis(ms));
        }
        let response = request.send()?;
        if !response.is_success() {
            let error = format!(
                "the receiver answered {}: {}",
                response.status,
                response.excerpt(100)
            );
            // A 4xx will not get better by itself (a 429 will).
            let permanent = (400..500).contains(&response.status) && response.status != 429;
            return Err(if permanent {
                switchyard_sdk::permanent(&error)
            } else {
                error
            });
        }
        log(Level::Debug, &format!("delivered: {}", response.status));
        if let Some(resource) = config["mark"].as_str()
            && meta["annotations"][MARK].is_null()
            && event.kind != EventKind::Deleted
        {
            let patch = json!({"metadata": {"annotations": {MARK: response.status.to_string()}}});
            let name = meta["name"].as_str().unwrap_or_default();
            switchyard_sdk::kube::merge_patch(resource, meta["namespace"].as_str(), name, &patch)?;
        }
        Ok(Outcome::Done)
    }
}

export_handler!(Outbound);
