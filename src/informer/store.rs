//! The informer's cache: the current state of every watched object, with indexes, safe for
//! concurrent readers while the reflector writes.

use crate::util::{FastMap as HashMap, FastSet as HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::object::{CachedObject, ObjectKey};
use super::wire::Received;
use crate::config::NAMESPACE_INDEX;

/// How an index computes an object's values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IndexFn {
    /// By `metadata.namespace`.
    Namespace,
    /// By the value of one label.
    Label(String),
    /// By the strings (or numbers, or bools) at a dotted field path such as `spec.nodeName`;
    /// a segment ending in `[]` visits each element of a list, so
    /// `spec.template.spec.volumes[].configMap.name` gives one value per volume that has one.
    Field(String),
    /// The values of each, together: one index over several paths.
    Any(Vec<IndexFn>),
}

impl IndexFn {
    /// The values an object has for this index, each once, in the order found.
    pub fn values(&self, object: &Received) -> Vec<String> {
        let mut found = Vec::new();
        self.collect(object, &mut found);
        let mut seen = std::collections::HashSet::new();
        found.retain(|v| seen.insert(v.clone()));
        found
    }

    fn collect(&self, object: &Received, found: &mut Vec<String>) {
        match self {
            IndexFn::Namespace => found.extend(object.meta().namespace.clone()),
            IndexFn::Label(key) => {
                found.extend(
                    object
                        .meta()
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(key))
                        .cloned(),
                );
            }
            IndexFn::Field(path) => {
                if let Some(value) = object.value() {
                    let parts: Vec<&str> = path.split('.').collect();
                    lookup(value, &parts, found);
                }
            }
            IndexFn::Any(each) => each.iter().for_each(|f| f.collect(object, found)),
        }
    }
}

/// Adds the scalars at `parts` below `value` to `found`; a part ending in `[]` goes into
/// each element of the list there.
fn lookup(value: &serde_json::Value, parts: &[&str], found: &mut Vec<String>) {
    let Some((part, rest)) = parts.split_first() else {
        match value {
            serde_json::Value::String(s) => found.push(s.clone()),
            serde_json::Value::Number(n) => found.push(n.to_string()),
            serde_json::Value::Bool(b) => found.push(b.to_string()),
            _ => {}
        }
        return;
    };
    match part.strip_suffix("[]") {
        Some(list) => {
            if let Some(serde_json::Value::Array(items)) = value.get(list) {
                items.iter().for_each(|item| lookup(item, rest, found));
            }
        }
        None => {
            if let Some(next) = value.get(*part) {
                lookup(next, rest, found);
            }
        }
    }
}

/// The indexes an informer keeps: name and function, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Indexers(Vec<(String, IndexFn)>);

impl Indexers {
    /// The indexes beyond the built-in namespace index, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &IndexFn)> {
        self.0
            .iter()
            .filter(|(name, _)| name != NAMESPACE_INDEX)
            .map(|(name, f)| (name.as_str(), f))
    }

    /// The namespace index, and `more`.
    pub fn new(more: impl IntoIterator<Item = (String, IndexFn)>) -> Self {
        let mut all = vec![(NAMESPACE_INDEX.to_string(), IndexFn::Namespace)];
        for (name, f) in more {
            if !all.iter().any(|(n, _)| *n == name) {
                all.push((name, f));
            }
        }
        Self(all)
    }

    /// The values of every index for an object, numbered by index position; the namespace
    /// index's only with `namespace`.
    pub fn values(&self, object: &Received, namespace: bool) -> Vec<(u16, Box<str>)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, (_, f))| namespace || *f != IndexFn::Namespace)
            .flat_map(|(i, (_, f))| {
                f.values(object)
                    .into_iter()
                    .map(move |v| (i as u16, v.into_boxed_str()))
            })
            .collect()
    }

    fn position(&self, name: &str) -> Option<u16> {
        self.0.iter().position(|(n, _)| n == name).map(|i| i as u16)
    }

    /// The index names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }
}

#[derive(Debug, Default)]
pub(super) struct Contents {
    objects: HashMap<ObjectKey, Arc<CachedObject>>,
    /// index number → value → keys.
    indexes: HashMap<u16, HashMap<Box<str>, HashSet<ObjectKey>>>,
}

impl Contents {
    /// Stores an object; returns the one it replaced.
    pub(super) fn insert(&mut self, object: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let key = object.key().clone();
        for (index, value) in object.index_values() {
            self.indexes
                .entry(*index)
                .or_default()
                .entry(value.clone())
                .or_default()
                .insert(key.clone());
        }
        let old = self.objects.insert(key, object);
        if let Some(old) = &old {
            self.unindex(old, true);
        }
        old
    }

