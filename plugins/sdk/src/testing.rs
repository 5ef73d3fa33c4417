//! A host for `cargo test`: the handler's own code, built natively, called on an event in
//! the test process, with what it did recorded.
//!
//! ```ignore
//! use serde_json::json;
//! use switchyard_sdk::testing::{TestHost, event};
//! use switchyard_sdk::{EventKind, Outcome};
//!
//! let report = TestHost::new()
//!     .config(json!({"label": "owner", "value": "unknown"}))
//!     .object("configmaps", json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}}))
//!     .handle::<LabelGuard>(event(EventKind::Added, json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}})));
//! assert_eq!(report.outcome, Ok(Outcome::Done));
//! assert_eq!(report.writes.len(), 1);
//! ```
//!
//! How it differs from the daemon: each [`TestHost::handle`] calls `init` and then `handle`
//! like the daemon's fresh instance per event, but statics keep their values between calls
//! in one test process; capabilities are not checked (every write is recorded, none is
//! sent); cache reads answer from the objects given with [`TestHost::object`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::Value;

use crate::{Event, EventKind, Handler, Level, Outcome};

/// A write the handler asked for, recorded instead of sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// `kube::apply`.
    Apply {
        /// The resource as the handler named it.
        resource: String,
        /// The object's namespace.
        namespace: Option<String>,
        /// The object's name.
        name: String,
        /// The applied body.
        body: Value,
    },
    /// `kube::merge_patch`.
    MergePatch {
        /// The resource as the handler named it.
        resource: String,
        /// The object's namespace.
        namespace: Option<String>,
        /// The object's name.
        name: String,
        /// The merge patch.
        patch: Value,
    },
    /// `kube::delete`.
    Delete {
        /// The resource as the handler named it.
        resource: String,
        /// The object's namespace.
        namespace: Option<String>,
        /// The object's name.
        name: String,
    },
    /// `kube::event`.
    Event {
        /// The object (or reference) the Event is about.
        object: Value,
        /// `Normal` or `Warning`.
        event_type: String,
        /// The Event's reason.
        reason: String,
        /// The Event's message.
        message: String,
    },
}

/// A metric the handler recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The metric's name as the handler gave it.
    pub name: String,
    /// The value added, set or observed.
    pub value: f64,
    /// The labels as given.
    pub labels: Vec<(String, String)>,
}

/// What one call did (`O`: what the call returns, [`Outcome`] for `handle`).
#[derive(Debug, Clone, PartialEq)]
pub struct Report<O = Outcome> {
    /// What `handle` (or `handle-batch`) returned; an `init` error is `Err("init: ...")`.
    pub outcome: Result<O, String>,
    /// The lines logged, in order.
    pub logs: Vec<(Level, String)>,
    /// The writes asked for, in order.
    pub writes: Vec<Write>,
    /// The metrics recorded, in order.
    pub metrics: Vec<Metric>,
    /// The HTTP requests sent, in order.
    pub requests: Vec<crate::http::Request>,
}

impl<O> Report<O> {
    /// The logged messages without their levels.
    pub fn lines(&self) -> Vec<&str> {
        self.logs.iter().map(|(_, line)| line.as_str()).collect()
    }
}

/// A function from an object to its values for a cache index.
type IndexFn = Rc<dyn Fn(&Value) -> Vec<String>>;

/// The state of a call in progress: what the host answers and what it recorded.
struct Call {
    objects: Vec<(String, Value)>,
    indexes: HashMap<String, IndexFn>,
    write_error: Option<String>,
    logs: Vec<(Level, String)>,
    writes: Vec<Write>,
    metrics: Vec<Metric>,
    responses: Vec<(String, AnswerFn)>,
    requests: Vec<crate::http::Request>,
}

/// What the test host answers a request with.
type HttpAnswer = Result<crate::http::Response, crate::http::Error>;

/// How the test host answers a request to a URL prefix.
type AnswerFn = Rc<dyn Fn(&crate::http::Request) -> HttpAnswer>;

thread_local! {
    static CALL: RefCell<Option<Call>> = const { RefCell::new(None) };
}

