//! The simulator's cluster state: every object, one cluster-wide resourceVersion counter,
//! the catalogue of served resources, a bounded history of changes (each with the object
//! before and after) and the live change feed.
//!
//! Writes live here; reads at a past resourceVersion, paging and where a watch starts are in
//! [`super::history`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::config::{CrdConfig, SimConfig};
use super::crd;
use super::error::ApiError;
use super::object::{
    apply_defaults, check_namespace_field, finalizers, metadata_mut, random_suffix, set_type_meta,
    spec_changed, validate_name,
};
pub use super::object::{now_rfc3339, object_rv, ref_of};
use super::resources::{Catalogue, ResourceDef, builtin_index};

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

    /// Creates an object. `namespace` is empty for cluster-scoped resources.
    pub fn create(
        &self,
        resource: usize,
        namespace: &str,
        object: Value,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_in(WriteMode::Store, resource, namespace, object)
    }

    /// Creates an object, or with [`WriteMode::DryRun`] checks that it could be created and
    /// returns it as it would be stored, without a resourceVersion (as kube-apiserver
    /// answers a dry run).
    pub fn create_in(
        &self,
        mode: WriteMode,
        resource: usize,
        namespace: &str,
        mut object: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let mut state = self.lock();
        let def = def_of(&state, resource)?;
        let meta = metadata_mut(&mut object)?;
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &def,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        validate_name(&def, &name)?;
        check_namespace_field(&def, meta, namespace)?;
        if def.namespaced && !namespace_exists(&state, namespace) {
            return Err(ApiError::namespace_not_found(namespace));
        }
        let at = ObjectRef {
            resource,
            namespace: namespace.to_string(),
            name: name.clone(),
        };
        if state.objects.contains_key(&at) {
            return Err(ApiError::already_exists(&def, &name));
        }
        let rv = state.rv + 1;
        let meta = metadata_mut(&mut object)?;
        meta.insert("name".into(), name.clone().into());
        if def.namespaced {
            meta.insert("namespace".into(), namespace.into());
        } else {
            meta.remove("namespace");
        }
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            meta.remove(field);
        }
        meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        meta.insert("resourceVersion".into(), rv.to_string().into());
        meta.insert("generation".into(), 1.into());
        meta.insert("creationTimestamp".into(), now_rfc3339().into());
        set_type_meta(&def, &mut object);
        apply_defaults(&def, &mut object);
        if is_crd(&def) {
            let custom = crd::definition(&object)
                .map_err(|e| ApiError::invalid(&def, &name, &e.to_string()))?;
            object["status"] = crd::accepted_status(&object, &custom);
            let mut dry_run_catalogue;
            let catalogue = match mode {
                WriteMode::Store => &mut state.catalogue,
                WriteMode::DryRun => {
                    dry_run_catalogue = state.catalogue.clone();
                    &mut dry_run_catalogue
                }
            };
            catalogue
                .serve(custom)
                .map_err(|e| ApiError::invalid(&def, &name, &format!("spec.names: {e}")))?;
        }
        if mode == WriteMode::DryRun {
            metadata_mut(&mut object)?.remove("resourceVersion");
            return Ok(Arc::new(object));
        }
        Ok(self.commit(&mut state, at, ChangeType::Added, object))
    }

    /// Replaces an object. A resourceVersion in `object` that is not the current one is a
    /// conflict; none means "whatever is there".
    pub fn update(&self, at: &ObjectRef, object: Value) -> Result<Arc<Value>, ApiError> {
        self.modify(at, |_| Ok(object))
    }

    /// Changes an object through `change`, which gets the current object and returns the new
    /// one; the same optimistic-concurrency rule as [`Cluster::update`] applies to its result.
    /// An object being deleted that loses its last finalizer is deleted.
    pub fn modify(
        &self,
        at: &ObjectRef,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        self.modify_in(WriteMode::Store, at, change)
    }

    /// [`Cluster::modify`], or with [`WriteMode::DryRun`] the checks alone: the answer is the
    /// object the change would make, at the current resourceVersion, and nothing is stored.
    pub fn modify_in(
        &self,
        mode: WriteMode,
        at: &ObjectRef,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let mut state = self.lock();
        let def = def_of(&state, at.resource)?;
        let current = state
            .objects
            .get(at)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def, &at.name))?;
        let mut object = change(&current)?;
        let meta = metadata_mut(&mut object)?;
        if let Some(name) = meta.get("name").and_then(Value::as_str)
            && name != at.name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                at.name
            )));
        }
        check_namespace_field(&def, meta, &at.namespace)?;
        let current_rv = object_rv(&current);
        if let Some(rv) = meta.get("resourceVersion").and_then(Value::as_str)
            && !rv.is_empty()
            && rv != current_rv.to_string()
        {
            return Err(ApiError::conflict(&def, &at.name));
        }
        let current_meta = &current["metadata"];
        let terminating = current_meta.get("deletionTimestamp").is_some();
        if terminating
            && !finalizers(&object)
                .iter()
                .all(|f| finalizers(&current).contains(f))
        {
            return Err(ApiError::invalid(
                &def,
                &at.name,
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
            ));
        }
        let meta = metadata_mut(&mut object)?;
        // Identity and deletion state belong to the server, whatever the client sent.
        for field in [
            "uid",
            "creationTimestamp",
            "name",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match current_meta.get(field) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.remove(field),
            };
        }
        if def.namespaced {
            meta.insert("namespace".into(), at.namespace.clone().into());
        }
        meta.insert("resourceVersion".into(), (state.rv + 1).to_string().into());
        let generation = current_meta["generation"].as_i64().unwrap_or(1);
        let bumped = if spec_changed(&current, &object) {
            generation + 1
        } else {
            generation
        };
        metadata_mut(&mut object)?.insert("generation".into(), bumped.into());
        set_type_meta(&def, &mut object);
        if is_crd(&def) {
            // The resource keeps the names it was created with; the status says so.
            object["status"] = current["status"].clone();
        }
        if mode == WriteMode::DryRun {
            let meta = metadata_mut(&mut object)?;
            meta.insert("resourceVersion".into(), current_rv.to_string().into());
            return Ok(Arc::new(object));
        }
        if terminating && finalizers(&object).is_empty() {
            // Like kube-apiserver, the update is not written: the object is deleted, and
            // the DELETED event carries its last stored state.
            return Ok(self.remove(&mut state, at));
        }
        Ok(self.commit(&mut state, at.clone(), ChangeType::Modified, object))
    }

    /// Deletes an object and returns its final state. Deleting a namespace deletes what is in
    /// it; an object with finalizers is only marked for deletion (see [`Cluster::delete_with`]).
    pub fn delete(&self, at: &ObjectRef) -> Result<Arc<Value>, ApiError> {
        self.delete_with(at, &Preconditions::default())
            .map(|d| d.object().clone())
    }

    /// Deletes an object if `preconditions` hold. An object with finalizers gets a
    /// deletionTimestamp instead and stays until its last finalizer is removed; deleting it
    /// again changes nothing.
    pub fn delete_with(
        &self,
        at: &ObjectRef,
        preconditions: &Preconditions,
    ) -> Result<Deletion, ApiError> {
        let mut state = self.lock();
        let def = def_of(&state, at.resource)?;
        let current = state
            .objects
            .get(at)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def, &at.name))?;
        let meta = &current["metadata"];
        if let Some(uid) = &preconditions.uid
            && meta["uid"].as_str() != Some(uid.as_str())
        {
            let detail = format!(
                "UID in precondition: {uid}, UID in object meta: {}",
                meta["uid"].as_str().unwrap_or_default()
            );
            return Err(ApiError::precondition_failed(&def, &at.name, &detail));
        }
        if let Some(rv) = &preconditions.resource_version
            && meta["resourceVersion"].as_str() != Some(rv.as_str())
        {
            let detail = format!(
                "ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta["resourceVersion"].as_str().unwrap_or_default()
            );
            return Err(ApiError::precondition_failed(&def, &at.name, &detail));
        }
        if !finalizers(&current).is_empty() {
            if meta.get("deletionTimestamp").is_some() {
                return Ok(Deletion::Finalizing(current));
            }
            let mut object = (*current).clone();
            let meta = metadata_mut(&mut object)?;
            meta.insert("deletionTimestamp".into(), now_rfc3339().into());
            meta.insert("deletionGracePeriodSeconds".into(), 0.into());
            meta.insert("resourceVersion".into(), (state.rv + 1).to_string().into());
            let object = self.commit(&mut state, at.clone(), ChangeType::Modified, object);
            return Ok(Deletion::Finalizing(object));
        }
        if def.plural == "namespaces" && def.group.is_empty() {
            let inside: Vec<ObjectRef> = state
                .objects
                .keys()
                .filter(|k| {
                    state
                        .catalogue
                        .get(k.resource)
                        .is_some_and(|d| d.namespaced)
                        && k.namespace == at.name
                })
                .cloned()
                .collect();
            for key in inside {
                self.remove(&mut state, &key);
            }
        }
        if is_crd(&def)
            && let Ok(custom) = crd::definition(&current)
            && let Some(index) =
                state
                    .catalogue
                    .find(&custom.group, &custom.version, &custom.plural)
        {
            let instances: Vec<ObjectRef> = state
                .objects
                .keys()
                .filter(|k| k.resource == index)
                .cloned()
                .collect();
            for key in instances {
                self.remove(&mut state, &key);
            }
            state.catalogue.withdraw(index);
        }
        Ok(Deletion::Deleted(self.remove(&mut state, at)))
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

    /// Removes an object for good, recording a DELETED change.
    fn remove(&self, state: &mut State, at: &ObjectRef) -> Arc<Value> {
        let mut object = state
            .objects
            .get(at)
            .map(|o| (**o).clone())
            .unwrap_or_default();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), (state.rv + 1).to_string().into());
        }
        self.commit(state, at.clone(), ChangeType::Deleted, object)
    }

    /// Applies a change: bumps the resourceVersion, updates the objects, records the history
    /// and publishes it. The caller has already set `object`'s resourceVersion to
    /// `state.rv + 1`.
    fn commit(
        &self,
        state: &mut State,
        at: ObjectRef,
        change_type: ChangeType,
        object: Value,
    ) -> Arc<Value> {
        state.rv += 1;
        let object = Arc::new(object);
        let previous = if change_type == ChangeType::Deleted {
            state.objects.remove(&at)
        } else {
            state.objects.insert(at.clone(), object.clone())
        };
        let change = Arc::new(Change {
            rv: state.rv,
            change_type,
            at,
            object: object.clone(),
            previous,
        });
        state.history.push_back(change.clone());
        while state.history.len() > state.history_limit {
            if let Some(old) = state.history.pop_front() {
                state.compacted_rv = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.feed.send(change);
        self.current.send_replace(state.rv);
        object
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

fn is_crd(def: &ResourceDef) -> bool {
    def.is("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

fn namespace_exists(state: &State, namespace: &str) -> bool {
    let at = ObjectRef {
        resource: builtin_index("", "v1", "namespaces"),
        namespace: String::new(),
        name: namespace.to_string(),
    };
    state.objects.contains_key(&at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> Value {
        json!({"metadata": {"name": name}, "data": {"k": "v"}})
    }

    fn configmaps() -> usize {
        builtin_index("", "v1", "configmaps")
    }

    #[test]
    fn create_assigns_identity_and_increasing_versions() {
        let cluster = Cluster::default();
        let a = cluster.create(configmaps(), "default", cm("a")).unwrap();
        let b = cluster.create(configmaps(), "default", cm("b")).unwrap();
        assert!(object_rv(&b) > object_rv(&a));
        assert_eq!(a["kind"], "ConfigMap");
        assert_eq!(a["metadata"]["namespace"], "default");
        assert!(a["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
        let err = cluster
            .create(configmaps(), "default", cm("a"))
            .unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(err.reason, "AlreadyExists");
    }

    #[test]
    fn create_in_a_missing_namespace_is_not_found() {
        let cluster = Cluster::default();
        let err = cluster
            .create(configmaps(), "nowhere", cm("a"))
            .unwrap_err();
        assert_eq!(err.code, 404);
    }

    #[test]
    fn update_with_a_stale_resource_version_conflicts() {
        let cluster = Cluster::default();
        let created = cluster.create(configmaps(), "default", cm("a")).unwrap();
        let at = ref_of(configmaps(), &created);
        let mut next = (*created).clone();
        next["data"]["k"] = "w".into();
        let updated = cluster.update(&at, next.clone()).unwrap();
        assert_eq!(updated["metadata"]["generation"], 2);
        let err = cluster.update(&at, next).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    }

    #[test]
    fn a_status_only_change_keeps_the_generation() {
        let cluster = Cluster::default();
        let pods = builtin_index("", "v1", "pods");
        let pod = cluster
            .create(
                pods,
                "default",
                json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
            )
            .unwrap();
        assert_eq!(pod["status"]["phase"], "Pending");
        let at = ref_of(pods, &pod);
        let running = cluster
            .modify(&at, |p| {
                let mut p = p.clone();
                p["status"]["phase"] = "Running".into();
                Ok(p)
            })
            .unwrap();
        assert_eq!(running["metadata"]["generation"], 1);
        assert_eq!(running["metadata"]["uid"], pod["metadata"]["uid"]);
        assert_eq!(
            running["metadata"]["creationTimestamp"],
            pod["metadata"]["creationTimestamp"]
        );
    }

    #[test]
    fn deleting_a_namespace_deletes_its_objects() {
        let cluster = Cluster::default();
        let ns = builtin_index("", "v1", "namespaces");
        cluster
            .create(ns, "", json!({"metadata": {"name": "team"}}))
            .unwrap();
        cluster.create(configmaps(), "team", cm("a")).unwrap();
        let at = ObjectRef {
            resource: ns,
            namespace: String::new(),
            name: "team".into(),
        };
        cluster.delete(&at).unwrap();
        assert!(cluster.list(configmaps(), Some("team")).items.is_empty());
    }

    #[test]
    fn an_object_with_finalizers_stays_until_the_last_one_is_removed() {
        let cluster = Cluster::default();
        let mut object = cm("held");
        object["metadata"]["finalizers"] = json!(["example.com/hold"]);
        let created = cluster.create(configmaps(), "default", object).unwrap();
        let at = ref_of(configmaps(), &created);
        let deletion = cluster.delete_with(&at, &Preconditions::default()).unwrap();
        let Deletion::Finalizing(marked) = deletion else {
            panic!("an object with finalizers must not be deleted at once");
        };
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert!(cluster.get(&at).is_ok());
        let mut changes = cluster.changes();
        cluster
            .modify(&at, |o| {
                let mut o = o.clone();
                o["metadata"]["finalizers"] = json!([]);
                Ok(o)
            })
            .unwrap();
        assert!(cluster.get(&at).is_err());
        let change = changes.try_recv().unwrap();
        assert_eq!(change.change_type, ChangeType::Deleted);
    }

    #[test]
    fn a_reset_cluster_forgets_its_objects_and_counts_versions_from_zero_again() {
        let cluster = Cluster::default();
        let first = cluster.create(configmaps(), "default", cm("a")).unwrap();
        for name in ["b", "c", "d"] {
            cluster.create(configmaps(), "default", cm(name)).unwrap();
        }
        let before = cluster.resource_version();
        cluster.reset();
        assert!(cluster.list(configmaps(), None).items.is_empty());
        let namespaces = builtin_index("", "v1", "namespaces");
        assert_eq!(cluster.list(namespaces, None).items.len(), 4);
        assert!(cluster.resource_version() < before);
        let again = cluster.create(configmaps(), "default", cm("a")).unwrap();
        assert_eq!(object_rv(&again), object_rv(&first), "versions start over");
        assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"]);
    }

    #[test]
    fn a_delete_precondition_that_does_not_hold_conflicts() {
        let cluster = Cluster::default();
        let created = cluster.create(configmaps(), "default", cm("a")).unwrap();
        let at = ref_of(configmaps(), &created);
        let wrong = Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        };
        let err = cluster.delete_with(&at, &wrong).unwrap_err();
        assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
        assert!(
            err.message.contains("Precondition failed"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_crd_serves_its_resource_until_it_is_deleted() {
        let cluster = Cluster::default();
        let config = SimConfig::from_yaml(
            "crds: [{group: example.com, version: v1, kind: Widget}]\nobjects: [{apiVersion: example.com/v1, kind: Widget, metadata: {name: w}}]",
            "test",
        )
        .unwrap();
        cluster.apply_config(&config).unwrap();
        let widgets = cluster
            .find_resource("example.com", "v1", "widgets")
            .unwrap();
        assert_eq!(cluster.list(widgets, None).items.len(), 1);
        assert_eq!(
            cluster
                .groups()
                .iter()
                .filter(|(g, _)| g == "example.com")
                .count(),
            1
        );
        let crds = builtin_index("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let crd = ObjectRef {
            resource: crds,
            namespace: String::new(),
            name: "widgets.example.com".into(),
        };
        assert_eq!(
            cluster.get(&crd).unwrap()["status"]["conditions"][1]["type"],
            "Established"
        );
        cluster.delete(&crd).unwrap();
        assert_eq!(cluster.find_resource("example.com", "v1", "widgets"), None);
        assert!(cluster.list(widgets, None).items.is_empty());
    }
}
