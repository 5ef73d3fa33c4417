//! A handler at run time: its work queue, the events its queued keys stand for, its plugin
//! and the workers that call it, and the counters /status shows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::config::HandlerSpec;
use crate::informer::{Delta, ObjectKey};
use crate::plugin::{self, CallLimits, Event, EventKind, Outcome, Plugin, PluginLogs};
use crate::queue::{ChangeKind, PendingEvent, WorkQueue};

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
    dropped: AtomicU64,
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
    /// Keys being handled right now.
    pub in_flight: usize,
    /// Calls that succeeded.
    pub processed: u64,
    /// Calls that failed (each retry that fails counts).
    pub failed: u64,
    /// Retries scheduled after failures.
    pub retries: u64,
    /// Events given up on after `max_retries`.
    pub dropped: u64,
}

/// A running handler. Shared by the routes that feed it and the admin API.
pub struct Handler {
    spec: HandlerSpec,
    name: Arc<str>,
    config_json: String,
    queue: WorkQueue<WorkKey>,
    pending: Mutex<HashMap<WorkKey, PendingEvent>>,
    plugin: watch::Sender<Option<Arc<Plugin>>>,
    plugin_error: Mutex<Option<String>>,
    logs: PluginLogs,
    counters: Counters,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Handler {
    /// Starts a handler with `spec.concurrency` workers. Until a plugin is set, events wait
    /// in the queue.
    pub fn start(spec: HandlerSpec, logs: PluginLogs) -> Arc<Self> {
        let handler = Arc::new(Self {
            name: spec.name.as_str().into(),
            config_json: spec.config.to_string(),
            spec,
            queue: WorkQueue::new(),
            pending: Mutex::new(HashMap::new()),
            plugin: watch::channel(None).0,
            plugin_error: Mutex::new(None),
            logs,
            counters: Counters::default(),
            workers: Mutex::new(Vec::new()),
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

    /// Installs a freshly loaded plugin, or records why loading failed (a plugin already
    /// running stays in place).
    pub fn set_plugin(&self, loaded: plugin::Result<Plugin>) {
        match loaded {
            Ok(plugin) => {
                *lock(&self.plugin_error) = None;
                self.plugin.send_replace(Some(Arc::new(plugin)));
            }
            Err(e) => {
                tracing::error!(handler = %self.name, error = %e, "plugin not loaded");
                *lock(&self.plugin_error) = Some(e.to_string());
            }
        }
    }

    /// Queues a delta delivered by `route`, coalescing it with what the key already owes.
    pub fn enqueue(&self, route: &Arc<str>, delta: &Delta) {
        let key = WorkKey {
            route: route.clone(),
            object: delta.key().clone(),
        };
        self.owe(key.clone(), PendingEvent::from_delta(delta));
        self.queue.add(key);
    }

    fn owe(&self, key: WorkKey, event: PendingEvent) {
        let mut pending = lock(&self.pending);
        let merged = match pending.remove(&key) {
            Some(earlier) => earlier.merge(event),
            None => event,
        };
        pending.insert(key, merged);
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
            in_flight: self.queue.in_flight(),
            processed: c.processed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }

    /// Stops taking events, lets the workers finish what is queued for up to `grace`, then
    /// stops them.
    pub async fn shut_down(&self, grace: Duration) {
        self.queue.shut_down();
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
            let plugin = match plugin_rx.wait_for(Option::is_some).await {
                Ok(p) => p.clone().expect("waited for a plugin"),
                Err(_) => return,
            };
            let Some(key) = self.queue.get().await else {
                return;
            };
            let event = lock(&self.pending).remove(&key);
            if let Some(event) = event {
                self.handle(&plugin, &key, event).await;
            }
            self.queue.done(&key);
        }
    }

    async fn handle(&self, plugin: &Plugin, key: &WorkKey, event: PendingEvent) {
        let call = Event {
            kind: match event.kind {
                ChangeKind::Added => EventKind::Added,
                ChangeKind::Updated => EventKind::Updated,
                ChangeKind::Deleted => EventKind::Deleted,
            },
            route: key.route.to_string(),
            object: event.object.json().to_string(),
            old_object: event.old.as_ref().map(|o| o.json().to_string()),
            attempt: event.failures + 1,
            final_state_unknown: event.final_state_unknown,
        };
        let limits = CallLimits {
            timeout: self.spec.timeout,
            memory: self.spec.memory,
        };
        let result = plugin
            .call(
                self.name.clone(),
                &self.logs,
                &limits,
                &self.config_json,
                &call,
            )
            .await;
        match result {
            Ok(Outcome::Done) => {
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Outcome::RequeueAfter(ms)) => {
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
                self.owe(
                    key.clone(),
                    PendingEvent {
                        failures: 0,
                        ..event
                    },
                );
                self.queue.add_after(key.clone(), Duration::from_millis(ms));
            }
            Err(error) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                let failures = event.failures + 1;
                if failures > self.spec.max_retries {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(object = %key.object, route = %key.route, %error, failures, "giving up on event");
                    return;
                }
                let delay = backoff(self.spec.backoff_base, self.spec.backoff_cap, failures);
                tracing::warn!(object = %key.object, route = %key.route, %error, failures, retry_in = ?delay, "handler failed; will retry");
                self.counters.retries.fetch_add(1, Ordering::Relaxed);
                self.owe(key.clone(), PendingEvent { failures, ..event });
                self.queue.add_after(key.clone(), delay);
            }
        }
    }
}

/// The delay before retry number `failures`: `base * 2^(failures-1)`, at most `cap`.
pub fn backoff(base: Duration, cap: Duration, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    base.saturating_mul(factor).min(cap)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let (base, cap) = (Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(backoff(base, cap, 1), Duration::from_millis(100));
        assert_eq!(backoff(base, cap, 3), Duration::from_millis(400));
        assert_eq!(backoff(base, cap, 10), cap);
        assert_eq!(backoff(base, cap, u32::MAX), cap);
    }
}
