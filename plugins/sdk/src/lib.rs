//! The Rust guest SDK for switchyard handler plugins.
//!
//! A handler is a type that implements [`Handler`], exported with [`export_handler!`]
//! (one with settings implements [`Configured`] instead: built from its `config` once per
//! instance, then called with it):
//!
//! ```ignore
//! use switchyard_sdk::{export_handler, log, Event, Handler, Level, Outcome};
//!
//! struct Hello;
//!
//! impl Handler for Hello {
//!     fn handle(event: Event) -> Result<Outcome, String> {
//!         log(Level::Info, &format!("{:?} on route {}", event.kind, event.route));
//!         Ok(Outcome::Done)
//!     }
//! }
//!
//! export_handler!(Hello);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release` (or `switchyard build`) and
//! drop the `.wasm` file into the daemon's plugins folder.
//!
//! Built natively (`cargo test`), the same handler code runs against [`testing::TestHost`]:
//! a host in the test process that records logs, metrics and the writes the handler asks
//! for, and answers cache reads from objects the test gives it.
//!
//! Besides [`log`], the host offers [`metrics`] (exposed on the daemon's `/metrics`),
//! read-only [`cache`] access to the resources the handler's routes watch, and [`kube`]
//! writes where the handler's `capabilities:` grant them, and [`http`] requests to the
//! destinations its `capabilities.http` allows. Each returns an error when refused or
//! failed; return it from `handle` (with `?`) and the daemon retries the event.

#![forbid(unsafe_code)]

#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "handler",
        pub_export_macro: true,
        export_macro_name: "__export_handler_world",
        default_bindings_module: "switchyard_sdk::bindings",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["stream-error"],
        generate_all,
    });
}

/// The `handler-batch` world: the same imports (the types and functions of [`bindings`]),
/// and `handle-batch` besides `init` and `handle`. Its exports are emitted only where
/// [`export_batch_handler!`] is used.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub mod batch_bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "handler-batch",
        pub_export_macro: true,
        export_macro_name: "__export_handler_batch_world",
        default_bindings_module: "switchyard_sdk::batch_bindings",
        with: {
            "switchyard:plugin/types@0.1.1": crate::bindings::switchyard::plugin::types,
            "switchyard:plugin/host@0.1.1": crate::bindings::switchyard::plugin::host,
            "switchyard:plugin/metrics@0.1.1": crate::bindings::switchyard::plugin::metrics,
            "switchyard:plugin/cache@0.1.1": crate::bindings::switchyard::plugin::cache,
            "switchyard:plugin/kube@0.1.1": crate::bindings::switchyard::plugin::kube,
        },
        generate_all,
    });
}

pub use bindings::switchyard::plugin::host::Level;
pub use bindings::switchyard::plugin::types::{Event, EventKind, ItemOutcome, Outcome};

pub mod http;
pub mod sink;
pub mod template;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

/// The host's functions: the component's imports in a plugin, the [`testing`] host when the
/// same code is built natively for `cargo test`.
mod imports {
    #[cfg(target_arch = "wasm32")]
    pub use super::bindings::switchyard::plugin::{
        cache::{get, list, list_by_index},
        host::log,
        kube::{apply, create_event, delete, merge_patch},
        metrics::{counter_add, gauge_set, histogram_observe},
    };
    #[cfg(not(target_arch = "wasm32"))]
    pub use super::testing::host::{
        apply, counter_add, create_event, delete, gauge_set, get, histogram_observe, list,
        list_by_index, log, merge_patch,
    };
}

/// Writes a line to the daemon's log, tagged with the handler's name.
pub fn log(level: Level, message: &str) {
    imports::log(level, message);
}

/// Parses JSON the host sent; the host only sends valid JSON, so a failure names the source.
fn parse(what: &str, text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what}: the host sent invalid JSON: {e}"))
}

/// Metrics exposed on the daemon's `/metrics` as `switchyard_plugin_NAME`, with a `handler`
/// label besides the labels given.
///
/// Names must match `[a-zA-Z_:][a-zA-Z0-9_:]*`, label names `[a-zA-Z_][a-zA-Z0-9_]*` (and
/// not `handler`); a name keeps the type it was first used with; a handler may create at
/// most 1000 series. Anything else is an `Err` explaining it, never a trap.
///
/// ```ignore
/// switchyard_sdk::metrics::gauge("pods_on_node", 3.0, &[("node", "n1")])?;
/// ```
pub mod metrics {
    use super::imports as host;

    fn labels(labels: &[(&str, &str)]) -> Vec<(String, String)> {
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Adds `value` (not negative) to a counter (exposed with the suffix `_total`).
    pub fn counter(name: &str, value: f64, labels: &[(&str, &str)]) -> Result<(), String> {
        host::counter_add(name, value, &self::labels(labels))
    }

    /// Sets a gauge.
    pub fn gauge(name: &str, value: f64, labels: &[(&str, &str)]) -> Result<(), String> {
        host::gauge_set(name, value, &self::labels(labels))
    }

    /// Records an observation in a histogram (buckets from 5 ms to 10 s).
    pub fn histogram(name: &str, value: f64, labels: &[(&str, &str)]) -> Result<(), String> {
        host::histogram_observe(name, value, &self::labels(labels))
    }
}

/// Read-only access to the daemon's caches of the resources the handler's routes watch and
/// the informers its `reads:` names.
/// `resource` is a plural (`pods`), a kind (`Pod`) or the route's resource (`v1/pods`);
/// any other resource is an `Err`.
///
/// ```ignore
/// let pods = switchyard_sdk::cache::list_by_index("pods", "node", "node-1")?;
/// ```
pub mod cache {
    use super::imports as host;
    use serde_json::Value;

