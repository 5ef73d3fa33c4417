//! Level-triggered delivery (`latest`): what a handler is owed for one key, with bursts of
//! deltas coalesced into one event that carries the newest object and the kind of change
//! since the key was queued.

use std::sync::Arc;

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
}

/// The event a handler is owed for one key.
#[derive(Debug, Clone)]
pub struct PendingEvent {
    /// The kind of change since the key was queued.
    pub kind: ChangeKind,
    /// The newest state (for deletions, the last known one).
    pub object: Arc<CachedObject>,
    /// The state before the first change, for updates.
    pub old: Option<Arc<CachedObject>>,
    /// For deletions inferred from a relist.
    pub final_state_unknown: bool,
    /// Failed deliveries so far.
    pub failures: u32,
}

impl PendingEvent {
    /// The event for one delta.
    pub fn from_delta(delta: &Delta) -> Self {
        let (kind, old, final_state_unknown) = match delta {
            Delta::Added(_) => (ChangeKind::Added, None, false),
            Delta::Updated { old, .. } => (ChangeKind::Updated, Some(old.clone()), false),
            Delta::Deleted {
                final_state_unknown,
                ..
            } => (ChangeKind::Deleted, None, *final_state_unknown),
        };
        Self {
            kind,
            object: delta.object().clone(),
            old,
            final_state_unknown,
            failures: 0,
        }
    }

    /// Folds a later event for the same key into this one.
    pub fn merge(self, later: PendingEvent) -> PendingEvent {
        use ChangeKind::*;
        let kind = match (self.kind, later.kind) {
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
        PendingEvent {
            kind,
            object: later.object,
            old,
            final_state_unknown: kind == Deleted && later.final_state_unknown,
            failures: self.failures.max(later.failures),
        }
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
        PendingEvent::from_delta(&delta)
    }

    #[test]
    fn updates_coalesce_into_one_from_the_first_old_to_the_newest() {
        let merged = ev(Delta::Updated {
            old: obj("1"),
            new: obj("2"),
        })
        .merge(ev(Delta::Updated {
            old: obj("2"),
            new: obj("3"),
        }));
        assert_eq!(merged.kind, ChangeKind::Updated);
        assert_eq!(merged.old.unwrap().resource_version(), "1");
        assert_eq!(merged.object.resource_version(), "3");
    }

    #[test]
    fn an_added_object_stays_added_with_its_newest_state() {
        let merged = ev(Delta::Added(obj("1"))).merge(ev(Delta::Updated {
            old: obj("1"),
            new: obj("2"),
        }));
        assert_eq!(merged.kind, ChangeKind::Added);
        assert!(merged.old.is_none());
        assert_eq!(merged.object.resource_version(), "2");
    }

    #[test]
    fn a_deletion_wins_over_earlier_changes() {
        let merged = ev(Delta::Updated {
            old: obj("1"),
            new: obj("2"),
        })
        .merge(ev(Delta::Deleted {
            last_known: obj("3"),
            final_state_unknown: true,
        }));
        assert_eq!(merged.kind, ChangeKind::Deleted);
        assert!(merged.final_state_unknown);
    }
}
