//! The wasmtime host: one engine for every plugin, a ticker that drives call deadlines, and
//! compilation of plugin files into pre-instantiated [`Plugin`]s.
//!
//! # Decision: a fresh instance per call, from a pooling allocator
//!
//! Measured with `cargo bench --bench plugin` (benches/plugin.rs; numbers, build and machine
//! in BENCHMARKS.md, "Plugin call cost"), calling the `noop` test plugin, medians, wasmtime
//! 48:
//!
//! | per call | on demand | pooling, decommit | pooling, resident 16 MiB |
//! |---|---|---|---|
//! | fresh instance (instantiate, `init`, `handle`) | 48.7 µs | 31.8 µs | 16.4 µs |
//! | reused instance (`handle` only) | 2.0 µs | 1.7 µs | 2.4 µs |
//! | native async fn doing the same work | 0.28 µs | | |
//!
//! **Fresh instance per call, by default.** An instance carries whatever the previous event
//! left in its memory and globals: a plugin could keep state between events (which would
//! behave differently with more workers or after a restart), a trap or a timeout leaves the
//! instance poisoned, and memory a call grew would stay charged to later calls. At 16 to 32 µs a
//! call a core makes 30,000 to 60,000 fresh instances a second, far above the rate at which an
//! informer delivers changes. A handler that accepts those costs can opt in to
//! `instance: reuse` (see `handler::instance`), which saves the instantiation.
//!
//! **Pooling allocator on, slots resident where that is exact.** Memories, tables and
//! stacks come from preallocated slots instead of being mapped and unmapped per instance
//! ([`SlotReset`]). Where `plugin::slots` finds the kernel's `PAGEMAP_SCAN` exact and the
//! process unable to swap, a slot stays resident and only the pages the instance wrote are
//! reset in place ([`RESIDENT_SLOT_RESET`]): half the cost of a decommitted slot. Elsewhere
//! its pages go back to the kernel (wasmtime's default) and the next instance faults in what
//! it touches, copy-on-write from the initial image, which is always exact. The pool's cost
//! is sizing: it holds a fixed number of instances, each memory slot reserves address space
//! for the largest memory allowed (the largest handler `memory` at start), and neither can
//! grow while the daemon runs. A semaphore makes a call wait for a free slot rather than
//! fail.
//!
//! # Decision: every handler owns its share of the pool; the pool has headroom
//!
//! A handler's share is its `concurrency`: it runs that many workers and a worker holds at
//! most one instance at a time (the instance lives for one call), so a handler can never
//! take more slots than its concurrency; a per-handler semaphore would only count the
//! workers again. The pool's semaphore is therefore a backstop, not a scheduler: as long as the handlers' concurrency adds up to no more than the pool, every
//! worker finds a free slot at once and no handler waits on another. Were it allowed to
//! add up to more, the handlers would compete for the slots in arrival order, and one whose
//! plugin spends every call at its deadline would hold most of them while the others'
//! queues grow. So:
//!
//! - the daemon sizes the pool at start with headroom, [`pool_instances`]: twice the
//!   handlers' total concurrency and at least [`POOL_MIN_INSTANCES`], so a reload can raise
//!   concurrency without a restart;
//! - a reload whose total concurrency exceeds the pool is refused (as is one whose memory
//!   cap exceeds the pool's memory slots): the running config stays, and a restart sizes
//!   the pool again.
//!
//! Handlers share slots only for the moment a reload overlaps two generations: a removed
//! handler's calls in flight finish (for up to its drain grace) while the new handlers
//! already run, and a new call may wait for one of those slots meanwhile. A replaced
//! handler's calls finish before its successor starts, so they never overlap.
//!
//! [`PluginHost::new`] (used by `switchyard check` and tests) allocates on demand.
//!
//! # Decision: the deadline bounds the call's future, not only the wasm it runs
//!
//! Epoch interruption fires only while wasm runs. A plugin waiting in the host (a WASI
//! clock poll behind `std::thread::sleep`, a Kubernetes write) runs none, so
//! a call is also bounded from outside: every part of it (instantiation with `init`, each
//! `handle`) goes through `by_deadline`, which drops the call's future at the deadline.
//! wasmtime unwinds the guest wherever it waits, the call fails as a timeout, and the
//! instance is never called again. Host imports need no deadline of their own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{
    Component, ComponentExportIndex, HasSelf, Instance, InstancePre, Linker, ResourceTable,
};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::switchyard::plugin::{host, types};
use super::bindings::{self, HandlerIndices};
use super::imports::HostContext;
use super::limiter::CallLimiter;
use super::logs::{CallLog, PluginLogs};
use super::outbound::CallHooks;
pub use super::ticker::EPOCH_TICK;
use super::ticker::Ticker;
use super::{Error, Result};

