//! Plugins: WebAssembly components that handle events, run by wasmtime with a memory cap and
//! a deadline per call.
//!
//! [`PluginHost`] owns the engine; [`loader`] reads plugin files from the plugins folder
//! (regular files inside it only, at most [`MAX_PLUGIN_FILE_SIZE`], within [`READ_DEADLINE`]);
//! [`PluginRegistry`] knows which handlers use which plugin and swaps new versions into
//! them; [`PluginWatcher`] reloads a plugin when its file changes; [`PluginLogs`] carries
//! what plugins log; [`imports`] is what else the host gives plugins (metrics, cache reads,
//! capability-gated writes), from each handler's [`HostContext`].

pub mod bindings;
pub mod builtin;
pub mod contract;
pub mod host;
pub mod imports;
mod limiter;
pub mod loader;
pub mod logs;
pub mod oci;
pub mod outbound;
pub mod registry;
pub mod slots;
mod ticker;
pub mod watcher;

use std::time::Duration;

pub use bindings::switchyard::plugin::types::{Event, EventKind, ItemOutcome, Outcome};
pub use host::{CallLimits, HostOptions, Plugin, PluginHost, PluginInstance, PoolOptions};
pub use imports::{HostContext, PluginMetrics};
pub use loader::{MAX_PLUGIN_FILE_SIZE, PluginFile, READ_DEADLINE, ReadError};
pub use logs::{About, CallLog, LogCounters, PluginLog, PluginLogs};
pub use registry::{PluginRegistry, PluginUser, PluginView, Reloaded};
pub use watcher::PluginWatcher;

/// Errors loading or calling a plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The wasm engine could not be set up.
    #[error("wasm engine: {0}")]
    Engine(String),
    /// The plugin file could not be read, or is not a file a plugin may be read from.
    #[error("cannot read plugin {path}: {problem}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        problem: ReadError,
    },
    /// A `builtin:NAME` the binary does not carry.
    #[error("{0}")]
    UnknownBuiltin(String),
    /// A plugin from an OCI registry could not be pulled.
    #[error("cannot pull plugin {reference}: {reason}")]
    Pull {
        /// The `oci://` reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// No handler uses a plugin of that name.
    #[error("no handler uses a plugin named {0:?}")]
    Unknown(String),
    /// The daemon is shutting down: the load (a pull, say) was given up.
    #[error("loading plugin {0} was abandoned: the daemon is shutting down")]
    Abandoned(String),
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
    /// A write the host makes around the call failed (a route's finalizer put on or taken
    /// off the object); the plugin itself did not fail.
    #[error("{0}")]
    Host(String),
}

/// What an error returned from `handle` begins with when retrying cannot help (a receiver
/// that refused the request as malformed, say): the event goes to the dead letters at once.
pub const PERMANENT: &str = "permanent:";

impl Error {
    /// Whether the plugin called this failure permanent: an error from `handle` that begins
    /// with [`PERMANENT`].
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Handler(message) if message.starts_with(PERMANENT))
    }

    /// Whether this is a failed read because the plugin file does not exist.
    pub fn is_file_gone(&self) -> bool {
        matches!(
            self,
            Self::Read {
                problem: ReadError::Gone,
                ..
            }
        )
    }
}

/// Why a handler with `batch:` does not run `plugin`, which has no `handle-batch`.
pub fn lacks_handle_batch(plugin: &str) -> String {
    format!(
        "plugin {plugin:?} does not export handle-batch, which the handler's batch: calls: \
         build it for the handler-batch world, or remove batch: to call handle per event"
    )
}

/// `bytes` in MiB for messages: `64 MiB`, or `80.5 MiB` when not a whole number.
pub(crate) fn mib(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

/// Result of plugin operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
