//! A handler at run time: its work queue, the events its queued keys stand for, its plugin
//! and the workers that call it, its dead letters, and the counters /status shows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::{Delivery, HandlerSpec};
use crate::informer::{Delta, ObjectKey};
use crate::metrics::Metrics;
use crate::plugin::{self, CallLimits, Event, EventKind, HostContext, Outcome, Plugin, PluginLogs};
use crate::queue::{
    ChangeKind, DeadLetter, DeadLetterView, DeadLetters, Owed, PendingEvent, RateLimits, WorkQueue,
};

/// What a handler's queue holds: an object as delivered by one route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkKey {
    /// The route that delivered it.
    pub route: Arc<str>,
    /// The object.
    pub object: ObjectKey,
}

#[derive(Debug, Default)]
struct Counters {
    processed: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    dead_lettered: AtomicU64,
    coalesced_overflow: AtomicU64,
}

/// A handler's state as /status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerStatus {
    /// Handler name.
    pub name: String,
    /// Plugin name.
    pub plugin: String,
    /// Whether a plugin is loaded and calls can run.
    pub plugin_loaded: bool,
    /// Why the plugin could not be loaded, if it could not.
    pub plugin_error: Option<String>,
    /// Keys waiting in the queue.
    pub queue_depth: usize,
    /// Keys waiting for a retry or a requested delay.
    pub delayed: usize,
    /// Keys being handled right now.
    pub in_flight: usize,
    /// Calls that succeeded.
    pub processed: u64,
    /// Calls that failed (each failed retry counts).
    pub failed: u64,
    /// Retries scheduled after failures.
    pub retries: u64,
    /// Events given up on after `max_retries` (ever).
    pub dead_lettered: u64,
    /// Dead letters waiting for a retry or purge now.
    pub dead_letters: usize,
    /// Times an `every` backlog was full and its two oldest events were coalesced.
    pub coalesced_overflow: u64,
    /// Whether the handler is paused (events queue up; none are handed to the plugin).
    pub paused: bool,
}

/// Events owed per key, with the delivery mode each key was queued in.
type Pending = HashMap<WorkKey, (Delivery, Owed)>;

/// A running handler. Shared by the routes that feed it and the admin API.
pub struct Handler {
    spec: HandlerSpec,
    name: Arc<str>,
    config_json: String,
    queue: WorkQueue<WorkKey>,
    pending: Mutex<Pending>,
    dead_letters: Mutex<DeadLetters>,
    plugin: watch::Sender<Option<Arc<Plugin>>>,
    plugin_error: Mutex<Option<String>>,
    /// What the plugin's host imports work from; replaced once the routes' informers exist.
    host_context: Mutex<Arc<HostContext>>,
    counters: Counters,
    workers: Mutex<Vec<JoinHandle<()>>>,
    stopping: watch::Sender<bool>,
    paused: watch::Sender<bool>,
    recent: Mutex<Recent>,
}

/// How many recent errors and call durations a handler remembers.
const RECENT_ERRORS: usize = 10;
const RECENT_CALLS: usize = 1024;

/// Recent errors and call durations, for GET /handlers/{name}.
#[derive(Debug, Default)]
struct Recent {
    errors: std::collections::VecDeque<RecentError>,
    durations: std::collections::VecDeque<f64>,
}

/// One recent failure.
#[derive(Debug, Clone, Serialize)]
pub struct RecentError {
    /// When (RFC 3339).
    pub at: String,
    /// `route/namespace/name`.
    pub object: String,
    /// The attempt that failed.
    pub attempt: u32,
    /// The error.
    pub error: String,
}

/// Call latency over the recent calls, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Calls measured (the most recent ones).
    pub calls: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// A handler in detail, for GET /handlers/{name}.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerDetail {
    /// Counters and queue state.
    #[serde(flatten)]
    pub status: HandlerStatus,
    /// Workers.
    pub concurrency: usize,
    /// Deadline per call, in milliseconds.
    pub timeout_ms: u128,
    /// Memory cap per call, in bytes.
    pub memory_bytes: u64,
    /// Retries before dead letters.
    pub max_retries: u32,
    /// Latency of recent calls.
    pub latency: Latency,
    /// The most recent failures, newest last.
    pub last_errors: Vec<RecentError>,
}