/// The per-call state a plugin instance runs with.
pub struct CallState {
    /// Built the first time the plugin calls a WASI import: most calls never do, and
    /// building one (its random generators seeded) is a few percent of a call.
    wasi: Option<WasiCtx>,
    http: WasiHttpCtx,
    /// Where the plugin's outbound requests go: the handler's policy, the call's deadline.
    hooks: CallHooks,
    table: ResourceTable,
    limits: CallLimiter,
    context: Arc<HostContext>,
    deadline: Instant,
    timed_out: bool,
    /// What the call has logged so far, against its handler's log limits.
    log: CallLog,
    /// The call's trace, when the event is traced: its writes are children of it.
    trace: Option<crate::traces::CallTrace>,
}

impl CallState {
    /// The calling handler's context: what its imports may read and write.
    pub(crate) fn context(&self) -> &Arc<HostContext> {
        &self.context
    }

    /// The call's trace, when the event is traced.
    pub(crate) fn trace(&self) -> Option<&crate::traces::CallTrace> {
        self.trace.as_ref()
    }

    /// Ends the call's log: if lines were dropped past its limits, one line says so.
    fn end_call(&mut self) {
        if let Some(note) = self.log.end() {
            self.context
                .logs()
                .record(self.context.handler(), host::Level::Warn, note);
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| WasiCtx::builder().build()),
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl host::Host for CallState {
    async fn log(&mut self, level: host::Level, message: String) -> wasmtime::Result<()> {
        if let Some(line) = self.log.admit(message, self.context.log_counters()) {
            self.context
                .logs()
                .record(self.context.handler(), level, line);
        }
        Ok(())
    }
}

impl types::Host for CallState {}

/// How to build a [`PluginHost`].
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// Where compiled plugins are cached (keyed by the file's content and the compiler's
    /// settings); `None` compiles every time.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Allocate instances from a preallocated pool instead of on demand; `None` (the
    /// default) allocates on demand. See the module docs for why.
    pub pool: Option<PoolOptions>,
}

/// Size of the pooling allocator's pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Plugin instances that may live at once; further calls wait for a free slot.
    pub instances: u32,
    /// The largest linear memory an instance may have, in bytes; at least the largest
    /// `memory` of any handler.
    pub max_memory: u64,
    /// How a slot is made ready for the next instance.
    pub reset: SlotReset,
}

/// How a pool slot is made ready for the next instance when one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReset {
    /// wasmtime's default: the slot's pages are given back to the kernel (`madvise`), and
    /// the next instance faults them in again, copy-on-write from the plugin's initial
    /// memory image.
    Decommit,
    /// Up to `bytes` of each memory and table stay resident and are reset in place (only
    /// the pages the instance touched, found with the kernel's `PAGEMAP_SCAN` where it has
    /// it), so the next instance takes no page faults there.
    KeepResident {
        /// Bytes of each memory and table kept resident.
        bytes: usize,
        /// Whether the plugin's initial memory image is still mapped copy-on-write (each
        /// page the instance writes then faults once), rather than copied in.
        copy_on_write: bool,
    },
}

/// The reset the daemon uses when slots are kept resident (`plugin::slots` decides when):
/// 16 MiB of each memory and table, the initial image mapped copy-on-write. See
/// BENCHMARKS.md, "Plugin call cost", for the measurement.
pub const RESIDENT_SLOT_RESET: SlotReset = SlotReset::KeepResident {
    bytes: 16 << 20,
    copy_on_write: true,
};

