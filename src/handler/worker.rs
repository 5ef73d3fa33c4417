//! The worker loop and the retry policy: a worker takes a key, hands the event it is owed
//! to the newest plugin version, and on failure retries with per-key backoff until
//! `max_retries`, then moves the event to the dead letters.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::ChangeKind;
use super::finalizer::RouteFinalizer;
use super::instance::Instances;
use super::quarantine::Gate;
use super::shadow::{CallResult, Compared};
use super::{DeadLetter, Delivery, Handler, PendingEvent, RecentError, WorkKey};
use crate::plugin::About;
use crate::plugin::imports::capture::Capture;
use crate::plugin::{CallLimits, Event, EventKind, Outcome, Plugin};
use crate::util::{lock, rfc3339};

impl Handler {
    /// One worker: runs until the handler shuts down.
    pub(super) async fn work(self: Arc<Self>) {
        let mut plugin_rx = self.slot.subscribe();
        let mut instances = Instances::new(self.spec.instance);
        if !self.waiting_for.is_empty() {
            // No config to init the plugin with: events queue up for the successor that
            // the daemon starts once the values are there.
            self.wait_for_shutdown().await;
            return;
        }
        loop {
            // Wait for a plugin before taking work, so events queue up meanwhile. Biased: at
            // shutdown, a worker that can call the plugin drains the queue (for the grace).
            tokio::select! {
                biased;
                p = plugin_rx.wait_for(Option::is_some) => if p.is_err() {
                    return;
                },
                _ = self.wait_for_shutdown() => return,
            }
            tokio::select! {
                biased;
                p = self.wait_until_running() => if !p {
                    return;
                },
                _ = self.wait_for_shutdown() => return,
            }
            // A batching worker takes its turn at gathering before it takes the first key.
            let gathering = if self.spec.batch.is_some() && self.plugin_batches(&plugin_rx) {
                Some(self.gathering.lock().await)
            } else {
                None
            };
            self.want_if_dry();
            let Some(key) = self.queue.get().await else {
                return;
            };
            if *self.paused.borrow() || !*self.active.borrow() {
                // Paused (or this replica stopped leading) while this worker waited for work: leave the key for later.
                self.queue.done(&key);
                self.queue.add(key);
                continue;
            }
            let gate = lock(&self.breaker).gate();
            if let Gate::Wait(wait) = gate {
                // Quarantined: the key waits in the queue; look again within a second, so
                // a lift (a new version, a resume) is seen soon.
                self.queue.done(&key);
                self.queue.add(key);
                tokio::select! {
                    () = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
                    _ = self.wait_for_shutdown() => return,
                }
                continue;
            }
            let is_try = gate == Gate::Try;
            // The newest plugin, taken after the wait for work: a swap made while this
            // worker waited applies to the event it now handles. A plugin once set is only
            // ever replaced, never removed.
            let plugin = plugin_rx
                .borrow_and_update()
                .clone()
                .expect("a plugin once set is never removed");
            // Checked here, with nothing awaited between it and the call: after a pause
            // this may be the first code to run, before any timer task.
            if let Some(tenure) = self.tenure.get().filter(|t| !t.holds()) {
                // This replica's Lease was not renewed in time (a pause, an outage): its
                // ranges may be another's now. The key waits; the informers release what
                // this replica lost, and it handles the rest once it claims ranges again.
                self.give_back_try(is_try);
                self.queue.done(&key);
                self.queue.add(key);
                tokio::select! {
                    () = tenure.claimed() => {}
                    _ = self.wait_for_shutdown() => return,
                }
                continue;
            }
            if self.spec.batch.is_some() && plugin.handles_batches() {
                if !self
                    .work_batch(&mut instances, &plugin, key, is_try, gathering)
                    .await
                {
                    return;
                }
                continue;
            }
            if let Some((delivery, event)) = self.take_next(&key) {
                // Write-ahead: the event is in the store before the plugin sees it.
                tokio::select! {
                    biased;
                    _ = self.wait_committed(event.recorded) => {}
                    _ = self.wait_for_shutdown() => return,
                }
                // Inside the worker's span (handler, worker): what the call logs names the
                // route and object it is about.
                let about = About {
                    route: key.route.clone(),
                    object: key.object.shared(),
                };
                let call = self.handle(&mut instances, &plugin, &key, (delivery, event), is_try);
                about.scope(call).await;
                self.persist_call_ended(&key);
            } else {
                self.give_back_try(is_try);
            }
            self.queue.done(&key);
        }
    }

