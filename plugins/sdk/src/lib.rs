//! The Rust guest SDK for switchyard handler plugins.
//!
//! A handler is a type that implements [`Handler`], exported with [`export_handler!`]:
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
//! Build it with `cargo build --target wasm32-wasip2 --release` and drop the `.wasm` file
//! into the daemon's plugins folder.

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
    });
}

pub use bindings::switchyard::plugin::host::{Level, log};
pub use bindings::switchyard::plugin::types::{Event, EventKind, Outcome};

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

/// Exports a [`Handler`] implementation as the plugin's entry points.
#[macro_export]
macro_rules! export_handler {
    ($handler:ty) => {
        type __SwitchyardExport = $crate::Adapter<$handler>;
        $crate::bindings::__export_handler_world!(__SwitchyardExport with_types_in $crate::bindings);
    };
}
