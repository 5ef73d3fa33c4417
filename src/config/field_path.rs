//! Paths to a value inside an object, as routes' conditions name them: dotted
//! (`spec.replicas`, `metadata.labels.app`, `.spec`) or a JSON pointer
//! (`/metadata/labels/app.kubernetes.io~1name`) when a key holds a dot.

use std::fmt;

use serde_json::Value;

/// Why a field path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldPathError {
    /// A part of the path is empty (`spec..x`, `` or `/a//b`).
    #[error(
        "invalid field path {text:?}: use a dotted path such as spec.replicas, or a JSON pointer such as /metadata/labels/app"
    )]
    EmptyPart {
        /// The path as written.
        text: String,
    },
    /// A JSON pointer with a `~` that escapes neither `~` nor `/`.
    #[error(transparent)]
    Pointer(#[from] super::pointer::PointerError),
}

/// A parsed path: the keys (or array indexes) from the object's root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    text: String,
    parts: Vec<String>,
}

impl FieldPath {
    /// Parses a dotted path or a JSON pointer.
    pub fn parse(text: &str) -> Result<Self, FieldPathError> {
        let parts: Vec<String> = if let Some(pointer) = text.strip_prefix('/') {
            super::pointer::validate_pointer(text)?;
            pointer
                .split('/')
                .map(|p| p.replace("~1", "/").replace("~0", "~"))
                .collect()
        } else {
            text.strip_prefix('.')
                .unwrap_or(text)
                .split('.')
                .map(str::to_string)
                .collect()
        };
        if parts.iter().any(String::is_empty) {
            return Err(FieldPathError::EmptyPart {
                text: text.to_string(),
            });
        }
        Ok(Self {
            text: text.to_string(),
            parts,
        })
    }

    /// The keys (or array indexes) from the root.
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(String::as_str)
    }

    /// The value at the path in `object`, if there is one (`null` counts as none).
    pub fn lookup<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        let mut value = object;
        for part in &self.parts {
            value = match value {
                Value::Object(map) => map.get(part)?,
                Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        (!value.is_null()).then_some(value)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dotted_paths_and_pointers_find_the_same_values() {
        let object = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "tier": "db"}},
                            "spec": {"ports": [{"port": 80}], "gone": null}});
        let tier = FieldPath::parse("metadata.labels.tier").unwrap();
        assert_eq!(tier.lookup(&object), Some(&json!("db")));
        let dotted_key = FieldPath::parse("/metadata/labels/app.kubernetes.io~1name").unwrap();
        assert_eq!(dotted_key.lookup(&object), Some(&json!("web")));
        let port = FieldPath::parse(".spec.ports.0.port").unwrap();
        assert_eq!(port.lookup(&object), Some(&json!(80)));
        assert_eq!(FieldPath::parse("spec.gone").unwrap().lookup(&object), None);
        assert_eq!(FieldPath::parse("spec.nope").unwrap().lookup(&object), None);
        assert!(FieldPath::parse("spec..x").is_err());
        assert!(FieldPath::parse("").is_err());
    }

    #[test]
    fn a_pointer_path_must_escape_tildes_as_json_pointers_do() {
        let error = FieldPath::parse("/metadata/~2bad").unwrap_err().to_string();
        assert!(error.contains("'~' must be followed by 0"), "{error}");
        assert!(FieldPath::parse("/metadata/a~0b").is_ok());
    }
}
