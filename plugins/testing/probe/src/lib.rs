//! Sends a GET (waiting 2 s at most) to each URL of its config's `"urls"`, in one call;
//! with `"burst": {"url": URL, "count": N}` it also sends N requests to URL all at once.
//! Then it posts what each met (`"status 200"`, or the request's error) as JSON to
//! `"report"`: `{"results": [{"url": URL, "result": TEXT}, ...], "burst": {TEXT: COUNT}}`.
//! The egress tests' probe: one call tries every spelling of a destination against the
//! handler's allow-list, or many requests against its bounds.

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
        // `"burst": {"url": URL, "count": N}`: N requests in flight at once, each result
        // counted by its text.
        let mut burst = serde_json::Map::new();
        if let Some(url) = config["burst"]["url"].as_str() {
            let count = config["burst"]["count"].as_u64().unwrap_or(0) as usize;
            let requests = (0..count)
                .map(|_| Request::get(url).timeout(Duration::from_secs(2)))
                .collect();
            for result in switchyard_sdk::http::send_all(requests) {
                let text = match result {
                    Ok(response) => format!("status {}", response.status),
                    Err(e) => e.to_string(),
                };
                let seen = burst.entry(text).or_insert(json!(0));
                *seen = json!(seen.as_u64().unwrap_or(0) + 1);
            }
        }
        Request::post(report)
            .json(&json!({"results": results, "burst": burst}))
            .send()?
            .error_for_status()?;
        Ok(Outcome::Done)
    }
}

export_handler!(Probe);