impl Handler {
    /// Starts a handler with `spec.concurrency` workers, its queue reporting to `metrics`.
    /// Until a plugin is set, events wait in the queue.
    pub fn start(spec: HandlerSpec, logs: PluginLogs, metrics: &Metrics) -> Arc<Self> {
        let limits = RateLimits {
            backoff_base: spec.backoff_base,
            backoff_cap: spec.backoff_cap,
            qps: spec.qps,
            burst: spec.burst,
        };
        let handler = Arc::new(Self {
            name: spec.name.as_str().into(),
            config_json: spec.config.to_string(),
            queue: WorkQueue::with_limits(limits, Some(metrics.queue(&spec.name))),
            host_context: Mutex::new(Arc::new(HostContext::new(spec.name.as_str().into(), logs))),
            spec,
            pending: Mutex::new(HashMap::new()),
            dead_letters: Mutex::new(DeadLetters::default()),
            plugin: watch::channel(None).0,
            plugin_error: Mutex::new(None),
            counters: Counters::default(),
            workers: Mutex::new(Vec::new()),
            stopping: watch::channel(false).0,
            paused: watch::channel(false).0,
            recent: Mutex::new(Recent::default()),
        });
        let workers = (0..handler.spec.concurrency)
            .map(|worker| {
                let span = tracing::info_span!("worker", handler = %handler.name, worker);
                tokio::spawn(handler.clone().work().instrument(span))
            })
            .collect();
        *lock(&handler.workers) = workers;
        handler
    }

    /// The handler's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The handler's settings.
    pub fn spec(&self) -> &HandlerSpec {
        &self.spec
    }

    /// Sets what the plugin's host imports work from (the routes' caches, the granted
    /// writes, the metrics registry). Until it is set, the plugin may only log.
    pub fn set_host_context(&self, context: HostContext) {
        *lock(&self.host_context) = Arc::new(context);
    }

    /// Installs a freshly loaded plugin, or records why loading failed (a plugin already
    /// running stays in place).
    pub fn set_plugin(&self, loaded: plugin::Result<Plugin>) {
        match loaded {
            Ok(plugin) => self.install_plugin(Arc::new(plugin)),
            Err(e) => self.report_plugin_problem(e.to_string()),
        }
    }

    /// Swaps `plugin` in and clears any recorded problem. Calls already running finish on
    /// the version they started with; every call that starts afterwards uses `plugin`.
    pub fn install_plugin(&self, plugin: Arc<Plugin>) {
        *lock(&self.plugin_error) = None;
        self.plugin.send_replace(Some(plugin));
    }

    /// Records a problem with the plugin's file (shown in /status as `plugin_error`); the
    /// plugin running now, if any, stays in place.
    pub fn report_plugin_problem(&self, problem: String) {
        tracing::error!(handler = %self.name, error = %problem, "plugin problem");
        *lock(&self.plugin_error) = Some(problem);
    }

    /// Queues a delta delivered by `route` in its delivery mode.
    pub fn enqueue(&self, route: &Arc<str>, delivery: Delivery, delta: &Delta) {
        let Some(event) = PendingEvent::from_delta(delta) else {
            return;
        };
        let key = WorkKey {
            route: route.clone(),
            object: event.object.key().clone(),
        };
        let overflowed = {
            let mut pending = lock(&self.pending);
            match pending.get_mut(&key) {
                Some((_, owed)) => owed.push(delivery, event),
                None => {
                    pending.insert(key.clone(), (delivery, Owed::new(delivery, event)));
                    false
                }
            }
        };
        if overflowed {
            self.counters
                .coalesced_overflow
                .fetch_add(1, Ordering::Relaxed);
        }
        self.queue.add(key);
    }

    /// Puts an event back in front of what the key owes now.
    fn put_back(&self, key: &WorkKey, delivery: Delivery, event: PendingEvent) {
        let mut pending = lock(&self.pending);
        match pending.get_mut(key) {
            Some((_, owed)) => owed.put_back(event),
            None => {
                pending.insert(key.clone(), (delivery, Owed::new(delivery, event)));
            }
        }
    }

    /// The handler's counters and queue state.
    pub fn status(&self) -> HandlerStatus {
        let c = &self.counters;
        HandlerStatus {
            name: self.spec.name.clone(),
            plugin: self.spec.plugin.clone(),
            plugin_loaded: self.plugin.borrow().is_some(),
            plugin_error: lock(&self.plugin_error).clone(),
            queue_depth: self.queue.len(),
            delayed: self.queue.delayed(),
            in_flight: self.queue.in_flight(),
            processed: c.processed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            dead_letters: lock(&self.dead_letters).len(),
            coalesced_overflow: c.coalesced_overflow.load(Ordering::Relaxed),
            paused: *self.paused.borrow(),
        }
    }

