//! The handler stage: one handler at run time. Routes queue deltas into it; its workers
//! take keys from its [`WorkQueue`], call the plugin with a memory cap and a deadline, and
//! retry, delay or dead-letter what fails.
//!
//! - [`pending`]: what each queued key is owed, by delivery mode (`latest` coalesces,
//!   `every` keeps each delta);
//! - `worker`: the worker loop and the retry policy;
//! - [`dead_letter`]: events given up on, for an operator to retry or purge;
//! - [`finalizer`]: a route's finalizer, put on an object before its handler sees it and
//!   taken off after the handler succeeded with its deletion;
//! - `lifecycle`: pause, resume, hand-over to a successor on reload, shutdown;
//! - `slot`: the plugin version the workers call, swapped in by the plugin registry;
//! - [`shadow`]: a second plugin called with the same events, its writes captured and
//!   compared with the plugin's;
//! - [`status`]: counters and the views /status and /handlers/{name} show.
//!
//! The handler owns the per-key buffer beside the queue rather than in it: the queue only
//! knows keys (de-duplication, one worker per key, delays), so it stays generic and the
//! delivery modes stay in one place.

mod batch;
pub mod dead_letter;
pub mod finalizer;
mod instance;
mod lifecycle;
pub mod pending;
mod persist;
mod quarantine;
pub mod shadow;
mod slot;
pub mod status;
mod worker;

use crate::util::FastMap as HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::{Delivery, HandlerSpec};
use crate::informer::{Delta, ObjectKey};
use crate::metrics::Metrics;
use crate::plugin::{HostContext, PluginLogs};
use crate::queue::{RateLimits, WorkQueue};
use crate::util::lock;

pub use dead_letter::{DeadLetter, DeadLetterView, DeadLetters};
pub use pending::{ChangeKind, Owed, PendingEvent};
pub use persist::cached_object;
pub use quarantine::QuarantineView;
pub use shadow::{ShadowStatus, ShadowView};
pub use status::{HandlerDetail, HandlerStatus, Latency, RecentError};

use slot::Slot;
use status::{Counters, Recent};

/// What a handler's queue holds: an object as delivered by one route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkKey {
    /// The route that delivered it.
    pub route: Arc<str>,
    /// The object.
    pub object: ObjectKey,
}

/// Events owed per key, with the delivery mode each key was queued in.
type Pending = HashMap<WorkKey, (Delivery, Owed)>;

/// A running handler. Shared by the routes that feed it and the admin API.
pub struct Handler {
    spec: HandlerSpec,
    name: Arc<str>,
    /// The config the plugin's `init` takes, its `valueFrom:` values resolved.
    config_json: String,
    /// What the config's values wait for (a Secret not found, say); while any, the
    /// workers take no work and events queue up.
    waiting_for: Vec<String>,
    queue: WorkQueue<WorkKey>,
    pending: Mutex<Pending>,
    dead_letters: Mutex<DeadLetters>,
    /// The plugin version the workers call, and why loading a new one failed.
    slot: Slot,
    /// What the plugin's host imports work from; replaced once the routes' informers exist.
    host_context: Mutex<Arc<HostContext>>,
    counters: Counters,
    workers: Mutex<Vec<JoinHandle<()>>>,
    stopping: watch::Sender<bool>,
    paused: watch::Sender<bool>,
    /// The replica's gate: false while another replica leads (set by the election, apart
    /// from the admin API's pause).
    active: watch::Receiver<bool>,
    /// Quarantine of a plugin that keeps failing.
    breaker: Mutex<quarantine::Breaker>,
    recent: Mutex<Recent>,
    /// The state store keeping its work across restarts, if the daemon has one.
    state: OnceLock<crate::state::State>,
    /// With a state store, the event each worker handles, by key: the first of the key's
    /// stored entry until the call ends. Locked after `pending`, never before.
    flying: Mutex<HashMap<WorkKey, PendingEvent>>,
    /// With a state store, keys whose newest event is not committed yet, in the order they
    /// were sent (sequence number, key, when it was queued): they go to the work queue once
    /// the store commits them ([`persist::release_committed`]), so no worker waits for a
    /// commit while holding a key. Locked after `pending`, never before.
    held: Mutex<std::collections::VecDeque<(u64, WorkKey, tokio::time::Instant)>>,
    /// The plugin compared with the handler's on every event, if `shadow:` names one.
    shadow: Option<Arc<shadow::Shadow>>,
    /// In sharded mode, this replica's hold on its ranges, checked before each call.
    tenure: OnceLock<Arc<crate::sharding::Tenure>>,
    /// The finalizers of the routes feeding it (`finalizer:`), set with the host context.
    finalizers: Mutex<Arc<finalizer::Finalizers>>,
    /// `handle-batch` calls and their sizes (`batch:`).
    batch_metrics: crate::metrics::BatchMetrics,
    /// With `batch:`, held by the one worker gathering a batch (from before it takes the
    /// batch's first key until the batch is full or its `max_wait` has passed): the others
    /// call the plugin meanwhile or wait their turn, so a batch fills from the whole stream
    /// instead of each worker's share of it, and no event waits more than one `max_wait`.
    gathering: tokio::sync::Mutex<()>,
}

