//! Batch delivery (`batch:`): a worker gathers the events of several keys and hands them to
//! the plugin's `handle-batch` in one call, then applies each item's outcome to its key as
//! a single event's outcome is applied.
//!
//! A worker holding a key is the only one that handles it (the queue gives a key to one
//! worker at a time), so a key is in at most one batch in flight and each object's events
//! stay in order; a batch holds at most one event per key (in `latest` and `every` mode
//! alike), since a key taken stays with its worker until the batch ends. Durability is the
//! single event's: each event stays in the key's stored entry until its own outcome is
//! applied, so a daemon killed mid-batch delivers every event of it again after restart.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::instance::Instances;
use super::shadow::{CallResult, ComparedBatch};
use super::worker::plugin_event;
use super::{ChangeKind, Delivery, Handler, PendingEvent, RecentError, WorkKey};
use crate::config::BatchSpec;
use crate::plugin::imports::capture::Capture;
use crate::plugin::{About, CallLimits, ItemOutcome, Plugin};
use crate::util::rfc3339;

/// One event of a batch, with its key and the attempt it is.
struct Item {
    key: WorkKey,
    delivery: Delivery,
    event: PendingEvent,
    attempt: u32,
}

impl Handler {
    /// Gathers a batch starting with `first` (a key just taken from the queue), calls the
    /// plugin's `handle-batch` with it and applies each outcome; every key taken is done
    /// when this returns. `gathering` (the handler's turn at gathering) is let go once the
    /// batch is gathered. False when the handler shut down meanwhile.
    pub(super) async fn work_batch(
        &self,
        instances: &mut Instances,
        plugin: &Arc<Plugin>,
        first: WorkKey,
        is_try: bool,
        gathering: Option<tokio::sync::MutexGuard<'_, ()>>,
    ) -> bool {
        let spec = self.spec.batch.unwrap_or_default();
        let (items, taken) = self.gather(first, &spec).await;
        // The next worker may gather while this one calls the plugin.
        drop(gathering);
        if items.is_empty() {
            self.give_back_try(is_try);
        } else {
            // Write-ahead: every event is in the store before the plugin sees it.
            let recorded = items.iter().map(|i| i.event.recorded).max().unwrap_or(0);
            tokio::select! {
                biased;
                _ = self.wait_committed(recorded) => {}
                _ = self.wait_for_shutdown() => return false,
            }
            let about = About {
                route: items[0].key.route.clone(),
                object: items[0].key.object.shared(),
            };
            about
                .scope(self.handle_batch(instances, plugin, items, is_try))
                .await;
        }
        for key in &taken {
            self.persist_call_ended(key);
            self.queue.done(key);
        }
        true
    }

    /// Takes keys until they owe `max_events` events or `max_bytes` of event JSON, or
    /// `max_wait` has passed since the first; then takes each key's next event. Returns the
    /// events and every key taken (each to be marked done).
    ///
    /// Events are taken when the batch closes, not as their keys arrive: in `latest` mode a
    /// change that comes while the batch gathers joins it, coalesced, instead of waiting
    /// for the batch to end and a whole `max_wait` of the next one.
    async fn gather(&self, first: WorkKey, spec: &BatchSpec) -> (Vec<Item>, Vec<WorkKey>) {
        let until = tokio::time::Instant::now() + spec.max_wait;
        let mut keys = Vec::new();
        let (mut events, mut bytes) = (0usize, 0u64);
        let mut next = Some(first);
        while let Some(key) = next.take() {
            let size = self.next_size(&key);
            if size.is_some_and(|s| !keys.is_empty() && bytes + s > spec.max_bytes) {
                // Handed out again once this batch is done with it (marked done by the caller).
                self.queue.add(key.clone());
                let items = self.take_items(&keys, spec);
                keys.push(key);
                return (items, keys);
            }
            bytes += size.unwrap_or(0);
            let owes = size.is_some();
            keys.push(key);
            if owes {
                events += 1;
            } else if keys.len() == 1 {
                break;
            }
            if events >= spec.max_events || bytes >= spec.max_bytes {
                break;
            }
            next = tokio::time::timeout_at(until, self.queue.get())
                .await
                .ok()
                .flatten();
        }
        (self.take_items(&keys, spec), keys)
    }

    /// Takes the next event of each key, in order, while the batch stays within
    /// `max_bytes` (the first always; an event may have grown since its key was taken): a
    /// key whose event would pass it is given back, to be handed out once the batch is done.
    fn take_items(&self, keys: &[WorkKey], spec: &BatchSpec) -> Vec<Item> {
        let mut items: Vec<Item> = Vec::with_capacity(keys.len());
        let mut bytes = 0u64;
        for key in keys {
            let size = self.next_size(key).unwrap_or(0);
            if !items.is_empty() && bytes + size > spec.max_bytes {
                self.queue.add(key.clone());
                continue;
            }
            let Some((delivery, event)) = self.take_next(key) else {
                continue;
            };
            bytes += size;
            let attempt = self.queue.num_requeues(key) + 1;
            if let Some(trace) = &event.trace {
                trace.dequeued(attempt);
            }
            items.push(Item {
                key: key.clone(),
                delivery,
                event,
                attempt,
            });
        }
        items
    }

    /// Whether the plugin the workers would call now takes batches.
    pub(super) fn plugin_batches(
        &self,
        plugin: &tokio::sync::watch::Receiver<Option<Arc<Plugin>>>,
    ) -> bool {
        plugin
            .borrow()
            .as_ref()
            .is_some_and(|p| p.handles_batches())
    }

