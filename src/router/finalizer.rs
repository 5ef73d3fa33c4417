//! What a route with a finalizer delivers: an object that holds the route's finalizer and
//! gets a `deletionTimestamp` is delivered as `deleted`, with its full final state, at once;
//! the object's later changes while it terminates, and its actual removal, are then not
//! delivered again.
//!
//! The route remembers which objects it delivered as deleted this way only in memory, and
//! needs nothing else: after a restart (or on the replica taking over) the first list shows
//! an object still holding the finalizer as terminating, and it is delivered as `deleted`
//! again (at least once); an object whose finalizer was already removed either is gone or
//! no longer holds it, and is delivered as any route delivers it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::informer::{CachedObject, Delta, ObjectKey};
use crate::util::lock;

/// A route's finalizer and the objects it delivered as deleted when their deletion began.
pub(super) struct Held {
    name: Arc<str>,
    terminating: Mutex<HashSet<ObjectKey>>,
}

/// The two fields of an object's metadata the finalizer mode reads.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
    #[serde(default)]
    finalizers: Vec<String>,
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: Meta,
}

impl Meta {
    fn of(object: &CachedObject) -> Self {
        serde_json::from_str::<Head>(object.json_str())
            .map(|h| h.metadata)
            .unwrap_or_default()
    }
}

/// What a route with a finalizer does with a delta its filter admitted.
pub(super) enum Step {
    /// Deliver this.
    Deliver(Delta),
    /// Deliver nothing: the object's deletion was delivered already.
    Skip,
}

impl Held {
    /// A route holding its objects with the finalizer `name`.
    pub(super) fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            terminating: Mutex::new(HashSet::new()),
        }
    }

    /// The finalizer's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// What to deliver for `delta`: a terminating object holding the finalizer becomes
    /// `deleted` (once); what follows for it until it is gone is skipped.
    pub(super) fn step(&self, delta: &Delta) -> Step {
        let object = match delta {
            Delta::Deleted { last_known, .. } => {
                return if lock(&self.terminating).remove(last_known.key()) {
                    Step::Skip
                } else {
                    Step::Deliver(delta.clone())
                };
            }
            Delta::Added(o) | Delta::Updated { new: o, .. } | Delta::Sync(o) => o,
            Delta::Replaced { .. } => return Step::Deliver(delta.clone()),
        };
        let meta = Meta::of(object);
        let mut terminating = lock(&self.terminating);
        if meta.deletion_timestamp.is_none() {
            // Another object under the same key, or one whose deletion was never begun.
            terminating.remove(object.key());
            return Step::Deliver(delta.clone());
        }
        if terminating.contains(object.key()) {
            return Step::Skip;
        }
        if meta.finalizers.iter().any(|f| **f == *self.name) {
            terminating.insert(object.key().clone());
            return Step::Deliver(Delta::Deleted {
                last_known: object.clone(),
                final_state_unknown: false,
            });
        }
        // Terminating without the finalizer (never put on, or taken off by hand): as a
        // route without a finalizer delivers it.
        Step::Deliver(delta.clone())
    }

    /// Forgets an object this replica no longer delivers (another replica's now).
    pub(super) fn release(&self, key: &ObjectKey) {
        lock(&self.terminating).remove(key);
    }
}