    /// The cached object, if there is one.
    pub fn get(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        host::get(resource, namespace, name)?
            .map(|o| super::parse("cache::get", &o))
            .transpose()
    }

    /// Every cached object of the resource, or those in `namespace`.
    pub fn list(resource: &str, namespace: Option<&str>) -> Result<Vec<Value>, String> {
        host::list(resource, namespace)?
            .iter()
            .map(|o| super::parse("cache::list", o))
            .collect()
    }

    /// The cached objects whose value for the route's index `index` is `value`.
    pub fn list_by_index(resource: &str, index: &str, value: &str) -> Result<Vec<Value>, String> {
        host::list_by_index(resource, index, value)?
            .iter()
            .map(|o| super::parse("cache::list_by_index", o))
            .collect()
    }
}

/// Writes to the Kubernetes API, allowed only where the handler's config grants them
/// (`handlers.NAME.capabilities.RESOURCE: [apply, patch, delete, event]`). A refused or
/// failed write is an `Err`: return it from `handle` and the daemon retries the event.
///
/// ```ignore
/// use serde_json::json;
/// switchyard_sdk::kube::merge_patch(
///     "configmaps",
///     Some("default"),
///     "settings",
///     &json!({"metadata": {"labels": {"owner": "unknown"}}}),
/// )?;
/// ```
pub mod kube {
    use super::imports as host;
    use serde_json::Value;

    /// The type of a Kubernetes Event.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum EventType {
        /// Something expected happened.
        Normal,
        /// Something needs attention.
        Warning,
    }

    /// Server-side apply of `body` (field manager `switchyard-HANDLER`, conflicts forced);
    /// `apiVersion`, `kind` and `metadata.name` may be left out. Returns the stored object.
    pub fn apply(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
    ) -> Result<Value, String> {
        let stored = host::apply(resource, namespace, name, &body.to_string())?;
        super::parse("kube::apply", &stored)
    }

    /// JSON merge patch of the object. Returns the patched object.
    pub fn merge_patch(
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Value, String> {
        let patched = host::merge_patch(resource, namespace, name, &patch.to_string())?;
        super::parse("kube::merge_patch", &patched)
    }

    /// Deletes the object (one already gone is fine).
    pub fn delete(resource: &str, namespace: Option<&str>, name: &str) -> Result<(), String> {
        host::delete(resource, namespace, name)
    }

    /// Records a core v1 Event about `object` (the object, or a reference with
    /// `apiVersion`, `kind`, `name`, `namespace`).
    pub fn event(
        object: &Value,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), String> {
        let event_type = match event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        host::create_event(&object.to_string(), event_type, reason, message)
    }
}

/// An error for `handle` that retrying cannot help (a receiver that refused the request as
/// malformed or unauthorised, say): the daemon does not retry it and moves the event to the
/// dead letters at once, where it can be retried by hand once the cause is fixed.
///
/// ```ignore
/// if (400..500).contains(&response.status) {
///     return Err(switchyard_sdk::permanent(&format!("the receiver answered {}", response.status)));
/// }
/// ```
pub fn permanent(message: &str) -> String {
    format!("permanent: {message}")
}

/// A handler plugin: what the daemon calls for each event.
pub trait Handler {
    /// Called once per instance with the handler's `config` from the daemon's YAML, as JSON.
    /// The default accepts any configuration.
    fn init(config: String) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// Handles one event; an `Err` is retried by the daemon with backoff.
    fn handle(event: Event) -> Result<Outcome, String>;
}

/// A handler built from its `config` when the instance starts, and called with it for each
/// event: what a plugin with settings implements instead of [`Handler`]. The daemon calls
/// `init` once per instance (a fresh one per event, or one kept with `instance: reuse`);
/// the SDK keeps the value [`Configured::new`] returns for that instance's `handle` calls.
///
/// ```ignore
/// use serde::Deserialize;
/// use switchyard_sdk::{export_handler, Configured, Event, Outcome};
///
/// #[derive(Deserialize)]
/// struct Greeter {
///     greeting: String,
/// }
///
/// impl Configured for Greeter {
///     fn new(config: &str) -> Result<Self, String> {
///         switchyard_sdk::parse_config(config)
///     }
///
///     fn handle(&self, event: Event) -> Result<Outcome, String> {
///         switchyard_sdk::log(switchyard_sdk::Level::Info, &format!("{} {}", self.greeting, event.route));
///         Ok(Outcome::Done)
///     }
/// }
///
/// export_handler!(Greeter);
/// ```
pub trait Configured: Sized + 'static {
    /// Builds the handler from its `config` (JSON; `null` when the YAML has none). An `Err`
    /// refuses the config: the daemon reports it and calls no `handle`.
    fn new(config: &str) -> Result<Self, String>;