/// How many finished instances' memory the pool gives back to the kernel at once (one
/// `process_madvise` where the kernel has it, and one TLB flush, for the batch), when slots
/// are decommitted.
///
/// Slots kept resident are reset in place and have nothing to give back, but wasmtime still
/// queues an empty range for each memory and table: batched, those became one
/// `process_madvise` of empty ranges every two or so instances. Flushed one at a time
/// ([`RESIDENT_DECOMMIT_BATCH`]), an empty range makes no system call.
pub const DECOMMIT_BATCH: usize = 16;

/// The decommit batch when slots are kept resident: see [`DECOMMIT_BATCH`].
pub const RESIDENT_DECOMMIT_BATCH: usize = 1;

/// The fewest instances [`pool_instances`] sizes the pool for: room to raise concurrency
/// on reload in a small config. An instance slot costs address space (reserved, not
/// resident) and a few KiB of bookkeeping, so the headroom is cheap.
pub const POOL_MIN_INSTANCES: u32 = 64;

/// How many instances the pool holds for handlers whose concurrency adds up to `workers`:
/// twice that, and at least [`POOL_MIN_INSTANCES`] (see the module docs).
pub fn pool_instances(workers: usize) -> u32 {
    u32::try_from(workers.saturating_mul(2))
        .unwrap_or(u32::MAX)
        .max(POOL_MIN_INSTANCES)
}

/// Core instances, memories and tables one component may hold in the pool (a Rust
/// component built for wasm32-wasip2 has a few core instances and one memory).
const POOL_CORE_INSTANCES_PER_COMPONENT: u32 = 16;
const POOL_MEMORIES_PER_COMPONENT: u32 = 2;
const POOL_TABLES_PER_COMPONENT: u32 = 16;

/// The engine and linker every plugin shares.
pub struct PluginHost {
    engine: Engine,
    linker: Linker<CallState>,
    ticker: Arc<Ticker>,
    slots: Option<Arc<Semaphore>>,
}

impl PluginHost {
    /// Creates the engine (epoch interruption on, compiled plugins cached in
    /// [`default_cache_dir`]) and starts its epoch ticker.
    pub fn new() -> Result<Arc<Self>> {
        Self::with_cache(default_cache_dir().as_deref())
    }

    /// Like [`PluginHost::new`], caching compiled plugins in `cache_dir`, or nowhere when
    /// `None`.
    pub fn with_cache(cache_dir: Option<&std::path::Path>) -> Result<Arc<Self>> {
        Self::with_options(HostOptions {
            cache_dir: cache_dir.map(std::path::Path::to_path_buf),
            pool: None,
        })
    }

