//! The simulator's cluster state: every object, one cluster-wide resourceVersion counter,
//! a bounded history of changes for watches to resume from, and the live change feed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::error::ApiError;
use super::resources::{RESOURCES, ResourceDef};

/// How many changes the history keeps by default before compacting the oldest.
pub const DEFAULT_HISTORY: usize = 10_000;

/// Capacity of the live change feed; a watch that falls this far behind is closed.
const FEED_CAPACITY: usize = 16_384;

/// Where an object lives: its resource, namespace (empty when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Index of the resource in [`RESOURCES`].
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
    /// The object after the change (for deletions, its final state).
    pub object: Arc<Value>,
}

struct State {
    rv: u64,
    objects: BTreeMap<ObjectRef, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Every change with a resourceVersion at or below this one has left the history.
    compacted_rv: u64,
}

/// What a watch starting at some resourceVersion must replay before following the live feed.
pub enum WatchStart {
    /// The changes after the requested version, and the live feed from there on.
    Resume(Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>),
    /// The requested version is older than the history keeps (the client must relist).
    Expired {
        /// The oldest version a watch could still resume from.
        oldest: u64,
    },
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
    feed: broadcast::Sender<Arc<Change>>,
}

impl Default for Cluster {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY)
    }
}

impl Cluster {
    /// An empty cluster holding the namespaces every cluster has.
    pub fn new(history_limit: usize) -> Self {
        let cluster = Self {
            state: Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted_rv: 0,
            }),
            feed: broadcast::channel(FEED_CAPACITY).0,
        };
        let namespaces = resource_index("", "v1", "namespaces");
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            cluster
                .create(namespaces, "", obj)
                .expect("a new cluster accepts its namespaces");
        }
        cluster
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than stopping the simulator would, so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The oldest resourceVersion a watch can resume from.
    pub fn oldest_resumable(&self) -> u64 {
        self.lock().compacted_rv
    }

    /// Reads one object.
    pub fn get(&self, at: &ObjectRef) -> Result<Arc<Value>, ApiError> {
        self.lock()
            .objects
            .get(at)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&RESOURCES[at.resource], &at.name))
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

    /// Where a watch from `from_rv` starts: the history after it (or the current objects as
    /// ADDED when `from_rv` is `None`), and the live feed, taken together so nothing falls
    /// between them.
    pub fn watch_from(
        &self,
        resource: usize,
        namespace: Option<&str>,
        from_rv: Option<u64>,
    ) -> WatchStart {
        let state = self.lock();
        let backlog = match from_rv {
            Some(rv) if rv < state.compacted_rv => {
                return WatchStart::Expired {
                    oldest: state.compacted_rv,
                };
            }
            Some(rv) => state
                .history
                .iter()
                .filter(|c| c.rv > rv && c.at.resource == resource)
                .filter(|c| namespace.is_none_or(|ns| c.at.namespace == ns))
                .cloned()
                .collect(),
            None => objects_of(&state, resource, namespace)
                .map(|obj| {
                    Arc::new(Change {
                        rv: object_rv(obj),
                        change_type: ChangeType::Added,
                        at: ref_of(resource, obj),
                        object: obj.clone(),
                    })
                })
                .collect(),
        };
        WatchStart::Resume(backlog, self.feed.subscribe())
    }

    /// Creates an object. `namespace` is empty for cluster-scoped resources.
    pub fn create(
        &self,
        resource: usize,
        namespace: &str,
        mut object: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let def = &RESOURCES[resource];
        let meta = metadata_mut(&mut object)?;
        let name = match meta.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) => format!("{prefix}{}", random_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        def,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        validate_name(def, &name)?;
        check_namespace_field(def, meta, namespace)?;
        let mut state = self.lock();
        if def.namespaced && !namespace_exists(&state, namespace) {
            return Err(ApiError::namespace_not_found(namespace));
        }
        let at = ObjectRef {
            resource,
            namespace: namespace.to_string(),
            name: name.clone(),
        };
        if state.objects.contains_key(&at) {
            return Err(ApiError::already_exists(def, &name));
        }
        let rv = state.rv + 1;
        let meta = metadata_mut(&mut object)?;
        meta.insert("name".into(), name.into());
        if def.namespaced {
            meta.insert("namespace".into(), namespace.into());
        }
        meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        meta.insert("resourceVersion".into(), rv.to_string().into());
        meta.insert("generation".into(), 1.into());
        meta.insert("creationTimestamp".into(), now_rfc3339().into());
        set_type_meta(def, &mut object);
        apply_defaults(def, &mut object);
        Ok(commit(
            &mut state,
            &self.feed,
            at,
            ChangeType::Added,
            object,
        ))
    }

    /// Replaces an object. A resourceVersion in `object` that is not the current one is a
    /// conflict; none means "whatever is there".
    pub fn update(&self, at: &ObjectRef, object: Value) -> Result<Arc<Value>, ApiError> {
        self.modify(at, |_| Ok(object))
    }

    /// Changes an object through `change`, which gets the current object and returns the new
    /// one; the same optimistic-concurrency rule as [`Cluster::update`] applies to its result.
    pub fn modify(
        &self,
        at: &ObjectRef,
        change: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let def = &RESOURCES[at.resource];
        let mut state = self.lock();
        let current = state
            .objects
            .get(at)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, &at.name))?;
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
        check_namespace_field(def, meta, &at.namespace)?;
        let current_rv = object_rv(&current);
        if let Some(rv) = meta.get("resourceVersion").and_then(Value::as_str)
            && !rv.is_empty()
            && rv != current_rv.to_string()
        {
            return Err(ApiError::conflict(def, &at.name));
        }
        let rv = state.rv + 1;
        let current_meta = &current["metadata"];
        for field in ["uid", "creationTimestamp", "name"] {
            meta.insert(field.into(), current_meta[field].clone());
        }
        if def.namespaced {
            meta.insert("namespace".into(), at.namespace.clone().into());
        }
        meta.insert("resourceVersion".into(), rv.to_string().into());
        let generation = current_meta["generation"].as_i64().unwrap_or(1);
        let bumped = if spec_changed(&current, &object) {
            generation + 1
        } else {
            generation
        };
        metadata_mut(&mut object)?.insert("generation".into(), bumped.into());
        set_type_meta(def, &mut object);
        Ok(commit(
            &mut state,
            &self.feed,
            at.clone(),
            ChangeType::Modified,
            object,
        ))
    }

    /// Deletes an object and returns its final state. Deleting a namespace deletes what is in it.
    pub fn delete(&self, at: &ObjectRef) -> Result<Arc<Value>, ApiError> {
        let def = &RESOURCES[at.resource];
        let mut state = self.lock();
        if !state.objects.contains_key(at) {
            return Err(ApiError::not_found(def, &at.name));
        }
        if def.plural == "namespaces" && def.group.is_empty() {
            let inside: Vec<ObjectRef> = state
                .objects
                .keys()
                .filter(|k| RESOURCES[k.resource].namespaced && k.namespace == at.name)
                .cloned()
                .collect();
            for key in inside {
                delete_locked(&mut state, &self.feed, &key);
            }
        }
        Ok(delete_locked(&mut state, &self.feed, at))
    }

    /// Drops every change from the history, so watches from any earlier version get 410 Gone.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.compacted_rv = state.rv;
    }
}