    /// Bytes of JSON of the event the key owes next, if it owes one.
    fn next_size(&self, key: &WorkKey) -> Option<u64> {
        let pending = crate::util::lock(&self.pending);
        let (_, owed) = pending.get(key)?;
        owed.peek().map(|e| e.json_len() as u64)
    }

    /// Puts the routes' finalizers on, calls `handle-batch` with the events, and applies
    /// each item's outcome (or the call's error, to every event); then, if the handler has
    /// a shadow, calls its `handle-batch` with the same events and compares.
    async fn handle_batch(
        &self,
        instances: &mut Instances,
        plugin: &Arc<Plugin>,
        items: Vec<Item>,
        is_try: bool,
    ) {
        let items = self.add_finalizers(items).await;
        if items.is_empty() {
            self.give_back_try(is_try);
            return;
        }
        let events: Vec<_> = items
            .iter()
            .map(|i| plugin_event(&i.key, &i.event, i.attempt))
            .collect();
        let limits = CallLimits {
            timeout: self.spec.timeout,
            memory: self.spec.memory,
        };
        let context = crate::util::lock(&self.host_context).clone();
        context.caches_listed().await;
        // With a shadow, the primary's writes and requests are recorded as they are sent.
        let recorded = self.shadow.as_ref().map(|_| Arc::new(Capture::recording()));
        let primary_context = match &recorded {
            Some(capture) => Arc::new((*context).clone().with_capture(capture.clone())),
            None => context.clone(),
        };
        // One call span per traced event: the batch's call, seen from each of its events.
        let calls: Vec<_> = items
            .iter()
            .map(|i| i.event.trace.as_ref().map(|t| t.call(i.attempt)))
            .collect();
        let started = std::time::Instant::now();
        let result = instances
            .call_batch(
                plugin,
                &primary_context,
                &limits,
                &self.config_json,
                &events,
            )
            .await;
        self.batch_metrics.record(items.len());
        let objects: Vec<String> = items.iter().map(|i| i.key.object.to_string()).collect();
        let compared = recorded.map(|c| {
            CallResult::of_batch(&result, &objects, c.writes()).with_requests(c.requests())
        });
        let route = items[0].key.route.clone();
        let first = &items[0];
        let failure = result.as_ref().err().map(|e| RecentError {
            at: rfc3339(SystemTime::now()),
            object: format!(
                "{}/{} (and {} more in its batch)",
                first.key.route,
                first.key.object,
                items.len() - 1
            ),
            attempt: first.attempt,
            error: e.to_string(),
        });
        self.record_call(started.elapsed().as_secs_f64(), failure);
        self.track_quarantine(&first.key, result.as_ref().err(), is_try);
        match result {
            Ok(outcomes) => {
                for ((item, outcome), call) in items.into_iter().zip(outcomes).zip(calls) {
                    self.apply_item(item, outcome, call.as_ref()).await;
                }
            }
            Err(error) => {
                for (i, call) in items.into_iter().zip(calls) {
                    self.failed(
                        &i.key,
                        (i.delivery, i.event),
                        i.attempt,
                        &error,
                        call.as_ref(),
                    );
                }
            }
        }
        if let (Some(shadow), Some(primary)) = (&self.shadow, compared) {
            let batch = ComparedBatch {
                route: &route,
                objects,
                calls: &events,
            };
            shadow
                .run_batch(&context, &limits, &self.config_json, batch, primary)
                .await;
        }
    }

    /// Puts each route's finalizer on its object (deletions aside) before the plugin sees
    /// it; an event whose finalizer write fails is retried and left out of the batch.
    async fn add_finalizers(&self, items: Vec<Item>) -> Vec<Item> {
        let finalizers = self.finalizers();
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            let finalizer = finalizers.of(&item.key.route);
            if let Some(finalizer) = finalizer.filter(|_| item.event.kind != ChangeKind::Deleted)
                && let Err(e) = finalizer.add(item.event.object.json_str()).await
            {
                self.host_failed(&item.key, item.delivery, item.event, item.attempt, &e);
                continue;
            }
            kept.push(item);
        }
        kept
    }

    /// Applies one item's outcome to its key as a single event's is applied: done forgets
    /// the key's backoff (its next owed event, if any, is queued already), retry requeues it
    /// with backoff (at least the delay given), dead letter gives the event up at once.
    async fn apply_item(
        &self,
        item: Item,
        outcome: ItemOutcome,
        call: Option<&crate::traces::CallTrace>,
    ) {
        let Item {
            key,
            delivery,
            event,
            attempt,
        } = item;
        match outcome {
            ItemOutcome::Done => {
                if let Some(trace) = call {
                    trace.end("done", None);
                }
                let finalizer = self.finalizers().of(&key.route).cloned();
                self.succeeded(&key, (delivery, event), attempt, finalizer.as_ref())
                    .await;
            }
            ItemOutcome::Retry(delay) => {
                let at_least = Duration::from_millis(delay.unwrap_or(0));
                let why = match delay {
                    Some(ms) => format!("the plugin asked to retry this event after {ms} ms"),
                    None => "the plugin asked to retry this event".to_string(),
                };
                let error = crate::plugin::Error::Handler(why);
                self.failed_after(&key, (delivery, event), attempt, &error, (call, at_least));
            }
            ItemOutcome::DeadLetter(reason) => {
                let reason = crate::util::redact::redact_owned(reason);
                let error =
                    crate::plugin::Error::Handler(format!("{} {reason}", crate::plugin::PERMANENT));
                self.failed(&key, (delivery, event), attempt, &error, call);
            }
        }
    }
}