    /// Creates the engine as `options` say and starts its epoch ticker. A cache that cannot
    /// be set up is skipped with a warning: plugins are then compiled every time.
    pub fn with_options(options: HostOptions) -> Result<Arc<Self>> {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        if let Some(dir) = &options.cache_dir {
            let mut cache_config = wasmtime::CacheConfig::new();
            cache_config.with_directory(dir);
            match wasmtime::Cache::new(cache_config) {
                Ok(cache) => {
                    config.cache(Some(cache));
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "compiled plugin cache disabled");
                }
            }
        }
        let slots = options.pool.as_ref().map(|pool| {
            let mut pooling = wasmtime::PoolingAllocationConfig::new();
            let n = pool.instances.max(1);
            pooling
                .total_component_instances(n)
                .total_core_instances(n.saturating_mul(POOL_CORE_INSTANCES_PER_COMPONENT))
                .total_memories(n.saturating_mul(POOL_MEMORIES_PER_COMPONENT))
                .total_tables(n.saturating_mul(POOL_TABLES_PER_COMPONENT))
                .total_stacks(n)
                .max_core_instances_per_component(POOL_CORE_INSTANCES_PER_COMPONENT)
                .max_memories_per_component(POOL_MEMORIES_PER_COMPONENT)
                .max_tables_per_component(POOL_TABLES_PER_COMPONENT)
                .max_memory_size(usize::try_from(pool.max_memory).unwrap_or(usize::MAX))
                .decommit_batch_size(DECOMMIT_BATCH);
            if let SlotReset::KeepResident {
                bytes,
                copy_on_write,
            } = pool.reset
            {
                pooling
                    .decommit_batch_size(RESIDENT_DECOMMIT_BATCH)
                    .linear_memory_keep_resident(bytes)
                    .table_keep_resident(bytes)
                    .pagemap_scan(wasmtime::Enabled::Auto);
                config.memory_init_cow(copy_on_write);
            }
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pooling));
            Arc::new(Semaphore::new(n as usize))
        });
        let engine = Engine::new(&config).map_err(|e| Error::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| Error::Engine(e.to_string()))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| Error::Engine(e.to_string()))?;
        // The contract's own interfaces; `wasi:http` and `wasi:io` come from their crates.
        let linked = (|| {
            use bindings::switchyard::plugin as contract;
            contract::types::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
            contract::host::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
            contract::metrics::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
            contract::cache::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)?;
            contract::kube::add_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
        })();
        linked.map_err(|e| Error::Engine(e.to_string()))?;
        let ticker = Ticker::start(engine.clone())?;
        Ok(Arc::new(Self {
            engine,
            linker,
            ticker,
            slots,
        }))
    }

    /// Compiles a plugin and checks it against the `handler` world. Runs the compiler on a
    /// blocking thread, off the async runtime.
    pub async fn compile(self: &Arc<Self>, name: &str, bytes: Vec<u8>) -> Result<Plugin> {
        let host = self.clone();
        let plugin_name = name.to_string();
        tokio::task::spawn_blocking(move || host.compile_blocking(&plugin_name, &bytes))
            .await
            .map_err(|e| Error::Engine(format!("the compiler thread failed: {e}")))?
    }

    fn compile_blocking(&self, name: &str, bytes: &[u8]) -> Result<Plugin> {
        let invalid = |reason: String| Error::Invalid {
            plugin: name.to_string(),
            reason,
        };
        if let Some(problem) = header_problem(bytes) {
            return Err(invalid(format!("not a WebAssembly component ({problem})")));
        }
        let component = Component::from_binary(&self.engine, bytes)
            .map_err(|e| invalid(format!("not a WebAssembly component: {}", error_chain(&e))))?;
        let ty = component.component_type();
        let imports = ty.imports(&self.engine).map(|(name, _)| name);
        super::contract::check(imports, super::contract::version()).map_err(invalid)?;
        let instance_pre = self.linker.instantiate_pre(&component).map_err(|e| {
            invalid(format!(
                "imports something the host does not provide: {}",
                error_chain(&e)
            ))
        })?;
        // The exports' indices, looked up once here rather than in every instance.
        let indices = HandlerIndices::new(&instance_pre).map_err(|e| {
            invalid(format!(
                "does not export the switchyard:plugin handler world: {}",
                error_chain(&e)
            ))
        })?;
        make_memory_images(name, &component);
        // `handle-batch` (the `handler-batch` world): its type is checked where it is
        // first looked up in an instance, when the handler's first batch is called.
        let batch = component.get_export_index(None, "handle-batch");
        Ok(Plugin {
            name: name.to_string(),
            pre: instance_pre,
            indices,
            batch,
            engine: self.engine.clone(),
            size: bytes.len(),
            slots: self.slots.clone(),
            ticker: self.ticker.clone(),
        })
    }
}

/// Attempts at [`make_memory_images`] before the first instance is left to make the images.
const MEMORY_IMAGE_TRIES: u32 = 5;