fn objects_of<'a>(
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

fn delete_locked(
    state: &mut State,
    feed: &broadcast::Sender<Arc<Change>>,
    at: &ObjectRef,
) -> Arc<Value> {
    let mut object = state
        .objects
        .remove(at)
        .map(Arc::unwrap_or_clone)
        .unwrap_or_default();
    let rv = state.rv + 1;
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), rv.to_string().into());
    }
    commit(state, feed, at.clone(), ChangeType::Deleted, object)
}

/// Applies a change: bumps the resourceVersion, updates the objects, records the history and
/// publishes it. The caller has already set `object`'s resourceVersion to `state.rv + 1`.
fn commit(
    state: &mut State,
    feed: &broadcast::Sender<Arc<Change>>,
    at: ObjectRef,
    change_type: ChangeType,
    object: Value,
) -> Arc<Value> {
    state.rv += 1;
    let object = Arc::new(object);
    if change_type == ChangeType::Deleted {
        state.objects.remove(&at);
    } else {
        state.objects.insert(at.clone(), object.clone());
    }
    let change = Arc::new(Change {
        rv: state.rv,
        change_type,
        at,
        object: object.clone(),
    });
    state.history.push_back(change.clone());
    while state.history.len() > state.history_limit {
        if let Some(old) = state.history.pop_front() {
            state.compacted_rv = old.rv;
        }
    }
    // No receivers is fine: nobody is watching.
    let _ = feed.send(change);
    object
}