    pub(super) async fn wait_for_shutdown(&self) {
        // The sender lives in self, so the wait cannot fail while we run.
        let _ = self
            .stopping
            .subscribe()
            .wait_for(|stopping| *stopping)
            .await;
    }

    /// The next event for a key just taken from the queue. If the key owes more (`every`
    /// mode), it is added again so the queue hands it out after this one is done.
    pub(super) fn take_next(&self, key: &WorkKey) -> Option<(Delivery, PendingEvent)> {
        let mut pending = lock(&self.pending);
        let (delivery, owed) = pending.get_mut(key)?;
        let delivery = *delivery;
        let event = owed.take_next();
        let empty = owed.is_empty();
        // The key's stored entry holds the event first already: nothing to write until
        // the call ends.
        if let Some(event) = event.as_ref().filter(|_| self.is_persistent()) {
            lock(&self.flying).insert(key.clone(), event.clone());
        }
        if empty {
            pending.remove(key);
        } else {
            self.queue.add(key.clone());
        }
        event.map(|e| (delivery, e))
    }

    /// Calls the plugin with one event and acts on the outcome; then, if the handler has a
    /// shadow, calls it with the same event and compares (see [`super::shadow`]).
    async fn handle(
        &self,
        instances: &mut Instances,
        plugin: &Arc<Plugin>,
        key: &WorkKey,
        (delivery, event): (Delivery, PendingEvent),
        is_try: bool,
    ) {
        let attempt = self.queue.num_requeues(key) + 1;
        if let Some(trace) = &event.trace {
            trace.dequeued(attempt);
        }
        let finalizer = self.finalizers().of(&key.route).cloned();
        let deletion = event.kind == ChangeKind::Deleted;
        // The finalizer goes on before the plugin sees the object, so a deletion from now
        // on waits for the handler.
        if let Some(finalizer) = finalizer.as_ref().filter(|_| !deletion)
            && let Err(e) = finalizer.add(event.object.json_str()).await
        {
            self.give_back_try(is_try);
            self.host_failed(key, delivery, event, attempt, &e);
            return;
        }
        let call = plugin_event(key, &event, attempt);
        let call_trace = event.trace.as_ref().map(|t| t.call(attempt));
        let limits = CallLimits {
            timeout: self.spec.timeout,
            memory: self.spec.memory,
        };
        let context = lock(&self.host_context).clone();
        // The informers the handler reads (`reads:`) must have listed once.
        context.caches_listed().await;
        // With a shadow, the primary's writes are recorded as they are sent.
        let recorded = self.shadow.as_ref().map(|_| Arc::new(Capture::recording()));
        let primary_context = match &recorded {
            Some(capture) => Arc::new((*context).clone().with_capture(capture.clone())),
            None => context.clone(),
        };
        let started = std::time::Instant::now();
        // With a shadow, each call records into a capture of its own, so a kept instance
        // (`instance: reuse`) is not reused: see `super::instance`.
        let result = instances
            .call(
                plugin,
                &primary_context,
                &limits,
                &self.config_json,
                (&call, call_trace.clone()),
            )
            .await;
        let compared =
            recorded.map(|c| CallResult::of(&result, c.writes()).with_requests(c.requests()));
        let failure = result.as_ref().err().map(|e| RecentError {
            at: rfc3339(SystemTime::now()),
            object: format!("{}/{}", key.route, key.object),
            attempt,
            error: e.to_string(),
        });
        self.record_call(started.elapsed().as_secs_f64(), failure);
        self.track_quarantine(key, result.as_ref().err(), is_try);
        match result {
            Ok(Outcome::Done) => {
                if let Some(trace) = &call_trace {
                    trace.end("done", None);
                }
                self.succeeded(key, (delivery, event), attempt, finalizer.as_ref())
                    .await;
            }
            Ok(Outcome::RequeueAfter(ms)) => {
                if let Some(trace) = &call_trace {
                    trace.end("requeue", None);
                }
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(key);
                let trace = event
                    .trace
                    .as_ref()
                    .map(crate::traces::EventTrace::requeued);
                self.put_back(key, delivery, PendingEvent { trace, ..event });
                // Paced by the handler's bucket: `requeue-after(0)` answered forever must not
                // call the plugin as fast as it can.
                self.queue
                    .add_after_rate_limited(key.clone(), Duration::from_millis(ms));
            }
            Err(error) => self.failed(key, (delivery, event), attempt, &error, call_trace.as_ref()),
        }
        if let (Some(shadow), Some(primary)) = (&self.shadow, compared) {
            let event = Compared {
                route: &key.route,
                object: key.object.to_string(),
                call: &call,
            };
            shadow
                .run(&context, &limits, &self.config_json, event, primary)
                .await;
        }
    }