/// Makes the component's copy-on-write memory images now, on the compiler's thread, rather
/// than in its first instance (a call). Linux refuses to seal a new image (`EBUSY`) while
/// something else holds its pages for a moment, as a kernel reclaiming memory in the
/// background (DAMON) does; each failure waits a little longer (20 ms, doubling) and tries
/// again. Images still missing are made by the first instance, as without this.
fn make_memory_images(plugin: &str, component: &Component) {
    for attempt in 1..=MEMORY_IMAGE_TRIES {
        match component.initialize_copy_on_write_image() {
            Ok(()) => return,
            Err(_) if attempt < MEMORY_IMAGE_TRIES => {
                std::thread::sleep(Duration::from_millis(10 << attempt));
            }
            Err(e) => tracing::warn!(
                plugin,
                error = %error_chain(&e),
                "the plugin's memory image could not be made; its first instance tries again"
            ),
        }
    }
}

/// The header of a component in the encoding the host reads: `\0asm`, version 0x0d, layer 1.
const COMPONENT_HEADER: [u8; 8] = *b"\0asm\x0d\x00\x01\x00";
/// The header of a core WebAssembly module: `\0asm`, version 1, layer 0.
const CORE_MODULE_HEADER: [u8; 8] = *b"\0asm\x01\x00\x00\x00";

/// What is wrong with the first bytes of a file that should be a component, in words that
/// never quote the bytes (the file may be anything, and the error is shown in /status).
fn header_problem(bytes: &[u8]) -> Option<&'static str> {
    if bytes.is_empty() {
        Some("the file is empty")
    } else if !bytes.starts_with(&COMPONENT_HEADER[..4]) {
        Some("bad magic number")
    } else if bytes.len() < COMPONENT_HEADER.len() {
        Some("the file ends inside its header")
    } else if bytes[..8] == CORE_MODULE_HEADER {
        Some(
            "it is a core module: make a component of it, for example with `wasm-tools component new`",
        )
    } else if bytes[..8] != COMPONENT_HEADER {
        Some("unsupported binary version")
    } else {
        None
    }
}

/// Where compiled plugins are cached unless configured otherwise:
/// `$XDG_CACHE_HOME/switchyard/wasm`, or `$HOME/.cache/switchyard/wasm`.
pub fn default_cache_dir() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
    Some(base.join("switchyard").join("wasm"))
}

/// What one call may use.
#[derive(Debug, Clone)]
pub struct CallLimits {
    /// Wall-clock deadline for instantiation, `init` and `handle` together.
    pub timeout: Duration,
    /// Memory cap for the instance, in bytes.
    pub memory: u64,
}

/// A compiled, pre-linked plugin, ready to instantiate. Cheap to share.
pub struct Plugin {
    name: String,
    pre: InstancePre<CallState>,
    /// Where the handler world's exports are, found once at load.
    indices: HandlerIndices,
    /// The export `handle-batch`, for a plugin of the `handler-batch` world.
    batch: Option<ComponentExportIndex>,
    engine: Engine,
    size: usize,
    slots: Option<Arc<Semaphore>>,
    ticker: Arc<Ticker>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish()
    }
}

impl Plugin {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size of the component file in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the plugin exports `handle-batch` (it targets the `handler-batch` world).
    pub fn handles_batches(&self) -> bool {
        self.batch.is_some()
    }

    /// Runs `init(config)` then `handle(event)` in a fresh instance, within `limits`, for
    /// `handler`, whose plugin may log and nothing more (see [`Plugin::call_in`]).
    pub async fn call(
        &self,
        handler: Arc<str>,
        logs: &PluginLogs,
        limits: &CallLimits,
        config_json: &str,
        event: &types::Event,
    ) -> Result<types::Outcome> {
        let context = Arc::new(HostContext::new(handler, logs.clone()));
        self.call_in(&context, limits, config_json, event).await
    }

    /// Runs `init(config)` then `handle(event)` in a fresh instance, within `limits`, with
    /// the host imports working from `context` (the handler's caches, writes and metrics).
    pub async fn call_in(
        &self,
        context: &Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
        event: &types::Event,
    ) -> Result<types::Outcome> {
        self.call_traced(context, limits, config_json, event, None)
            .await
    }

