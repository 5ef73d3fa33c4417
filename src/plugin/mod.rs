//! Plugins: WebAssembly components that handle events, run by wasmtime with a memory cap and
//! a deadline per call.
//!
//! [`PluginHost`] owns the engine; [`loader`] reads plugin files from the plugins folder;
//! [`PluginRegistry`] knows which handlers use which plugin and swaps new versions into
//! them; [`PluginWatcher`] reloads a plugin when its file changes; [`PluginLogs`] carries
//! what plugins log; [`imports`] is what else the host gives plugins (metrics, cache reads,
//! capability-gated writes), from each handler's [`HostContext`].

pub mod bindings;
pub mod host;
pub mod imports;
pub mod loader;
pub mod logs;
pub mod registry;
pub mod watcher;

use std::time::Duration;

pub use bindings::switchyard::plugin::types::{Event, EventKind, Outcome};
pub use host::{CallLimits, HostOptions, Plugin, PluginHost, PluginInstance, PoolOptions};
pub use imports::{HostContext, PluginMetrics};
pub use logs::{PluginLog, PluginLogs};
pub use registry::{PluginRegistry, PluginUser, PluginView, Reloaded};
pub use watcher::PluginWatcher;

/// Errors loading or calling a plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The wasm engine could not be set up.
    #[error("wasm engine: {0}")]
    Engine(String),
    /// The plugin file could not be read.
    #[error("cannot read plugin {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// No handler uses a plugin of that name.
    #[error("no handler uses a plugin named {0:?}")]
    Unknown(String),
    /// The plugins folder cannot be watched for changes.
    #[error("cannot watch the plugins folder {dir}: {reason}")]
    Watch {
        /// The folder.
        dir: String,
        /// Why.
        reason: String,
    },
    /// The file is not a component of the handler world.
    #[error("plugin {plugin:?} is invalid: {reason}")]
    Invalid {
        /// The plugin name.
        plugin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The call ran past its deadline and was stopped.
    #[error("deadline of {0:?} exceeded; the call was stopped")]
    Timeout(Duration),
    /// The plugin trapped (a panic, an out-of-bounds access, memory past its cap, ...).
    #[error("plugin trapped in {0}")]
    Trap(String),
    /// The plugin's `init` returned an error.
    #[error("plugin init failed: {0}")]
    Init(String),
    /// The plugin's `handle` returned an error.
    #[error("{0}")]
    Handler(String),
}

/// Result of plugin operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
