//! Dead letters: events a handler gave up on after `max_retries`, kept with why, so an
//! operator can see them and retry or purge them through the admin API.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::{ChangeKind, Handler, PendingEvent, WorkKey};
use crate::config::Delivery;
use crate::informer::ObjectKey;
use crate::util::{lock, rfc3339};

/// One event given up on.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// The route that delivered it.
    pub route: String,
    /// The object's key.
    pub object: String,
    /// The route's delivery mode.
    pub delivery: Delivery,
    /// The event, to deliver again on retry.
    pub event: PendingEvent,
    /// The last error.
    pub last_error: String,
    /// Delivery attempts made.
    pub attempts: u32,
    /// When the first attempt failed.
    pub first_failure: SystemTime,
    /// When the last attempt failed.
    pub last_failure: SystemTime,
}

/// A dead letter as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterView {
    /// `route/object-key`: what to name in a retry or purge.
    pub id: String,
    /// The route that delivered it.
    pub route: String,
    /// The object's key.
    pub object: String,
    /// The kind of change.
    pub kind: String,
    /// The object's resourceVersion in the event.
    pub resource_version: String,
    /// The last error.
    pub last_error: String,
    /// Delivery attempts made.
    pub attempts: u32,
    /// When the first attempt failed (RFC 3339).
    pub first_failure: String,
    /// When the last attempt failed (RFC 3339).
    pub last_failure: String,
    /// The route's finalizer when this is a deletion it holds the object with: the object
    /// stays Terminating until the letter is retried and succeeds (or is purged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds_finalizer: Option<String>,
}

/// A handler's dead letters, by `route/object` id. At most one per id: a later give-up on
/// the same object replaces the earlier one (it carries a newer state of the object).
#[derive(Debug, Default)]
pub struct DeadLetters {
    letters: BTreeMap<String, DeadLetter>,
}

impl DeadLetters {
    /// The id of a dead letter.
    pub fn id(route: &str, object: &str) -> String {
        format!("{route}/{object}")
    }

    /// Records a dead letter.
    pub fn insert(&mut self, letter: DeadLetter) {
        self.letters
            .insert(Self::id(&letter.route, &letter.object), letter);
    }

    /// Removes and returns the letters with these ids (all when `ids` is `None`).
    pub fn take(&mut self, ids: Option<&[String]>) -> Vec<DeadLetter> {
        match ids {
            None => std::mem::take(&mut self.letters).into_values().collect(),
            Some(ids) => ids
                .iter()
                .filter_map(|id| self.letters.remove(id))
                .collect(),
        }
    }

    /// How many letters there are.
    pub fn len(&self) -> usize {
        self.letters.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.letters.is_empty()
    }

    /// Every letter, for display; `finalizer` names the finalizer a deletion of the
    /// route's holds.
    pub fn views(&self, finalizer: impl Fn(&DeadLetter) -> Option<String>) -> Vec<DeadLetterView> {
        self.letters
            .iter()
            .map(|(id, l)| DeadLetterView {
                id: id.clone(),
                route: l.route.clone(),
                object: l.object.clone(),
                kind: format!("{:?}", l.event.kind).to_lowercase(),
                resource_version: l.event.object.resource_version().to_string(),
                last_error: l.last_error.clone(),
                attempts: l.attempts,
                first_failure: rfc3339(l.first_failure),
                last_failure: rfc3339(l.last_failure),
                holds_finalizer: finalizer(l),
            })
            .collect()
    }
}

impl Handler {
    /// The dead letters waiting now.
    pub fn dead_letters(&self) -> Vec<DeadLetterView> {
        let finalizers = self.finalizers();
        lock(&self.dead_letters).views(|l| {
            finalizers
                .of(&l.route)
                .filter(|_| l.event.kind == ChangeKind::Deleted)
                .map(|f| f.name().to_string())
        })
    }

    /// How many dead letters of `route` are deletions its finalizer holds in Terminating.
    pub fn dead_deletions_for_route(&self, route: &str) -> usize {
        if !self.finalizers().holds(route) {
            return 0;
        }
        lock(&self.dead_letters)
            .letters
            .values()
            .filter(|l| l.route == route && l.event.kind == ChangeKind::Deleted)
            .count()
    }

    /// Delivers dead letters again (those with these ids, or all); returns how many.
    pub fn retry_dead_letters(&self, ids: Option<&[String]>) -> usize {
        let letters = lock(&self.dead_letters).take(ids);
        let count = letters.len();
        for letter in letters {
            let id = DeadLetters::id(&letter.route, &letter.object);
            let key = WorkKey {
                route: letter.route.as_str().into(),
                object: ObjectKey::from_raw(&letter.object),
            };
            let event = PendingEvent {
                first_failure: None,
                ..letter.event
            };
            self.queue.forget(&key);
            self.put_back(&key, letter.delivery, event);
            self.persist_key(&key, lock(&self.pending).get(&key));
            self.persist_dead_letter(&id, None);
            self.queue.add(key);
        }
        count
    }

    /// Drops dead letters (those with these ids, or all); returns how many. A deletion a
    /// route's finalizer holds is let go: the finalizer is removed (in the background), as
    /// purging gives the deletion up.
    pub fn purge_dead_letters(&self, ids: Option<&[String]>) -> usize {
        let letters = lock(&self.dead_letters).take(ids);
        let finalizers = self.finalizers();
        for letter in &letters {
            self.persist_dead_letter(&DeadLetters::id(&letter.route, &letter.object), None);
            if let Some(finalizer) = finalizers.of(&letter.route).cloned()
                && letter.event.kind == ChangeKind::Deleted
            {
                let object = letter.event.object.clone();
                tokio::spawn(async move {
                    if let Err(e) = finalizer.remove(object.json_str()).await {
                        tracing::error!(error = %e, "cannot let go of a purged deletion");
                    }
                });
            }
        }
        letters.len()
    }
}
