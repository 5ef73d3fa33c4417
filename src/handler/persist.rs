//! Keeping a handler's work in the state store (`state_dir:`): every change to what a key
//! owes is sent to the store while the pending buffer is locked, so the store sees the
//! changes of one key in the order they happened. A worker's event stays recorded as in
//! flight until its call ends, and its `done` is committed by the next group commit (a
//! few milliseconds): a crash in between delivers that event again after the restart
//! (at-least-once).
//!
//! After a restart, [`Handler::restore`] puts back each key's event in flight (first) and
//! what it owed, its dead letters, and returns whether an operator had paused it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::api::DynamicObject;

use super::{ChangeKind, DeadLetter, Delivery, Handler, Owed, PendingEvent, WorkKey};
use crate::informer::{CachedObject, ObjectKey};
use crate::state::{HandlerSnapshot, State, StoredDeadLetter, StoredEvent, StoredOwed};
use crate::util::lock;

impl Handler {
    /// Keeps this handler's work in `state` from now on. Set once, before any event. A
    /// task hands the keys held for a commit to the work queue as the store commits them,
    /// until the handler stops.
    pub fn set_state(self: &Arc<Self>, state: State) {
        let mut committed = state.committed_watch();
        if self.state.set(state).is_err() {
            return;
        }
        let mut stopping = self.stopping.subscribe();
        let handler = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = committed.changed() => if changed.is_err() { return },
                    _ = stopping.wait_for(|stopping| *stopping) => return,
                }
                match handler.upgrade() {
                    Some(handler) => handler.release_committed(),
                    None => return,
                }
            }
        });
    }

    /// Hands the keys held until their events were committed to the work queue, their
    /// queue wait counted from when they were queued.
    pub(super) fn release_committed(&self) {
        let Some(state) = self.state.get() else {
            return;
        };
        let committed = state.committed_seq();
        let mut held = lock(&self.held);
        while let Some((seq, _, _)) = held.front() {
            if *seq > committed {
                break;
            }
            let (_, key, since) = held.pop_front().expect("the front exists");
            self.queue.add_since(key, since);
        }
    }

    /// When the work queue has run dry, so a worker would wait, asks the store to commit
    /// the events held for it now instead of holding them back for a larger commit.
    pub(super) fn want_if_dry(&self) {
        if !self.queue.is_empty() {
            return;
        }
        if let Some(state) = self.state.get()
            && let Some((seq, _, _)) = lock(&self.held).back()
        {
            state.want(*seq);
        }
    }

    /// Records what `key` has not finished now: the event a worker handles for it, if any,
    /// then what it owes (`pending` is the locked buffer's entry for it). Returns the
    /// change's sequence number in the store (0 without one), for
    /// [`Handler::wait_committed`].
    pub(super) fn persist_key(&self, key: &WorkKey, owed: Option<&(Delivery, Owed)>) -> u64 {
        let Some(state) = self.state.get() else {
            return 0;
        };
        let flying = lock(&self.flying).get(key).map(stored_event);
        let owed = owed.filter(|(_, o)| !o.is_empty());
        let stored = match (flying, owed) {
            (None, None) => None,
            (flying, owed) => {
                let mut events: Vec<StoredEvent> = flying.into_iter().collect();
                if let Some((_, owed)) = owed {
                    events.extend(owed_events(owed));
                }
                Some(StoredOwed {
                    every: owed.and_then(|(delivery, _)| every(*delivery)),
                    events,
                })
            }
        };
        state.queued(&self.name, &key.route, key.object.as_str(), stored)
    }

    /// Write-ahead: waits until the store has committed the change `seq` (and so every
    /// change sent before it), so a plugin never sees an event the store could lose. True
    /// at once without a store; false if the store closed first.
    pub(super) async fn wait_committed(&self, seq: u64) -> bool {
        match self.state.get() {
            Some(state) if seq > 0 => state.committed(seq).await,
            _ => true,
        }
    }

    /// Records a dead letter added (`Some`) or removed.
    pub(super) fn persist_dead_letter(&self, id: &str, letter: Option<&DeadLetter>) {
        if let Some(state) = self.state.get() {
            state.dead_letter(&self.name, id, letter.map(stored_dead_letter));
        }
    }

    /// Records whether an operator paused the handler.
    pub(super) fn persist_paused(&self, paused: bool) {
        if let Some(state) = self.state.get() {
            state.paused(&self.name, paused);
        }
    }

    /// Whether the handler keeps its work in a state store.
    pub fn is_persistent(&self) -> bool {
        self.state.get().is_some()
    }

    /// Puts back what the store kept for this handler: each key's event in flight, then
    /// what it owed, queued again; the dead letters. Returns whether it was paused. An
    /// event whose object does not parse is skipped with a warning.
    pub fn restore(&self, snapshot: HandlerSnapshot) -> bool {
        let mut restored = 0usize;
        for stored in snapshot.keys {
            let key = WorkKey {
                route: stored.route.as_str().into(),
                object: ObjectKey::from_raw(&stored.object),
            };
            let delivery = stored
                .owed
                .every
                .map_or(Delivery::Latest, |backlog| Delivery::Every { backlog });
            let events = stored
                .owed
                .events
                .into_iter()
                .filter_map(|e| self.restored_event(&key, e));
            let mut owed: Option<Owed> = None;
            for event in events {
                restored += 1;
                match &mut owed {
                    Some(owed) => {
                        owed.push(delivery, event);
                    }
                    None => owed = Some(Owed::new(delivery, event)),
                }
            }
            let mut pending = lock(&self.pending);
            let entry = owed.map(|owed| (delivery, owed));
            self.persist_key(&key, entry.as_ref());
            if let Some(entry) = entry {
                pending.insert(key.clone(), entry);
                self.queue.add(key);
            }
        }
        let letters = snapshot.dead_letters.len();
        let mut dead = lock(&self.dead_letters);
        for stored in snapshot.dead_letters {
            if let Some(letter) = self.restored_dead_letter(stored) {
                dead.insert(letter);
            }
        }
        drop(dead);
        if restored + letters > 0 {
            tracing::info!(handler = %self.name, events = restored, dead_letters = letters, "restored the queue and dead letters of the last run");
        }
        snapshot.paused.unwrap_or(false)
    }

    fn restored_event(&self, key: &WorkKey, stored: StoredEvent) -> Option<PendingEvent> {
        let event = pending_event(stored);
        if event.is_none() {
            tracing::warn!(handler = %self.name, route = %key.route, object = %key.object, "a stored event does not parse; it is skipped");
        }
        event
    }

    fn restored_dead_letter(&self, stored: StoredDeadLetter) -> Option<DeadLetter> {
        let delivery = stored
            .every
            .map_or(Delivery::Latest, |backlog| Delivery::Every { backlog });
        let Some(event) = pending_event(stored.event) else {
            tracing::warn!(handler = %self.name, route = %stored.route, object = %stored.object, "a stored dead letter does not parse; it is skipped");
            return None;
        };
        Some(DeadLetter {
            route: stored.route,
            object: stored.object,
            delivery,
            event,
            last_error: stored.last_error,
            attempts: stored.attempts,
            first_failure: from_ms(stored.first_failure_ms),
            last_failure: from_ms(stored.last_failure_ms),
        })
    }
}

fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn every(delivery: Delivery) -> Option<usize> {
    match delivery {
        Delivery::Latest => None,
        Delivery::Every { backlog } => Some(backlog),
    }
}

fn kind_name(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Added => "added",
        ChangeKind::Updated => "updated",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Sync => "sync",
    }
}

/// The stored form of an event: the objects' JSON is shared, not copied.
fn stored_event(event: &PendingEvent) -> StoredEvent {
    StoredEvent {
        kind: kind_name(event.kind).into(),
        object: event.object.json(),
        old: event.old.as_ref().map(|o| o.json()),
        final_state_unknown: event.final_state_unknown,
        first_failure_ms: event.first_failure.map(to_ms),
    }
}

fn owed_events(owed: &Owed) -> Vec<StoredEvent> {
    match owed {
        Owed::Latest(event) => vec![stored_event(event)],
        Owed::Every(events) => events.iter().map(stored_event).collect(),
    }
}

fn stored_dead_letter(letter: &DeadLetter) -> StoredDeadLetter {
    StoredDeadLetter {
        route: letter.route.clone(),
        object: letter.object.clone(),
        every: every(letter.delivery),
        event: stored_event(&letter.event),
        last_error: letter.last_error.clone(),
        attempts: letter.attempts,
        first_failure_ms: to_ms(letter.first_failure),
        last_failure_ms: to_ms(letter.last_failure),
    }
}

/// An object from its stored JSON.
pub fn cached_object(json: &str) -> Option<Arc<CachedObject>> {
    let object: DynamicObject = serde_json::from_str(json).ok()?;
    Some(Arc::new(CachedObject::new(object)))
}

fn pending_event(stored: StoredEvent) -> Option<PendingEvent> {
    let kind = match stored.kind.as_str() {
        "added" => ChangeKind::Added,
        "updated" => ChangeKind::Updated,
        "deleted" => ChangeKind::Deleted,
        "sync" => ChangeKind::Sync,
        _ => return None,
    };
    let old = match &stored.old {
        Some(json) => Some(cached_object(json)?),
        None => None,
    };
    Some(PendingEvent {
        kind,
        object: cached_object(&stored.object)?,
        old,
        final_state_unknown: stored.final_state_unknown,
        first_failure: stored.first_failure_ms.map(from_ms),
        // Read from the store: committed.
        recorded: 0,
        trace: None,
    })
}
