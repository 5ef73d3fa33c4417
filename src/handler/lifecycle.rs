//! A handler's life: pause and resume, handing its work to a successor after a config
//! change, and shutting down.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::status::{RECENT_CALLS, RECENT_ERRORS};
use super::{Delivery, Handler, Owed, WorkKey};
use crate::util::lock;

impl Handler {
    /// Stops handing events to the plugin; calls in flight finish, new events queue up.
    /// Returns whether it was running. Kept in the state store, if there is one: the
    /// handler starts paused after a restart.
    pub fn pause(&self) -> bool {
        self.persist_paused(true);
        self.hold()
    }

    /// Hands events to the plugin again (and records that in the state store), lifting a
    /// quarantine. Returns whether it was paused or quarantined.
    pub fn resume(&self) -> bool {
        self.persist_paused(false);
        let lifted = lock(&self.breaker).lift();
        if lifted {
            tracing::info!(handler = %self.name, "quarantine lifted by a resume");
        }
        self.unhold() || lifted
    }

    /// Pauses without recording it: the daemon holds a handler while it wires it in.
    /// Returns whether it was running.
    pub fn hold(&self) -> bool {
        !self.paused.send_replace(true)
    }

    /// Ends a [`Handler::hold`]. Returns whether it was paused.
    pub fn unhold(&self) -> bool {
        self.paused.send_replace(false)
    }

    /// Hands this handler's work to `successor`, which replaces it after a config change:
    /// no new call starts here, calls in flight finish (for up to `grace`), the workers
    /// stop, and every event still owed, every dead letter, the counters, the recent call
    /// durations (`latency`) and the outbound requests by host move to `successor`. Events it owes a key are delivered before those the key already owes
    /// `successor`. Retry counts start again from the first attempt. A shadow's counts and
    /// differences move too when the successor's shadow runs the same plugin.
    pub async fn hand_over(&self, successor: &Handler, grace: Duration) {
        self.hold();
        let deadline = tokio::time::Instant::now() + grace;
        while self.queue.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.stop_workers(Duration::ZERO).await;
        self.hand_over_pending(successor);
        let letters = lock(&self.dead_letters).take(None);
        let mut theirs = lock(&successor.dead_letters);
        for letter in letters {
            theirs.insert(letter);
        }
        drop(theirs);
        for (from, to) in self.counters.pairs(&successor.counters) {
            to.fetch_add(from.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
        let outbound = self.outbound_status();
        let recent = std::mem::take(&mut *lock(&self.recent));
        let mut theirs = lock(&successor.recent);
        let mut errors = recent.errors;
        errors.extend(theirs.errors.drain(..));
        while errors.len() > RECENT_ERRORS {
            errors.pop_front();
        }
        theirs.errors = errors;
        let mut durations = recent.durations;
        durations.extend(theirs.durations.drain(..));
        while durations.len() > RECENT_CALLS {
            durations.pop_front();
        }
        theirs.durations = durations;
        theirs.outbound_before = super::status::outbound_sum(&theirs.outbound_before, outbound);
        drop(theirs);
        if let (Some(mine), Some(theirs)) = (&self.shadow, &successor.shadow)
            && mine.plugin() == theirs.plugin()
        {
            theirs.take_record(mine);
        }
    }

    /// Moves every event still owed to `successor`, ahead of what it already owes the key.
    fn hand_over_pending(&self, successor: &Handler) {
        let owed: Vec<(WorkKey, (Delivery, Owed))> = lock(&self.pending).drain().collect();
        for (key, (delivery, mut earlier)) in owed {
            {
                let mut pending = lock(&successor.pending);
                let merged = match pending.remove(&key) {
                    Some((later_delivery, mut later)) => {
                        while let Some(event) = later.take_next() {
                            earlier.push(later_delivery, event);
                        }
                        (later_delivery, earlier)
                    }
                    None => (delivery, earlier),
                };
                pending.insert(key.clone(), merged);
                successor.persist_key(&key, pending.get(&key));
            }
            successor.queue.add(key);
        }
    }

    /// Updates the time-based queue gauges before metrics are read.
    pub fn update_time_metrics(&self) {
        self.queue.update_time_metrics();
    }

    /// Stops taking events, lets the workers finish what is queued for up to `grace`, then
    /// stops them. Events left undelivered (queued while paused, waiting for a retry, or cut
    /// off by the grace) are lost: they are counted in the status's `undelivered` and
    /// logged at warn level. Without a state store its dead letters are lost too: a warning
    /// says how many.
    pub async fn shut_down(&self, grace: Duration) {
        self.stop_workers(grace).await;
        // A stopped worker never calls `done`: the keys still in flight are the events the
        // grace cut off (taken from the pending buffer, never finished).
        let interrupted = self.queue.in_flight();
        let queued: usize = lock(&self.pending)
            .values()
            .map(|(_, owed)| owed.len())
            .sum();
        let lost = queued + interrupted;
        if lost > 0 && self.is_persistent() {
            tracing::info!(
                handler = %self.name,
                queued,
                interrupted,
                "handler stopped with events undelivered; the state store keeps them for the next start"
            );
        } else if lost > 0 {
            self.counters
                .undelivered
                .fetch_add(lost as u64, Ordering::Relaxed);
            tracing::warn!(
                handler = %self.name,
                undelivered = lost,
                queued,
                interrupted,
                paused = *self.paused.borrow(),
                "handler stopped with events undelivered; they are lost"
            );
        }
        let dead_letters = lock(&self.dead_letters).len();
        if dead_letters > 0 && !self.is_persistent() {
            tracing::warn!(
                handler = %self.name,
                dead_letters,
                "handler stopped with dead letters; without state_dir they are lost"
            );
        }
    }

    /// Stops taking events, lets the workers finish what is queued for up to `grace`, then
    /// stops them.
    async fn stop_workers(&self, grace: Duration) {
        self.queue.shut_down();
        self.stopping.send_replace(true);
        let workers: Vec<JoinHandle<()>> = lock(&self.workers).drain(..).collect();
        let aborts: Vec<_> = workers.iter().map(JoinHandle::abort_handle).collect();
        if tokio::time::timeout(grace, futures::future::join_all(workers))
            .await
            .is_err()
        {
            tracing::warn!(handler = %self.name, "workers did not finish in time; stopping them");
            aborts.iter().for_each(|a| a.abort());
        }
    }
}
