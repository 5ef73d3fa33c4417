//! What a handler owes each queued key, by delivery mode.
//!
//! - `latest` (level-triggered): bursts of deltas coalesce into one event that carries the
//!   newest object and the kind of change since the key was queued.
//! - `every` (edge-triggered): each delta is delivered, in order, per key. The per-key
//!   backlog is bounded: when it is full, the two oldest events are coalesced as `latest`
//!   would, so the handler still ends on the object's newest state and only intermediate
//!   steps are merged.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::SystemTime;

use crate::config::Delivery;
use crate::informer::{CachedObject, Delta};

/// The kind of change a pending event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The object appeared.
    Added,
    /// The object changed.
    Updated,
    /// The object went away.
    Deleted,
    /// A periodic resync of an unchanged object.
    Sync,
}

/// One event a handler is owed.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    /// The kind of change.
    pub kind: ChangeKind,
    /// The newest state (for deletions, the last known one).
    pub object: Arc<CachedObject>,
    /// The state before the change, for updates.
    pub old: Option<Arc<CachedObject>>,
    /// For deletions inferred from a relist.
    pub final_state_unknown: bool,
    /// When delivering this event first failed, if it has.
    pub first_failure: Option<SystemTime>,
    /// With a state store, the sequence number of the change that recorded this event as
    /// owed (0: none, or already in the store): a worker waits for it to be committed
    /// before it calls the plugin (write-ahead).
    pub recorded: u64,
    /// Its trace, when the daemon sends traces (never stored: a restored event has none).
    pub trace: Option<crate::traces::EventTrace>,
}

impl PendingEvent {
    /// Bytes of JSON the event carries to the plugin: the object and the old object.
    pub fn json_len(&self) -> usize {
        self.object.json_str().len() + self.old.as_ref().map_or(0, |o| o.json_str().len())
    }

    /// The event for one delta about an object; `None` for [`Delta::Replaced`].
    pub fn from_delta(delta: &Delta) -> Option<Self> {
        let (kind, old, final_state_unknown) = match delta {
            Delta::Added(_) => (ChangeKind::Added, None, false),
            Delta::Updated { old, .. } => (ChangeKind::Updated, Some(old.clone()), false),
            Delta::Deleted {
                final_state_unknown,
                ..
            } => (ChangeKind::Deleted, None, *final_state_unknown),
            Delta::Sync(_) => (ChangeKind::Sync, None, false),
            Delta::Replaced { .. } => return None,
        };
        Some(Self {
            kind,
            object: delta.object()?.clone(),
            old,
            final_state_unknown,
            first_failure: None,
            recorded: 0,
            trace: None,
        })
    }

    /// Folds a later event for the same key into this one.
    pub fn merge(self, later: PendingEvent) -> PendingEvent {
        use ChangeKind::*;
        let kind = match (self.kind, later.kind) {
            // A resync says nothing changed: the other event stands.
            (earlier, Sync) => earlier,
            (Sync, later_kind) => later_kind,
            // Still new to the handler, whatever happened since.
            (Added, Updated) => Added,
            // Gone and back: the handler sees a new object.
            (Deleted, Added | Updated) => Added,
            (_, later_kind) => later_kind,
        };
        let old = match kind {
            Updated => self.old.or(later.old),
            _ => None,
        };
        let final_state_unknown = match (kind, later.kind) {
            (Deleted, Deleted) => later.final_state_unknown,
            (Deleted, _) => self.final_state_unknown,
            _ => false,
        };
        // The earlier event's trace goes on; the later one's ends, folded into it.
        let trace = match (self.trace, later.trace) {
            (Some(earlier), Some(folded)) => {
                folded.coalesced();
                Some(earlier)
            }
            (earlier, folded) => earlier.or(folded),
        };
        let first_failure = match (self.first_failure, later.first_failure) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        PendingEvent {
            kind,
            object: later.object,
            old,
            final_state_unknown,
            first_failure,
            recorded: self.recorded.max(later.recorded),
            trace,
        }
    }
}

/// What a handler owes one key.
#[derive(Debug, Clone)]
pub enum Owed {
    /// One coalesced event.
    Latest(PendingEvent),
    /// Events in order, oldest first.
    Every(VecDeque<PendingEvent>),
}

impl Owed {
    /// What is owed after one event, in a delivery mode.
    pub fn new(delivery: Delivery, event: PendingEvent) -> Self {
        match delivery {
            Delivery::Latest => Owed::Latest(event),
            Delivery::Every { .. } => Owed::Every(VecDeque::from([event])),
        }
    }

    /// Adds a later event. Returns true when an `every` backlog was full and its two oldest
    /// events were coalesced. A coalesced event owed while the delivery is `every` now (a
    /// key restored with only its event in flight, or a reload that changed the mode) is
    /// kept as the first of the backlog, not merged with what follows.
    pub fn push(&mut self, delivery: Delivery, event: PendingEvent) -> bool {
        if let (Owed::Latest(current), Delivery::Every { .. }) = (&*self, delivery) {
            *self = Owed::Every(VecDeque::from([current.clone()]));
        }
        match self {
            Owed::Latest(current) => {
                let earlier = current.clone();
                *current = earlier.merge(event);
                false
            }
            Owed::Every(events) => {
                events.push_back(event);
                let backlog = match delivery {
                    Delivery::Every { backlog } => backlog.max(1),
                    Delivery::Latest => 1,
                };
                let overflow = events.len() > backlog;
                if overflow
                    && let (Some(first), Some(second)) = (events.pop_front(), events.pop_front())
                {
                    events.push_front(first.merge(second));
                }
                overflow
            }
        }
    }

