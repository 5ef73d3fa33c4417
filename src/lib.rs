//! switchyard: routes Kubernetes changes through shared informers and rate-limited work
//! queues into WebAssembly handler plugins.
//!
//! # Layout
//!
//! Data flows one way, from the API server to the plugins:
//!
//! ```text
//! API server ─▶ informer ─▶ router ─▶ handler (queue ─▶ workers) ─▶ plugin
//! ```
//!
//! Each stage is a folder; a module imports only the modules below it in this list (and
//! the leaves after it), and calls up through a trait the upper stage implements (the
//! informer delivers to routes through `informer::DeltaSink`, the plugin registry swaps
//! versions into handlers through `plugin::PluginUser`, the admin API reads the daemon
//! through `admin::Backend`).
//!
//! On top, the binary's tools over the config, the daemon and the plugins:
//!
//! - [`demo`]: `switchyard demo`: the daemon on the simulator with churn and a scripted
//!   tour; its config is built in and its plugins are built on first use.
//! - [`offline`]: `switchyard record` and `replay`: events the routes deliver written to a
//!   file, and handed to the plugins with no API server, their writes captured.
//! - [`check`]: `switchyard check`: every finding about a config at once, its plugins
//!   loaded, built-in resources known offline, discovery with `--cluster`.
//! - [`scaffold`]: a plugin author's projects: `switchyard new plugin` and
//!   `switchyard build`; takes the contract from [`plugin`], the SDK's sources are built
//!   in.
//! - [`rbac`]: the Kubernetes permissions a config needs (`switchyard rbac`); reads the
//!   config only.
//!
//! Then the daemon and its stages, from the top down:
//!
//! - [`daemon`]: owns the lifecycle: builds every stage from a config, applies reload
//!   diffs, shuts them down in order.
//! - [`admin`]: the HTTP admin API (health, status, metrics, reloads, handler actions).
//! - [`router`]: a route's rules, handing selected deltas to its handler.
//! - [`handler`]: one handler at run time: lifecycle, worker loop, per-key buffer and
//!   delivery modes, retries, dead letters, status views, the plugin slot.
//! - [`queue`]: the generic work queue (de-duplication, one worker per key, delays) and
//!   rate limiting.
//! - [`plugin`]: the wasm host only: engine, pooling, limits, the plugin contract's
//!   bindings, host imports, loading and the plugins folder watcher.
//! - [`informer`]: shared watches (reflector), the indexed cache (store) and deltas.
//! - [`secrets`]: the Secrets handlers' configs name (`valueFrom: {secretKeyRef: …}`),
//!   each watched alone, and the files they name (`valueFrom: {file: …}`), polled,
//!   resolved into the config a plugin's `init` takes.
//! - [`tenancy`]: team-owned `Route` and `Handler` resources at run time: their watch,
//!   SubjectAccessReviews, the impersonating client a team's handler writes through, and
//!   the status and Events written on them; imports config and util only.
//! - [`election`]: `ha.mode: leader`: leader election through a Lease (client-go's
//!   algorithm) and its status.
//! - [`sim`]: the built-in Kubernetes API simulator (a stage of its own, used by tests,
//!   the demo and `switchyard sim`).
//! - [`sharding`]: `ha.mode: sharded`: the hash ranges, the `shardSelector` wire form
//!   (shared with the simulator) and the per-replica Leases that say who owns which range.
//! - [`state`]: durable state (`state_dir:`): what each route delivered, handlers'
//!   queues and dead letters, in an embedded store written by one group-commit thread;
//!   imports config and util only (routes and handlers use it).
//! - [`config`]: the bottom floor: the YAML schema, validation with precise locations,
//!   units, field paths, selectors. Imports no other stage; every stage may read it.
//!
//! Beside the stages, leaves any module may use:
//!
//! - [`metrics`]: the Prometheus registry;
//! - [`util`]: poison-tolerant locks, RFC 3339 times, bearer tokens, Kubernetes errors as
//!   text, secret values redacted from what the daemon shows;
//! - [`logging`]: the log the binary installs (text or JSON, one line per event);
//! - [`traces`]: a trace per event, exported over OTLP/HTTP when `tracing:` says where.

pub mod admin;
pub mod check;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod election;
pub mod handler;
pub mod informer;
pub mod logging;
pub mod metrics;
pub mod offline;
pub mod plugin;
pub mod queue;
pub mod rbac;
pub mod router;
pub mod scaffold;
pub mod secrets;
pub mod sharding;
pub mod sim;
pub mod state;
pub mod tenancy;
pub mod traces;
pub mod util;

pub use config::Config;
pub use daemon::Daemon;
