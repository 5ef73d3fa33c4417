//! The problems validation finds, each placed at the line and column of the value or key it
//! is about, and the reading of a part of the document into its schema type.

use std::borrow::Cow;
use std::collections::HashSet;
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
    /// Probable mistakes that `run` accepts (`check` shows them as warnings).
    warned: Vec<ConfigError>,
    /// The paths of values that could not be read and were left out of what was read.
    unreadable: HashSet<String>,
    /// The sequence items left out, as (the sequence's path, the item's index), both as
    /// in the file: what was read has its later items at lower indices.
    removed: Taken,
}

impl<'a> Errors<'a> {
    /// No problems yet, in `document` read from `file`.
    pub(super) fn new(file: PathBuf, document: &'a Document) -> Self {
        Self {
            file,
            document,
            found: Vec::new(),
            warned: Vec::new(),
            unreadable: HashSet::new(),
            removed: Taken::default(),
        }
    }

    /// How many problems were found so far.
    pub(in crate::config) fn count(&self) -> usize {
        self.found.len()
    }

    /// The problems, then the warnings, each in file order (those without a place last).
    pub(super) fn into_sorted(self) -> (Vec<ConfigError>, Vec<ConfigError>) {
        let sorted = |mut found: Vec<ConfigError>| {
            found.sort_by_key(|e| (e.line == 0, e.line, e.column));
            found
        };
        (sorted(self.found), sorted(self.warned))
    }

