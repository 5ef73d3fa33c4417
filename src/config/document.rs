//! A YAML document read once into plain JSON values, with the line and column of every value
//! and every mapping key, by path (`routes[2].handler`). Each part of a config is then
//! checked on its own, so one wrong value does not hide the mistakes after it.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

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
        // YAML 1.2 booleans only: `y`, `no` or `on` stay text, as a typed parse would read
        // them into a string field.
        let mut options = serde_saphyr::Options::default();
        options.strict_booleans = true;
        let tree: Spanned<Tree> =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| SyntaxError {
                place: e
                    .location()
                    .map(|l| Place {
                        line: l.line(),
                        column: l.column(),
                    })
                    .unwrap_or_default(),
                message: e.to_string(),
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
}