    /// Events owed to keys delivered by `route`.
    pub fn pending_for_route(&self, route: &str) -> usize {
        lock(&self.pending)
            .iter()
            .filter(|(k, _)| &*k.route == route)
            .map(|(_, (_, owed))| owed.len())
            .sum()
    }

    /// Stops handing events to the plugin; calls in flight finish, new events queue up.
    /// Returns whether it was running.
    pub fn pause(&self) -> bool {
        !self.paused.send_replace(true)
    }

    /// Hands events to the plugin again. Returns whether it was paused.
    pub fn resume(&self) -> bool {
        self.paused.send_replace(false)
    }

    /// Everything GET /handlers/{name} shows.
    pub fn detail(&self) -> HandlerDetail {
        let recent = lock(&self.recent);
        let mut sorted: Vec<f64> = recent.durations.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let quantile = |q: f64| {
            if sorted.is_empty() {
                return 0.0;
            }
            let index = ((sorted.len() - 1) as f64 * q).round() as usize;
            (sorted[index] * 1000.0 * 1000.0).round() / 1000.0
        };
        HandlerDetail {
            status: self.status(),
            concurrency: self.spec.concurrency,
            timeout_ms: self.spec.timeout.as_millis(),
            memory_bytes: self.spec.memory,
            max_retries: self.spec.max_retries,
            latency: Latency {
                calls: sorted.len(),
                p50_ms: quantile(0.5),
                p90_ms: quantile(0.9),
                p99_ms: quantile(0.99),
            },
            last_errors: recent.errors.iter().cloned().collect(),
        }
    }

    fn record_call(&self, seconds: f64, failure: Option<RecentError>) {
        let mut recent = lock(&self.recent);
        if recent.durations.len() == RECENT_CALLS {
            recent.durations.pop_front();
        }
        recent.durations.push_back(seconds);
        if let Some(failure) = failure {
            if recent.errors.len() == RECENT_ERRORS {
                recent.errors.pop_front();
            }
            recent.errors.push_back(failure);
        }
    }

    /// The dead letters waiting now.
    pub fn dead_letters(&self) -> Vec<DeadLetterView> {
        lock(&self.dead_letters).views()
    }

    /// Delivers dead letters again (those with these ids, or all); returns how many.
    pub fn retry_dead_letters(&self, ids: Option<&[String]>) -> usize {
        let letters = lock(&self.dead_letters).take(ids);
        let count = letters.len();
        for letter in letters {
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
            self.queue.add(key);
        }
        count
    }

    /// Drops dead letters (those with these ids, or all); returns how many.
    pub fn purge_dead_letters(&self, ids: Option<&[String]>) -> usize {
        lock(&self.dead_letters).take(ids).len()
    }