    /// The plugin is done with the event: the key's backoff is cleared and, for a
    /// deletion, the route's finalizer taken off (a failure there retries the event).
    pub(super) async fn succeeded(
        &self,
        key: &WorkKey,
        (delivery, event): (Delivery, PendingEvent),
        attempt: u32,
        finalizer: Option<&Arc<RouteFinalizer>>,
    ) {
        self.counters.processed.fetch_add(1, Ordering::Relaxed);
        // Taken off only now that the handler succeeded with the deletion.
        let released = match finalizer.filter(|_| event.kind == ChangeKind::Deleted) {
            Some(finalizer) => finalizer.remove(event.object.json_str()).await,
            None => Ok(()),
        };
        match released {
            Ok(()) => {
                self.queue.forget(key);
                if let Some(trace) = &event.trace {
                    trace.end("done", None);
                }
            }
            Err(e) => self.host_failed(key, delivery, event, attempt, &e),
        }
    }

    /// The retry policy: retry with the key's backoff, or after `max_retries` (or at once,
    /// for an error the plugin calls permanent) give the event up to the dead letters.
    /// `call` is the trace of the call that failed, if it was traced.
    pub(super) fn failed(
        &self,
        key: &WorkKey,
        (delivery, event): (Delivery, PendingEvent),
        attempt: u32,
        error: &crate::plugin::Error,
        call: Option<&crate::traces::CallTrace>,
    ) {
        self.failed_after(
            key,
            (delivery, event),
            attempt,
            error,
            (call, Duration::ZERO),
        );
    }

    /// [`Self::failed`], a retry waiting at least `at_least` (when longer than the backoff).
    pub(super) fn failed_after(
        &self,
        key: &WorkKey,
        (delivery, mut event): (Delivery, PendingEvent),
        attempt: u32,
        error: &crate::plugin::Error,
        (call, at_least): (Option<&crate::traces::CallTrace>, Duration),
    ) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now();
        let first_failure = event.first_failure.unwrap_or(now);
        let permanent = error.is_permanent();
        if attempt > self.spec.max_retries || permanent {
            self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            let why = if permanent {
                "the plugin called the failure permanent"
            } else {
                "out of retries"
            };
            tracing::error!(object = %key.object, route = %key.route, %error, attempt, "giving up ({why}): event moved to dead letters");
            let text = error.to_string();
            if let Some(trace) = call {
                trace.end("dead_letter", Some(&text));
            }
            if let Some(trace) = event.trace.take() {
                trace.end("dead_letter", Some(&text));
            }
            self.queue.forget(key);
            let letter = DeadLetter {
                route: key.route.to_string(),
                object: key.object.to_string(),
                delivery,
                event,
                last_error: error.to_string(),
                attempts: attempt,
                first_failure,
                last_failure: now,
            };
            let mut letters = lock(&self.dead_letters);
            let id = super::DeadLetters::id(&letter.route, &letter.object);
            self.persist_dead_letter(&id, Some(&letter));
            letters.insert(letter);
            return;
        }
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        if let Some(trace) = call {
            trace.end("retry", Some(&error.to_string()));
        }
        if let Some(trace) = &mut event.trace {
            trace.queued_again();
        }
        self.put_back(
            key,
            delivery,
            PendingEvent {
                first_failure: Some(first_failure),
                ..event
            },
        );
        let delay = self.queue.add_rate_limited_at_least(key.clone(), at_least);
        tracing::warn!(object = %key.object, route = %key.route, %error, attempt, retry_in = ?delay, "handler failed; will retry");
    }
}

