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
    /// A periodic resync of an unchanged object.
    Sync(Arc<CachedObject>),
    /// A list replaced the cache (the first list, or a relist after the watch broke). The
    /// per-object differences were delivered just before, as Added, Updated and Deleted.
    Replaced {
        /// Objects the list returned.
        objects: usize,
        /// In sharded mode, the share the list covered: objects outside it are another
        /// replica's, and their absence from the list says nothing. `None`: every object.
        shard: Option<crate::sharding::ShardSelector>,
    },
}

impl Delta {
    /// The key of the object the delta is about; `None` for [`Delta::Replaced`].
    pub fn key(&self) -> Option<&ObjectKey> {
        self.object().map(|o| o.key())
    }

    /// The newest state the delta carries (for deletions, the last known one); `None` for
    /// [`Delta::Replaced`].
    pub fn object(&self) -> Option<&Arc<CachedObject>> {
        match self {
            Delta::Added(o) | Delta::Sync(o) => Some(o),
            Delta::Updated { new, .. } => Some(new),
            Delta::Deleted { last_known, .. } => Some(last_known),
            Delta::Replaced { .. } => None,
        }
    }
}

/// Receives the deltas of an informer, in order. Delivery is synchronous and must not block.
pub trait DeltaSink: Send + Sync {
    /// Takes one delta.
    fn deliver(&self, delta: &Delta);

    /// Takes one delta about a change the list or watch reported, which the informer took
    /// in at `received` (for traces: what the subscriber does is timed from then).
    fn deliver_received(&self, delta: &Delta, received: std::time::SystemTime) {
        let _ = received;
        self.deliver(delta);
    }

    /// How often this subscriber wants a [`Delta::Sync`] for every cached object; `None`
    /// for never.
    fn resync_period(&self) -> Option<std::time::Duration> {
        None
    }

    /// The object left this replica's share (sharded mode): another replica handles it
    /// now. It is not deleted: the subscriber drops what it holds for it and delivers
    /// nothing.
    fn release(&self, object: &std::sync::Arc<CachedObject>) {
        let _ = object;
    }
}
