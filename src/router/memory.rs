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
//! on, and which share it covered, is known through [`Route::sink`]: one sink per
//! subscription.
//!
//! In sharded mode a list covers only this replica's ranges, so only the records in the
//! share every informer listed are taken for gone; the others are kept ([`Retained`]), as
//! are the records of objects released at a hand-over, and compared the same way when a
//! list of a range holding them comes back. Why "every informer": a route's informers share
//! one shard field, and during a hand-over one may have listed the new ranges while another
//! still holds the old; a record is gone only once no informer can still hand it over.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Route;
use crate::informer::{CachedObject, Delta, ObjectKey};
use crate::sharding::{ShardField, ShardSelector};
use crate::state::{Retained, RouteRecord, State};
use crate::util::lock;

/// What a route keeps in the state store, and the records it compares objects with.
pub(super) struct Memory {
    state: State,
    /// Whether the store held records of the route's last run when it started.
    pub(super) ran_before: bool,
    /// Whether records wait to be compared: checked before taking the lock.
    comparing: AtomicBool,
    baseline: Mutex<Baseline>,
}

/// The records not compared yet, and what the informers have listed.
struct Baseline {
    retained: Retained,
    /// Per subscription: the share its last list covered (`Some(None)`: every object);
    /// `None` until its informer has listed.
    listed: Vec<Option<Option<ShardSelector>>>,
    /// Whether every informer has listed once (the restart's difference is delivered).
    restored: bool,
    unchanged: usize,
    changed: usize,
}

/// The value of `field` an object was placed by, from its record and key (`namespace/name`).
fn shard_value<'a>(field: ShardField, key: &'a str, record: &'a RouteRecord) -> &'a str {
    match field {
        ShardField::Uid => &record.uid,
        ShardField::Namespace => key.split_once('/').map_or("", |(namespace, _)| namespace),
    }
}

