//! Routes: each subscribes to its informers and hands the deltas its rules select (kinds of
//! change, and the object filter in [`filter`]) to its handler's queue. A route with a
//! finalizer delivers an object's deletion when it begins (`finalizer`).

pub mod filter;
mod finalizer;
mod memory;
mod pruned;
mod subscription;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use serde::Serialize;

use crate::config::{Delivery, EventFilter, Initial};
use crate::handler::Handler;
use crate::informer::{Delta, DeltaSink};

pub use filter::ObjectFilter;

/// One route at run time.
pub struct Route {
    name: Arc<str>,
    events: EventFilter,
    filter: ObjectFilter,
    delivery: Delivery,
    /// Swapped when a config reload replaces the handler; held for reading while a delta
    /// is queued, so once a swap returns nothing more reaches the old handler.
    handler: RwLock<Arc<Handler>>,
    delivered: AtomicU64,
    skipped: AtomicU64,
    /// What it does with the objects listed when it starts.
    initial: Initial,
    /// Objects of the first list passed over (`initial: skip`).
    initial_skipped: AtomicU64,
    /// What it delivered, kept in the state store (`state_dir:`).
    memory: Option<memory::Memory>,
    /// Its finalizer (`finalizer:`), if it holds its objects with one.
    held: Option<finalizer::Held>,
    /// Where the daemon sends traces, if it does: each event delivered starts one.
    traces: Option<Arc<crate::traces::Traces>>,
}

/// A route's state as /status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RouteStatus {
    /// Route name.
    pub name: String,
    /// The handler it feeds.
    pub handler: String,
    /// `latest` or `every`.
    pub delivery: &'static str,
    /// Deltas handed to the handler's queue.
    pub delivered: u64,
    /// Deltas the route's event kinds or object filter left out.
    pub skipped: u64,
    /// Objects of its informers' first list it passed over (`initial: skip`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_skipped: Option<u64>,
    /// Events from this route waiting in the handler's queue: the route's buffer.
    pub pending: usize,
    /// The finalizer it holds its objects with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// Objects held in Terminating by a deletion in the handler's dead letters (with a
    /// finalizer): retrying the dead letter lets them go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by_dead_letters: Option<usize>,
}

impl Route {
    /// A route named `name` delivering the selected kinds of change to the objects `filter`
    /// admits to `handler`.
    pub fn new(
        name: &str,
        events: EventFilter,
        filter: ObjectFilter,
        delivery: Delivery,
        handler: Arc<Handler>,
    ) -> Self {
        Self {
            name: name.into(),
            events,
            filter,
            delivery,
            handler: RwLock::new(handler),
            delivered: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            initial: Initial::Deliver,
            initial_skipped: AtomicU64::new(0),
            memory: None,
            held: None,
            traces: None,
        }
    }

    /// Starts a trace for each event it delivers, sent through `traces` (none with `None`).
    #[must_use]
    pub fn with_traces(mut self, traces: Option<Arc<crate::traces::Traces>>) -> Self {
        self.traces = traces;
        self
    }

    /// Holds the objects it delivers with the finalizer `name`, delivering their deletion
    /// as `deleted` when it begins (see [`finalizer`]).
    #[must_use]
    pub fn with_finalizer(mut self, name: Option<&str>) -> Self {
        self.held = name.map(finalizer::Held::new);
        self
    }

    /// The route's counters and buffer.
    pub fn status(&self) -> RouteStatus {
        let handler = self.handler();
        RouteStatus {
            name: self.name.to_string(),
            handler: handler.name().to_string(),
            delivery: match self.delivery {
                Delivery::Latest => "latest",
                Delivery::Every { .. } => "every",
            },
            delivered: self.delivered.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            initial_skipped: (self.initial == Initial::Skip)
                .then(|| self.initial_skipped.load(Ordering::Relaxed)),
            pending: handler.pending_for_route(&self.name),
            finalizer: self.held.as_ref().map(|h| h.name().to_string()),
            held_by_dead_letters: self
                .held
                .as_ref()
                .map(|_| handler.dead_deletions_for_route(&self.name)),
        }
    }

    /// The handler the route feeds now.
    pub fn handler(&self) -> RwLockReadGuard<'_, Arc<Handler>> {
        crate::util::read(&self.handler)
    }

    /// Feeds `handler` from now on; returns the handler fed before. Once this returns, no
    /// delta reaches the previous handler through this route.
    pub fn set_handler(&self, handler: Arc<Handler>) -> Arc<Handler> {
        let mut current = crate::util::write(&self.handler);
        std::mem::replace(&mut *current, handler)
    }

    /// Whether the route's filter admits `object` (as an addition).
    pub fn admits(&self, object: &Arc<crate::informer::CachedObject>) -> bool {
        self.filter.apply(&Delta::Added(object.clone())).is_some()
    }

    /// The route's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the route delivers for this delta, if anything: the object filter first (which
    /// turns an update moving an object in or out of the route into `added` or `deleted`),
    /// then the kinds of change. Resyncs go to handlers that asked for them; `Replaced`
    /// only announces a list and carries no object.
    pub fn select(&self, delta: &Delta) -> Option<Delta> {
        select(&self.events, &self.filter, delta)
    }
}

