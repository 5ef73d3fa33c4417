//! A plugin for tests of batch delivery (the `handler-batch` world). `handle-batch` logs
//! `batch of N: NS/NAME rv=RV attempt=A, ...` and answers each event as its object's
//! annotations ask:
//!
//! - `batcher/outcome: retry` asks to retry it (`retry-ms:N`: after at least N ms);
//! - `batcher/outcome: dead-letter:REASON` gives it up with REASON;
//! - `batcher/fail-attempts: N` asks to retry it while the attempt is at most N;
//! - otherwise it is done, and logged `done NS/NAME rv=RV`.
//!
//! `batcher/fail-batch: MESSAGE` on any event fails the whole call with MESSAGE (while the
//! event's attempt is at most `batcher/fail-batch-attempts`, when that is set). With
//! `config: {sleep_ms: N}` every batch sleeps N ms after logging. `handle` (a handler
//! without `batch:`) logs `single NS/NAME` and is done.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use switchyard_sdk::{
    BatchHandler, Event, Handler, ItemOutcome, Level, Outcome, export_batch_handler, log,
};

struct Batcher;

/// Milliseconds each batch sleeps (`config.sleep_ms`).
static SLEEP_MS: AtomicU64 = AtomicU64::new(0);

fn annotation<'a>(object: &'a Value, name: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][name].as_str()
}

/// `NS/NAME rv=RV` of an object.
fn describe(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{}/{} rv={}",
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
        meta["resourceVersion"].as_str().unwrap_or("")
    )
}

/// What the object asks for this attempt.
fn outcome(object: &Value, attempt: u32) -> ItemOutcome {
    let fail_attempts = annotation(object, "batcher/fail-attempts").and_then(|n| n.parse().ok());
    if fail_attempts.is_some_and(|n: u32| attempt <= n) {
        return ItemOutcome::Retry(None);
    }
    match annotation(object, "batcher/outcome") {
        Some("retry") => ItemOutcome::Retry(None),
        Some(o) if o.starts_with("retry-ms:") => ItemOutcome::Retry(o[9..].parse().ok()),
        Some(o) if o.starts_with("dead-letter:") => ItemOutcome::DeadLetter(o[12..].to_string()),
        _ => {
            log(Level::Info, &format!("done {}", describe(object)));
            ItemOutcome::Done
        }
    }
}

impl Handler for Batcher {
    fn init(config: String) -> Result<(), String> {
        let config: Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        SLEEP_MS.store(config["sleep_ms"].as_u64().unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        log(Level::Info, &format!("single {}", describe(&object)));
        Ok(Outcome::Done)
    }
}

impl BatchHandler for Batcher {
    fn handle_batch(events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        let objects = events
            .iter()
            .map(|e| serde_json::from_str::<Value>(&e.object).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = objects
            .iter()
            .zip(&events)
            .map(|(o, e)| format!("{} attempt={}", describe(o), e.attempt))
            .collect();
        log(
            Level::Info,
            &format!("batch of {}: {}", events.len(), names.join(", ")),
        );
        let sleep = SLEEP_MS.load(Ordering::Relaxed);
        if sleep > 0 {
            std::thread::sleep(std::time::Duration::from_millis(sleep));
        }
        for (object, event) in objects.iter().zip(&events) {
            let attempts = annotation(object, "batcher/fail-batch-attempts")
                .and_then(|n| n.parse().ok())
                .unwrap_or(u32::MAX);
            if let Some(message) = annotation(object, "batcher/fail-batch")
                && event.attempt <= attempts
            {
                return Err(message.to_string());
            }
        }
        Ok(objects
            .iter()
            .zip(&events)
            .map(|(o, e)| outcome(o, e.attempt))
            .collect())
    }
}

export_batch_handler!(Batcher);