/// Runs `f` on the call in progress on this thread.
fn with_call<T>(f: impl FnOnce(&mut Call) -> T) -> T {
    CALL.with(|call| {
        let mut call = call.borrow_mut();
        let call = call
            .as_mut()
            .expect("a switchyard host function was called outside TestHost::handle");
        f(call)
    })
}

/// A host in the test process. Build one, give it config and cached objects, then call
/// [`TestHost::handle`] as often as needed.
#[derive(Clone, Default)]
pub struct TestHost {
    config: Option<Value>,
    objects: Vec<(String, Value)>,
    indexes: HashMap<String, IndexFn>,
    write_error: Option<String>,
    responses: Vec<(String, AnswerFn)>,
}

impl TestHost {
    /// A host with no config (`null`), an empty cache, and writes that succeed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handler's `config`, as the daemon would pass it from the YAML.
    pub fn config(mut self, config: Value) -> Self {
        self.config = Some(config);
        self
    }

    /// Puts `object` in the cache under `resource` (found by that name or by its `kind`).
    pub fn object(mut self, resource: &str, object: Value) -> Self {
        self.objects.push((resource.to_string(), object));
        self
    }

    /// Declares the cache index `name`: the values `index` gives for each object.
    /// `namespace` is always there.
    pub fn index(mut self, name: &str, index: impl Fn(&Value) -> Vec<String> + 'static) -> Self {
        self.indexes.insert(name.to_string(), Rc::new(index));
        self
    }

    /// Makes every write fail with `message`, as a refused or failed write would.
    pub fn fail_writes(mut self, message: &str) -> Self {
        self.write_error = Some(message.to_string());
        self
    }

    /// Answers HTTP requests whose URL starts with `url_prefix` with `response` (the first
    /// matching prefix wins). A request nothing answers fails with `Error::Denied`, as a
    /// destination missing from `capabilities.http` would.
    pub fn http(self, url_prefix: &str, response: crate::http::Response) -> Self {
        self.http_with(url_prefix, move |_| Ok(response.clone()))
    }

    /// Answers HTTP requests whose URL starts with `url_prefix` with what `answer` gives
    /// for each request (a limit on bodies, answers that change from call to call, ...).
    pub fn http_with(
        mut self,
        url_prefix: &str,
        answer: impl Fn(&crate::http::Request) -> Result<crate::http::Response, crate::http::Error>
        + 'static,
    ) -> Self {
        self.responses
            .push((url_prefix.to_string(), Rc::new(answer)));
        self
    }

    /// Makes HTTP requests whose URL starts with `url_prefix` fail with `error` (a timeout,
    /// a refused connection, ...).
    pub fn http_error(self, url_prefix: &str, error: crate::http::Error) -> Self {
        self.http_with(url_prefix, move |_| Err(error.clone()))
    }

    /// Calls `H::init` with the config and then `H::handle` with `event`; returns what
    /// the call did.
    pub fn handle<H: Handler>(&self, event: Event) -> Report {
        self.run::<H, _>(|| H::handle(event))
    }

    /// Calls `H::init` with the config and then `H::handle_batch` with `events`; returns
    /// what the call did.
    pub fn handle_batch<H: crate::BatchHandler>(
        &self,
        events: Vec<Event>,
    ) -> Report<Vec<crate::ItemOutcome>> {
        self.run::<H, _>(|| H::handle_batch(events))
    }

    /// Runs `H::init`, then `call`, against this host.
    fn run<H: Handler, O>(&self, calling: impl FnOnce() -> Result<O, String>) -> Report<O> {
        let config = self.config.clone().unwrap_or(Value::Null).to_string();
        let call = Call {
            objects: self.objects.clone(),
            indexes: self.indexes.clone(),
            write_error: self.write_error.clone(),
            logs: Vec::new(),
            writes: Vec::new(),
            metrics: Vec::new(),
            responses: self.responses.clone(),
            requests: Vec::new(),
        };
        CALL.with(|c| *c.borrow_mut() = Some(call));
        let outcome = H::init(config)
            .map_err(|e| format!("init: {e}"))
            .and_then(|()| calling());
        let call = CALL
            .with(|c| c.borrow_mut().take())
            .expect("the call is there");
        Report {
            outcome,
            logs: call.logs,
            writes: call.writes,
            metrics: call.metrics,
            requests: call.requests,
        }
    }
}