    /// Marks the newest event (the last pushed, or the one it was coalesced into) as
    /// recorded in the state store by the change numbered `seq`.
    pub fn mark_recorded(&mut self, seq: u64) {
        let newest = match self {
            Owed::Latest(event) => Some(event),
            Owed::Every(events) => events.back_mut(),
        };
        if let Some(event) = newest {
            event.recorded = event.recorded.max(seq);
        }
    }

    /// Takes the next event to deliver: the coalesced one, or the oldest.
    pub fn take_next(&mut self) -> Option<PendingEvent> {
        match self {
            Owed::Latest(_) => {
                let Owed::Latest(event) = std::mem::replace(self, Owed::Every(VecDeque::new()))
                else {
                    unreachable!("matched Latest above")
                };
                Some(event)
            }
            Owed::Every(events) => events.pop_front(),
        }
    }

    /// The next event [`Owed::take_next`] would take, left in place.
    pub fn peek(&self) -> Option<&PendingEvent> {
        match self {
            Owed::Latest(event) => Some(event),
            Owed::Every(events) => events.front(),
        }
    }

    /// Puts a failed event back in front of whatever arrived meanwhile (in `latest` mode,
    /// merged with it).
    pub fn put_back(&mut self, event: PendingEvent) {
        match self {
            Owed::Latest(current) => *current = event.merge(current.clone()),
            Owed::Every(events) => events.push_front(event),
        }
    }

    /// Events owed.
    pub fn len(&self) -> usize {
        match self {
            Owed::Latest(_) => 1,
            Owed::Every(events) => events.len(),
        }
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;

    fn obj(rv: &str) -> Arc<CachedObject> {
        let mut o = DynamicObject::new(
            "a",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        o.metadata.resource_version = Some(rv.into());
        Arc::new(CachedObject::new(o))
    }

    fn ev(delta: Delta) -> PendingEvent {
        PendingEvent::from_delta(&delta).unwrap()
    }

    fn updated(old: &str, new: &str) -> PendingEvent {
        ev(Delta::Updated {
            old: obj(old),
            new: obj(new),
        })
    }

    #[test]
    fn updates_coalesce_into_one_from_the_first_old_to_the_newest() {
        let merged = updated("1", "2").merge(updated("2", "3"));
        assert_eq!(merged.kind, ChangeKind::Updated);
        assert_eq!(merged.old.unwrap().resource_version(), "1");
        assert_eq!(merged.object.resource_version(), "3");
    }

    #[test]
    fn an_added_object_stays_added_with_its_newest_state() {
        let merged = ev(Delta::Added(obj("1"))).merge(updated("1", "2"));
        assert_eq!(merged.kind, ChangeKind::Added);
        assert!(merged.old.is_none());
        assert_eq!(merged.object.resource_version(), "2");
    }

    #[test]
    fn a_deletion_wins_over_earlier_changes() {
        let merged = updated("1", "2").merge(ev(Delta::Deleted {
            last_known: obj("3"),
            final_state_unknown: true,
        }));
        assert_eq!(merged.kind, ChangeKind::Deleted);
        assert!(merged.final_state_unknown);
    }

    #[test]
    fn a_resync_does_not_hide_a_real_change() {
        let merged = updated("1", "2").merge(ev(Delta::Sync(obj("2"))));
        assert_eq!(merged.kind, ChangeKind::Updated);
        let merged = ev(Delta::Sync(obj("1"))).merge(updated("1", "2"));
        assert_eq!(merged.kind, ChangeKind::Updated);
        assert_eq!(merged.old.unwrap().resource_version(), "1");
        let deleted = ev(Delta::Deleted {
            last_known: obj("3"),
            final_state_unknown: true,
        });
        assert!(deleted.merge(ev(Delta::Sync(obj("3")))).final_state_unknown);
    }

    #[test]
    fn every_mode_keeps_order_and_coalesces_the_oldest_on_overflow() {
        let delivery = Delivery::Every { backlog: 3 };
        let mut owed = Owed::new(delivery, ev(Delta::Added(obj("1"))));
        assert!(!owed.push(delivery, updated("1", "2")));
        assert!(!owed.push(delivery, updated("2", "3")));
        assert!(
            owed.push(delivery, updated("3", "4")),
            "the fourth overflows"
        );
        let versions: Vec<(ChangeKind, String)> = std::iter::from_fn(|| owed.take_next())
            .map(|e| (e.kind, e.object.resource_version().to_string()))
            .collect();
        assert_eq!(
            versions,
            [
                (ChangeKind::Added, "2".to_string()),
                (ChangeKind::Updated, "3".to_string()),
                (ChangeKind::Updated, "4".to_string()),
            ]
        );
    }

    #[test]
    fn a_coalesced_event_is_not_merged_into_once_the_delivery_is_every() {
        let mut owed = Owed::new(Delivery::Latest, ev(Delta::Added(obj("1"))));
        let deleted = ev(Delta::Deleted {
            last_known: obj("1"),
            final_state_unknown: true,
        });
        assert!(!owed.push(Delivery::Every { backlog: 10 }, deleted));
        let kinds: Vec<ChangeKind> = std::iter::from_fn(|| owed.take_next())
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, [ChangeKind::Added, ChangeKind::Deleted]);
    }

    #[test]
    fn a_failed_event_goes_back_before_later_ones() {
        let delivery = Delivery::Every { backlog: 10 };
        let mut owed = Owed::new(delivery, updated("1", "2"));
        let failed = owed.take_next().unwrap();
        owed.push(delivery, updated("2", "3"));
        owed.put_back(failed);
        assert_eq!(owed.take_next().unwrap().object.resource_version(), "2");
        assert_eq!(owed.take_next().unwrap().object.resource_version(), "3");
    }
}
