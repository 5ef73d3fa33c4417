//! Logs one line per event: the kind of change, the object's kind, namespace/name and
//! resourceVersion, and for ConfigMaps the data keys.

use serde_json::Value;
use switchyard_sdk::{Event, EventKind, Handler, Level, Outcome, export_handler, log};

struct LogEvents;

impl Handler for LogEvents {
    fn handle(event: Event) -> Result<Outcome, String> {
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("object is not JSON: {e}"))?;
        let kind = match event.kind {
            EventKind::Added => "added",
            EventKind::Updated => "updated",
            EventKind::Deleted if event.final_state_unknown => "deleted (final state unknown)",
            EventKind::Deleted => "deleted",
            EventKind::Sync => "sync",
        };
        let meta = &object["metadata"];
        let name = meta["name"].as_str().unwrap_or("?");
        let key = match meta["namespace"].as_str() {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        let mut line = format!(
            "{kind} {} {key} rv={} route={}",
            object["kind"].as_str().unwrap_or("?"),
            meta["resourceVersion"].as_str().unwrap_or("?"),
            event.route,
        );
        if let Some(data) = object["data"].as_object() {
            let keys: Vec<&str> = data.keys().map(String::as_str).collect();
            line.push_str(&format!(" data=[{}]", keys.join(",")));
        }
        if event.attempt > 1 {
            line.push_str(&format!(" attempt={}", event.attempt));
        }
        log(Level::Info, &line);
        Ok(Outcome::Done)
    }
}

export_handler!(LogEvents);