fn namespace_exists(state: &State, namespace: &str) -> bool {
    let at = ObjectRef {
        resource: resource_index("", "v1", "namespaces"),
        namespace: String::new(),
        name: namespace.to_string(),
    };
    state.objects.contains_key(&at)
}

fn resource_index(group: &str, version: &str, plural: &str) -> usize {
    super::resources::find(group, version, plural).expect("the resource is in the catalogue")
}

fn metadata_mut(object: &mut Value) -> Result<&mut serde_json::Map<String, Value>, ApiError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object".to_string()))?;
    map.entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be a JSON object".to_string()))
}

fn check_namespace_field(
    def: &ResourceDef,
    meta: &serde_json::Map<String, Value>,
    namespace: &str,
) -> Result<(), ApiError> {
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if def.namespaced && !ns.is_empty() && ns != namespace => {
            Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({ns}) does not match the namespace sent on the request ({namespace})"
            )))
        }
        _ => Ok(()),
    }
}

fn validate_name(def: &ResourceDef, name: &str) -> Result<(), ApiError> {
    let ok = name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            def,
            name,
            &format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

/// Whether anything but metadata and status changed (what bumps `metadata.generation`).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for field in ["metadata", "status", "kind", "apiVersion"] {
                map.remove(field);
            }
        }
        v
    };
    strip(old) != strip(new)
}

/// Defaults the API server fills in on create.
fn apply_defaults(def: &ResourceDef, object: &mut Value) {
    if def.kind == "Secret" && object["type"].as_str().is_none_or(str::is_empty) {
        object["type"] = "Opaque".into();
    }
}

fn set_type_meta(def: &ResourceDef, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), def.api_version().into());
        map.insert("kind".into(), def.kind.into());
    }
}

/// The resourceVersion of a stored object.
pub fn object_rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn ref_of(resource: usize, object: &Value) -> ObjectRef {
    let meta = &object["metadata"];
    ObjectRef {
        resource,
        namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
    }
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The current time as the API server writes timestamps (`2024-01-02T03:04:05Z`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> Value {
        json!({"metadata": {"name": name}, "data": {"k": "v"}})
    }

    fn configmaps() -> usize {
        resource_index("", "v1", "configmaps")
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
    fn watch_from_a_compacted_version_is_expired() {
        let cluster = Cluster::new(2);
        for name in ["a", "b", "c", "d"] {
            cluster.create(configmaps(), "default", cm(name)).unwrap();
        }
        let rv = cluster.resource_version();
        assert!(matches!(
            cluster.watch_from(configmaps(), None, Some(1)),
            WatchStart::Expired { .. }
        ));
        match cluster.watch_from(configmaps(), None, Some(rv - 1)) {
            WatchStart::Resume(backlog, _) => assert_eq!(backlog.len(), 1),
            WatchStart::Expired { .. } => panic!("recent version must resume"),
        }
    }

    #[test]
    fn deleting_a_namespace_deletes_its_objects() {
        let cluster = Cluster::default();
        let ns = resource_index("", "v1", "namespaces");
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
}
