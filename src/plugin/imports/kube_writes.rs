//! The `kube` import: writes to the Kubernetes API, each allowed only where the handler's
//! `capabilities:` grant it, made with the daemon's own client through the dynamic API and
//! the resource as the route's informer resolved it.
//!
//! A write awaits the API server while the plugin waits. Epoch interruption (which only
//! fires while wasm code runs) cannot stop it there; the host's bound on the whole call
//! does (`plugin::host`): a write still waiting at the call's deadline ends the call as a
//! timeout.

use crate::util::kube_error;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::super::bindings::switchyard::plugin::kube as wit;
use super::{HostContext, names_of};
use crate::config::Verb;
use crate::informer::Informer;
use crate::plugin::host::CallState;
use crate::util::identity::{patch_params, post_params};

/// The field manager of a handler's writes (server-side applies, patches, Events).
pub fn field_manager(handler: &str) -> String {
    format!("switchyard-{handler}")
}

impl HostContext {
    /// The informer of `resource` if the handler may `verb` it; the refusal otherwise.
    /// `action` names the write in the message (`merge-patch`).
    pub(super) fn writable(
        &self,
        resource: &str,
        verb: Verb,
        action: &str,
    ) -> Result<&Arc<Informer>, String> {
        let informers = self.resolve(resource).map_err(|_| {
            format!(
                "capability denied: handler {:?} may write only resources its routes watch, and none watches {resource:?}",
                self.handler
            )
        })?;
        let informer = informers[0];
        let names = names_of(informer);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        if !self.capabilities.allows(&names, verb) {
            return Err(format!(
                "capability denied: handler {handler:?} may not {action} {plural} (grant it with handlers.{handler}.capabilities.{plural}: [{verb}])",
                handler = self.handler,
                plural = informer.key().resource.plural,
            ));
        }
        Ok(informer)
    }

