//! {{name}}: a switchyard handler. Logs one line per event: the kind of change, the
//! object's kind and namespace/name.

use serde_json::Value;
use switchyard_sdk::{Event, EventKind, Handler, Level, Outcome, export_handler, log};

struct Plugin;

impl Handler for Plugin {
    fn handle(event: Event) -> Result<Outcome, String> {
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
        log(Level::Info, &format!("{change} {kind} {key}"));
        Ok(Outcome::Done)
    }
}

export_handler!(Plugin);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::json;
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
}
