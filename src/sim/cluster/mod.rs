//! The simulator's cluster state: every object, one cluster-wide resourceVersion counter,
//! the catalogue of served resources, a bounded history of changes (each with the object
//! before and after) and the live change feed.
//!
//! Writes (create, modify, delete, each committed as one change) are in [`writes`]; reads
//! at a past resourceVersion, paging and where a watch starts are in [`super::history`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::config::{CrdConfig, SimConfig};
use super::crd;
use super::error::ApiError;
pub use super::object::{now_rfc3339, object_rv, ref_of};
use super::resources::{Catalogue, ResourceDef, builtin_index};

mod writes;

/// How many changes the history keeps by default before compacting the oldest.
pub const DEFAULT_HISTORY: usize = 10_000;

/// Capacity of the live change feed; a watch that falls this far behind is closed.
const FEED_CAPACITY: usize = 16_384;

/// Where an object lives: its resource, namespace (empty when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Index of the resource in the cluster's catalogue (for built-in kinds, the same as in
    /// [`super::resources::RESOURCES`]).
    pub resource: usize,
    /// Namespace, or empty for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated or patched.
    Modified,
    /// The object was deleted.
    Deleted,
}

impl ChangeType {
    /// The name used in watch events.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One change to the cluster, as watches see it.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// What happened.
    pub change_type: ChangeType,
    /// Where the object lives.
    pub at: ObjectRef,
    /// The object after the change (for deletions, its final state at the new version).
    pub object: Arc<Value>,
    /// The object before the change (`None` for creations).
    pub previous: Option<Arc<Value>>,
}

/// Whether a write is stored, or only checked and answered as if stored (a request with
/// `?dryRun=All`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Store the change and publish it.
    #[default]
    Store,
    /// Check the change and answer with the object it would make; store nothing.
    DryRun,
}

/// Preconditions a delete must meet (a `DeleteOptions.preconditions`).
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The uid the object must have.
    pub uid: Option<String>,
    /// The resourceVersion the object must be at.
    pub resource_version: Option<String>,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deletion {
    /// The object is gone; this was its final state.
    Deleted(Arc<Value>),
    /// The object has finalizers: it is marked with a deletionTimestamp and stays until an
    /// update removes the last finalizer.
    Finalizing(Arc<Value>),
}

impl Deletion {
    /// The object the delete answered with.
    pub fn object(&self) -> &Arc<Value> {
        match self {
            Deletion::Deleted(o) | Deletion::Finalizing(o) => o,
        }
    }
}

pub(super) struct State {
    pub(super) rv: u64,
    pub(super) objects: BTreeMap<ObjectRef, Arc<Value>>,
    pub(super) history: VecDeque<Arc<Change>>,
    pub(super) history_limit: usize,
    /// Every change with a resourceVersion at or below this one has left the history.
    pub(super) compacted_rv: u64,
    pub(super) catalogue: Catalogue,
}

/// A consistent snapshot of one resource's objects.
pub struct Snapshot {
    /// The resourceVersion the snapshot was taken at.
    pub rv: u64,
    /// The objects, ordered by namespace and name.
    pub items: Vec<Arc<Value>>,
}

/// The cluster the simulator serves. Cheap to share; every method is safe to call concurrently.
pub struct Cluster {
    state: Mutex<State>,
    pub(super) feed: broadcast::Sender<Arc<Change>>,
    current: watch::Sender<u64>,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY)
    }
}