    /// Handles one event with the handler built by [`Configured::new`]; an `Err` is retried
    /// by the daemon with backoff.
    fn handle(&self, event: Event) -> Result<Outcome, String>;
}

/// The handler [`Configured::new`] built for this instance. An instance runs one call at a
/// time on one thread (natively, [`testing::TestHost`] runs `init` and `handle` on the test's
/// thread), so a thread-local holds it.
mod instance {
    use std::any::Any;
    use std::cell::RefCell;

    thread_local! {
        static BUILT: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
    }

    /// Keeps `handler` for the instance's calls (`None`: none), replacing any kept before.
    pub fn keep<T: 'static>(handler: Option<T>) {
        let boxed = handler.map(|h| Box::new(h) as Box<dyn Any>);
        BUILT.with(|built| *built.borrow_mut() = boxed);
    }

    /// Runs `f` on the kept handler; an `Err` when `init` did not build one of type `T`.
    pub fn with<T: 'static, R>(f: impl FnOnce(&T) -> R) -> Result<R, String> {
        BUILT.with(|built| {
            let built = built.borrow();
            let handler = built
                .as_ref()
                .and_then(|b| b.downcast_ref::<T>())
                .ok_or("handle called before init built the handler")?;
            Ok(f(handler))
        })
    }
}

impl<T: Configured> Handler for T {
    fn init(config: String) -> Result<(), String> {
        instance::keep::<T>(None);
        instance::keep(Some(T::new(&config)?));
        Ok(())
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        instance::with(|handler: &T| handler.handle(event))?
    }
}

/// Reads a handler's `config` (JSON) into `T`, with an error that names the field at fault
/// (`config: unknown field `urll`, expected `url` ...`) and not its place in the JSON, which
/// the daemon made from the YAML; `null` (no `config:` in the YAML) reads as an empty
/// mapping, so a `T` whose fields all have defaults needs none.
pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, String> {
    let value: serde_json::Value =
        serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
    let value = if value.is_null() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        value
    };
    T::deserialize(value).map_err(|e| format!("config: {e}"))
}

/// A handler that also takes events in batches (the `handler-batch` world): the daemon
/// calls [`BatchHandler::handle_batch`] when the handler's config has `batch:`, and
/// [`Handler::handle`] otherwise. Export it with [`export_batch_handler!`].
pub trait BatchHandler: Handler {
    /// Handles several events (each of another object) at once: one [`ItemOutcome`] per
    /// event, in their order. An `Err` retries every event of the batch with backoff.
    fn handle_batch(events: Vec<Event>) -> Result<Vec<ItemOutcome>, String>;
}

/// [`BatchHandler`] for a handler built from its `config` ([`Configured`]).
pub trait ConfiguredBatch: Configured {
    /// Handles several events at once with the handler built by [`Configured::new`]; see
    /// [`BatchHandler::handle_batch`].
    fn handle_batch(&self, events: Vec<Event>) -> Result<Vec<ItemOutcome>, String>;
}

impl<T: ConfiguredBatch> BatchHandler for T {
    fn handle_batch(events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        instance::with(|handler: &T| handler.handle_batch(events))?
    }
}

/// Adapts a [`Handler`] to the generated component export. Used by [`export_handler!`].
#[doc(hidden)]
pub struct Adapter<H>(core::marker::PhantomData<H>);

impl<H: Handler> bindings::Guest for Adapter<H> {
    fn init(config: String) -> Result<(), String> {
        H::init(config)
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        H::handle(event)
    }
}

/// Adapts a [`BatchHandler`] to the generated `handler-batch` export. Used by
/// [`export_batch_handler!`].
#[doc(hidden)]
pub struct BatchAdapter<H>(core::marker::PhantomData<H>);

impl<H: BatchHandler> batch_bindings::Guest for BatchAdapter<H> {
    fn init(config: String) -> Result<(), String> {
        H::init(config)
    }

    fn handle(event: Event) -> Result<Outcome, String> {
        H::handle(event)
    }

    fn handle_batch(events: Vec<Event>) -> Result<Vec<ItemOutcome>, String> {
        H::handle_batch(events)
    }
}

/// Exports a [`BatchHandler`] implementation as the plugin's entry points (the
/// `handler-batch` world: `init`, `handle` and `handle-batch`).
#[macro_export]
macro_rules! export_batch_handler {
    ($handler:ty) => {
        type __SwitchyardBatchExport = $crate::BatchAdapter<$handler>;
        $crate::batch_bindings::__export_handler_batch_world!(__SwitchyardBatchExport with_types_in $crate::batch_bindings);
    };
}

/// Exports a [`Handler`] implementation as the plugin's entry points.
#[macro_export]
macro_rules! export_handler {
    ($handler:ty) => {
        type __SwitchyardExport = $crate::Adapter<$handler>;
        $crate::bindings::__export_handler_world!(__SwitchyardExport with_types_in $crate::bindings);
    };
}
