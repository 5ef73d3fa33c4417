//! Makes sure every object it sees carries a label: an object without the label named in the
//! handler's config gets it, with the configured value, through a JSON merge patch. Objects
//! that have the label (with any value) are left alone, so the plugin's own patch, which
//! comes back as an update, causes no further write.
//!
//! ```yaml
//! handlers:
//!   label-guard:
//!     config: {label: owner, value: unknown}
//!     capabilities:
//!       configmaps: [patch]
//! ```
//!
//! The object is patched through the resource named by its kind, so the handler's routes
//! must watch that resource and its capabilities must grant `patch` on it.
//!
//! Options besides `label` and `value`:
//!
//! - `"method": "apply"` writes the label with a server-side apply instead (the handler's
//!   field manager then owns just that label); needs `apply`;
//! - `"event": true` also records a Normal Event `LabelAdded` about the object; needs
//!   `event`.

use std::sync::OnceLock;

use serde_json::{Value, json};
use switchyard_sdk::{Event, EventKind, Handler, Level, Outcome, export_handler, kube, log};

/// The label to guarantee, the value to give it, and how.
struct Settings {
    label: String,
    value: String,
    apply: bool,
    event: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

struct LabelGuard;

impl Handler for LabelGuard {
    fn init(config: String) -> Result<(), String> {
        let config: Value =
            serde_json::from_str(&config).map_err(|e| format!("config is not JSON: {e}"))?;
        let text = |key: &str| config[key].as_str().map(str::to_string);
        let (Some(label), Some(value)) = (text("label"), text("value")) else {
            return Err(r#"config needs {"label": "NAME", "value": "VALUE"}"#.into());
        };
        let apply = match config["method"].as_str() {
            None | Some("patch") => false,
            Some("apply") => true,
            Some(other) => return Err(format!("method {other:?} must be patch or apply")),
        };
        let event = config["event"].as_bool().unwrap_or(false);
        // One instance per event: init runs once per instance, so this is set once.
        let _ = SETTINGS.set(Settings {
            label,
            value,
            apply,
            event,
        });
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        if event.kind == EventKind::Deleted {
            return Ok(Outcome::Done);
        }
        let settings = SETTINGS.get().ok_or("init did not run")?;
        let object: Value =
            serde_json::from_str(&event.object).map_err(|e| format!("object is not JSON: {e}"))?;
        let meta = &object["metadata"];
        if meta["labels"].get(&settings.label).is_some() || meta["deletionTimestamp"].is_string() {
            return Ok(Outcome::Done);
        }
        let kind = object["kind"].as_str().ok_or("object has no kind")?;
        let name = meta["name"].as_str().ok_or("object has no name")?;
        let namespace = meta["namespace"].as_str();
        let labels = json!({"metadata": {"labels": {&settings.label: &settings.value}}});
        if settings.apply {
            kube::apply(kind, namespace, name, &labels)?;
        } else {
            kube::merge_patch(kind, namespace, name, &labels)?;
        }
        if settings.event {
            kube::event(
                &object,
                kube::EventType::Normal,
                "LabelAdded",
                &format!("added the label {}={}", settings.label, settings.value),
            )?;
        }
        log(
            Level::Info,
            &format!(
                "labelled {kind} {}{name} {}={}",
                namespace.map(|ns| format!("{ns}/")).unwrap_or_default(),
                settings.label,
                settings.value
            ),
        );
        Ok(Outcome::Done)
    }
}

export_handler!(LabelGuard);

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use serde_json::{Value, json};
    use switchyard_sdk::testing::{TestHost, Write, event, updated};
    use switchyard_sdk::{EventKind, Outcome};

    use super::LabelGuard;

    fn configmap(labels: Value) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default", "labels": labels}})
    }

    fn host() -> TestHost {
        TestHost::new()
            .config(json!({"label": "owner", "value": "unknown"}))
            .object("configmaps", configmap(json!({})))
    }

    #[test]
    fn an_object_without_the_label_is_patched_once() {
        let report = host().handle::<LabelGuard>(event(EventKind::Added, configmap(json!({}))));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert_eq!(
            report.writes,
            [Write::MergePatch {
                resource: "ConfigMap".into(),
                namespace: Some("default".into()),
                name: "settings".into(),
                patch: json!({"metadata": {"labels": {"owner": "unknown"}}}),
            }]
        );
        assert_eq!(
            report.lines(),
            ["labelled ConfigMap default/settings owner=unknown"]
        );
    }

    #[test]
    fn the_plugin_s_own_update_and_deletions_write_nothing() {
        let labelled = configmap(json!({"owner": "unknown"}));
        let report = host().handle::<LabelGuard>(updated(configmap(json!({})), labelled.clone()));
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
        let report = host().handle::<LabelGuard>(event(EventKind::Deleted, configmap(json!({}))));
        assert_eq!((report.outcome, report.writes), (Ok(Outcome::Done), vec![]));
    }

    #[test]
    fn a_refused_patch_is_an_error_for_the_daemon_to_retry() {
        let report = host()
            .fail_writes("patch on configmaps is not granted")
            .handle::<LabelGuard>(event(EventKind::Added, configmap(json!({}))));
        assert_eq!(
            report.outcome,
            Err("patch on configmaps is not granted".into())
        );
        assert!(report.logs.is_empty());
    }
}
