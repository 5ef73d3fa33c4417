//! The problems validation finds, each placed at the line and column of the value or key it
//! is about, and the reading of a part of the document into its schema type.

use std::fmt;
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::names::nearest;
use crate::config::ConfigError;
use crate::config::document::{Document, Place, join};

/// The problems found so far.
pub(in crate::config) struct Errors<'a> {
    file: PathBuf,
    document: &'a Document,
    found: Vec<ConfigError>,
}

impl<'a> Errors<'a> {
    /// No problems yet, in `document` read from `file`.
    pub(super) fn new(file: PathBuf, document: &'a Document) -> Self {
        Self {
            file,
            document,
            found: Vec::new(),
        }
    }

    /// How many problems were found so far.
    pub(in crate::config) fn count(&self) -> usize {
        self.found.len()
    }

    /// The problems, in file order (those without a place last).
    pub(super) fn into_sorted(self) -> Vec<ConfigError> {
        let mut found = self.found;
        found.sort_by_key(|e| (e.line == 0, e.line, e.column));
        found
    }

    /// A problem with the value at `path`.
    pub(in crate::config) fn at(&mut self, path: impl Into<String>, message: impl fmt::Display) {
        let path = path.into();
        let place = self.document.value_place(&path);
        self.push(place, path, message.to_string());
    }

    /// A problem with the key of the entry at `path` (a name, or a field that must not be
    /// there).
    pub(in crate::config) fn at_key(
        &mut self,
        path: impl Into<String>,
        message: impl fmt::Display,
    ) {
        let path = path.into();
        let place = self.document.key_place(&path);
        self.push(place, path, message.to_string());
    }

    fn push(&mut self, place: Place, path: String, message: String) {
        self.found.push(ConfigError {
            file: self.file.clone(),
            line: place.line,
            column: place.column,
            path,
            message,
        });
    }

    /// Reads the value at `path` into `T`, or records why it cannot be (with the place of
    /// the offending value or key inside it).
    pub(super) fn read<T: DeserializeOwned>(&mut self, path: &str, value: &Value) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(read) => Some(read),
            Err(e) => {
                let mut at = path.to_string();
                for segment in e.path().iter() {
                    match segment {
                        serde_path_to_error::Segment::Seq { index } => {
                            at.push_str(&format!("[{index}]"));
                        }
                        serde_path_to_error::Segment::Map { key } => at = join(&at, key),
                        _ => {}
                    }
                }
                let message = first_line(&e.inner().to_string());
                match unknown_field(&message) {
                    Some(field) => {
                        // The path may or may not already name the unknown field.
                        let field_path = if at.ends_with(&format!(".{field}")) || at == field {
                            at
                        } else {
                            join(&at, field)
                        };
                        self.at_key(field_path, message);
                    }
                    None => self.at(at, message),
                }
                None
            }
        }
    }
}

/// The parser's message, without what the error line already says (the word "error" and
/// the location) and with the nearest valid name for an unknown field.
pub(super) fn first_line(message: &str) -> String {
    let mut text = message.lines().next().unwrap_or_default().trim();
    text = text.strip_prefix("error:").unwrap_or(text).trim();
    if let Some(rest) = text.strip_prefix("line ")
        && let Some((_, after)) = rest.split_once(": ")
    {
        text = after;
    }
    let mut text = text.to_string();
    if let Some(hint) = unknown_field_hint(&text) {
        text.push_str(&hint);
    }
    text
}

/// For serde's "unknown field `x`, expected one of a, b, c": the field.
fn unknown_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")?
        .split_once('`')
        .map(|(field, _)| field)
}

/// For serde's "unknown field `x`, expected one of a, b, c": "; did you mean `b`?".
fn unknown_field_hint(message: &str) -> Option<String> {
    let field = unknown_field(message)?;
    let rest = message.split_once(&format!("`{field}`"))?.1;
    let expected = rest
        .split_once("expected one of ")
        .map(|(_, list)| list)
        .or_else(|| rest.split_once("expected ").map(|(_, one)| one))?;
    let candidates: Vec<&str> = expected
        .split(',')
        .map(|c| c.trim().trim_matches('`'))
        .filter(|c| !c.is_empty())
        .collect();
    nearest(field, &candidates).map(|near| format!("; did you mean `{near}`?"))
}
