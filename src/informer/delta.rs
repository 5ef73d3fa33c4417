//! Deltas: what the informer tells its subscribers about each change to the cache.

use std::sync::Arc;

use super::object::{CachedObject, ObjectKey};

/// One change to the cache.
#[derive(Debug, Clone)]
pub enum Delta {
    /// An object appeared.
    Added(Arc<CachedObject>),
    /// An object changed.
    Updated {
        /// The state before.
        old: Arc<CachedObject>,
        /// The state after.
        new: Arc<CachedObject>,
    },
    /// An object went away.
    Deleted {
        /// The last state seen.
        last_known: Arc<CachedObject>,
        /// True when the deletion was inferred from a relist (the watch missed the actual
        /// delete), so `last_known` may be older than the object's final state.
        final_state_unknown: bool,
    },
}

impl Delta {
    /// The key of the object the delta is about.
    pub fn key(&self) -> &ObjectKey {
        self.object().key()
    }

    /// The newest state the delta carries (for deletions, the last known one).
    pub fn object(&self) -> &Arc<CachedObject> {
        match self {
            Delta::Added(o) => o,
            Delta::Updated { new, .. } => new,
            Delta::Deleted { last_known, .. } => last_known,
        }
    }
}

/// Receives the deltas of an informer, in order. Delivery is synchronous and must not block.
pub trait DeltaSink: Send + Sync {
    /// Takes one delta.
    fn deliver(&self, delta: &Delta);
}
