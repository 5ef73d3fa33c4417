//! switchyard: routes Kubernetes changes through shared informers and rate-limited work
//! queues into WebAssembly handler plugins.
//!
//! # Layout
//!
//! - [`config`]: the bottom floor: the YAML routing file, its validation with precise
//!   locations, and the values every stage reads (selectors, field paths, units). It
//!   imports no other module; every other module may import it.
//! - [`informer`]: shared watches (reflector), the cache (store) and deltas.
//! - [`router`]: a route's rules, handing selected deltas to its handler.
//! - [`queue`]: the work queue (de-duplication, one worker per key, delays) and the
//!   coalesced events its keys stand for.
//! - [`handler`]: a handler's queue, workers and counters; calls the plugin per event.
//! - [`plugin`]: the wasmtime component host, the plugin contract's bindings and loading,
//!   and the host imports (metrics, cache reads, capability-gated writes).
//! - [`admin`]: the HTTP admin API (health, status).
//! - [`daemon`]: builds every stage from a config, runs them, shuts them down.
//! - [`sim`]: the built-in Kubernetes API simulator.

pub mod admin;
pub mod config;
pub mod daemon;
pub mod handler;
pub mod informer;
pub mod metrics;
pub mod plugin;
pub mod queue;
pub mod router;
pub mod sim;

pub use config::Config;
pub use daemon::Daemon;
