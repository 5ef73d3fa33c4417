//! The `cache` import: read-only access to the informer caches of the handler's routes.
//!
//! A plugin names a resource by plural, kind or the route's resource string; when several
//! of the handler's routes watch it (say in two namespaces), their caches are read
//! together, each object once.

use std::collections::HashSet;
use std::sync::Arc;

use super::super::bindings::switchyard::plugin::cache as wit;
use super::HostContext;
use crate::informer::{CachedObject, ObjectKey};
use crate::plugin::host::CallState;

impl HostContext {
    /// The cached object `namespace/name` (or `name` for cluster-scoped resources) of
    /// `resource`, as JSON.
    pub fn cache_get(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String> {
        if let Some(capture) = self.offline() {
            return capture.known(&self.handler, resource).map(|()| None);
        }
        let key = ObjectKey::new(namespace, name);
        Ok(self
            .resolve(resource)?
            .into_iter()
            .find_map(|i| i.store().get(&key))
            .map(|o| String::from(o.json_str())))
    }

    /// Every cached object of `resource` (only those in `namespace`, if given), as JSON.
    pub fn cache_list(
        &self,
        resource: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<String>, String> {
        if let Some(capture) = self.offline() {
            return capture.known(&self.handler, resource).map(|()| Vec::new());
        }
        let informers = self.resolve(resource)?;
        let objects = informers.into_iter().flat_map(|i| match namespace {
            Some(ns) => i
                .store()
                .list_by_index(crate::config::NAMESPACE_INDEX, ns)
                .unwrap_or_default(),
            None => i.store().list(),
        });
        Ok(unique_json(objects))
    }

    /// The cached objects of `resource` whose value for the index `index` is `value`, as
    /// JSON; an error naming the indexes there are when no cache of the resource has
    /// `index`.
    pub fn cache_list_by_index(
        &self,
        resource: &str,
        index: &str,
        value: &str,
    ) -> Result<Vec<String>, String> {
        if let Some(capture) = self.offline() {
            return capture.known(&self.handler, resource).map(|()| Vec::new());
        }
        let informers = self.resolve(resource)?;
        let mut found = None::<Vec<Arc<CachedObject>>>;
        for informer in &informers {
            if let Some(objects) = informer.store().list_by_index(index, value) {
                found.get_or_insert_with(Vec::new).extend(objects);
            }
        }
        match found {
            Some(objects) => Ok(unique_json(objects)),
            None => {
                let mut names: Vec<&str> = informers
                    .iter()
                    .flat_map(|i| i.store().indexers().names())
                    .collect();
                names.sort();
                names.dedup();
                Err(format!(
                    "{resource} has no index {index:?}; its indexes: {} (add one under the route's or the informer's indexes:)",
                    names.join(", ")
                ))
            }
        }
    }
}

/// The objects' JSON, each object once, in key order (so plugins see a stable order).
fn unique_json(objects: impl IntoIterator<Item = Arc<CachedObject>>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut objects: Vec<Arc<CachedObject>> = objects
        .into_iter()
        .filter(|o| seen.insert(o.key().clone()))
        .collect();
    objects.sort_by(|a, b| a.key().as_str().cmp(b.key().as_str()));
    objects.iter().map(|o| String::from(o.json_str())).collect()
}

impl wit::Host for CallState {
    async fn get(
        &mut self,
        resource: String,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<Option<String>, String>> {
        Ok(self
            .context()
            .cache_get(&resource, namespace.as_deref(), &name))
    }

    async fn list(
        &mut self,
        resource: String,
        namespace: Option<String>,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        Ok(self.context().cache_list(&resource, namespace.as_deref()))
    }

    async fn list_by_index(
        &mut self,
        resource: String,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<String>, String>> {
        Ok(self
            .context()
            .cache_list_by_index(&resource, &index, &value))
    }
}