    /// [`Plugin::call_in`], the call's writes and requests traced as children of `trace`.
    pub async fn call_traced(
        &self,
        context: &Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
        event: &types::Event,
        trace: Option<crate::traces::CallTrace>,
    ) -> Result<types::Outcome> {
        let mut instance = self
            .instantiate_in(context.clone(), limits, config_json)
            .await?;
        instance.handle_traced(event, trace).await
    }

    /// Creates an instance for `handler` (whose plugin may log and nothing more) and runs
    /// its `init(config)`; see [`Plugin::instantiate_in`].
    pub async fn instantiate(
        &self,
        handler: Arc<str>,
        logs: &PluginLogs,
        limits: &CallLimits,
        config_json: &str,
    ) -> Result<PluginInstance> {
        let context = Arc::new(HostContext::new(handler, logs.clone()));
        self.instantiate_in(context, limits, config_json).await
    }

    /// Creates an instance whose imports work from `context` and runs its `init(config)`,
    /// within `limits` (the deadline covers instantiation, `init` and the instance's first
    /// `handle`). With a pooling engine, waits for a free slot in the pool first.
    pub async fn instantiate_in(
        &self,
        context: Arc<HostContext>,
        limits: &CallLimits,
        config_json: &str,
    ) -> Result<PluginInstance> {
        let slot = match &self.slots {
            Some(slots) => Some(
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| Error::Engine("the instance pool is closed".into()))?,
            ),
            None => None,
        };
        let deadline = Instant::now() + limits.timeout;
        let log = CallLog::new(context.log_limits());
        let mut store = Store::new(
            &self.engine,
            CallState {
                wasi: None,
                http: WasiHttpCtx::new(),
                hooks: CallHooks::new(context.clone(), deadline),
                table: ResourceTable::new(),
                limits: CallLimiter::new(limits.memory),
                context,
                deadline,
                timed_out: false,
                log,
                trace: None,
            },
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            if Instant::now() >= state.deadline {
                state.timed_out = true;
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let running = self.ticker.running();
        let pre = &self.pre;
        let started = by_deadline(deadline, limits.timeout, async {
            let instance = pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| trap(&store, limits.timeout, "instantiate", e))?;
            let bindings = self
                .indices
                .load(&mut store, &instance)
                .map_err(|e| trap(&store, limits.timeout, "instantiate", e))?;
            bindings
                .call_init(&mut store, config_json)
                .await
                .map_err(|e| trap(&store, limits.timeout, "init", e))?
                .map_err(|m| Error::Init(crate::util::redact::redact_owned(m)))?;
            Ok((instance, bindings))
        })
        .await;
        drop(running);
        let (instance, bindings) = match started {
            Ok(started) => started,
            Err(error) => {
                store.data_mut().end_call();
                return Err(error);
            }
        };
        Ok(PluginInstance {
            store,
            instance,
            bindings,
            batch: self.batch,
            timeout: limits.timeout,
            calls: 0,
            broken: false,
            _slot: slot,
            ticker: self.ticker.clone(),
        })
    }
}

/// Runs `call` (a plugin call, or a part of one) until `deadline`, and ends it there as a
/// timeout of `timeout`: the one bound every call goes through.
///
/// Epoch interruption stops a plugin that runs wasm past its deadline, but not one waiting
/// in the host (a WASI clock poll behind `std::thread::sleep`, a write waiting for the API
/// server): there no wasm runs, so no epoch check does. Dropping the call's future at the
/// deadline stops it wherever it is; wasmtime then unwinds the guest's stack, and the
/// instance is never called again (see [`PluginInstance::handle`]).
async fn by_deadline<T>(
    deadline: Instant,
    timeout: Duration,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), call)
        .await
        .unwrap_or(Err(Error::Timeout(timeout)))
}

/// A live instance of a plugin, initialised and ready for events. [`Plugin::call`] uses one
/// per event; the benchmarks also reuse one across events to measure what that would save.
pub struct PluginInstance {
    store: Store<CallState>,
    instance: Instance,
    bindings: bindings::Handler,
    /// The export `handle-batch`, if the plugin has it.
    batch: Option<ComponentExportIndex>,
    timeout: Duration,
    calls: u64,
    /// A call trapped or was stopped at its deadline: whatever state the plugin was left
    /// in, it is not called again.
    broken: bool,
    _slot: Option<OwnedSemaphorePermit>,
    ticker: Arc<Ticker>,
}

