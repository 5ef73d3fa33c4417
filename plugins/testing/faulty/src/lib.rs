//! A plugin for tests that misbehaves as the object's annotations ask:
//!
//! - `faulty/error: MESSAGE` returns an error with that message;
//! - `faulty/fail-attempts: N` returns an error while the attempt number is at most N;
//! - `faulty/trap: "true"` panics (a trap);
//! - `faulty/loop: "true"` loops forever;
//! - `faulty/allocate-mib: N` allocates and touches N MiB;
//! - `faulty/metric: NAME` sets the gauge NAME to 1 and returns the host's error, if any;
//! - `faulty/read: RESOURCE` lists RESOURCE from the cache and returns the host's error, if
//!   any;
//! - `faulty/index: INDEX` lists the object's own resource (by its kind) by the index INDEX
//!   and the value `x`, and returns the host's error, if any;
//! - `faulty/label: KEY=VALUE` merge-patches the label KEY=VALUE onto the object (through
//!   the resource named by its kind) and returns the host's error, if any;
//! - `faulty/requeue-ms: N` asks to be called again after N ms whenever the attempt number
//!   is 1 (a requeue is not a retry, so that is every call);
//! - `faulty/count: "true"` logs `call N of this instance`, N counting the calls the
//!   instance has had (1 in a fresh instance);
//! - `faulty/sleep-ms: N` sleeps N ms with `std::thread::sleep` (a WASI monotonic-clock
//!   poll: the plugin waits in the host, running no wasm);
//! - `faulty/log-bytes: N` logs one line of N bytes (`x` repeated);
//! - `faulty/log-lines: N` logs N lines, `line I of N`.
//!
//! Every call that gets past those logs `handled KIND NAMESPACE/NAME rv=RV attempt=N`.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;
use switchyard_sdk::{
    Event, EventKind, Handler, Level, Outcome, cache, export_handler, kube, log, metrics,
};

struct Faulty;

/// Calls this instance has had.
static CALLS: AtomicU32 = AtomicU32::new(0);

fn annotation<'a>(object: &'a Value, name: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][name].as_str()
}

impl Handler for Faulty {
    fn handle(event: Event) -> Result<Outcome, String> {
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        if annotation(&object, "faulty/count") == Some("true") {
            log(Level::Info, &format!("call {calls} of this instance"));
        }
        if let Some(ms) = annotation(&object, "faulty/sleep-ms").and_then(|n| n.parse().ok()) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        if let Some(bytes) = annotation(&object, "faulty/log-bytes").and_then(|n| n.parse().ok()) {
            log(Level::Info, &"x".repeat(bytes));
        }
        if let Some(n) = annotation(&object, "faulty/log-lines").and_then(|n| n.parse::<u32>().ok())
        {
            for i in 1..=n {
                log(Level::Info, &format!("line {i} of {n}"));
            }
        }
        if let Some(message) = annotation(&object, "faulty/error") {
            return Err(message.to_string());
        }
        if let Some(n) =
            annotation(&object, "faulty/fail-attempts").and_then(|n| n.parse::<u32>().ok())
            && event.attempt <= n
        {
            return Err(format!("failing attempt {} of {n}", event.attempt));
        }
        if let Some(name) = annotation(&object, "faulty/metric") {
            metrics::gauge(name, 1.0, &[])?;
        }
        if let Some(resource) = annotation(&object, "faulty/read") {
            cache::list(resource, None)?;
        }
        if let Some(index) = annotation(&object, "faulty/index") {
            let kind = object["kind"].as_str().unwrap_or_default();
            cache::list_by_index(kind, index, "x")?;
        }
        if let Some((key, value)) =
            annotation(&object, "faulty/label").and_then(|l| l.split_once('='))
        {
            let meta = &object["metadata"];
            let kind = object["kind"].as_str().unwrap_or_default();
            let name = meta["name"].as_str().unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
            kube::merge_patch(kind, meta["namespace"].as_str(), name, &patch)?;
        }
        if annotation(&object, "faulty/trap") == Some("true") {
            panic!("faulty plugin asked to trap");
        }
        if annotation(&object, "faulty/loop") == Some("true") {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        if let Some(mib) =
            annotation(&object, "faulty/allocate-mib").and_then(|n| n.parse::<usize>().ok())
        {
            let block = vec![1u8; mib << 20];
            log(
                Level::Info,
                &format!("allocated {} bytes", std::hint::black_box(block).len()),
            );
        }
        let meta = &object["metadata"];
        let kind = match event.kind {
            EventKind::Added => "added",
            EventKind::Updated => "updated",
            EventKind::Deleted => "deleted",
            EventKind::Sync => "sync",
        };
        log(
            Level::Info,
            &format!(
                "handled {kind} {}/{} rv={} attempt={}",
                meta["namespace"].as_str().unwrap_or_default(),
                meta["name"].as_str().unwrap_or_default(),
                meta["resourceVersion"].as_str().unwrap_or_default(),
                event.attempt
            ),
        );
        if let Some(ms) =
            annotation(&object, "faulty/requeue-ms").and_then(|n| n.parse::<u64>().ok())
            && event.attempt == 1
            && event.kind != EventKind::Deleted
        {
            return Ok(Outcome::RequeueAfter(ms));
        }
        Ok(Outcome::Done)
    }
}

export_handler!(Faulty);