    /// Hands this handler's work to `successor`, which replaces it after a config change:
    /// no new call starts here, calls in flight finish (for up to `grace`), the workers
    /// stop, and every event still owed, every dead letter and the counters move to
    /// `successor`. Events it owes a key are delivered before those the key already owes
    /// `successor`. Retry counts start again from the first attempt.
    pub async fn hand_over(&self, successor: &Handler, grace: Duration) {
        self.pause();
        let deadline = tokio::time::Instant::now() + grace;
        while self.queue.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.shut_down(Duration::ZERO).await;
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
            }
            successor.queue.add(key);
        }
        let letters = lock(&self.dead_letters).take(None);
        let mut theirs = lock(&successor.dead_letters);
        for letter in letters {
            theirs.insert(letter);
        }
        drop(theirs);
        let (from, to) = (&self.counters, &successor.counters);
        for (a, b) in [
            (&from.processed, &to.processed),
            (&from.failed, &to.failed),
            (&from.retries, &to.retries),
            (&from.dead_lettered, &to.dead_lettered),
            (&from.coalesced_overflow, &to.coalesced_overflow),
        ] {
            b.fetch_add(a.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
        let recent = std::mem::take(&mut *lock(&self.recent));
        let mut theirs = lock(&successor.recent);
        let mut errors = recent.errors;
        errors.extend(theirs.errors.drain(..));
        while errors.len() > RECENT_ERRORS {
            errors.pop_front();
        }
        theirs.errors = errors;
    }

    /// Updates the time-based queue gauges before metrics are read.
    pub fn update_time_metrics(&self) {
        self.queue.update_time_metrics();
    }

    /// Stops taking events, lets the workers finish what is queued for up to `grace`, then
    /// stops them.
    pub async fn shut_down(&self, grace: Duration) {
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

    async fn work(self: Arc<Self>) {
        let mut plugin_rx = self.plugin.subscribe();
        loop {
            // Wait for a plugin before taking work, so events queue up meanwhile.
            tokio::select! {
                p = plugin_rx.wait_for(Option::is_some) => if p.is_err() {
                    return;
                },
                _ = self.wait_for_shutdown() => return,
            }
            let mut paused = self.paused.subscribe();
            tokio::select! {
                p = paused.wait_for(|paused| !*paused) => if p.is_err() {
                    return;
                },
                _ = self.wait_for_shutdown() => return,
            }
            let Some(key) = self.queue.get().await else {
                return;
            };
            if *self.paused.borrow() {
                // Paused while this worker waited for work: leave the key for later.
                self.queue.done(&key);
                self.queue.add(key);
                continue;
            }
            // The newest plugin, taken after the wait for work: a swap made while this
            // worker waited applies to the event it now handles. A plugin once set is only
            // ever replaced, never removed.
            let plugin = plugin_rx
                .borrow_and_update()
                .clone()
                .expect("a plugin once set is never removed");
            if let Some((delivery, event)) = self.take_next(&key) {
                self.handle(&plugin, &key, delivery, event).await;
            }
            self.queue.done(&key);
        }
    }

    async fn wait_for_shutdown(&self) {
        // The sender lives in self, so the wait cannot fail while we run.
        let _ = self
            .stopping
            .subscribe()
            .wait_for(|stopping| *stopping)
            .await;
    }

    /// The next event for a key just taken from the queue. If the key owes more (`every`
    /// mode), it is added again so the queue hands it out after this one is done.
    fn take_next(&self, key: &WorkKey) -> Option<(Delivery, PendingEvent)> {
        let mut pending = lock(&self.pending);
        let (delivery, owed) = pending.get_mut(key)?;
        let delivery = *delivery;
        let event = owed.take_next();
        if owed.is_empty() {
            pending.remove(key);
        } else {
            self.queue.add(key.clone());
        }
        event.map(|e| (delivery, e))
    }

    async fn handle(
        &self,
        plugin: &Plugin,
        key: &WorkKey,
        delivery: Delivery,
        event: PendingEvent,
    ) {
        let attempt = self.queue.num_requeues(key) + 1;
        let call = Event {
            kind: match event.kind {
                ChangeKind::Added => EventKind::Added,
                ChangeKind::Updated => EventKind::Updated,
                ChangeKind::Deleted => EventKind::Deleted,
                ChangeKind::Sync => EventKind::Sync,
            },
            route: key.route.to_string(),
            object: event.object.json().to_string(),
            old_object: event.old.as_ref().map(|o| o.json().to_string()),
            attempt,
            final_state_unknown: event.final_state_unknown,
        };
        let limits = CallLimits {
            timeout: self.spec.timeout,
            memory: self.spec.memory,
        };
        let context = lock(&self.host_context).clone();
        let started = std::time::Instant::now();
        let result = plugin
            .call_in(&context, &limits, &self.config_json, &call)
            .await;
        let failure = result.as_ref().err().map(|e| RecentError {
            at: crate::queue::dead_letter::rfc3339(SystemTime::now()),
            object: format!("{}/{}", key.route, key.object),
            attempt,
            error: e.to_string(),
        });
        self.record_call(started.elapsed().as_secs_f64(), failure);
        match result {
            Ok(Outcome::Done) => {
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(key);
            }
            Ok(Outcome::RequeueAfter(ms)) => {
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(key);
                self.put_back(key, delivery, event);
                self.queue.add_after(key.clone(), Duration::from_millis(ms));
            }
            Err(error) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                let now = SystemTime::now();
                let first_failure = event.first_failure.unwrap_or(now);
                if attempt > self.spec.max_retries {
                    self.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(object = %key.object, route = %key.route, %error, attempt, "giving up: event moved to dead letters");
                    self.queue.forget(key);
                    lock(&self.dead_letters).insert(DeadLetter {
                        route: key.route.to_string(),
                        object: key.object.to_string(),
                        delivery,
                        event,
                        last_error: error.to_string(),
                        attempts: attempt,
                        first_failure,
                        last_failure: now,
                    });
                    return;
                }
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                self.put_back(
                    key,
                    delivery,
                    PendingEvent {
                        first_failure: Some(first_failure),
                        ..event
                    },
                );
                let delay = self.queue.add_rate_limited(key.clone());
                tracing::warn!(object = %key.object, route = %key.route, %error, attempt, retry_in = ?delay, "handler failed; will retry");
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
