//! A route's memory across restarts (`state_dir:`): it records in the state store what it
//! delivered of each object (after its object filter, before its event kinds: the objects
//! "in" the route), and after a restart it delivers only the difference from that record.
//!
//! Until each of its informers has listed once, a restored route compares every object it
//! is handed with the record: the same uid and content is delivered as nothing, other
//! content as `updated` (the old object is the record's last state: name, namespace, uid,
//! resourceVersion), another uid as `deleted` then `added`, an object the filter no longer
//! admits as `deleted`; once every informer has listed, each recorded object nobody handed
//! over is delivered as `deleted` with `final_state_unknown`. Which informer a list ended
//! on is known through [`Route::sink`]: one sink per subscription.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Route;
use crate::informer::{CachedObject, Delta, DeltaSink};
use crate::state::{RouteRecord, State};
use crate::util::lock;

/// What a route keeps in the state store, and the record it restores from.
pub(super) struct Memory {
    state: State,
    restoring: AtomicBool,
    baseline: Mutex<Option<Baseline>>,
}

/// The record of the last run, while the informers list.
struct Baseline {
    prior: HashMap<String, RouteRecord>,
    /// Per subscription: whether its informer has listed.
    listed: Vec<bool>,
    unchanged: usize,
    changed: usize,
}

impl Memory {
    /// Memory in `state`, restoring from `prior` over `subscriptions` informers.
    pub(super) fn new(
        state: State,
        prior: HashMap<String, RouteRecord>,
        subscriptions: usize,
    ) -> Self {
        let restoring = !prior.is_empty() && subscriptions > 0;
        Self {
            state,
            restoring: AtomicBool::new(restoring),
            baseline: Mutex::new(restoring.then(|| Baseline {
                prior,
                listed: vec![false; subscriptions],
                unchanged: 0,
                changed: 0,
            })),
        }
    }

    /// Records a delta the route's filter admitted.
    fn remember(&self, route: &Arc<str>, delta: &Delta) {
        match delta {
            Delta::Added(o) | Delta::Updated { new: o, .. } => {
                self.state.delivered(route, o.key().as_str(), o.json());
            }
            Delta::Deleted { last_known, .. } => {
                self.state.forgot(route, last_known.key().as_str());
            }
            Delta::Sync(_) | Delta::Replaced { .. } => {}
        }
    }
}

impl Route {
    /// Keeps what this route delivers in `state`, and delivers only the difference from
    /// `prior` (what it delivered in the last run) until its `subscriptions` informers
    /// have listed.
    #[must_use]
    pub fn with_state(
        mut self,
        state: State,
        prior: HashMap<String, RouteRecord>,
        subscriptions: usize,
    ) -> Self {
        self.memory = Some(Memory::new(state, prior, subscriptions));
        self
    }

    /// What to subscribe to the `index`th informer feeding this route: the route itself,
    /// or while it restores, a sink that also tells it when that informer has listed.
    pub fn sink(self: &Arc<Self>, index: usize) -> Arc<dyn DeltaSink> {
        match &self.memory {
            Some(m) if m.restoring.load(Ordering::Acquire) => Arc::new(Subscribed {
                route: self.clone(),
                index,
            }),
            _ => self.clone(),
        }
    }

    /// Records a delta the filter admitted, if the route keeps state.
    pub(super) fn remember(&self, delta: &Delta) {
        if let Some(memory) = &self.memory {
            memory.remember(&self.name, delta);
        }
    }

    /// While restoring: delivers the difference for an object the last run delivered, and
    /// returns true; false for any other delta (delivered as usual).
    pub(super) fn restore(&self, delta: &Delta) -> bool {
        let Some(memory) = self.memory.as_ref() else {
            return false;
        };
        if !memory.restoring.load(Ordering::Acquire) {
            return false;
        }
        let (Some(key), Some(new)) = (delta.key(), delta.object()) else {
            return false;
        };
        let prior = {
            let mut guard = lock(&memory.baseline);
            let Some(baseline) = guard.as_mut() else {
                return false;
            };
            let Some(prior) = baseline.prior.remove(key.as_str()) else {
                return false;
            };
            let same = RouteRecord::of_json(&new.json()).is_some_and(|r| r.is_same(&prior));
            if same {
                baseline.unchanged += 1;
            } else {
                baseline.changed += 1;
            }
            prior
        };
        self.difference(delta, new, &prior);
        true
    }

    /// Delivers what changed between `prior` and the object `delta` carries.
    fn difference(&self, delta: &Delta, new: &Arc<CachedObject>, prior: &RouteRecord) {
        let key = new.key().as_str();
        // `emit` records what it hands over (and what the route's kinds of change skip).
        let gone = |route: &Route| match stub(prior, key) {
            Some(last_known) => route.emit(&Delta::Deleted {
                last_known,
                final_state_unknown: true,
            }),
            None => route.remember(&Delta::Deleted {
                last_known: new.clone(),
                final_state_unknown: true,
            }),
        };
        if let Delta::Deleted { .. } = delta {
            self.emit(delta);
            return;
        }
        if self.filter.apply(&Delta::Added(new.clone())).is_none() {
            return gone(self);
        }
        let record = RouteRecord::of_json(&new.json());
        let added = Delta::Added(new.clone());
        match record {
            Some(r) if r.is_same(prior) => {}
            Some(r) if r.uid != prior.uid => {
                gone(self);
                self.emit(&added);
            }
            _ => {
                let updated = match stub(prior, key) {
                    Some(old) => Delta::Updated {
                        old,
                        new: new.clone(),
                    },
                    None => added,
                };
                self.emit(&updated);
            }
        }
    }

    /// The `index`th informer has listed; once all have, every object of the last run not
    /// seen again is delivered as `deleted`.
    fn listed(&self, index: usize) {
        let Some(memory) = self.memory.as_ref() else {
            return;
        };
        let baseline = {
            let mut guard = lock(&memory.baseline);
            let Some(baseline) = guard.as_mut() else {
                return;
            };
            if let Some(done) = baseline.listed.get_mut(index) {
                *done = true;
            }
            if !baseline.listed.iter().all(|l| *l) {
                return;
            }
            memory.restoring.store(false, Ordering::Release);
            guard.take().expect("checked above")
        };
        let mut gone: Vec<(String, RouteRecord)> = baseline.prior.into_iter().collect();
        gone.sort_by(|a, b| a.0.cmp(&b.0));
        tracing::info!(route = %self.name, unchanged = baseline.unchanged, changed = baseline.changed, deleted = gone.len(), "route restored from the state store: delivering the difference from the last run");
        for (key, prior) in gone {
            match stub(&prior, &key) {
                // Recorded (forgotten) by `emit`, with the handler's queue entry.
                Some(last_known) => self.emit(&Delta::Deleted {
                    last_known,
                    final_state_unknown: true,
                }),
                None => memory.state.forgot(&self.name, &key),
            }
        }
    }
}

/// The record's last state of the object under `key`, as an object.
fn stub(record: &RouteRecord, key: &str) -> Option<Arc<CachedObject>> {
    crate::handler::cached_object(&record.stub_json(key))
}

/// A route's subscription to one of its informers while it restores.
struct Subscribed {
    route: Arc<Route>,
    index: usize,
}

impl DeltaSink for Subscribed {
    fn deliver(&self, delta: &Delta) {
        self.route.deliver(delta);
        if let Delta::Replaced { .. } = delta {
            self.route.listed(self.index);
        }
    }

    fn resync_period(&self) -> Option<std::time::Duration> {
        self.route.resync_period()
    }
}