    fn client(&self) -> Result<&kube::Client, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "Kubernetes writes are not available to this plugin call".to_string())
    }

    fn api(
        &self,
        informer: &Informer,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, String> {
        let client = self.client()?.clone();
        Ok(match namespace {
            Some(ns) => Api::namespaced_with(client, ns, informer.resource()),
            None => Api::all_with(client, informer.resource()),
        })
    }

    /// Server-side apply of `body` to `resource` `namespace/name`, forcing conflicts, with
    /// field manager `switchyard-HANDLER`. Returns the stored object as JSON.
    pub async fn apply(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        body: &str,
    ) -> Result<String, String> {
        if let Some(capture) = self.capturing() {
            let body: Value = serde_json::from_str(body)
                .map_err(|e| format!("apply: the body is not JSON: {e}"))?;
            let write = captured("apply", resource, namespace, name, body);
            return self.capture_write(capture, Verb::Apply, write);
        }
        let informer = self.writable(resource, Verb::Apply, "apply")?;
        let mut body: Value =
            serde_json::from_str(body).map_err(|e| format!("apply: the body is not JSON: {e}"))?;
        self.record_sent(|| captured("apply", resource, namespace, name, body.clone()));
        let Some(object) = body.as_object_mut() else {
            return Err("apply: the body must be a JSON object".into());
        };
        let ar = informer.resource();
        object
            .entry("apiVersion")
            .or_insert_with(|| ar.api_version.clone().into());
        object
            .entry("kind")
            .or_insert_with(|| ar.kind.clone().into());
        let meta = object.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else {
            return Err("apply: metadata must be a JSON object".into());
        };
        match meta.get("name").and_then(Value::as_str) {
            Some(n) if n != name => {
                return Err(format!(
                    "apply: the body names {n:?} but the call names {name:?}"
                ));
            }
            Some(_) => {}
            None => {
                meta.insert("name".into(), name.into());
            }
        }
        if let Some(ns) = namespace {
            meta.entry("namespace").or_insert_with(|| ns.into());
        }
        let params = PatchParams::apply(&field_manager(&self.handler)).force();
        let stored = self
            .api(informer, namespace)?
            .patch(name, &params, &Patch::Apply(&body))
            .await
            .map_err(|e| failed("apply", informer, namespace, name, &e))?;
        serde_json::to_string(&stored).map_err(|e| e.to_string())
    }

    /// JSON merge patch of `resource` `namespace/name`. Returns the patched object as JSON.
    pub async fn merge_patch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &str,
    ) -> Result<String, String> {
        if let Some(capture) = self.capturing() {
            let patch: Value = serde_json::from_str(patch)
                .map_err(|e| format!("merge-patch: the patch is not JSON: {e}"))?;
            let write = captured("merge-patch", resource, namespace, name, patch);
            return self.capture_write(capture, Verb::Patch, write);
        }
        let informer = self.writable(resource, Verb::Patch, "merge-patch")?;
        let patch: Value = serde_json::from_str(patch)
            .map_err(|e| format!("merge-patch: the patch is not JSON: {e}"))?;
        self.record_sent(|| captured("merge-patch", resource, namespace, name, patch.clone()));
        let patched = self
            .api(informer, namespace)?
            .patch(
                name,
                &patch_params(&field_manager(&self.handler)),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| failed("merge-patch", informer, namespace, name, &e))?;
        serde_json::to_string(&patched).map_err(|e| e.to_string())
    }

    /// Deletes `resource` `namespace/name`; an object already gone is fine.
    pub async fn delete(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), String> {
        if let Some(capture) = self.capturing() {
            let write = captured("delete", resource, namespace, name, Value::Null);
            return self.capture_write(capture, Verb::Delete, write).map(|_| ());
        }
        let informer = self.writable(resource, Verb::Delete, "delete")?;
        self.record_sent(|| captured("delete", resource, namespace, name, Value::Null));
        match self
            .api(informer, namespace)?
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(failed("delete", informer, namespace, name, &e)),
        }
    }

    /// Records a core v1 Event about `object` (the object as JSON, or a reference with
    /// `apiVersion`, `kind`, `name`, `namespace`, `uid`).
    pub async fn create_event(
        &self,
        object: &str,
        event_type: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), String> {
        let object: Value = serde_json::from_str(object)
            .map_err(|e| format!("create-event: the object is not JSON: {e}"))?;
        let field = |name: &str| {
            object
                .get("metadata")
                .and_then(|m| m.get(name))
                .or_else(|| object.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let (Some(api_version), Some(kind), Some(name)) = (
            object.get("apiVersion").and_then(Value::as_str),
            object.get("kind").and_then(Value::as_str),
            field("name"),
        ) else {
            return Err("create-event: the object needs apiVersion, kind and a name".into());
        };
        if !matches!(event_type, "Normal" | "Warning") {
            return Err(format!(
                "create-event: type {event_type:?} must be Normal or Warning"
            ));
        }
        if reason.is_empty() {
            return Err("create-event: give a reason (UpperCamelCase, such as LabelAdded)".into());
        }
        if let Some(capture) = self.capturing() {
            let body = json!({"type": event_type, "reason": reason, "message": message});
            let namespace = field("namespace");
            let write = captured("create-event", kind, namespace.as_deref(), &name, body);
            return self.capture_write(capture, Verb::Event, write).map(|_| ());
        }
        let Some(informer) = self
            .resources
            .iter()
            .find(|i| i.resource().kind == kind && i.resource().api_version == api_version)
        else {
            return Err(format!(
                "capability denied: handler {:?} may record events only about objects its routes watch, not {api_version} {kind}",
                self.handler
            ));
        };
        let plural = informer.key().resource.plural.clone();
        self.writable(&plural, Verb::Event, "record events about")?;
        let namespace = field("namespace");
        self.record_sent(|| {
            let body = json!({"type": event_type, "reason": reason, "message": message});
            captured("create-event", kind, namespace.as_deref(), &name, body)
        });
        let event_namespace = namespace.clone().unwrap_or_else(|| "default".into());
        let manager = field_manager(&self.handler);
        let now = crate::util::rfc3339(SystemTime::now());
        let key = json!([
            &manager,
            api_version,
            kind,
            &namespace,
            &name,
            field("uid"),
            event_type,
            reason,
            message
        ])
        .to_string();
        let event = json!({
            "metadata": {"namespace": event_namespace},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "namespace": namespace,
                "uid": field("uid"),
                "resourceVersion": field("resourceVersion"),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": manager},
            "reportingComponent": "switchyard",
            "reportingInstance": self.handler.to_string(),
        });
        let api: Api<CoreEvent> = Api::namespaced(self.client()?.clone(), &event_namespace);
        count_or_create(&api, key, &manager, event, &now)
            .await
            .map_err(|e| format!("create-event about {kind} {name} failed: {e}"))
    }
}

/// Counts `event` into the Event recorded for `key` when there is one (its `count` up,
/// `lastTimestamp` now), as client-go's event recorder does; else creates it, named after
/// the object with a random suffix.
async fn count_or_create(
    api: &Api<CoreEvent>,
    key: String,
    manager: &str,
    mut event: Value,
    now: &str,
) -> Result<(), String> {
    if let Some((name, count)) = recorded::get(&key) {
        let patch = json!({"count": count + 1, "lastTimestamp": now});
        match api
            .patch(&name, &patch_params(manager), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                recorded::put(key, name, count + 1);
                return Ok(());
            }
            // Gone (expired, or deleted): a new one.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(kube_error(&e)),
        }
    }
    let object = event["involvedObject"]["name"].as_str().unwrap_or("event");
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{object}.{}", &suffix[..16]);
    event["metadata"]["name"] = name.clone().into();
    let event: CoreEvent = serde_json::from_value(event).map_err(|e| e.to_string())?;
    api.create(&post_params(manager), &event)
        .await
        .map_err(|e| kube_error(&e))?;
    recorded::put(key, name, 1);
    Ok(())
}

