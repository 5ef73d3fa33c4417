//! The alert for one change, as Alertmanager's API v2 takes it (`postableAlert`): labels
//! (which name the alert), annotations, `startsAt`, `endsAt` on a deletion (the alert is
//! resolved), and `generatorURL`.
//!
//! The default labels name the object the change is about: for a core v1 Event, the
//! object it is about (`involvedObject`), `alertname` its `reason` and `severity`
//! `warning` or `info` from its `type`; for any other object, the object itself and
//! `alertname` its kind. Configured label templates are laid over them; a label whose value
//! comes out empty is left out (Alertmanager drops it anyway).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use switchyard_sdk::sink::cut;
use switchyard_sdk::template;

/// The longest label value sent (longer ones are cut, ending in `…`): a label is part of
/// the alert's identity and of every notification's grouping key.
pub const MAX_LABEL: usize = 1024;

/// The longest annotation value sent (longer ones are cut, ending in `…`).
pub const MAX_ANNOTATION: usize = 16 * 1024;

/// The templates a config gives, checked.
#[derive(Debug, Default)]
pub struct Templates {
    /// Label name to template.
    pub labels: BTreeMap<String, String>,
    /// Annotation name to template.
    pub annotations: BTreeMap<String, String>,
    /// The `generatorURL` template.
    pub generator_url: Option<String>,
}