    /// Makes room for `objects` objects in all, so a long list does not grow the map step by
    /// step.
    pub(super) fn reserve(&mut self, objects: usize) {
        self.objects
            .reserve(objects.saturating_sub(self.objects.len()));
    }

    /// Removes an object; returns it.
    pub(super) fn remove(&mut self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        let old = self.objects.remove(key)?;
        self.unindex(&old, false);
        Some(old)
    }

    /// Takes `old`'s index entries out, except those the current object with its key still
    /// has (when `replaced`).
    fn unindex(&mut self, old: &CachedObject, replaced: bool) {
        let current = if replaced {
            self.objects.get(old.key()).cloned()
        } else {
            None
        };
        for (index, value) in old.index_values() {
            if current.as_ref().is_some_and(|c| {
                c.index_values()
                    .iter()
                    .any(|(i, v)| i == index && v == value)
            }) {
                continue;
            }
            if let Some(values) = self.indexes.get_mut(index)
                && let Some(keys) = values.get_mut(value)
            {
                keys.remove(old.key());
                if keys.is_empty() {
                    values.remove(value);
                }
            }
        }
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.objects.keys()
    }
}

/// A cache of objects by key, with indexes. Cloning gives another handle to the same cache.
#[derive(Debug, Clone, Default)]
pub struct Store {
    contents: Arc<RwLock<Contents>>,
    indexers: Arc<Indexers>,
    /// The one namespace every object is in, when the watch is of one namespace. The
    /// namespace index is then the whole store (or nothing), so it is not kept.
    namespace: Option<Arc<str>>,
}

impl Store {
    /// An empty store keeping these indexes.
    pub fn new(indexers: Indexers) -> Self {
        Self::watching(indexers, None)
    }

    /// An empty store keeping these indexes, for a watch of `namespace` alone when given.
    pub fn watching(indexers: Indexers, namespace: Option<&str>) -> Self {
        Self {
            contents: Arc::default(),
            indexers: Arc::new(indexers),
            namespace: namespace.map(Arc::from),
        }
    }

    /// The values of every index the store keeps for `object`, numbered by index position.
    pub fn index_values(&self, object: &Received) -> Vec<(u16, Box<str>)> {
        self.indexers.values(object, self.namespace.is_none())
    }

    fn read(&self) -> RwLockReadGuard<'_, Contents> {
        crate::util::read(&self.contents)
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Contents> {
        crate::util::write(&self.contents)
    }

    /// The indexes this store keeps.
    pub fn indexers(&self) -> &Indexers {
        &self.indexers
    }

