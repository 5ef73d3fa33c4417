//! The events file: one JSON object a line, each an event as a route delivered it to its
//! handler: `route`, `handler`, `kind` (`added`, `updated`, `deleted`, `sync`), `object`,
//! and `old_object` for updates when known.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::handler::ChangeKind;

/// The kind of change of a recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordedKind {
    /// The object appeared.
    Added,
    /// The object changed.
    Updated,
    /// The object went away.
    Deleted,
    /// A periodic resync.
    Sync,
}

impl From<ChangeKind> for RecordedKind {
    fn from(kind: ChangeKind) -> Self {
        match kind {
            ChangeKind::Added => Self::Added,
            ChangeKind::Updated => Self::Updated,
            ChangeKind::Deleted => Self::Deleted,
            ChangeKind::Sync => Self::Sync,
        }
    }
}

/// One line of an events file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedEvent {
    /// The route that delivered the event.
    pub route: String,
    /// The handler the route feeds.
    pub handler: String,
    /// The kind of change.
    pub kind: RecordedKind,
    /// The object (for deletions, its last known state).
    pub object: Value,
    /// The state before, for updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// For deletions inferred from a relist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub final_state_unknown: bool,
}

impl RecordedEvent {
    /// `namespace/name` (or `name`) of the event's object.
    pub fn object_name(&self) -> String {
        let meta = |field: &str| {
            self.object
                .get("metadata")
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
        };
        let name = meta("name").unwrap_or("(unnamed)");
        match meta("namespace") {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }
}

/// An events file that cannot be read, or a line that is not an event.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an event.
    #[error("{path}:{line}: not an event: {reason}")]
    Line {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// The events of the file at `path` with their line numbers; blank lines are skipped.
pub fn read_events(path: &Path) -> Result<Vec<(usize, RecordedEvent)>, EventsError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| EventsError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_events(&shown, &text)
}

/// The events of `text` (from the file `path`) with their line numbers.
pub fn parse_events(path: &str, text: &str) -> Result<Vec<(usize, RecordedEvent)>, EventsError> {
    let mut events = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: RecordedEvent = serde_json::from_str(line).map_err(|e| {
            // The parser's place is within the line: its line is always 1.
            let message = e.to_string();
            let reason = message
                .rsplit_once(" at line ")
                .map_or(&*message, |(r, _)| r);
            EventsError::Line {
                path: path.to_string(),
                line: index + 1,
                reason: format!("{reason} (column {})", e.column()),
            }
        })?;
        if !event.object.is_object() {
            return Err(EventsError::Line {
                path: path.to_string(),
                line: index + 1,
                reason: "`object` must be a JSON object".into(),
            });
        }
        events.push((index + 1, event));
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_named_by_number() {
        let good =
            r#"{"route":"r","handler":"h","kind":"added","object":{"metadata":{"name":"a"}}}"#;
        let text = format!("{good}\n\n{{\"route\": 1}}\n");
        let error = parse_events("e.jsonl", &text).unwrap_err().to_string();
        assert_eq!(
            error,
            "e.jsonl:3: not an event: invalid type: integer `1`, expected a string (column 11)"
        );
        let events = parse_events("e.jsonl", good).unwrap();
        assert_eq!(events[0].0, 1);
        assert_eq!(events[0].1.kind, RecordedKind::Added);
        assert_eq!(events[0].1.object_name(), "a");
    }
}