impl Templates {
    /// Checks every template and label name; `Err` names the key at fault.
    pub fn check(&self) -> Result<(), String> {
        for (name, text) in &self.labels {
            if !is_label_name(name) {
                return Err(format!(
                    "config.labels: {name:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)"
                ));
            }
            template::check(&json!(text), &format!("config.labels.{name}"))?;
        }
        for (name, text) in &self.annotations {
            template::check(&json!(text), &format!("config.annotations.{name}"))?;
        }
        if let Some(text) = &self.generator_url {
            template::check(&json!(text), "config.generator_url")?;
        }
        Ok(())
    }
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The text a template gives for `event` (a value not a string as its JSON).
fn render(text: &str, event: &Value) -> String {
    match template::fill(&json!(text), event) {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The alert for `event` (as `switchyard_sdk::sink::event_json` gives it); `ends_at` is
/// set for a deletion.
pub fn build(event: &Value, templates: &Templates, ends_at: Option<&str>) -> Value {
    let object = &event["object"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let is_event = text(&object["kind"]) == "Event" && object["involvedObject"].is_object();
    let subject = if is_event {
        &object["involvedObject"]
    } else {
        object
    };
    let meta = if is_event {
        subject
    } else {
        &subject["metadata"]
    };
    let (kind, namespace, name) = (
        text(&subject["kind"]),
        text(&meta["namespace"]),
        text(&meta["name"]),
    );
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let path = if namespace.is_empty() {
        name.clone()
    } else {
        format!("{namespace}/{name}")
    };
    if is_event {
        let event_type = text(&object["type"]);
        let reason = text(&object["reason"]);
        labels.insert("alertname", reason.clone());
        let severity = if event_type == "Warning" {
            "warning"
        } else {
            "info"
        };
        labels.insert("severity", severity.to_string());
        annotations.insert("summary", format!("{event_type} {reason} on {kind} {path}"));
        annotations.insert("description", text(&object["message"]));
    } else {
        labels.insert("alertname", kind.clone());
        let change = text(&event["kind"]);
        annotations.insert("summary", format!("{kind} {path} was {change}"));
    }
    labels.insert("kind", kind);
    labels.insert("namespace", namespace);
    labels.insert("name", name);
    let mut labels: BTreeMap<String, String> = labels
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut annotations: BTreeMap<String, String> = annotations
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (name, text) in &templates.labels {
        labels.insert(name.clone(), render(text, event));
    }
    for (name, text) in &templates.annotations {
        annotations.insert(name.clone(), render(text, event));
    }
    let strings = |map: BTreeMap<String, String>, max: usize| -> Map<String, Value> {
        map.into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k, json!(cut(&v, max))))
            .collect()
    };
    let mut alert = json!({
        "labels": strings(labels, MAX_LABEL),
        "annotations": strings(annotations, MAX_ANNOTATION),
    });
    if let Some(at) = starts_at(object, is_event) {
        alert["startsAt"] = json!(at);
    }
    if let Some(at) = ends_at {
        alert["endsAt"] = json!(at);
    }
    if let Some(url) = &templates.generator_url {
        alert["generatorURL"] = json!(render(url, event));
    }
    alert
}

/// When the alert started: an Event's `eventTime` or `firstTimestamp`, another object's
/// `creationTimestamp`; none (Alertmanager takes the time it gets the alert) without one.
fn starts_at(object: &Value, is_event: bool) -> Option<String> {
    let candidates: &[&str] = if is_event {
        &["/eventTime", "/firstTimestamp", "/lastTimestamp"]
    } else {
        &["/metadata/creationTimestamp"]
    };
    candidates
        .iter()
        .filter_map(|p| object.pointer(p)?.as_str())
        .find(|t| !t.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning() -> Value {
        json!({"kind": "added", "object": {
            "kind": "Event", "type": "Warning", "reason": "BackOff",
            "message": "Back-off restarting failed container",
            "firstTimestamp": "2026-11-27T10:00:00Z",
            "metadata": {"name": "web-1.1", "namespace": "shop"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"}}})
    }

    #[test]
    fn an_event_is_an_alert_about_its_object_named_by_its_reason() {
        let alert = build(&warning(), &Templates::default(), None);
        assert_eq!(
            alert,
            json!({
                "labels": {"alertname": "BackOff", "severity": "warning", "kind": "Pod",
                           "namespace": "shop", "name": "web-1"},
                "annotations": {"summary": "Warning BackOff on Pod shop/web-1",
                                "description": "Back-off restarting failed container"},
                "startsAt": "2026-11-27T10:00:00Z",
            })
        );
    }

    #[test]
    fn templates_add_and_replace_labels_and_an_empty_one_is_left_out() {
        let templates = Templates {
            labels: BTreeMap::from([
                ("alertname".into(), "Pod{{object.reason}}".into()),
                ("team".into(), "{{object.metadata.labels.team}}".into()),
                ("cluster".into(), "prod".into()),
            ]),
            annotations: BTreeMap::from([("runbook".into(), "https://r/{{kind}}".into())]),
            generator_url: Some("https://k8s/{{object.metadata.name}}".into()),
        };
        templates.check().unwrap();
        let alert = build(&warning(), &templates, Some("2026-11-27T11:00:00.000Z"));
        assert_eq!(alert["labels"]["alertname"], "PodBackOff");
        assert_eq!(alert["labels"]["cluster"], "prod");
        assert!(alert["labels"].get("team").is_none(), "{alert}");
        assert_eq!(alert["annotations"]["runbook"], "https://r/added");
        assert_eq!(alert["generatorURL"], "https://k8s/web-1.1");
        assert_eq!(alert["endsAt"], "2026-11-27T11:00:00.000Z");
    }

    #[test]
    fn another_object_is_named_by_its_kind_and_long_values_are_cut() {
        let event = json!({"kind": "deleted", "object": {"kind": "Node",
            "metadata": {"name": "n".repeat(5000), "creationTimestamp": "2026-01-01T00:00:00Z"}}});
        let alert = build(&event, &Templates::default(), None);
        assert_eq!(alert["labels"]["alertname"], "Node");
        assert!(alert["labels"].get("namespace").is_none());
        let name = alert["labels"]["name"].as_str().unwrap();
        assert_eq!(name.chars().count(), MAX_LABEL);
        assert!(name.ends_with('…'));
        assert_eq!(alert["startsAt"], "2026-01-01T00:00:00Z");
    }

    #[test]
    fn a_bad_label_name_or_template_is_refused_naming_it() {
        let bad = |labels: &[(&str, &str)]| {
            Templates {
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Templates::default()
            }
            .check()
            .unwrap_err()
        };
        assert!(bad(&[("team-name", "x")]).contains("\"team-name\" is not a label name"));
        assert!(bad(&[("1a", "x")]).contains("\"1a\""));
        assert!(bad(&[("team", "{{object")]).starts_with("config.labels.team:"));
    }
}
