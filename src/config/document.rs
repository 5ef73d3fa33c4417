//! A YAML document read once into plain JSON values, with the line and column of every value
//! and every mapping key, by path (`routes[2].handler`). Each part of a config is then
//! checked on its own, so one wrong value does not hide the mistakes after it.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

use super::limits;

/// A place in the file: 1-based line and column; 0 and 0 when unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

/// A parsed document and where its parts are.
#[derive(Debug, Default)]
pub struct Document {
    /// The whole document as JSON.
    pub root: Value,
    values: HashMap<String, Place>,
    keys: HashMap<String, Place>,
}

/// Why the text is not YAML, and where.
#[derive(Debug)]
pub struct SyntaxError {
    /// Where the parser stopped.
    pub place: Place,
    /// The parser's message.
    pub message: String,
}

impl Document {
    /// Parses `text`. Only YAML syntax errors fail here; types are checked later.
    pub fn parse(text: &str) -> Result<Self, SyntaxError> {
        if text.trim().is_empty() {
            return Ok(Self {
                root: Value::Object(Default::default()),
                ..Self::default()
            });
        }
        let tree: Spanned<Tree> = serde_saphyr::from_str_with_options(text, parse_options())
            .map_err(|e| SyntaxError {
                place: e
                    .location()
                    .map(|l| Place {
                        line: l.line(),
                        column: l.column(),
                    })
                    .unwrap_or_default(),
                message: too_complex(&e).unwrap_or_else(|| e.to_string()),
            })?;
        let mut document = Self::default();
        document.root = document.record(String::new(), tree);
        Ok(document)
    }

    fn record(&mut self, path: String, tree: Spanned<Tree>) -> Value {
        self.values.insert(path.clone(), place_of(&tree));
        match tree.value {
            Tree::Scalar(value) => value,
            Tree::Seq(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| self.record(format!("{path}[{i}]"), item))
                    .collect(),
            ),
            Tree::Map(entries) => {
                let mut object = serde_json::Map::new();
                for (key, value) in entries {
                    let child = join(&path, &key.value);
                    self.keys.insert(child.clone(), place_of(&key));
                    let value = self.record(child, value);
                    object.insert(key.value, value);
                }
                Value::Object(object)
            }
        }
    }

    /// Where the value at `path` is, or else the nearest enclosing value that has a place.
    pub fn value_place(&self, path: &str) -> Place {
        let mut path = path;
        loop {
            if let Some(place) = self.values.get(path) {
                return *place;
            }
            match parent(path) {
                Some(up) => path = up,
                None => return Place::default(),
            }
        }
    }

    /// Where the key of the mapping entry at `path` is, or else where its value is.
    pub fn key_place(&self, path: &str) -> Place {
        self.keys
            .get(path)
            .copied()
            .unwrap_or_else(|| self.value_place(path))
    }
}

/// How a config is parsed: YAML 1.2 booleans only (`y`, `no` or `on` stay text, as a typed
/// parse would read them into a string field), and a budget that refuses a document no
/// config needs (deep nesting, aliases that expand to a flood of values) before it costs
/// more than a moment of CPU. See [`super::limits`].
fn parse_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = limits::MAX_YAML_DEPTH;
    budget.max_nodes = limits::MAX_YAML_NODES;
    budget.max_events = 2 * limits::MAX_YAML_NODES;
    budget.max_aliases = limits::MAX_YAML_ALIASES;
    budget.max_anchors = limits::MAX_YAML_ALIASES;
    budget.max_merge_keys = limits::MAX_YAML_ALIASES;
    budget.max_documents = 1;
    budget.max_total_scalar_bytes = limits::MAX_CONFIG_BYTES;
    budget.max_recorded_anchor_events = limits::MAX_YAML_ALIAS_EXPANSION;
    budget.max_recorded_anchor_bytes = limits::MAX_CONFIG_BYTES;
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = limits::MAX_YAML_ALIAS_EXPANSION;
    options.alias_limits.max_replay_stack_depth = limits::MAX_YAML_DEPTH;
    options
}

/// A clear message for a document refused by the budget of [`parse_options`].
fn too_complex(error: &serde_saphyr::Error) -> Option<String> {
    use serde_saphyr::budget::BudgetBreach;
    let what = match original(error) {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            BudgetBreach::Depth { .. } => {
                format!("it nests deeper than {} levels", limits::MAX_YAML_DEPTH)
            }
            BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => {
                format!("it has more than {} values", limits::MAX_YAML_NODES)
            }
            BudgetBreach::Documents { .. } => "it holds more than one document".to_string(),
            BudgetBreach::Aliases { .. }
            | BudgetBreach::Anchors { .. }
            | BudgetBreach::AliasAnchorRatio { .. }
            | BudgetBreach::MergeKeys { .. } => format!(
                "it has more than {} aliases, anchors or merge keys",
                limits::MAX_YAML_ALIASES
            ),
            BudgetBreach::RecordedAnchorEvents { .. }
            | BudgetBreach::RecordedAnchorBytes { .. } => alias_flood(),
            other => format!("it breaks the parser's limit on {other:?}"),
        },
        serde_saphyr::Error::AliasReplayLimitExceeded { .. }
        | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
        | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. } => alias_flood(),
        _ => return None,
    };
    Some(format!("the YAML is too complex for a config: {what}"))
}

