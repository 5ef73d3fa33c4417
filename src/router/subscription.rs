//! A route's subscription to one of its informers, when the route needs to know where that
//! informer's first list ends: to compare with its records (`state_dir:`, see `memory`), or
//! to pass over the objects listed (`initial: skip`).
//!
//! `initial: skip` is for handlers that report changes, such as an Event exporter: the
//! objects there when the route starts are not news, and a restart without `state_dir`
//! would otherwise deliver them all again. Objects the informer hands over before its first
//! list ends (the `Added` of a list, or of the cache a route joins) are passed over: counted
//! in `initial_skipped` (when the route's filter admits them) and, with `state_dir`, recorded as delivered, so an update of one
//! is delivered as `updated` and the next start knows the route ran. A route whose records
//! say it ran before delivers the difference from them instead: objects created while the
//! daemon was down are changes it has not delivered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Route;
use crate::config::Initial;
use crate::informer::{CachedObject, Delta, DeltaSink};

impl Route {
    /// What to do with the objects listed when the route starts (default: deliver them).
    #[must_use]
    pub fn with_initial(mut self, initial: Initial) -> Self {
        self.initial = initial;
        self
    }

    /// What to subscribe to the `index`th informer feeding this route: the route itself,
    /// or when it keeps state or passes over the first list, a sink that also tells it when
    /// that informer has listed (and which share the list covered).
    pub fn sink(self: &Arc<Self>, index: usize) -> Arc<dyn DeltaSink> {
        let ran_before = self.memory.as_ref().is_some_and(|m| m.ran_before);
        let skipping = self.initial == Initial::Skip && !ran_before;
        if self.memory.is_none() && !skipping {
            return self.clone();
        }
        Arc::new(Subscribed {
            route: self.clone(),
            index,
            skipping: AtomicBool::new(skipping),
        })
    }

    /// Passes over an object of the first list: never delivered; if the filter admits it,
    /// counted in `initial_skipped` and recorded (with `state_dir`), else in `skipped`.
    fn pass_over(&self, delta: &Delta) {
        match self.filter.apply(delta) {
            Some(admitted) => {
                self.remember(&admitted);
                self.initial_skipped.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A route's subscription to one informer.
struct Subscribed {
    route: Arc<Route>,
    index: usize,
    /// Whether the informer's first list has not ended and the route passes over it.
    skipping: AtomicBool,
}

impl Subscribed {
    /// Hands `delta` (taken in by the informer at `received`, if it says) to the route.
    fn pass(&self, delta: &Delta, received: Option<std::time::SystemTime>) {
        if self.skipping.load(Ordering::Acquire) {
            match delta {
                Delta::Added(_) => return self.route.pass_over(delta),
                Delta::Replaced { .. } => self.skipping.store(false, Ordering::Release),
                _ => {}
            }
        }
        match received {
            Some(received) => self.route.deliver_received(delta, received),
            None => self.route.deliver(delta),
        }
        if let Delta::Replaced { shard, .. } = delta {
            self.route.listed(self.index, shard.clone());
        }
    }
}

impl DeltaSink for Subscribed {
    fn deliver(&self, delta: &Delta) {
        self.pass(delta, None);
    }

    fn deliver_received(&self, delta: &Delta, received: std::time::SystemTime) {
        self.pass(delta, Some(received));
    }

    fn resync_period(&self) -> Option<std::time::Duration> {
        self.route.resync_period()
    }

    fn release(&self, object: &Arc<CachedObject>) {
        self.route.release(object);
    }
}