/// What a route with these kinds of change and this object filter delivers for `delta`, if
/// anything: the object filter first (which turns an update moving an object in or out of
/// the route into `added` or `deleted`), then the kinds of change. Resyncs always pass;
/// `Replaced` only announces a list and carries no object.
pub fn select(events: &EventFilter, filter: &ObjectFilter, delta: &Delta) -> Option<Delta> {
    if matches!(delta, Delta::Replaced { .. }) {
        return None;
    }
    let delta = filter.apply(delta)?;
    wanted(events, &delta).then_some(delta)
}

impl Route {
    /// Hands a delta the filter admitted to the handler if the route takes its kind of
    /// change, and records it (with `state_dir`) in the same step: queued before it is
    /// recorded, so the store never holds "delivered" without the queued event (see
    /// `state`), and both sent before a worker can take it.
    /// `stamps`: when the informer took the delta in and the route got it, if the route
    /// traces its events.
    fn emit(&self, delta: &Delta, stamps: Option<Stamps>) {
        let finalized;
        let delta = match self.held.as_ref().map(|held| held.step(delta)) {
            None => delta,
            Some(finalizer::Step::Deliver(d)) => {
                finalized = d;
                &finalized
            }
            Some(finalizer::Step::Skip) => {
                // Its deletion was delivered when it began; the route's memory forgot it then.
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        if wanted(&self.events, delta) {
            self.delivered.fetch_add(1, Ordering::Relaxed);
            let handler = self.handler();
            let trace = self
                .traces
                .as_ref()
                .zip(stamps)
                .and_then(|(traces, stamps)| self.trace(traces, stamps, handler.name(), delta));
            handler.enqueue(&self.name, self.delivery, (delta, trace), || {
                self.remember(delta)
            });
        } else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            self.remember(delta);
        }
    }
}

/// When the informer took a delta in and when the route got it.
#[derive(Debug, Clone, Copy)]
struct Stamps {
    received: std::time::SystemTime,
    routed: std::time::SystemTime,
}

impl Route {
    /// If the route traces its events (else no clock is read): now as the route gets a
    /// delta, and when the informer took it in (`received`, else now too).
    fn stamps(&self, received: Option<std::time::SystemTime>) -> Option<Stamps> {
        self.traces.as_ref().map(|_| {
            let routed = std::time::SystemTime::now();
            Stamps {
                received: received.unwrap_or(routed),
                routed,
            }
        })
    }

    /// The trace of the event `delta` gives `handler`, taken in and routed at `stamps`.
    fn trace(
        &self,
        traces: &crate::traces::Traces,
        stamps: Stamps,
        handler: &str,
        delta: &Delta,
    ) -> Option<crate::traces::EventTrace> {
        let object = delta.object()?;
        let change = match delta {
            Delta::Added(_) => "added",
            Delta::Updated { .. } => "updated",
            Delta::Deleted { .. } => "deleted",
            Delta::Sync(_) | Delta::Replaced { .. } => "sync",
        };
        let about = crate::traces::About {
            handler,
            route: &self.name,
            change,
            object: object.key().as_str(),
            resource_version: object.resource_version(),
            json: object.json_str(),
        };
        Some(traces.event((stamps.received, stamps.routed), &about))
    }
}

/// Whether a route taking these kinds of change delivers `delta`.
fn wanted(events: &EventFilter, delta: &Delta) -> bool {
    match delta {
        Delta::Added(_) => events.added,
        Delta::Updated { .. } => events.updated,
        Delta::Deleted { .. } => events.deleted,
        Delta::Sync(_) => true,
        Delta::Replaced { .. } => false,
    }
}

impl Route {
    /// Takes a delta the informer took in at `received`, if it says.
    fn route_delta(&self, delta: &Delta, received: Option<std::time::SystemTime>) {
        if matches!(delta, Delta::Replaced { .. }) || self.restore(delta) {
            return;
        }
        let stamps = self.stamps(received);
        match self.filter.apply(delta) {
            Some(admitted) => self.emit(&admitted, stamps),
            None => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl DeltaSink for Route {
    fn deliver(&self, delta: &Delta) {
        self.route_delta(delta, None);
    }

    fn deliver_received(&self, delta: &Delta, received: std::time::SystemTime) {
        self.route_delta(delta, Some(received));
    }

    fn resync_period(&self) -> Option<std::time::Duration> {
        self.handler().spec().resync
    }

    fn release(&self, object: &Arc<crate::informer::CachedObject>) {
        self.retain_released(object);
        if let Some(held) = &self.held {
            held.release(object.key());
        }
        self.handler().release(&self.name, object.key());
    }
}