/// An event of `kind` about `object`, on route `test`, first attempt.
pub fn event(kind: EventKind, object: Value) -> Event {
    Event {
        kind,
        route: "test".to_string(),
        object: object.to_string(),
        old_object: None,
        attempt: 1,
        final_state_unknown: false,
    }
}

/// An `updated` event from `old` to `new`, on route `test`, first attempt.
pub fn updated(old: Value, new: Value) -> Event {
    Event {
        old_object: Some(old.to_string()),
        ..event(EventKind::Updated, new)
    }
}

/// The host functions with the signatures the component's imports have.
pub(crate) mod host {
    use super::{Call, Level, Metric, Value, Write, with_call};

    fn labels(labels: &[(String, String)]) -> Vec<(String, String)> {
        labels.to_vec()
    }

    fn record_metric(kind: &'static str, name: &str, value: f64, l: &[(String, String)]) {
        with_call(|call| {
            call.metrics.push(Metric {
                kind,
                name: name.to_string(),
                value,
                labels: labels(l),
            })
        });
    }

    pub fn http_send(
        request: crate::http::Request,
    ) -> Result<crate::http::Response, crate::http::Error> {
        with_call(|call| {
            let answer = call
                .responses
                .iter()
                .find(|(prefix, _)| request.url.starts_with(prefix.as_str()))
                .map(|(_, answer)| answer(&request))
                .unwrap_or_else(|| {
                    Err(crate::http::Error::Denied(format!(
                        "HttpRequestDenied: the TestHost has no answer for {} (give one with TestHost::http)",
                        request.url
                    )))
                });
            call.requests.push(request);
            answer
        })
    }

    pub fn log(level: Level, message: &str) {
        with_call(|call| call.logs.push((level, message.to_string())));
    }

    pub fn counter_add(name: &str, value: f64, l: &[(String, String)]) -> Result<(), String> {
        if value < 0.0 || value.is_nan() {
            return Err(format!("counter {name}: {value} is not zero or more"));
        }
        record_metric("counter", name, value, l);
        Ok(())
    }

    pub fn gauge_set(name: &str, value: f64, l: &[(String, String)]) -> Result<(), String> {
        record_metric("gauge", name, value, l);
        Ok(())
    }

    pub fn histogram_observe(name: &str, value: f64, l: &[(String, String)]) -> Result<(), String> {
        record_metric("histogram", name, value, l);
        Ok(())
    }

