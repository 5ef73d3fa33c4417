//! Capture mode for the `kube` and `cache` imports, in three kinds ([`CaptureMode`]):
//!
//! - offline, for `switchyard replay`: no API server, cache reads see an empty cache;
//! - shadow, for a handler's shadow plugin in the daemon: writes are never sent, but cache
//!   reads see the daemon's live caches and writes are checked exactly as the daemon checks
//!   them (so a refusal reads the same as the primary's);
//! - record, for the primary plugin of a handler with a shadow: writes are sent as usual and
//!   also recorded, so the two can be compared.
//!
//! In offline and shadow mode, a write the handler's capabilities allow is recorded, never
//! sent, and answered as the API server would answer a successful one:
//!
//! - `apply` returns the body, with `apiVersion`, `kind`, `metadata.name` and
//!   `metadata.namespace` filled in as the host fills them before sending;
//! - `merge-patch` returns the event's object with the patch merged in (RFC 7386) when the
//!   write names the event's object, otherwise the patch itself;
//! - `delete` and `create-event` return success.
//!
//! Metrics are checked as in the daemon and recorded with the writes. A write the
//! capabilities refuse gets the same refusal as in the daemon. Cache reads see
//! an empty cache: `get` finds nothing and the lists are empty, for the resources the
//! handler's routes watch.

use std::sync::Mutex;

use serde::Serialize;
use serde_json::{Value, json};

use super::HostContext;
use crate::config::Verb;
use crate::util::lock;

/// One write a plugin asked for in capture mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturedWrite {
    /// `apply`, `merge-patch`, `delete` or `create-event`.
    pub action: &'static str,
    /// The resource as the plugin named it (for `create-event`, the object's kind).
    pub resource: String,
    /// The namespace, for namespaced objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The body sent: the applied object, the patch, or the event (type, reason, message);
    /// null for `delete`.
    pub body: Value,
}

/// One metric a plugin recorded in capture mode (after the daemon's checks passed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturedMetric {
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The name as the plugin gave it.
    pub name: String,
    /// The value added, set or observed.
    pub value: f64,
    /// The plugin's labels, as given.
    pub labels: Vec<(String, String)>,
}

/// One outbound HTTP request a plugin made in capture mode: in a shadow run or a replay it
/// is recorded and answered by a stub, never sent; for the primary of a shadow it is sent
/// and recorded. Headers that carry credentials are redacted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturedRequest {
    /// The method.
    pub method: String,
    /// The URL.
    pub url: String,
    /// The headers, in order, credentials redacted.
    pub headers: Vec<(String, String)>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
}

/// What stands in for a redacted value.
pub use crate::util::redact::REDACTED;
use crate::util::redact::redact;

impl CapturedRequest {
    /// The request `parts` with `body`, credentials redacted.
    pub fn new(parts: &http::request::Parts, body: &[u8]) -> Self {
        let headers = parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = if is_credential(name.as_str()) {
                    REDACTED.to_string()
                } else {
                    redact(&String::from_utf8_lossy(value.as_bytes())).into_owned()
                };
                (name.as_str().to_string(), value)
            })
            .collect();
        Self {
            method: parts.method.to_string(),
            url: redact(&parts.uri.to_string()).into_owned(),
            headers,
            body: redact(&String::from_utf8_lossy(body)).into_owned(),
        }
    }
}

/// Whether a header's value is a credential: `Authorization`, cookies, and names that say
/// key, token, secret, signature or password.
fn is_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["authorization", "cookie"].iter().any(|n| name.contains(n))
        || ["key", "token", "secret", "signature", "password", "auth"]
            .iter()
            .any(|n| name.contains(n))
}

/// What a capture does with writes and cache reads (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureMode {
    /// Writes recorded, not sent; cache reads see an empty cache.
    Offline,
    /// Writes recorded, not sent; cache reads see the live caches.
    Shadow,
    /// Writes sent and recorded; cache reads see the live caches.
    Record,
}

/// What a handler's calls in capture mode may name, and the writes and metrics they asked
/// for.
#[derive(Debug)]
pub struct Capture {
    mode: CaptureMode,
    /// Every name the watched resources go by (plural, kind, `v1/configmaps`).
    names: Vec<String>,
    /// The object of the event being replayed.
    object: Value,
    writes: Mutex<Vec<CapturedWrite>>,
    metrics: Mutex<Vec<CapturedMetric>>,
    requests: Mutex<Vec<CapturedRequest>>,
}

