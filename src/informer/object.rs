//! Cached objects and their keys: one copy per object, its JSON serialized at most once.

use std::fmt;
use std::sync::{Arc, OnceLock};

use kube::api::DynamicObject;

/// `namespace/name`, or `name` for cluster-scoped objects: how client-go keys its caches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// The key of an object with this namespace and name.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) if !ns.is_empty() => Self(format!("{ns}/{name}").into()),
            _ => Self(name.into()),
        }
    }

    /// The key of a Kubernetes object.
    pub fn of(object: &DynamicObject) -> Self {
        Self::new(
            object.metadata.namespace.as_deref(),
            object.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// A key from its text form (`namespace/name` or `name`).
    pub fn from_raw(text: &str) -> Self {
        Self(text.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One object as the cache holds it. Shared (`Arc`) by the store, deltas and queues.
#[derive(Debug)]
pub struct CachedObject {
    key: ObjectKey,
    object: DynamicObject,
    json: OnceLock<Arc<str>>,
}

impl CachedObject {
    /// Wraps an object received from the API server.
    pub fn new(object: DynamicObject) -> Self {
        Self {
            key: ObjectKey::of(&object),
            object,
            json: OnceLock::new(),
        }
    }

    /// The object's cache key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The object.
    pub fn object(&self) -> &DynamicObject {
        &self.object
    }

    /// The object's resourceVersion (empty if the server sent none).
    pub fn resource_version(&self) -> &str {
        self.object
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    /// The object as JSON, serialized on first use and shared by every handler after.
    pub fn json(&self) -> Arc<str> {
        self.json
            .get_or_init(|| {
                serde_json::to_string(&self.object)
                    .expect("an object received as JSON serializes back to JSON")
                    .into()
            })
            .clone()
    }
}
