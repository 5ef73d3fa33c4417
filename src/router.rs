//! Routes: each subscribes to an informer and hands the deltas its rules select to its
//! handler's queue.

use std::sync::Arc;

use crate::config::EventFilter;
use crate::handler::Handler;
use crate::informer::{Delta, DeltaSink};
use crate::queue::Delivery;

/// One route at run time.
pub struct Route {
    name: Arc<str>,
    events: EventFilter,
    delivery: Delivery,
    handler: Arc<Handler>,
}

impl Route {
    /// A route named `name` delivering the selected kinds of change to `handler`.
    pub fn new(name: &str, events: EventFilter, delivery: Delivery, handler: Arc<Handler>) -> Self {
        Self {
            name: name.into(),
            events,
            delivery,
            handler,
        }
    }

    /// The route's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the route delivers this delta. Resyncs go to handlers that asked for them;
    /// `Replaced` only announces a list and carries no object.
    pub fn selects(&self, delta: &Delta) -> bool {
        match delta {
            Delta::Added(_) => self.events.added,
            Delta::Updated { .. } => self.events.updated,
            Delta::Deleted { .. } => self.events.deleted,
            Delta::Sync(_) => true,
            Delta::Replaced { .. } => false,
        }
    }
}

impl DeltaSink for Route {
    fn deliver(&self, delta: &Delta) {
        if self.selects(delta) {
            self.handler.enqueue(&self.name, self.delivery, delta);
        }
    }

    fn resync_period(&self) -> Option<std::time::Duration> {
        self.handler.spec().resync
    }
}