impl Capture {
    /// Offline capture for one event about `object`, of resources going by `names`.
    pub fn new(names: Vec<String>, object: Value) -> Self {
        Self {
            mode: CaptureMode::Offline,
            names,
            object,
            writes: Mutex::new(Vec::new()),
            metrics: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Shadow capture for one event about `object`: writes recorded and answered, never
    /// sent; cache reads and write checks as in the daemon.
    pub fn shadow(object: Value) -> Self {
        Self {
            mode: CaptureMode::Shadow,
            ..Self::new(Vec::new(), object)
        }
    }

    /// Recording of the writes a call sends (they are sent as usual).
    pub fn recording() -> Self {
        Self {
            mode: CaptureMode::Record,
            ..Self::new(Vec::new(), Value::Null)
        }
    }

    /// What this capture does with writes and cache reads.
    pub fn mode(&self) -> CaptureMode {
        self.mode
    }

    /// The writes captured so far, in order.
    pub fn writes(&self) -> Vec<CapturedWrite> {
        lock(&self.writes).clone()
    }

    /// The metrics recorded so far, in order.
    pub fn metrics(&self) -> Vec<CapturedMetric> {
        lock(&self.metrics).clone()
    }

    /// The outbound requests captured so far, in order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        lock(&self.requests).clone()
    }

    /// Records an outbound request (the policy's checks passed).
    pub fn record_request(&self, request: CapturedRequest) {
        lock(&self.requests).push(request);
    }

    /// Records a metric the daemon's checks accepted.
    pub(super) fn record_metric(
        &self,
        kind: super::MetricType,
        name: &str,
        value: f64,
        labels: Vec<(String, String)>,
    ) {
        lock(&self.metrics).push(CapturedMetric {
            kind: kind.as_str(),
            name: name.to_string(),
            value,
            labels,
        });
    }

    /// Whether `resource` names a watched resource; the daemon's refusal otherwise.
    pub(super) fn known(&self, handler: &str, resource: &str) -> Result<(), String> {
        if self.names.iter().any(|n| n == resource) {
            Ok(())
        } else {
            Err(format!(
                "handler {handler:?} may read only the resources its routes watch, not {resource:?}: {}",
                self.names.join(", ")
            ))
        }
    }

    pub(super) fn record(&self, write: CapturedWrite) {
        lock(&self.writes).push(write);
    }

    fn object_field(&self, field: &str) -> Option<&str> {
        self.object.get("metadata")?.get(field)?.as_str()
    }
}

impl HostContext {
    /// The capture that stands in for the API server's writes (offline or shadow), if any.
    pub(crate) fn capturing(&self) -> Option<&Capture> {
        self.capture
            .as_deref()
            .filter(|c| c.mode != CaptureMode::Record)
    }

    /// The capture that stands in for the caches (offline only), if any.
    pub(super) fn offline(&self) -> Option<&Capture> {
        self.capture
            .as_deref()
            .filter(|c| c.mode == CaptureMode::Offline)
    }

    /// Records a write about to be sent, when the call records its writes.
    pub(super) fn record_sent(&self, write: impl FnOnce() -> CapturedWrite) {
        if let Some(capture) = self
            .capture
            .as_deref()
            .filter(|c| c.mode == CaptureMode::Record)
        {
            capture.record(write());
        }
    }

    /// Checks a write in capture mode as [`HostContext`] checks a real one.
    fn capture_allowed(
        &self,
        capture: &Capture,
        resource: &str,
        verb: Verb,
        action: &str,
    ) -> Result<(), String> {
        if capture.mode == CaptureMode::Shadow {
            let action = match action {
                "create-event" => "record events about",
                other => other,
            };
            return self.writable(resource, verb, action).map(|_| ());
        }
        capture.known(&self.handler, resource).map_err(|_| {
            format!(
                "capability denied: handler {:?} may write only resources its routes watch, and none watches {resource:?}",
                self.handler
            )
        })?;
        let names: Vec<&str> = capture.names.iter().map(String::as_str).collect();
        if !self.capabilities.allows(&names, verb) {
            return Err(format!(
                "capability denied: handler {handler:?} may not {action} {resource} (grant it in handlers.{handler}.capabilities)",
                handler = self.handler,
            ));
        }
        Ok(())
    }