impl PluginInstance {
    /// Runs `handle(event)`. The first call shares the deadline (and the log budget) that
    /// instantiation started; each later call gets its own. A trap or a timeout leaves the
    /// instance unusable: every later call fails at once, and the caller should drop it.
    pub async fn handle(&mut self, event: &types::Event) -> Result<types::Outcome> {
        self.handle_traced(event, None).await
    }

    /// [`PluginInstance::handle`], the call's Kubernetes writes and outbound requests
    /// traced as children of `trace` (the event's trace id then replaces the one derived
    /// from the event in `traceparent`).
    pub async fn handle_traced(
        &mut self,
        event: &types::Event,
        trace: Option<crate::traces::CallTrace>,
    ) -> Result<types::Outcome> {
        let deadline = self.begin_call("handle", event, trace)?;
        let (store, bindings, timeout) = (&mut self.store, &self.bindings, self.timeout);
        let running = self.ticker.running();
        let result = by_deadline(deadline, timeout, async {
            bindings
                .call_handle(&mut *store, event)
                .await
                .map_err(|e| trap(store, timeout, "handle", e))?
                // The plugin may echo a secret value of its config.
                .map_err(|m| Error::Handler(crate::util::redact::redact_owned(m)))
        })
        .await;
        drop(running);
        self.end_call(result)
    }

    /// Runs `handle-batch(events)`, under the same deadline rules as [`Self::handle`] (one
    /// deadline for the whole batch). An answer with another number of item outcomes than
    /// events is an error; so is a plugin without `handle-batch`.
    pub async fn handle_batch(
        &mut self,
        events: &[types::Event],
    ) -> Result<Vec<types::ItemOutcome>> {
        let Some(index) = self.batch else {
            return Err(Error::Trap(
                "handle-batch: the plugin does not export it (build it for the handler-batch world)".into(),
            ));
        };
        let first = events
            .first()
            .ok_or_else(|| Error::Host("an empty batch".into()))?;
        let deadline = self.begin_call("handle-batch", first, None)?;
        let (store, instance, timeout) = (&mut self.store, &self.instance, self.timeout);
        let running = self.ticker.running();
        let result = by_deadline(deadline, timeout, async {
            type Answer = (std::result::Result<Vec<types::ItemOutcome>, String>,);
            let func = instance
                .get_typed_func::<(&[types::Event],), Answer>(&mut *store, index)
                .map_err(|e| Error::Trap(format!("handle-batch: {}", error_chain(&e))))?;
            let (answer,) = func
                .call_async(&mut *store, (events,))
                .await
                .map_err(|e| trap(store, timeout, "handle-batch", e))?;
            answer.map_err(|m| Error::Handler(crate::util::redact::redact_owned(m)))
        })
        .await;
        drop(running);
        let result = result.and_then(|items| {
            if items.len() == events.len() {
                Ok(items)
            } else {
                Err(Error::Handler(format!(
                    "handle-batch answered {} item outcomes for {} events",
                    items.len(),
                    events.len()
                )))
            }
        });
        self.end_call(result)
    }

    /// Starts a call (`stage` names it for errors): a fresh deadline and log budget unless
    /// it is the instance's first; the outbound requests' trace context is `trace`'s when
    /// the event is traced, else derived from `event`. Returns the deadline.
    fn begin_call(
        &mut self,
        stage: &str,
        event: &types::Event,
        trace: Option<crate::traces::CallTrace>,
    ) -> Result<Instant> {
        if self.broken {
            return Err(Error::Trap(format!(
                "{stage}: the instance trapped or timed out in an earlier call and cannot be called again"
            )));
        }
        if self.calls > 0 {
            let state = self.store.data_mut();
            state.deadline = Instant::now() + self.timeout;
            state.hooks.next_call(state.deadline);
            state.timed_out = false;
            state.log = CallLog::new(state.context.log_limits());
            self.store.set_epoch_deadline(1);
        }
        self.calls += 1;
        let state = self.store.data_mut();
        if trace.is_none() {
            let derived = super::outbound::trace::Trace::of(state.context.handler(), event);
            state.hooks.trace = Some(derived);
        } else {
            state.hooks.trace = None;
        }
        state.hooks.call_trace.clone_from(&trace);
        state.trace = trace;
        Ok(self.store.data().deadline)
    }