    /// Whether the value at `path`, or a part of it, could not be read (it was reported,
    /// and left out): a check that would miss it stays quiet rather than report a mistake
    /// that is not there.
    pub(in crate::config) fn unreadable(&self, path: &str) -> bool {
        let path = &self.in_file(path);
        self.unreadable.iter().any(|taken| {
            taken == path
                || taken
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }

    /// Whether the value at `path` itself could not be read and was left out whole.
    pub(in crate::config) fn left_out(&self, path: &str) -> bool {
        self.unreadable.contains(&self.in_file(path))
    }

    /// The path in the file of what is at `path` in what was read (a sequence with an item
    /// left out has its later items one lower).
    fn in_file(&self, path: &str) -> String {
        if self.removed.items.is_empty() {
            return path.to_string();
        }
        let mut out = String::with_capacity(path.len());
        let mut rest = path;
        while let Some(open) = rest.find('[') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let index = after
                .find(']')
                .and_then(|close| Some((after[..close].parse::<usize>().ok()?, close)));
            match index {
                Some((index, close)) => {
                    let index = self.removed.original_index(&out, index);
                    out.push_str(&format!("[{index}]"));
                    rest = &after[close + 1..];
                }
                None => {
                    out.push('[');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// A probable mistake `run` accepts, with the value at `path`.
    pub(in crate::config) fn warn_at(
        &mut self,
        path: impl Into<String>,
        message: impl fmt::Display,
    ) {
        let path = self.in_file(&path.into());
        let place = self.document.value_place(&path);
        self.warned.push(ConfigError {
            file: self.file.clone(),
            line: place.line,
            column: place.column,
            path,
            message: message.to_string(),
        });
    }

    /// A problem with the value at `path`.
    pub(in crate::config) fn at(&mut self, path: impl Into<String>, message: impl fmt::Display) {
        let path = self.in_file(&path.into());
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
        let path = self.in_file(&path.into());
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

    /// Reads the value at `path` into `T`, recording every reason it cannot be, each at the
    /// place of the offending value or key inside it: after each mistake the offending part
    /// is taken out and the rest read again, so a mapping with four wrong fields reports
    /// four problems. What is left once the rest reads is returned, so the checks that
    /// follow (the names it refers to, the resource it watches) find their mistakes in the
    /// same run; the parts taken out are [`Errors::unreadable`]. `None` when nothing
    /// readable is left (a required field is missing or wrong).
    pub(super) fn read<T: DeserializeOwned>(&mut self, path: &str, value: &Value) -> Option<T> {
        let mut value = Cow::Borrowed(value);
        let mut taken = Taken::default();
        for _ in 0..MAX_PROBLEMS_PER_ITEM {
            let e = match serde_path_to_error::deserialize::<_, T>(value.as_ref()) {
                Ok(read) => {
                    self.unreadable.extend(taken.keys);
                    self.unreadable
                        .extend(taken.items.iter().map(|(at, i)| format!("{at}[{i}]")));
                    self.removed.items.extend(taken.items);
                    return Some(read);
                }
                Err(e) => e,
            };
            let message = first_line(&e.inner().to_string());
            let (mut steps, exact) = steps_of(e.path());
            let unknown = unknown_field(&message);
            if let Some(field) = unknown
                && !matches!(steps.last(), Some(Step::Key(k)) if k == field)
            {
                steps.push(Step::Key(field.to_string()));
            }
            let at = taken.original_path(path, &steps);
            if let Some(meant) = suggested_field(&message) {
                // A misspelt field is not also missing.
                taken.keys.insert(join(parent_of(&at), meant));
            }
            // A required field taken out after its own mistake is not missing again: the
            // mapping that needs it is taken out too, silently.
            let reported =
                missing_field(&message).is_some_and(|f| taken.keys.contains(&join(&at, f)));
            if !reported {
                match unknown {
                    Some(_) => self.at_key(at, message),
                    None => self.at(at, message),
                }
            }
            if !exact || !taken.take(path, value.to_mut(), &steps) {
                break;
            }
        }
        None
    }
}

/// The most problems reported inside one item (a handler, a route); past them the item is
/// left at that.
const MAX_PROBLEMS_PER_ITEM: usize = 50;

/// One step from a value to a part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// The value of a mapping key.
    Key(String),
    /// An item of a sequence.
    Index(usize),
}

/// The steps of an error's path, and whether they are all there is to it (a path through
/// an enum or a non-text key cannot be followed back into the value).
fn steps_of(path: &serde_path_to_error::Path) -> (Vec<Step>, bool) {
    let mut exact = true;
    let steps = path
        .iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
            _ => {
                exact = false;
                None
            }
        })
        .collect();
    (steps, exact)
}

/// The parts of a value taken out so far, by their paths in the file.
#[derive(Default)]
struct Taken {
    /// Mapping entries.
    keys: HashSet<String>,
    /// Sequence items: the sequence's path and the item's index in the file.
    items: Vec<(String, usize)>,
}

impl Taken {
    /// The path in the file of the part `steps` lead to in what is left of the value.
    fn original_path(&self, root: &str, steps: &[Step]) -> String {
        let mut at = root.to_string();
        for step in steps {
            match step {
                Step::Key(key) => at = join(&at, key),
                Step::Index(index) => {
                    let index = self.original_index(&at, *index);
                    at.push_str(&format!("[{index}]"));
                }
            }
        }
        at
    }

    /// The index in the file of what is now item `index` of the sequence at `sequence`.
    fn original_index(&self, sequence: &str, index: usize) -> usize {
        let mut gone: Vec<usize> = self
            .items
            .iter()
            .filter(|(at, _)| at == sequence)
            .map(|(_, i)| *i)
            .collect();
        gone.sort_unstable();
        gone.into_iter()
            .fold(index, |index, i| if i <= index { index + 1 } else { index })
    }

    /// Takes the part `steps` lead to out of `value`; false if there is no such part.
    fn take(&mut self, root: &str, value: &mut Value, steps: &[Step]) -> bool {
        let Some((last, parents)) = steps.split_last() else {
            return false;
        };
        let mut parent = &mut *value;
        for step in parents {
            let next = match (step, parent) {
                (Step::Key(key), Value::Object(map)) => map.get_mut(key),
                (Step::Index(i), Value::Array(items)) => items.get_mut(*i),
                _ => None,
            };
            match next {
                Some(next) => parent = next,
                None => return false,
            }
        }
        let at = self.original_path(root, parents);
        match (last, parent) {
            (Step::Key(key), Value::Object(map)) => {
                let taken = map.remove(key).is_some();
                self.keys.insert(join(&at, key));
                taken
            }
            (Step::Index(i), Value::Array(items)) if *i < items.len() => {
                let original = self.original_index(&at, *i);
                items.remove(*i);
                self.items.push((at, original));
                true
            }
            _ => false,
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
    let mut text = plain_types(text);
    if let Some(hint) = unknown_field_hint(&text) {
        text.push_str(&hint);
    }
    text
}

/// The parser's message with Rust's names of number types (`expected usize`) said as a
/// config's reader says them.
fn plain_types(message: &str) -> String {
    let Some((before, expected)) = message.rsplit_once("expected ") else {
        return message.to_string();
    };
    let plain = match expected {
        "usize" | "u64" => "a whole number, 0 or more",
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        _ => return message.to_string(),
    };
    format!("{before}expected {plain}")
}

/// For a message ending "; did you mean `x`?": the field.
fn suggested_field(message: &str) -> Option<&str> {
    message
        .rsplit_once("; did you mean `")?
        .1
        .strip_suffix("`?")
}

/// The path of the mapping a field at `path` is in (`routes[0].handler` → `routes[0]`).
fn parent_of(path: &str) -> &str {
    path.rfind('.').map_or("", |cut| &path[..cut])
}

/// For serde's "missing field `x`": the field.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split_once('`')
        .map(|(field, _)| field)
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
