//! Parsing only the parts of an object a route's filter reads. A selector or condition looks
//! at a few paths (`metadata.labels`, `spec.replicas`); the rest of the object (a
//! ConfigMap's data, a Pod's spec) is skipped by the parser instead of being built into a
//! JSON tree and dropped again.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The paths a filter reads, as a tree of keys. A path's last key keeps its whole value; a
/// value on the way that is not an object (an array a path indexes into, a scalar) is kept
/// whole too.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Wanted {
    whole: bool,
    children: BTreeMap<String, Wanted>,
}

impl Wanted {
    /// Adds a path, given as its keys from the root. An empty path wants the whole object.
    pub(super) fn add<'a>(&mut self, path: impl IntoIterator<Item = &'a str>) {
        let mut node = self;
        for key in path {
            if node.whole {
                return;
            }
            node = node.children.entry(key.to_string()).or_default();
        }
        node.whole = true;
        node.children.clear();
    }

    /// Whether no path was added.
    pub(super) fn is_empty(&self) -> bool {
        !self.whole && self.children.is_empty()
    }

    /// Parses `json` keeping only the wanted paths: every lookup along them finds what it
    /// would find in the whole object.
    pub(super) fn parse(&self, json: &str) -> serde_json::Result<Value> {
        let mut parser = serde_json::Deserializer::from_str(json);
        let value = Pruned(self).deserialize(&mut parser)?;
        parser.end()?;
        Ok(value)
    }
}

/// The parse of one value under a node of the tree.
#[derive(Clone, Copy)]
struct Pruned<'w>(&'w Wanted);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, parser: D) -> Result<Value, D::Error> {
        if self.0.whole {
            return serde::Deserialize::deserialize(parser);
        }
        parser.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(Key(key)) = map.next_key()? {
            match self.0.children.get(key.as_ref()) {
                Some(child) => {
                    let value = map.next_value_seed(Pruned(child))?;
                    kept.insert(key.into_owned(), value);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }
}

/// An object's key, borrowed from the text unless it holds an escape.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(parser: D) -> Result<Self, D::Error> {
        parser.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_string())))
    }

    fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FieldPath;
    use serde_json::json;

    fn wanted(paths: &[&str]) -> Wanted {
        let mut wanted = Wanted::default();
        for path in paths {
            wanted.add(FieldPath::parse(path).unwrap().parts());
        }
        wanted
    }

    #[test]
    fn only_the_wanted_paths_are_kept_and_a_path_s_end_is_kept_whole() {
        let object = json!({
            "metadata": {"name": "web", "labels": {"app": "web", "tier": "db"}, "uid": "u"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "a"}]}}},
            "data": {"payload": "x".repeat(100)},
        });
        let parsed = wanted(&["metadata.labels", "spec.replicas"])
            .parse(&object.to_string())
            .unwrap();
        assert_eq!(
            parsed,
            json!({"metadata": {"labels": {"app": "web", "tier": "db"}}, "spec": {"replicas": 3}})
        );
    }

    #[test]
    fn every_lookup_on_a_wanted_path_finds_what_the_whole_object_has() {
        let object = json!({
            "metadata": {"name": "web", "annotations": {"a.b/c": "1", "esc\"aped": "2"}},
            "spec": {"ports": [{"port": 80}, {"port": 443}], "gone": null, "n": -1.5,
                     "flag": false, "big": 18446744073709551615u64},
            "status": "plain",
        });
        let paths = [
            "/metadata/annotations/a.b~1c",
            "/metadata/annotations/esc\"aped",
            "metadata.annotations.absent",
            "spec.ports.1.port",
            "spec.gone",
            "spec.n",
            "spec.flag",
            "spec.big",
            "status.deeper",
            "status",
            "nowhere.at.all",
        ];
        let text = object.to_string();
        let parsed = wanted(&paths).parse(&text).unwrap();
        for path in paths {
            let path = FieldPath::parse(path).unwrap();
            assert_eq!(path.lookup(&parsed), path.lookup(&object), "{path}");
        }
        assert!(parsed.get("spec").unwrap().get("ports").unwrap().is_array());
    }

    #[test]
    fn a_shorter_path_wants_the_whole_of_a_longer_one_and_bad_json_is_an_error() {
        let mut both = wanted(&["spec.template.spec"]);
        both.add(["spec"]);
        assert_eq!(both, wanted(&["spec"]));
        let mut again = wanted(&["spec"]);
        again.add(["spec", "replicas"]);
        assert_eq!(again, wanted(&["spec"]));
        assert!(Wanted::default().is_empty() && !both.is_empty());
        assert!(both.parse(r#"{"spec": {"a": 1}"#).is_err());
        assert!(both.parse(r#"{"spec": 1} trailing"#).is_err());
    }
}