    /// Ends a call with `result`: a trap or a timeout breaks the instance.
    fn end_call<T>(&mut self, result: Result<T>) -> Result<T> {
        self.broken = matches!(result, Err(Error::Timeout(_) | Error::Trap(_)));
        self.store.data_mut().end_call();
        result
    }
}

/// The error for a call that failed in wasmtime: a timeout if the deadline stopped it,
/// otherwise a trap in `stage`, saying what went wrong before where (the wasm backtrace).
fn trap(store: &Store<CallState>, timeout: Duration, stage: &str, e: wasmtime::Error) -> Error {
    if store.data().timed_out {
        Error::Timeout(timeout)
    } else {
        // A panic's message may hold a secret value of the config.
        Error::Trap(crate::util::redact::redact_owned(format!(
            "{stage}: {}",
            reason_first(&e)
        )))
    }
}

/// An error's root cause (what went wrong: a trap code, the memory cap), then the context
/// wrapped around it, outermost first (where: wasmtime adds the wasm backtrace there).
fn reason_first(error: &wasmtime::Error) -> String {
    let mut text = error.root_cause().to_string();
    let chain: Vec<String> = error.chain().map(|cause| cause.to_string()).collect();
    for context in &chain[..chain.len().saturating_sub(1)] {
        text.push_str("; ");
        text.push_str(context);
    }
    text
}

/// An error with its causes, on one line (a cause written over several lines is joined).
fn error_chain(error: &wasmtime::Error) -> String {
    error
        .chain()
        .map(|cause| {
            cause
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile_error(bytes: &[u8]) -> String {
        let host = PluginHost::with_cache(None).unwrap();
        host.compile_blocking("x", bytes).unwrap_err().to_string()
    }

    #[test]
    fn a_text_file_is_refused_in_one_line_that_quotes_none_of_it() {
        let error = compile_error(b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/sh\n");
        assert_eq!(
            error,
            "plugin \"x\" is invalid: not a WebAssembly component (bad magic number)"
        );
    }

    #[test]
    fn header_problems_are_named_without_the_bytes() {
        assert_eq!(
            compile_error(b""),
            "plugin \"x\" is invalid: not a WebAssembly component (the file is empty)"
        );
        assert_eq!(
            compile_error(b"\0asm\x0d"),
            "plugin \"x\" is invalid: not a WebAssembly component (the file ends inside its header)"
        );
        assert!(
            compile_error(b"\0asm\x01\0\0\0")
                .contains("(it is a core module: make a component of it"),
        );
        assert_eq!(
            compile_error(b"\0asm garbage"),
            "plugin \"x\" is invalid: not a WebAssembly component (unsupported binary version)"
        );
    }

    #[test]
    fn a_truncated_component_is_refused_in_one_line() {
        let error = compile_error(b"\0asm\x0d\0\x01\0\x01\x7f");
        assert!(
            error.starts_with("plugin \"x\" is invalid: not a WebAssembly component: "),
            "{error}"
        );
        assert!(!error.contains('\n'), "{error}");
    }

    #[test]
    fn a_trap_reads_reason_first_then_where() {
        let error = wasmtime::Error::msg("memory cap of 16 MiB exceeded")
            .context("error while executing at wasm backtrace:\n    0: 0x1 - f");
        assert_eq!(
            reason_first(&error),
            "memory cap of 16 MiB exceeded; error while executing at wasm backtrace:\n    0: 0x1 - f"
        );
    }
}
