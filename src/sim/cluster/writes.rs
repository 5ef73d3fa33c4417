//! The cluster's writes: create, update (or modify in place), delete with finalizers and
//! preconditions, each checked as kube-apiserver checks it and committed as one change
//! (a new resourceVersion, the history, the live feed), or, as a dry run, only checked.

use std::sync::Arc;

use serde_json::Value;

use super::{
    Change, ChangeType, Cluster, Deletion, ObjectRef, Preconditions, State, WriteMode, def_of,
    object_rv,
};
use crate::sim::crd;
use crate::sim::error::ApiError;
use crate::sim::object::{
    apply_defaults, check_namespace_field, finalizers, fold_string_data, metadata_mut, now_rfc3339,
    random_suffix, set_type_meta, spec_changed, validate_name,
};
use crate::sim::resources::{ResourceDef, builtin_index};

impl Cluster {
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
        fold_string_data(&def, &mut object);
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
        fold_string_data(&def, &mut object);
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
