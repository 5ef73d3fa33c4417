//! A route's finalizer (`finalizer:` on a route): put on each object the route delivers
//! before the handler sees it, and taken off only after the handler has handled the
//! object's deletion (or its leaving the route), so a deletion cannot finish unseen.
//!
//! Both writes are JSON patches that `test` what they rely on, retried on the object read
//! again when the test fails: adding tests the list it appends to (or the resourceVersion,
//! when the object has no list yet), removing tests the uid and the entry at the index it
//! removes. A merge patch would replace the whole list and could drop a finalizer another
//! controller added meanwhile; a JSON patch changes one entry and fails instead of
//! overwriting. The writes come from the daemon, never from the plugin, and only from the
//! worker that handles the object: in leader and sharded modes, the replica that owns it.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, Patch};
use serde_json::{Value, json};

use crate::util::identity::{FIELD_MANAGER, patch_params};
use crate::util::{FastMap as HashMap, kube_error};

/// Attempts at a write whose test keeps failing (another writer keeps changing the object).
const ATTEMPTS: usize = 5;

/// A finalizer write that failed, with the object and why.
#[derive(Debug, thiserror::Error)]
#[error("finalizer {finalizer} on {object}: {reason}")]
pub struct Error {
    /// The finalizer.
    pub finalizer: String,
    /// `Kind namespace/name`.
    pub object: String,
    /// Why it failed.
    pub reason: String,
}

/// The finalizers of the routes feeding one handler, by route; set by the daemon whenever
/// the config is (re)applied.
#[derive(Default)]
pub struct Finalizers {
    by_route: HashMap<Arc<str>, Arc<RouteFinalizer>>,
}

impl Finalizers {
    /// Routes' finalizers, by route name.
    pub fn new(by_route: impl IntoIterator<Item = (Arc<str>, Arc<RouteFinalizer>)>) -> Self {
        Self {
            by_route: by_route.into_iter().collect(),
        }
    }

    /// The finalizer of `route`, if it has one.
    pub fn of(&self, route: &str) -> Option<&Arc<RouteFinalizer>> {
        self.by_route.get(route)
    }

    /// Whether `route` holds its objects with a finalizer.
    pub fn holds(&self, route: &str) -> bool {
        self.by_route.contains_key(route)
    }
}

/// One route's finalizer: its name, the client that writes it and the resources the route
/// watches (to find an object's resource from its `apiVersion` and `kind`).
pub struct RouteFinalizer {
    name: String,
    client: kube::Client,
    resources: Vec<ApiResource>,
}

/// The parts of an object a finalizer write needs.
struct Target {
    api: Api<DynamicObject>,
    name: String,
    described: String,
}

impl RouteFinalizer {
    /// The finalizer `name`, written with `client` to objects of `resources`.
    pub fn new(name: &str, client: kube::Client, resources: Vec<ApiResource>) -> Self {
        Self {
            name: name.to_string(),
            client,
            resources,
        }
    }

    /// The finalizer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `object` (JSON) lists this finalizer.
    pub fn is_on(&self, object: &Value) -> bool {
        finalizers(object).iter().any(|f| *f == self.name)
    }