/// The Events recorded lately, by what they say (source, object, type, reason, message),
/// so that one said again is counted into the same Event (its `count` and
/// `lastTimestamp`), as client-go's event recorder does instead of making a new one. Shared
/// by every handler of the process (the source names the handler), so a handler rebuilt
/// (a config change, a rotated Secret) goes on counting; the oldest are forgotten past
/// [`recorded::KEPT`], as client-go's cache of 4096.
mod recorded {
    use std::collections::{HashMap, VecDeque};
    use std::sync::{Mutex, OnceLock};

    use crate::util::lock;

    /// Events remembered.
    pub(super) const KEPT: usize = 4096;

    #[derive(Default)]
    struct Recorded {
        /// Each key's Event name and count.
        events: HashMap<String, (String, i32)>,
        /// The keys, oldest first.
        order: VecDeque<String>,
    }

    fn recorded() -> &'static Mutex<Recorded> {
        static RECORDED: OnceLock<Mutex<Recorded>> = OnceLock::new();
        RECORDED.get_or_init(Mutex::default)
    }

    /// The Event recorded for `key` and its count.
    pub(super) fn get(key: &str) -> Option<(String, i32)> {
        lock(recorded()).events.get(key).cloned()
    }

    /// Records the Event for `key` with its count.
    pub(super) fn put(key: String, name: String, count: i32) {
        let mut recorded = lock(recorded());
        if recorded.events.insert(key.clone(), (name, count)).is_none() {
            recorded.order.push_back(key);
        }
        while recorded.order.len() > KEPT {
            if let Some(oldest) = recorded.order.pop_front() {
                recorded.events.remove(&oldest);
            }
        }
    }
}

/// A write for capture mode.
fn captured(
    action: &'static str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
    body: Value,
) -> super::capture::CapturedWrite {
    super::capture::CapturedWrite {
        action,
        resource: resource.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
        body,
    }
}

/// `merge-patch configmaps default/x failed: ...`.
fn failed(
    action: &str,
    informer: &Informer,
    namespace: Option<&str>,
    name: &str,
    error: &kube::Error,
) -> String {
    if let kube::Error::Api(status) = error {
        answered(status.code);
    }
    let object = match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    format!(
        "{action} {} {object} failed: {}",
        informer.key().resource.plural,
        kube_error(error)
    )
}

tokio::task_local! {
    /// The status code the API server answered the traced write in progress with, when
    /// it answered with an error (a success's code is the verb's).
    static ANSWER: std::cell::Cell<Option<u16>>;
}

/// Notes the API server's status code for the traced write in progress, if one is.
fn answered(code: u16) {
    let _ = ANSWER.try_with(|answer| answer.set(Some(code)));
}

/// Runs `write` (`verb` of `resource` `object`), in a span under the call's when the call
/// is traced; a success is recorded as `ok_code`.
async fn traced<T>(
    call: Option<&crate::traces::CallTrace>,
    (verb, resource, object): (&str, &str, String),
    ok_code: u16,
    write: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let Some(call) = call else {
        return write.await;
    };
    let span = call.write(verb, resource, object);
    let (result, code) = ANSWER
        .scope(std::cell::Cell::new(None), async {
            let result = write.await;
            (result, ANSWER.with(std::cell::Cell::get))
        })
        .await;
    span.end(match (&result, code) {
        (_, Some(code)) => Ok(code),
        (Ok(_), None) => Ok(ok_code),
        (Err(e), None) => Err(e.as_str()),
    });
    result
}

/// `namespace/name`, or `name`.
fn object_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

impl wit::Host for CallState {
    async fn apply(
        &mut self,
        resource: String,
        namespace: Option<String>,
        name: String,
        body: String,
    ) -> wasmtime::Result<Result<String, String>> {
        let ctx = self.context().clone();
        let write = ctx.apply(&resource, namespace.as_deref(), &name, &body);
        let about = (
            "apply",
            resource.as_str(),
            object_of(namespace.as_deref(), &name),
        );
        Ok(traced(self.trace(), about, 200, write).await)
    }

    async fn merge_patch(
        &mut self,
        resource: String,
        namespace: Option<String>,
        name: String,
        patch: String,
    ) -> wasmtime::Result<Result<String, String>> {
        let ctx = self.context().clone();
        let write = ctx.merge_patch(&resource, namespace.as_deref(), &name, &patch);
        let about = (
            "merge-patch",
            resource.as_str(),
            object_of(namespace.as_deref(), &name),
        );
        Ok(traced(self.trace(), about, 200, write).await)
    }

    async fn delete(
        &mut self,
        resource: String,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let ctx = self.context().clone();
        let write = ctx.delete(&resource, namespace.as_deref(), &name);
        let about = (
            "delete",
            resource.as_str(),
            object_of(namespace.as_deref(), &name),
        );
        Ok(traced(self.trace(), about, 200, write).await)
    }

    async fn create_event(
        &mut self,
        object: String,
        event_type: String,
        reason: String,
        message: String,
    ) -> wasmtime::Result<Result<(), String>> {
        let ctx = self.context().clone();
        let write = ctx.create_event(&object, &event_type, &reason, &message);
        let about = ("create", "events", reason.clone());
        Ok(traced(self.trace(), about, 201, write).await)
    }
}
