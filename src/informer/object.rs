//! Cached objects and their keys. The cache holds each object once, as its JSON text (what
//! plugins get, shared by every handler without copying) plus the few fields the informer
//! reads: key, resourceVersion and index values. A parsed object tree costs several times
//! its JSON size; the text costs about its size.

use std::fmt;
use std::sync::Arc;

use kube::api::DynamicObject;

use super::wire::Received;

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

    /// The key as shared text (no copy).
    pub fn shared(&self) -> Arc<str> {
        self.0.clone()
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
    resource_version: Box<str>,
    json: Arc<str>,
    /// `(index number, value)` for every index the object is in.
    index_values: Box<[(u16, Box<str>)]>,
}

impl CachedObject {
    /// Serializes an object into its cached form.
    pub fn new(object: DynamicObject) -> Self {
        Self::received(Received::of_object(&object), Vec::new())
    }

    /// The cached form of an object as received, with its index values.
    pub fn received(object: Received, index_values: Vec<(u16, Box<str>)>) -> Self {
        let (json, meta) = object.into_parts();
        Self {
            key: ObjectKey::new(
                meta.namespace.as_deref(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            resource_version: meta.resource_version.unwrap_or_default().into_boxed_str(),
            json: json.into(),
            index_values: index_values.into_boxed_slice(),
        }
    }

    /// The object's cache key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The object's resourceVersion (empty if the server sent none).
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// The object as JSON, shared by every handler.
    pub fn json(&self) -> Arc<str> {
        self.json.clone()
    }

    /// The object as JSON, borrowed.
    pub fn json_str(&self) -> &str {
        &self.json
    }

    /// The object, parsed again from its JSON.
    pub fn parse(&self) -> serde_json::Result<DynamicObject> {
        serde_json::from_str(&self.json)
    }

    /// The index values the object was stored under.
    pub(crate) fn index_values(&self) -> &[(u16, Box<str>)] {
        &self.index_values
    }
}