impl Handler {
    /// Starts a handler with `spec.concurrency` workers, its queue reporting to `metrics`.
    /// Until a plugin is set, events wait in the queue.
    /// Workers hand events to the plugin only while `active` is true and the handler is
    /// not paused. `config` is the config `init` takes, or what its values wait for: then
    /// events queue up until a successor with the values takes them over.
    pub fn start(
        spec: HandlerSpec,
        config: Result<String, Vec<String>>,
        logs: PluginLogs,
        metrics: &Metrics,
        active: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let limits = RateLimits {
            backoff_base: spec.backoff_base,
            backoff_cap: spec.backoff_cap,
            qps: spec.qps,
            burst: spec.burst,
        };
        let spec_quarantine = spec.quarantine;
        let spec_name = spec.name.clone();
        let shadow = spec
            .shadow
            .clone()
            .map(|plugin| Arc::new(shadow::Shadow::new(spec.name.as_str().into(), plugin)));
        let (config_json, waiting_for) = match config {
            Ok(json) => (json, Vec::new()),
            Err(waiting) => (String::new(), waiting),
        };
        let handler = Arc::new(Self {
            name: spec.name.as_str().into(),
            config_json,
            waiting_for,
            queue: WorkQueue::with_limits(limits, Some(metrics.queue(&spec.name))),
            host_context: Mutex::new(Arc::new(HostContext::new(spec.name.as_str().into(), logs))),
            spec,
            pending: Mutex::new(HashMap::default()),
            flying: Mutex::new(HashMap::default()),
            held: Mutex::default(),
            dead_letters: Mutex::new(DeadLetters::default()),
            slot: Slot::default(),
            counters: Counters::default(),
            workers: Mutex::new(Vec::new()),
            stopping: watch::channel(false).0,
            paused: watch::channel(false).0,
            active,
            breaker: Mutex::new(quarantine::Breaker::new(spec_quarantine)),
            recent: Mutex::new(Recent::default()),
            state: OnceLock::new(),
            shadow,
            tenure: OnceLock::new(),
            finalizers: Mutex::default(),
            batch_metrics: metrics.batch(&spec_name),
            gathering: tokio::sync::Mutex::new(()),
        });
        let workers = (0..handler.spec.concurrency)
            .map(|worker| {
                let span = tracing::info_span!("worker", handler = %handler.name, worker);
                tokio::spawn(handler.clone().work().instrument(span))
            })
            .collect();
        *lock(&handler.workers) = workers;
        handler
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The handler's settings.
    pub fn spec(&self) -> &HandlerSpec {
        &self.spec
    }

    /// Whether the handler runs with `config` (as [`Handler::start`] takes it): the same
    /// resolved values, or waiting for the same ones.
    pub fn has_config(&self, config: &Result<String, Vec<String>>) -> bool {
        match config {
            Ok(json) => self.waiting_for.is_empty() && *json == self.config_json,
            Err(waiting) => *waiting == self.waiting_for,
        }
    }

    /// What the config's values wait for; empty when the handler can run.
    pub fn waiting_for(&self) -> &[String] {
        &self.waiting_for
    }

    /// Sets what the plugin's host imports work from (the routes' caches, the granted
    /// writes, the metrics registry). Until it is set, the plugin may only log.
    pub fn set_host_context(&self, context: HostContext) {
        *lock(&self.host_context) = Arc::new(context);
    }

    /// Sets the finalizers of the routes feeding the handler: the workers put each on the
    /// objects its route delivers, and take it off once a deletion is handled.
    pub fn set_finalizers(&self, finalizers: finalizer::Finalizers) {
        *lock(&self.finalizers) = Arc::new(finalizers);
    }

    /// The finalizers of the routes feeding the handler.
    pub fn finalizers(&self) -> Arc<finalizer::Finalizers> {
        lock(&self.finalizers).clone()
    }

    /// Queues a delta delivered by `route` in its delivery mode. `recorded` runs while the
    /// key's buffer is still locked, right after its queue entry went to the state store:
    /// a route records there what it delivered, so both are sent before a worker can take
    /// the event. The event remembers its queue entry's sequence number: the worker calls
    /// the plugin once that is committed (under load, long before the worker gets to it).
    /// `trace` is the event's trace, when the daemon sends traces.
    pub fn enqueue(
        &self,
        route: &Arc<str>,
        delivery: Delivery,
        (delta, trace): (&Delta, Option<crate::traces::EventTrace>),
        recorded: impl FnOnce(),
    ) {
        let Some(mut event) = PendingEvent::from_delta(delta) else {
            recorded();
            return;
        };
        event.trace = trace;
        let key = WorkKey {
            route: route.clone(),
            object: event.object.key().clone(),
        };
        let mut pending = lock(&self.pending);
        let overflowed = match pending.get_mut(&key) {
            Some((mode, owed)) => {
                *mode = delivery;
                owed.push(delivery, event)
            }
            None => {
                pending.insert(key.clone(), (delivery, Owed::new(delivery, event)));
                false
            }
        };
        let seq = self.persist_key(&key, pending.get(&key));
        if let Some((_, owed)) = pending.get_mut(&key) {
            owed.mark_recorded(seq);
        }
        recorded();
        if seq > 0 {
            // Write-ahead: queued once the store has committed it, in the order sent.
            lock(&self.held).push_back((seq, key, tokio::time::Instant::now()));
            drop(pending);
            self.release_committed();
            self.want_if_dry();
        } else {
            drop(pending);
            self.queue.add(key);
        }
        if overflowed {
            self.counters
                .coalesced_overflow
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The shadow as the plugin registry sees it (a user of the shadow plugin), if the
    /// handler has one.
    pub fn shadow_user(&self) -> Option<Arc<dyn crate::plugin::PluginUser>> {
        self.shadow
            .clone()
            .map(|s| s as Arc<dyn crate::plugin::PluginUser>)
    }

    /// The shadow's counts and recent differences, if the handler has one.
    pub fn shadow_view(&self) -> Option<ShadowView> {
        self.shadow.as_ref().map(|s| s.view(&self.spec.plugin))
    }

    /// Puts an event back in front of what the key owes now.
    fn put_back(&self, key: &WorkKey, delivery: Delivery, event: PendingEvent) {
        let mut pending = lock(&self.pending);
        match pending.get_mut(key) {
            Some((_, owed)) => owed.put_back(event),
            None => {
                pending.insert(key.clone(), (delivery, Owed::new(delivery, event)));
            }
        }
    }

    /// Forgets what `route` queued for `object`, which another replica handles now (sharded
    /// mode): its pending events and retry count go; a call in flight finishes.
    pub fn release(&self, route: &Arc<str>, object: &ObjectKey) {
        let key = WorkKey {
            route: route.clone(),
            object: object.clone(),
        };
        if lock(&self.pending).remove(&key).is_some() {
            self.queue.forget(&key);
            // What the key owed is dropped from the store too (an event in flight stays,
            // its call ends as usual).
            self.persist_key(&key, None);
        }
    }

    /// Records that a worker's call for `key` ended, with what the key owes now (the event
    /// put back for a retry, or what arrived meanwhile).
    fn persist_call_ended(&self, key: &WorkKey) {
        let pending = lock(&self.pending);
        if lock(&self.flying).remove(key).is_some() {
            self.persist_key(key, pending.get(key));
        }
    }

    /// Events owed to keys delivered by `route`.
    pub fn pending_for_route(&self, route: &str) -> usize {
        lock(&self.pending)
            .iter()
            .filter(|(k, _)| &*k.route == route)
            .map(|(_, (_, owed))| owed.len())
            .sum()
    }
}