impl Cluster {
    /// An empty cluster holding the namespaces every cluster has; the history keeps the
    /// last `history_limit` changes.
    pub fn new(history_limit: usize) -> Self {
        let cluster = Self {
            state: Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted_rv: 0,
                catalogue: Catalogue::default(),
            }),
            feed: broadcast::channel(FEED_CAPACITY).0,
            current: watch::channel(0).0,
        };
        let namespaces = builtin_index("", "v1", "namespaces");
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            cluster
                .create(namespaces, "", obj)
                .expect("a new cluster accepts its namespaces");
        }
        cluster
    }

    /// Applies a simulator config: creates a CRD for each declared custom resource, then the
    /// declared objects (in the namespace their metadata names, default `default`).
    pub fn apply_config(&self, config: &SimConfig) -> Result<(), ApiError> {
        for crd in &config.crds {
            self.define_crd(crd)?;
        }
        for object in &config.objects {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let kind = object["kind"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let (resource, def) = self
                .served_resources()
                .into_iter()
                .find(|(_, d)| d.group == group && d.version == version && d.kind == kind)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "no kind {kind:?} is registered for version {api_version:?}"
                    ))
                })?;
            let namespace = match object["metadata"]["namespace"].as_str() {
                _ if !def.namespaced => "",
                Some(ns) if !ns.is_empty() => ns,
                _ => "default",
            };
            self.create(resource, namespace, object.clone())?;
        }
        Ok(())
    }

    /// Serves a custom resource, by creating its CustomResourceDefinition; returns the
    /// resource's index.
    pub fn define_crd(&self, config: &CrdConfig) -> Result<usize, ApiError> {
        let crds = builtin_index("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let created = self.create(crds, "", crd::object_for(config))?;
        let def = crd::definition(&created).map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.find_resource(&def.group, &def.version, &def.plural)
            .ok_or_else(|| ApiError::internal("the CRD was created but is not served"))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than stopping the simulator would, so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch can resume from (or a list be read at).
    pub fn oldest_resumable(&self) -> u64 {
        self.lock().compacted_rv
    }

    /// Waits until the cluster's resourceVersion reaches `rv`; false if `timeout` passes first.
    pub async fn wait_for_version(&self, rv: u64, timeout: Duration) -> bool {
        let mut current = self.current.subscribe();
        tokio::time::timeout(timeout, current.wait_for(|now| *now >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Every change from now on (for tests and tools that observe the cluster).
    pub fn changes(&self) -> broadcast::Receiver<Arc<Change>> {
        self.feed.subscribe()
    }

    /// The definition of the resource at `index` (served or not).
    pub fn resource(&self, index: usize) -> Option<Arc<ResourceDef>> {
        self.lock().catalogue.get(index).cloned()
    }

    /// The index of the resource served at `group`/`version`/`plural`, custom ones included.
    pub fn find_resource(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.lock().catalogue.find(group, version, plural)
    }

    /// Every served resource with its index.
    pub fn served_resources(&self) -> Vec<(usize, Arc<ResourceDef>)> {
        let state = self.lock();
        state
            .catalogue
            .served()
            .map(|(i, d)| (i, d.clone()))
            .collect()
    }

    /// The served API groups other than the core group, each with its versions.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        self.lock().catalogue.groups()
    }

    /// Reads one object.
    pub fn get(&self, at: &ObjectRef) -> Result<Arc<Value>, ApiError> {
        let state = self.lock();
        let def = def_of(&state, at.resource)?;
        state
            .objects
            .get(at)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def, &at.name))
    }

    /// Every object of a resource, in one namespace or all (`None`), at one resourceVersion.
    pub fn list(&self, resource: usize, namespace: Option<&str>) -> Snapshot {
        let state = self.lock();
        let items = objects_of(&state, resource, namespace).cloned().collect();
        Snapshot {
            rv: state.rv,
            items,
        }
    }

    /// Forgets everything, as an API server whose etcd was wiped or restored from an old
    /// backup: the objects, custom resources and history go, the resourceVersion counter
    /// starts again from zero and the namespaces every cluster has are created anew. Open
    /// watches get no events for it (end them, as a restart does). Clients holding a
    /// resourceVersion from before are now ahead of the cluster.
    pub fn reset(&self) {
        let history_limit = self.lock().history_limit;
        let fresh = Self::new(history_limit)
            .state
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        let rv = fresh.rv;
        *self.lock() = fresh;
        self.current.send_replace(rv);
    }

    /// Drops every change from the history, so watches, lists and continue tokens from any
    /// earlier version get 410 Gone.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.compacted_rv = state.rv;
    }
}

/// The definition of the resource at `index`, or a 404 when there is none.
pub(super) fn def_of(state: &State, index: usize) -> Result<Arc<ResourceDef>, ApiError> {
    state
        .catalogue
        .get(index)
        .cloned()
        .ok_or_else(|| ApiError::no_such_resource(&format!("resource #{index}")))
}

/// The objects of one resource (in one namespace or all), in key order.
pub(super) fn objects_of<'a>(
    state: &'a State,
    resource: usize,
    namespace: Option<&'a str>,
) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
    let start = ObjectRef {
        resource,
        namespace: namespace.unwrap_or_default().to_string(),
        name: String::new(),
    };
    state
        .objects
        .range(start..)
        .take_while(move |(k, _)| {
            k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns)
        })
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests;