    /// Puts the finalizer on `object` (the JSON the route delivered) unless it is there or
    /// the object is being deleted (the API server refuses new finalizers then). An object
    /// gone meanwhile needs none: its deletion is on its way.
    pub async fn add(&self, object: &str) -> Result<(), Error> {
        let mut current: Value = serde_json::from_str(object).map_err(|e| Error {
            finalizer: self.name.clone(),
            object: "an object".into(),
            reason: format!("the delivered object is not JSON: {e}"),
        })?;
        let target = self.target(&current)?;
        for _ in 0..ATTEMPTS {
            if self.is_on(&current) || is_terminating(&current) {
                return Ok(());
            }
            let ops = match current.pointer("/metadata/finalizers") {
                Some(list) => json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": list},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": self.name},
                ]),
                None => json!([
                    {"op": "test", "path": "/metadata/resourceVersion",
                     "value": current.pointer("/metadata/resourceVersion")},
                    {"op": "add", "path": "/metadata/finalizers", "value": [self.name]},
                ]),
            };
            match self.patch(&target, ops).await? {
                Written::Done | Written::Gone => return Ok(()),
                Written::Conflict => match self.read(&target).await? {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                },
            }
        }
        Err(self.gave_up(&target))
    }

    /// Takes the finalizer off the object `object` (JSON) describes, as it is now on the
    /// server: nothing to do if it is gone, is another object under the same name (another
    /// uid), or does not hold the finalizer.
    pub async fn remove(&self, object: &str) -> Result<(), Error> {
        let delivered: Value = serde_json::from_str(object).map_err(|e| Error {
            finalizer: self.name.clone(),
            object: "an object".into(),
            reason: format!("the delivered object is not JSON: {e}"),
        })?;
        let target = self.target(&delivered)?;
        let uid = delivered.pointer("/metadata/uid").cloned();
        for _ in 0..ATTEMPTS {
            let Some(current) = self.read(&target).await? else {
                return Ok(());
            };
            if uid.is_some() && current.pointer("/metadata/uid") != uid.as_ref() {
                return Ok(());
            }
            let Some(index) = finalizers(&current).iter().position(|f| *f == self.name) else {
                return Ok(());
            };
            let at = format!("/metadata/finalizers/{index}");
            let ops = json!([
                {"op": "test", "path": "/metadata/uid", "value": current.pointer("/metadata/uid")},
                {"op": "test", "path": at, "value": self.name},
                {"op": "remove", "path": at},
            ]);
            match self.patch(&target, ops).await? {
                Written::Done | Written::Gone => return Ok(()),
                Written::Conflict => {}
            }
        }
        Err(self.gave_up(&target))
    }

    /// The API and name of `object`, from its `apiVersion`, `kind` and metadata.
    fn target(&self, object: &Value) -> Result<Target, Error> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let (api_version, kind) = (
            text("/apiVersion").unwrap_or_default(),
            text("/kind").unwrap_or_default(),
        );
        let name = text("/metadata/name").unwrap_or_default().to_string();
        let namespace = text("/metadata/namespace");
        let described = match namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        let Some(resource) = self
            .resources
            .iter()
            .find(|r| r.api_version == api_version && r.kind == kind)
        else {
            return Err(Error {
                finalizer: self.name.clone(),
                object: described,
                reason: format!("the route watches no resource of {api_version} {kind}"),
            });
        };
        let client = self.client.clone();
        let api = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, resource),
            None => Api::all_with(client, resource),
        };
        Ok(Target {
            api,
            name,
            described,
        })
    }

    /// The object as the server has it now; `None` when it is gone.
    async fn read(&self, target: &Target) -> Result<Option<Value>, Error> {
        match target.api.get_opt(&target.name).await {
            Ok(Some(object)) => serde_json::to_value(object)
                .map(Some)
                .map_err(|e| self.failed(target, e.to_string())),
            Ok(None) => Ok(None),
            Err(e) => Err(self.failed(target, format!("cannot read it: {}", kube_error(&e)))),
        }
    }

    /// Sends a JSON patch: done, the object is gone, or a test failed (or the write
    /// conflicted) and the caller reads the object again.
    async fn patch(&self, target: &Target, ops: Value) -> Result<Written, Error> {
        let ops: json_patch::Patch =
            serde_json::from_value(ops).map_err(|e| self.failed(target, e.to_string()))?;
        match target
            .api
            .patch(
                &target.name,
                &patch_params(FIELD_MANAGER),
                &Patch::<()>::Json(ops),
            )
            .await
        {
            Ok(_) => Ok(Written::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => Ok(Written::Conflict),
            Err(e) => Err(self.failed(target, format!("cannot patch it: {}", kube_error(&e)))),
        }
    }

    fn failed(&self, target: &Target, reason: String) -> Error {
        Error {
            finalizer: self.name.clone(),
            object: target.described.clone(),
            reason,
        }
    }

    fn gave_up(&self, target: &Target) -> Error {
        self.failed(
            target,
            format!("the object kept changing under {ATTEMPTS} attempts to write it"),
        )
    }
}

/// What a patch came to.
enum Written {
    Done,
    Gone,
    Conflict,
}

/// The object's finalizers.
pub fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether the object is being deleted (it has a `deletionTimestamp`).
pub fn is_terminating(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}