impl Memory {
    /// Memory in `state`, comparing with `prior` over `subscriptions` informers.
    pub(super) fn new(
        state: State,
        prior: HashMap<String, RouteRecord>,
        subscriptions: usize,
    ) -> Self {
        let prior = if subscriptions > 0 {
            prior
        } else {
            HashMap::new()
        };
        Self {
            state,
            ran_before: !prior.is_empty(),
            comparing: AtomicBool::new(!prior.is_empty()),
            baseline: Mutex::new(Baseline {
                retained: Retained::new(prior),
                listed: vec![None; subscriptions],
                restored: false,
                unchanged: 0,
                changed: 0,
            }),
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
    /// `prior` (what it delivered in the last run) once its `subscriptions` informers have
    /// listed; in sharded mode, within this replica's ranges (see [`Retained`]).
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

    /// Records a delta the filter admitted, if the route keeps state.
    pub(super) fn remember(&self, delta: &Delta) {
        if let Some(memory) = &self.memory {
            memory.remember(&self.name, delta);
        }
    }

    /// For an object a record waits for: delivers the difference from the record, and
    /// returns true; false for any other delta (delivered as usual).
    pub(super) fn restore(&self, delta: &Delta) -> bool {
        let Some(memory) = self.memory.as_ref() else {
            return false;
        };
        if !memory.comparing.load(Ordering::Acquire) {
            return false;
        }
        let (Some(key), Some(new)) = (delta.key(), delta.object()) else {
            return false;
        };
        let prior = {
            let mut baseline = lock(&memory.baseline);
            let Some(prior) = baseline.retained.take(key.as_str()) else {
                return false;
            };
            let same = RouteRecord::of_json(&new.json()).is_some_and(|r| r.is_same(&prior));
            if same {
                baseline.unchanged += 1;
            } else {
                baseline.changed += 1;
            }
            if baseline.retained.is_empty() {
                memory.comparing.store(false, Ordering::Release);
            }
            prior
        };
        self.difference(delta, new, &prior);
        true
    }

    /// An object left this replica's share (sharded mode): keeps the record of what the
    /// route last delivered of it, to compare with if its range comes back.
    pub(super) fn retain_released(&self, object: &Arc<CachedObject>) {
        let Some(memory) = self.memory.as_ref() else {
            return;
        };
        // The route records every state its filter admits, so the cache's last state is
        // the record's, if the filter admitted it.
        if self.filter.apply(&Delta::Added(object.clone())).is_none() {
            return;
        }
        let Some(record) = RouteRecord::of_json(&object.json()) else {
            return;
        };
        let mut baseline = lock(&memory.baseline);
        baseline.retained.keep(object.key().as_str(), record);
        memory.comparing.store(true, Ordering::Release);
    }

    /// Delivers what changed between `prior` and the object `delta` carries.
    fn difference(&self, delta: &Delta, new: &Arc<CachedObject>, prior: &RouteRecord) {
        let key = new.key().as_str();
        // `emit` records what it hands over (and what the route's kinds of change skip).
        let gone = |route: &Route| match stub(prior, key) {
            Some(last_known) => route.emit(
                &Delta::Deleted {
                    last_known,
                    final_state_unknown: true,
                },
                route.stamps(None),
            ),
            None => route.remember(&Delta::Deleted {
                last_known: new.clone(),
                final_state_unknown: true,
            }),
        };
        if let Delta::Deleted { .. } = delta {
            self.emit(delta, self.stamps(None));
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
                self.emit(&added, self.stamps(None));
            }
            _ => {
                let updated = match stub(prior, key) {
                    Some(old) => Delta::Updated {
                        old,
                        new: new.clone(),
                    },
                    None => added,
                };
                self.emit(&updated, self.stamps(None));
            }
        }
    }

    /// The `index`th informer has listed the share `shard` (`None`: every object); once
    /// all have, every waiting record in the share they all listed is of an object gone,
    /// delivered as `deleted`. The first time, queued events the last run left for objects
    /// outside the share are dropped, as at a hand-over: another replica owns them now.
    pub(super) fn listed(&self, index: usize, shard: Option<ShardSelector>) {
        let Some(memory) = self.memory.as_ref() else {
            return;
        };
        let (gone, outside) = {
            let mut guard = lock(&memory.baseline);
            let baseline = &mut *guard;
            if let Some(listed) = baseline.listed.get_mut(index) {
                *listed = Some(shard);
            }
            if baseline.listed.iter().any(Option::is_none) {
                return;
            }
            let listed = &baseline.listed;
            let gone = baseline
                .retained
                .take_owned(|key, record| covers(listed, key, record));
            let first = !std::mem::replace(&mut baseline.restored, true);
            if first {
                tracing::info!(route = %self.name, unchanged = baseline.unchanged, changed = baseline.changed, deleted = gone.len(), kept = baseline.retained.len(), "route restored from the state store: delivering the difference from the last run");
            } else if !gone.is_empty() {
                tracing::info!(route = %self.name, deleted = gone.len(), "objects of a range this replica gained were deleted while another replica had it");
            }
            let outside: Vec<String> = if first {
                baseline
                    .retained
                    .keys()
                    .into_iter()
                    .map(str::to_string)
                    .collect()
            } else {
                Vec::new()
            };
            memory
                .comparing
                .store(!baseline.retained.is_empty(), Ordering::Release);
            (gone, outside)
        };
        for key in outside {
            self.handler()
                .release(&self.name, &ObjectKey::from_raw(&key));
        }
        for (key, prior) in gone {
            match stub(&prior, &key) {
                // Recorded (forgotten) by `emit`, with the handler's queue entry.
                Some(last_known) => self.emit(
                    &Delta::Deleted {
                        last_known,
                        final_state_unknown: true,
                    },
                    self.stamps(None),
                ),
                None => memory.state.forgot(&self.name, &key),
            }
        }
    }
}

/// Whether every subscription's last list (`listed`) covered the object of `record` under
/// `key`: only then does its absence from the lists mean it is gone. False until every
/// informer has listed.
fn covers(listed: &[Option<Option<ShardSelector>>], key: &str, record: &RouteRecord) -> bool {
    !listed.is_empty()
        && listed.iter().all(|list| match list {
            None => false,
            Some(None) => true,
            Some(Some(selector)) => {
                selector.matches_value(shard_value(selector.field, key, record))
            }
        })
}

/// The record's last state of the object under `key`, as an object.
fn stub(record: &RouteRecord, key: &str) -> Option<Arc<CachedObject>> {
    crate::handler::cached_object(&record.stub_json(key))
}
