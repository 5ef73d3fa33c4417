//! The informer's cache: the current state of every watched object, safe for concurrent
//! readers while the reflector writes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::object::{CachedObject, ObjectKey};

/// A cache of objects by key. Cloning gives another handle to the same cache.
#[derive(Debug, Clone, Default)]
pub struct Store {
    objects: Arc<RwLock<HashMap<ObjectKey, Arc<CachedObject>>>>,
}

impl Store {
    fn read(&self) -> RwLockReadGuard<'_, HashMap<ObjectKey, Arc<CachedObject>>> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<CachedObject>>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The object with this key, if cached.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        self.read().get(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<CachedObject>> {
        self.read().values().cloned().collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}
