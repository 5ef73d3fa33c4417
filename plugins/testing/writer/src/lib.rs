//! For each event on a ConfigMap, applies the ConfigMap `copy-NAME` into the namespace the
//! config's `"namespace"` names (the event's own when absent), as a team's handler might
//! write beyond its namespace: the tenancy tests show the API server refusing what the
//! team's ServiceAccount may not do. A refused write fails the call, with the API server's
//! message.

use std::cell::RefCell;

use serde_json::{Value, json};
use switchyard_sdk::{Event, EventKind, Handler, Outcome, export_handler, kube};

thread_local! {
    static TARGET: RefCell<Option<String>> = const { RefCell::new(None) };
}

struct Writer;

impl Handler for Writer {
    fn init(config: String) -> Result<(), String> {
        let config: Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let target = config["namespace"].as_str().map(String::from);
        TARGET.with(|t| *t.borrow_mut() = target);
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        if event.kind == EventKind::Deleted {
            return Ok(Outcome::Done);
        }
        let object: Value = serde_json::from_str(&event.object).map_err(|e| e.to_string())?;
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if name.starts_with("copy-") {
            return Ok(Outcome::Done);
        }
        let own = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let target = TARGET
            .with(|t| t.borrow().clone())
            .unwrap_or_else(|| own.to_string());
        let copy = json!({"data": {"from": format!("{own}/{name}")}});
        kube::apply("configmaps", Some(&target), &format!("copy-{name}"), &copy)?;
        Ok(Outcome::Done)
    }
}

export_handler!(Writer);
