//! Sends a GET to each URL (each waiting 2 s at most) of its config's `"urls"`, in one call, then posts what each met
//! (`"status 200"`, or the request's error) as JSON to `"report"`:
//! `{"results": [{"url": URL, "result": TEXT}, ...]}`. The egress tests' probe: one call
//! tries every spelling of a destination against the handler's allow-list.

use std::cell::RefCell;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_sdk::http::Request;
use switchyard_sdk::{Event, Handler, Outcome, export_handler};

thread_local! {
    static CONFIG: RefCell<Value> = const { RefCell::new(Value::Null) };
}

struct Probe;

impl Handler for Probe {
    fn init(config: String) -> Result<(), String> {
        let config: Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        CONFIG.with(|c| *c.borrow_mut() = config);
        Ok(())
    }

    fn handle(_event: Event) -> Result<Outcome, String> {
        let config = CONFIG.with(|c| c.borrow().clone());
        let report = config["report"].as_str().ok_or("config has no report")?;
        let results: Vec<Value> = config["urls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|url| {
                let result = match Request::get(url).timeout(Duration::from_secs(2)).send() {
                    Ok(response) => format!("status {}", response.status),
                    Err(e) => e.to_string(),
                };
                json!({"url": url, "result": result})
            })
            .collect();
        Request::post(report)
            .json(&json!({"results": results}))
            .send()?
            .error_for_status()?;
        Ok(Outcome::Done)
    }
}

export_handler!(Probe);