/// The error itself, out of the wrappers that add a snippet or the alias it came through.
fn original(error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match error {
        serde_saphyr::Error::WithSnippet { error, .. }
        | serde_saphyr::Error::AliasError { error, .. } => original(error),
        other => other,
    }
}

fn alias_flood() -> String {
    format!(
        "its aliases expand to more than {} values",
        limits::MAX_YAML_ALIAS_EXPANSION
    )
}

/// `parent.key`, or `key` at the top.
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The path one level up: `routes[2].handler` → `routes[2]` → `routes` → none.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    let cut = path.rfind(['.', '[']).unwrap_or(0);
    Some(&path[..cut])
}

fn place_of<T>(spanned: &Spanned<T>) -> Place {
    Place {
        line: spanned.referenced.line(),
        column: spanned.referenced.column(),
    }
}

/// A YAML value with the places of its parts.
enum Tree {
    Scalar(Value),
    Seq(Vec<Spanned<Tree>>),
    Map(Vec<(Spanned<String>, Spanned<Tree>)>),
}

impl<'de> Deserialize<'de> for Tree {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TreeVisitor)
    }
}

struct TreeVisitor;

impl<'de> Visitor<'de> for TreeVisitor {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Tree, E> {
        Ok(Tree::Scalar(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, v: &str) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::String(v.to_string())))
    }

    fn visit_string<E>(self, v: String) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Tree, E> {
        Ok(Tree::Scalar(Value::Null))
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Tree, D::Error> {
        Tree::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tree, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Tree>>()? {
            items.push(item);
        }
        Ok(Tree::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tree, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let value = map.next_value::<Spanned<Tree>>()?;
            let key = Spanned {
                value: key.value.0,
                referenced: key.referenced,
                defined: key.defined,
            };
            entries.push((key, value));
        }
        Ok(Tree::Map(entries))
    }
}

/// A mapping key as text, whatever scalar it was written as (`1: x` has the key "1").
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_keys_have_their_places() {
        let text = "a: 1\nroutes:\n  - name: x\n    handler: h\n  - {name: y}\n";
        let doc = Document::parse(text).unwrap();
        assert_eq!(
            doc.root,
            serde_json::json!({"a": 1, "routes": [{"name": "x", "handler": "h"}, {"name": "y"}]})
        );
        assert_eq!(
            doc.value_place("routes[0].handler"),
            Place {
                line: 4,
                column: 14
            }
        );
        assert_eq!(
            doc.key_place("routes[0].handler"),
            Place { line: 4, column: 5 }
        );
        assert_eq!(doc.value_place("routes[1].name").line, 5);
        // A path that is not there falls back to the nearest enclosing value.
        assert_eq!(doc.value_place("routes[1].handler").line, 5);
    }

    #[test]
    fn a_syntax_error_has_its_place() {
        let err = Document::parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.place.line >= 1, "{err:?}");
    }

    #[test]
    fn aliases_that_expand_to_a_flood_of_values_are_refused() {
        // "Billion laughs": nine levels of ten aliases each, 10^9 values.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let prev = format!("*a{}", level - 1);
            let items = [prev.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let err = Document::parse(&text).unwrap_err();
        assert_eq!(
            err.message,
            "the YAML is too complex for a config: its aliases expand to more than 10000 values"
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let depth = limits::MAX_YAML_DEPTH + 1;
        let text = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let err = Document::parse(&text).unwrap_err();
        assert_eq!(
            err.message,
            "the YAML is too complex for a config: it nests deeper than 32 levels"
        );
        let block: String = (0..depth)
            .map(|i| format!("{}k:\n", "  ".repeat(i)))
            .collect();
        let err = Document::parse(&block).unwrap_err();
        assert!(
            err.message.contains("nests deeper than 32 levels"),
            "{err:?}"
        );
    }

    #[test]
    fn anchors_shared_between_parts_of_a_config_are_fine() {
        let text = "defaults: &d {timeout: 2s, memory: 32Mi}\nhandlers:\n  a: *d\n  b: {<<: *d, concurrency: 3}\n";
        let doc = Document::parse(text).unwrap();
        assert_eq!(doc.root["handlers"]["a"]["timeout"], "2s");
        assert_eq!(doc.root["handlers"]["b"]["memory"], "32Mi");
    }
}