    /// The cached objects of `resource` (by the name given to the test host or by kind).
    fn of<'a>(call: &'a Call, resource: &str) -> impl Iterator<Item = &'a Value> {
        call.objects
            .iter()
            .filter(move |(r, o)| r == resource || o["kind"] == resource)
            .map(|(_, o)| o)
    }

    fn in_namespace(object: &Value, namespace: Option<&str>) -> bool {
        namespace.is_none_or(|ns| object["metadata"]["namespace"] == ns)
    }

    pub fn get(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String> {
        Ok(with_call(|call| {
            of(call, resource)
                .find(|o| in_namespace(o, namespace) && o["metadata"]["name"] == name)
                .map(Value::to_string)
        }))
    }

    pub fn list(resource: &str, namespace: Option<&str>) -> Result<Vec<String>, String> {
        Ok(with_call(|call| {
            of(call, resource)
                .filter(|o| in_namespace(o, namespace))
                .map(Value::to_string)
                .collect()
        }))
    }

    pub fn list_by_index(resource: &str, index: &str, value: &str) -> Result<Vec<String>, String> {
        with_call(|call| {
            let values = |o: &Value| -> Result<Vec<String>, String> {
                if index == "namespace" {
                    return Ok(o["metadata"]["namespace"]
                        .as_str()
                        .map(str::to_string)
                        .into_iter()
                        .collect());
                }
                let f = call.indexes.get(index).ok_or_else(|| {
                    format!("{resource} has no index {index:?} (declare it with TestHost::index)")
                })?;
                Ok(f(o))
            };
            let mut found = Vec::new();
            for o in of(call, resource) {
                if values(o)?.iter().any(|v| v == value) {
                    found.push(o.to_string());
                }
            }
            Ok(found)
        })
    }

    /// Records `write` unless writes are set to fail.
    fn write(write: Write) -> Result<(), String> {
        with_call(|call| match &call.write_error {
            Some(e) => Err(e.clone()),
            None => {
                call.writes.push(write);
                Ok(())
            }
        })
    }

    fn parse(what: &str, text: &str) -> Result<Value, String> {
        serde_json::from_str(text).map_err(|e| format!("{what}: not JSON: {e}"))
    }

    pub fn apply(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        body: &str,
    ) -> Result<String, String> {
        let mut body = parse("apply", body)?;
        write(Write::Apply {
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            body: body.clone(),
        })?;
        body["metadata"]["name"] = name.into();
        if let Some(ns) = namespace {
            body["metadata"]["namespace"] = ns.into();
        }
        Ok(body.to_string())
    }

    pub fn merge_patch(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &str,
    ) -> Result<String, String> {
        let patch = parse("merge-patch", patch)?;
        let current = get(resource, namespace, name)?.ok_or_else(|| {
            let key = namespace.map_or(name.to_string(), |ns| format!("{ns}/{name}"));
            format!("{resource} {key} not found")
        })?;
        write(Write::MergePatch {
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            patch: patch.clone(),
        })?;
        let mut object = parse("cache", &current)?;
        merge(&mut object, &patch);
        Ok(object.to_string())
    }

    /// RFC 7386 JSON merge patch.
    pub(super) fn merge(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = Value::Object(Default::default());
        }
        let target = target.as_object_mut().expect("an object");
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    pub fn delete(resource: &str, namespace: Option<&str>, name: &str) -> Result<(), String> {
        write(Write::Delete {
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        })
    }

    pub fn create_event(
        object: &str,
        event_type: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), String> {
        if event_type != "Normal" && event_type != "Warning" {
            return Err(format!(
                "event type {event_type:?} must be Normal or Warning"
            ));
        }
        write(Write::Event {
            object: parse("event", object)?,
            event_type: event_type.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{cache, kube, log, metrics};

    /// Reads its config's `name` from the cache, labels it, and logs what it did.
    struct Labeler;

    impl Handler for Labeler {
        fn init(config: String) -> Result<(), String> {
            if config == "null" {
                return Err("needs a config".into());
            }
            Ok(())
        }

        fn handle(event: Event) -> Result<Outcome, String> {
            let object: Value = serde_json::from_str(&event.object).unwrap();
            let name = object["metadata"]["name"].as_str().unwrap();
            let cached = cache::get("configmaps", Some("default"), name)?;
            log(Level::Info, &format!("{name} cached={}", cached.is_some()));
            metrics::counter("seen", 1.0, &[("kind", "ConfigMap")])?;
            kube::merge_patch(
                "ConfigMap",
                Some("default"),
                name,
                &json!({"metadata": {"labels": {"seen": "yes"}}}),
            )?;
            Ok(Outcome::RequeueAfter(5))
        }
    }

    fn cm(name: &str) -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}})
    }

    #[test]
    fn records_logs_metrics_and_writes_and_answers_from_the_cache() {
        let host = TestHost::new()
            .config(json!({}))
            .object("configmaps", cm("a"));
        let report = host.handle::<Labeler>(event(EventKind::Added, cm("a")));
        assert_eq!(report.outcome, Ok(Outcome::RequeueAfter(5)));
        assert_eq!(report.lines(), ["a cached=true"]);
        assert_eq!(report.metrics[0].name, "seen");
        assert_eq!(
            report.writes,
            [Write::MergePatch {
                resource: "ConfigMap".into(),
                namespace: Some("default".into()),
                name: "a".into(),
                patch: json!({"metadata": {"labels": {"seen": "yes"}}}),
            }]
        );
    }

    #[test]
    fn a_missing_object_a_failing_write_and_a_failing_init_are_errors() {
        let host = TestHost::new().config(json!({}));
        let report = host.handle::<Labeler>(event(EventKind::Added, cm("gone")));
        assert_eq!(
            report.outcome,
            Err("ConfigMap default/gone not found".into())
        );
        assert_eq!(report.lines(), ["gone cached=false"]);

        let report = host
            .clone()
            .object("configmaps", cm("a"))
            .fail_writes("forbidden")
            .handle::<Labeler>(event(EventKind::Added, cm("a")));
        assert_eq!(report.outcome, Err("forbidden".into()));
        assert!(report.writes.is_empty());

        let report = TestHost::new().handle::<Labeler>(event(EventKind::Added, cm("a")));
        assert_eq!(report.outcome, Err("init: needs a config".into()));
        assert!(report.logs.is_empty());
    }

    /// Labels what it gets with the label its config names.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Stamp {
        label: String,
        #[serde(default)]
        value: Option<String>,
    }

    impl crate::Configured for Stamp {
        fn new(config: &str) -> Result<Self, String> {
            crate::parse_config(config)
        }

        fn handle(&self, event: Event) -> Result<Outcome, String> {
            let object: Value = serde_json::from_str(&event.object).unwrap();
            let name = object["metadata"]["name"].as_str().unwrap();
            let value = self.value.as_deref().unwrap_or("yes");
            log(Level::Info, &format!("{name}: {}={value}", self.label));
            Ok(Outcome::Done)
        }
    }

    /// A config with defaults for every field.
    #[derive(serde::Deserialize, Default)]
    struct Quiet {
        #[serde(default)]
        verbose: bool,
    }

    impl crate::Configured for Quiet {
        fn new(config: &str) -> Result<Self, String> {
            crate::parse_config(config)
        }

        fn handle(&self, _event: Event) -> Result<Outcome, String> {
            log(Level::Info, &format!("verbose={}", self.verbose));
            Ok(Outcome::Done)
        }
    }

    #[test]
    fn a_configured_handler_is_built_from_each_instance_s_config_and_called_with_it() {
        let report = TestHost::new()
            .config(json!({"label": "owner"}))
            .handle::<Stamp>(event(EventKind::Added, cm("a")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        assert_eq!(report.lines(), ["a: owner=yes"]);
        // Another instance, another config: the handler built for the first is not reused.
        let report = TestHost::new()
            .config(json!({"label": "team", "value": "web"}))
            .handle::<Stamp>(event(EventKind::Added, cm("b")));
        assert_eq!(report.lines(), ["b: team=web"]);
        let report = TestHost::new()
            .config(json!({"lable": "team"}))
            .handle::<Stamp>(event(EventKind::Added, cm("c")));
        // The field at fault, and no place in the JSON the daemon made from the YAML.
        assert_eq!(
            report.outcome.unwrap_err(),
            "init: config: unknown field `lable`, expected `label` or `value`"
        );
        assert!(report.logs.is_empty());
        // No `config:` at all: fields with defaults take them.
        let report = TestHost::new().handle::<Quiet>(event(EventKind::Added, cm("d")));
        assert_eq!(report.lines(), ["verbose=false"]);
    }

    #[test]
    fn handle_before_init_built_the_handler_is_an_error_not_a_panic() {
        let handle = |e| <Stamp as crate::Handler>::handle(e);
        let before = Err("handle called before init built the handler".into());
        assert_eq!(handle(event(EventKind::Added, cm("a"))), before);
        // A failed init leaves nothing behind, not the handler an earlier init built.
        let report = TestHost::new()
            .config(json!({"label": "x"}))
            .handle::<Stamp>(event(EventKind::Added, cm("a")));
        assert_eq!(report.outcome, Ok(Outcome::Done));
        let report = TestHost::new()
            .config(json!({"lable": "x"}))
            .handle::<Stamp>(event(EventKind::Added, cm("a")));
        assert!(report.outcome.is_err());
        assert_eq!(handle(event(EventKind::Added, cm("a"))), before);
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        host::merge(
            &mut target,
            &json!({"a": {"b": null, "e": 3}, "d": {"x": 1}}),
        );
        assert_eq!(target, json!({"a": {"c": 2, "e": 3}, "d": {"x": 1}}));
    }
}
