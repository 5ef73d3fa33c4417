//! What the informer drops from objects before caching them: `metadata.managedFields` by
//! default (often the largest part of an object, and of no use to handlers) and any
//! configured JSON pointers, such as the last-applied-configuration annotation.

use kube::api::DynamicObject;

/// The transform applied to every object before it is cached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transform {
    /// Drop `metadata.managedFields`.
    pub strip_managed_fields: bool,
    /// JSON pointers (RFC 6901) to remove, such as
    /// `/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration`.
    pub drop: Vec<String>,
}

impl Default for Transform {
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
            drop: Vec::new(),
        }
    }
}

impl Transform {
    /// Applies the transform in place.
    pub fn apply(&self, object: &mut DynamicObject) {
        if self.strip_managed_fields {
            object.metadata.managed_fields = None;
        }
        for pointer in &self.drop {
            remove_pointer(object, pointer);
        }
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn remove_pointer(object: &mut DynamicObject, pointer: &str) {
    // Validation refuses such a pointer; without its leading '/' the first token would be
    // dropped and a different field removed.
    if crate::config::validate_pointer(pointer).is_err() {
        return;
    }
    let tokens: Vec<String> = pointer.split('/').skip(1).map(unescape).collect();
    match tokens.as_slice() {
        [meta, map, key] if meta == "metadata" && map == "annotations" => {
            if let Some(a) = object.metadata.annotations.as_mut() {
                a.remove(key);
            }
        }
        [meta, map, key] if meta == "metadata" && map == "labels" => {
            if let Some(l) = object.metadata.labels.as_mut() {
                l.remove(key);
            }
        }
        [meta, ..] if meta == "metadata" => {}
        [first, rest @ ..] => {
            let Some(root) = object.data.as_object_mut() else {
                return;
            };
            if rest.is_empty() {
                root.remove(first);
                return;
            }
            let mut current = root.get_mut(first.as_str());
            for token in &rest[..rest.len() - 1] {
                current = current.and_then(|v| v.get_mut(token.as_str()));
            }
            if let Some(serde_json::Value::Object(map)) = current {
                map.remove(&rest[rest.len() - 1]);
            }
        }
        [] => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ApiResource;
    use serde_json::json;

    #[test]
    fn managed_fields_and_configured_pointers_are_dropped() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a",
                "managedFields": [{"manager": "kubectl"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
            },
            "data": {"big": "x", "small": "y"},
        }))
        .unwrap();
        let _ = ar;
        let transform = Transform {
            strip_managed_fields: true,
            drop: vec![
                "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration".into(),
                "/data/big".into(),
            ],
        };
        transform.apply(&mut o);
        let json = serde_json::to_value(&o).unwrap();
        assert!(json["metadata"].get("managedFields").is_none());
        assert_eq!(json["metadata"]["annotations"], json!({"keep": "me"}));
        assert_eq!(json["data"], json!({"small": "y"}));
    }
}