    /// The object with this key, if cached.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        self.read().objects.get(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<CachedObject>> {
        self.read().objects.values().cloned().collect()
    }

    /// The objects whose value for the index `index` is `value`; `None` if there is no
    /// such index.
    pub fn list_by_index(&self, index: &str, value: &str) -> Option<Vec<Arc<CachedObject>>> {
        let position = self.indexers.position(index)?;
        if let Some(namespace) = &self.namespace
            && index == NAMESPACE_INDEX
        {
            return Some(if **namespace == *value {
                self.list()
            } else {
                Vec::new()
            });
        }
        let contents = self.read();
        let keys = contents.indexes.get(&position).and_then(|v| v.get(value));
        Some(
            keys.into_iter()
                .flatten()
                .filter_map(|k| contents.objects.get(k).cloned())
                .collect(),
        )
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.read().objects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, DynamicObject};
    use serde_json::json;

    fn pod(name: &str, node: &str, app: &str) -> Received {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let mut o = DynamicObject::new(name, &ar).within("default");
        o.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        o.data = json!({"spec": {"nodeName": node}});
        Received::of_object(&o)
    }

    fn store_with(objects: Vec<Received>) -> Store {
        store_watching(None, objects)
    }

    fn store_watching(namespace: Option<&str>, objects: Vec<Received>) -> Store {
        let indexers = Indexers::new([
            ("node".to_string(), IndexFn::Field("spec.nodeName".into())),
            ("app".to_string(), IndexFn::Label("app".into())),
        ]);
        let store = Store::watching(indexers, namespace);
        for o in objects {
            let values = store.index_values(&o);
            let cached = CachedObject::received(o, values);
            store.write().insert(Arc::new(cached));
        }
        store
    }

    fn names(objects: Option<Vec<Arc<CachedObject>>>) -> Vec<String> {
        let mut names: Vec<String> = objects
            .unwrap()
            .iter()
            .map(|o| o.key().to_string())
            .collect();
        names.sort();
        names
    }

    fn deployment(name: &str, spec: serde_json::Value) -> Received {
        let ar = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let mut o = DynamicObject::new(name, &ar).within("default");
        o.data = json!({ "spec": spec });
        Received::of_object(&o)
    }

    #[test]
    fn a_list_path_and_several_paths_index_every_value_each_once_and_an_update_moves_them() {
        let by_config = IndexFn::Any(vec![
            IndexFn::Field("spec.volumes[].configMap.name".into()),
            IndexFn::Field("spec.containers[].envFrom[].configMapRef.name".into()),
        ]);
        let store = Store::new(Indexers::new([("cm".to_string(), by_config)]));
        let put = |o: Received| {
            let values = store.index_values(&o);
            store
                .write()
                .insert(Arc::new(CachedObject::received(o, values)));
        };
        put(deployment(
            "web",
            json!({
                "volumes": [{"configMap": {"name": "a"}}, {"secret": {"secretName": "s"}}, {"configMap": {"name": "b"}}],
                "containers": [{"envFrom": [{"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "c"}}]}, {"name": "x"}]
            }),
        ));
        put(deployment(
            "db",
            json!({"volumes": [{"configMap": {"name": "b"}}], "containers": "not a list"}),
        ));
        assert_eq!(names(store.list_by_index("cm", "a")), ["default/web"]);
        assert_eq!(
            names(store.list_by_index("cm", "b")),
            ["default/db", "default/web"]
        );
        assert_eq!(names(store.list_by_index("cm", "c")), ["default/web"]);
        let web = store.get(&ObjectKey::new(Some("default"), "web")).unwrap();
        let values: Vec<&str> = (web.index_values().iter())
            .filter(|(index, _)| *index != 0) // the namespace index
            .map(|(_, v)| &**v)
            .collect();
        assert_eq!(values, ["a", "b", "c"], "each value once");
        // An update that drops a reference takes the object out of that value only.
        put(deployment(
            "web",
            json!({"volumes": [{"configMap": {"name": "b"}}]}),
        ));
        assert!(names(store.list_by_index("cm", "a")).is_empty());
        assert!(names(store.list_by_index("cm", "c")).is_empty());
        assert_eq!(
            names(store.list_by_index("cm", "b")),
            ["default/db", "default/web"]
        );
    }

    #[test]
    fn list_by_index_finds_objects_by_field_label_and_namespace() {
        let store = store_with(vec![
            pod("a", "n1", "web"),
            pod("b", "n2", "web"),
            pod("c", "n1", "db"),
        ]);
        assert_eq!(
            names(store.list_by_index("node", "n1")),
            ["default/a", "default/c"]
        );
        assert_eq!(
            names(store.list_by_index("app", "web")),
            ["default/a", "default/b"]
        );
        assert_eq!(
            names(store.list_by_index(NAMESPACE_INDEX, "default")).len(),
            3
        );
        assert!(store.list_by_index("missing", "x").is_none());
    }

    #[test]
    fn a_store_of_one_namespace_answers_the_namespace_index_without_keeping_it() {
        let objects = || vec![pod("a", "n1", "web"), pod("b", "n2", "db")];
        let kept = store_with(objects());
        let one = store_watching(Some("default"), objects());
        for (namespace, expected) in [("default", 2), ("other", 0)] {
            assert_eq!(
                names(one.list_by_index(NAMESPACE_INDEX, namespace)),
                names(kept.list_by_index(NAMESPACE_INDEX, namespace)),
            );
            assert_eq!(
                names(one.list_by_index(NAMESPACE_INDEX, namespace)).len(),
                expected
            );
        }
        assert_eq!(names(one.list_by_index("node", "n2")), ["default/b"]);
        assert!(kept.write().indexes.contains_key(&0));
        assert!(
            !one.write().indexes.contains_key(&0),
            "no namespace index kept"
        );
        assert!(
            one.get(&ObjectKey::from_raw("default/a"))
                .unwrap()
                .index_values()
                .iter()
                .all(|(i, _)| *i != 0)
        );
    }

    #[test]
    fn an_update_moves_the_object_between_index_values_and_a_delete_removes_it() {
        let store = store_with(vec![pod("a", "n1", "web")]);
        let moved = pod("a", "n2", "web");
        let values = store.index_values(&moved);
        store
            .write()
            .insert(Arc::new(CachedObject::received(moved, values)));
        assert!(names(store.list_by_index("node", "n1")).is_empty());
        assert_eq!(names(store.list_by_index("node", "n2")), ["default/a"]);
        assert_eq!(
            names(store.list_by_index("app", "web")),
            ["default/a"],
            "unchanged values stay"
        );
        store.write().remove(&ObjectKey::from_raw("default/a"));
        assert!(names(store.list_by_index("node", "n2")).is_empty());
        assert!(names(store.list_by_index("app", "web")).is_empty());
    }
}