    /// A write in capture mode: checked, recorded, and answered (see the module docs).
    pub(super) fn capture_write(
        &self,
        capture: &Capture,
        verb: Verb,
        write: CapturedWrite,
    ) -> Result<String, String> {
        self.capture_allowed(capture, &write.resource, verb, write.action)?;
        let answer = match write.action {
            "apply" => {
                let mut body = write.body.clone();
                if let Some(object) = body.as_object_mut() {
                    for field in ["apiVersion", "kind"] {
                        if let Some(v) = capture.object.get(field) {
                            object.entry(field).or_insert_with(|| v.clone());
                        }
                    }
                    let meta = object.entry("metadata").or_insert_with(|| json!({}));
                    if let Some(meta) = meta.as_object_mut() {
                        meta.entry("name")
                            .or_insert_with(|| write.name.clone().into());
                        if let Some(ns) = &write.namespace {
                            meta.entry("namespace").or_insert_with(|| ns.clone().into());
                        }
                    }
                }
                body
            }
            "merge-patch" => {
                let same = capture.object_field("name") == Some(write.name.as_str())
                    && capture.object_field("namespace") == write.namespace.as_deref();
                if same {
                    let mut patched = capture.object.clone();
                    json_patch::merge(&mut patched, &write.body);
                    patched
                } else {
                    write.body.clone()
                }
            }
            _ => Value::Null,
        };
        capture.record(write);
        Ok(answer.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::config::Capabilities;
    use crate::plugin::PluginLogs;

    fn context(verbs: &[Verb]) -> (HostContext, Arc<Capture>) {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default"}, "data": {"x": "1"}});
        let names = vec![
            "ConfigMap".into(),
            "configmaps".into(),
            "v1/configmaps".into(),
        ];
        let capture = Arc::new(Capture::new(names, object));
        let context = HostContext::new("h".into(), PluginLogs::default())
            .with_capabilities(Capabilities::new([("configmaps", verbs)]))
            .with_capture(capture.clone());
        (context, capture)
    }

    #[tokio::test]
    async fn writes_are_recorded_and_answered_as_a_successful_write() {
        let (context, capture) = context(&[Verb::Patch, Verb::Apply, Verb::Delete]);
        let patched = context
            .merge_patch("configmaps", Some("default"), "a", r#"{"data":{"y":"2"}}"#)
            .await
            .unwrap();
        let patched: Value = serde_json::from_str(&patched).unwrap();
        assert_eq!(patched["data"], json!({"x": "1", "y": "2"}));
        let other = context
            .merge_patch("configmaps", Some("default"), "b", r#"{"data":{"y":"2"}}"#)
            .await
            .unwrap();
        assert_eq!(other, r#"{"data":{"y":"2"}}"#);
        let applied = context
            .apply("ConfigMap", Some("default"), "c", r#"{"data":{"z":"3"}}"#)
            .await
            .unwrap();
        let applied: Value = serde_json::from_str(&applied).unwrap();
        assert_eq!(
            applied,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"z": "3"},
                "metadata": {"name": "c", "namespace": "default"}})
        );
        context.delete("configmaps", None, "d").await.unwrap();
        let actions: Vec<&str> = capture.writes().iter().map(|w| w.action).collect();
        assert_eq!(actions, ["merge-patch", "merge-patch", "apply", "delete"]);
    }

    #[tokio::test]
    async fn refused_writes_are_not_recorded_and_the_cache_is_empty() {
        let (context, capture) = context(&[]);
        let refused = context
            .merge_patch("configmaps", Some("default"), "a", "{}")
            .await
            .unwrap_err();
        assert!(refused.starts_with("capability denied"), "{refused}");
        let unwatched = context.delete("pods", None, "p").await.unwrap_err();
        assert!(unwatched.contains("none watches \"pods\""), "{unwatched}");
        assert!(capture.writes().is_empty());
        assert_eq!(
            context.cache_get("configmaps", Some("default"), "a"),
            Ok(None)
        );
        assert_eq!(context.cache_list("ConfigMap", None), Ok(Vec::new()));
        assert!(context.cache_list("pods", None).is_err());
    }
}