impl Handler {
    /// A worker let through as the quarantine's try made no call: another may try.
    pub(super) fn give_back_try(&self, is_try: bool) {
        if is_try {
            lock(&self.breaker).give_back_try();
        }
    }

    /// A finalizer write around the call failed: the event is retried (or dead-lettered)
    /// as if the call had failed, so the write is tried again.
    pub(super) fn host_failed(
        &self,
        key: &WorkKey,
        delivery: Delivery,
        event: PendingEvent,
        attempt: u32,
        error: &super::finalizer::Error,
    ) {
        let error = crate::plugin::Error::Host(error.to_string());
        self.record_error(RecentError {
            at: rfc3339(SystemTime::now()),
            object: format!("{}/{}", key.route, key.object),
            attempt,
            error: error.to_string(),
        });
        self.failed(key, (delivery, event), attempt, &error, None);
    }

    /// Feeds a call's result to the quarantine breaker (`is_try`: the call was the
    /// quarantine's try), logging when it trips or lifts.
    pub(super) fn track_quarantine(
        &self,
        key: &WorkKey,
        error: Option<&crate::plugin::Error>,
        is_try: bool,
    ) {
        let mut breaker = lock(&self.breaker);
        match error {
            None => {
                if breaker.succeeded() {
                    tracing::info!(handler = %self.name, "quarantine lifted: the plugin succeeded");
                }
            }
            Some(error) => {
                let object = format!("{}/{}", key.route, key.object);
                if breaker.failed(&object, &error.to_string(), is_try) {
                    let q = &self.spec.quarantine;
                    tracing::error!(handler = %self.name, %error, failures = q.after, retry_in = ?q.backoff, "plugin quarantined: it failed on every call; its events wait in the queue");
                }
            }
        }
    }
}

/// The event as the plugin contract has it.
pub(super) fn plugin_event(key: &WorkKey, event: &PendingEvent, attempt: u32) -> Event {
    Event {
        kind: match event.kind {
            ChangeKind::Added => EventKind::Added,
            ChangeKind::Updated => EventKind::Updated,
            ChangeKind::Deleted => EventKind::Deleted,
            ChangeKind::Sync => EventKind::Sync,
        },
        route: String::from(&*key.route),
        object: String::from(event.object.json_str()),
        old_object: event.old.as_ref().map(|o| String::from(o.json_str())),
        attempt,
        final_state_unknown: event.final_state_unknown,
    }
}

impl Handler {
    /// In sharded mode: workers call the plugin only while `tenure` holds (checked right
    /// before each call). Set once, before any event.
    pub fn set_tenure(&self, tenure: Arc<crate::sharding::Tenure>) {
        let _ = self.tenure.set(tenure);
    }

    /// Waits until the handler is neither paused nor held by the replica's gate; false if
    /// either sender went away.
    async fn wait_until_running(&self) -> bool {
        let mut paused = self.paused.subscribe();
        let mut active = self.active.clone();
        loop {
            if !*paused.borrow_and_update() && *active.borrow_and_update() {
                return true;
            }
            let changed = tokio::select! {
                r = paused.changed() => r,
                r = active.changed() => r,
            };
            if changed.is_err() {
                return false;
            }
        }
    }
}
