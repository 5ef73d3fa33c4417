//! A handler's counters and recent calls, and the views of them that /status and
//! GET /handlers/{name} show.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::Handler;
use crate::plugin::outbound::HostStatus;
use crate::util::lock;

/// What a handler has done since it started (moved to its successor on a reload).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) processed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) dead_lettered: AtomicU64,
    pub(super) coalesced_overflow: AtomicU64,
    pub(super) undelivered: AtomicU64,
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
    /// Whether its `oci://` plugin is being pulled from the registry (tried again until it
    /// loads); its events wait in the queue meanwhile.
    pub plugin_pulling: bool,
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
    /// What its config's values wait for (a Secret not found, an environment variable not
    /// set); events queue up meanwhile. Names the source, never a value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// The quarantine in force, if the plugin kept failing (events queue up; the plugin is
    /// tried again after a backoff).
    pub quarantine: Option<super::QuarantineView>,
    /// Times the handler was quarantined.
    pub quarantines: u64,
    /// Events left undelivered when the handler stopped (queued, waiting for a retry or a
    /// requested delay, or cut off by the shutdown grace): lost, and logged at warn level.
    pub undelivered: u64,
    /// The shadow plugin and its comparison counts, if the handler has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<super::ShadowStatus>,
    /// The plugin's outbound HTTP requests by destination, if its `capabilities.http`
    /// allows any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outbound: Vec<HostStatus>,
}

/// How many recent errors and call durations a handler remembers.
pub(super) const RECENT_ERRORS: usize = 10;
pub(super) const RECENT_CALLS: usize = 1024;

/// Recent errors and call durations, for GET /handlers/{name}, and the outbound requests
/// of the handlers this one replaced.
#[derive(Debug, Default)]
pub(super) struct Recent {
    pub(super) errors: VecDeque<RecentError>,
    pub(super) durations: VecDeque<f64>,
    /// What the handlers this one replaced (a config change, a rotated Secret) sent, by
    /// host: counted on with this one's own.
    pub(super) outbound_before: Vec<HostStatus>,
}

/// The requests of `before` and `now` by host, counted together; the percentile is the
/// newer one where there is one.
pub(super) fn outbound_sum(before: &[HostStatus], now: Vec<HostStatus>) -> Vec<HostStatus> {
    let mut hosts: std::collections::BTreeMap<String, HostStatus> =
        before.iter().map(|h| (h.host.clone(), h.clone())).collect();
    for host in now {
        match hosts.get_mut(&host.host) {
            Some(sum) => {
                sum.requests += host.requests;
                sum.errors += host.errors;
                sum.refused += host.refused;
                sum.p99_ms = host.p99_ms.or(sum.p99_ms);
            }
            None => {
                hosts.insert(host.host.clone(), host);
            }
        }
    }
    hosts.into_values().collect()
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

impl Counters {
    /// Every counter with its successor's, for a hand-over.
    pub(super) fn pairs<'a>(&'a self, other: &'a Counters) -> [(&'a AtomicU64, &'a AtomicU64); 6] {
        [
            (&self.processed, &other.processed),
            (&self.failed, &other.failed),
            (&self.retries, &other.retries),
            (&self.dead_lettered, &other.dead_lettered),
            (&self.coalesced_overflow, &other.coalesced_overflow),
            (&self.undelivered, &other.undelivered),
        ]
    }
}

impl Handler {
    /// The handler's counters and queue state.
    pub fn status(&self) -> HandlerStatus {
        let c = &self.counters;
        let (quarantine, quarantines) = {
            let breaker = lock(&self.breaker);
            (breaker.view(), breaker.trips)
        };
        HandlerStatus {
            name: self.spec.name.clone(),
            plugin: self.spec.plugin.clone(),
            plugin_loaded: self.slot.is_loaded(),
            plugin_error: self.slot.error(),
            plugin_pulling: self.slot.is_pulling(),
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
            waiting_for: self.waiting_for.clone(),
            quarantine,
            quarantines,
            undelivered: c.undelivered.load(Ordering::Relaxed),
            shadow: self.shadow.as_ref().map(|s| s.status()),
            outbound: self.outbound_status(),
        }
    }

    /// The outbound requests by host, counting those of the handlers this one replaced.
    pub(super) fn outbound_status(&self) -> Vec<HostStatus> {
        let now = lock(&self.host_context)
            .outbound()
            .map(|o| o.status())
            .unwrap_or_default();
        outbound_sum(&lock(&self.recent).outbound_before, now)
    }

    /// Everything GET /handlers/{name} shows.
    pub fn detail(&self) -> HandlerDetail {
        // Before `recent` is locked: the status reads it too.
        let status = self.status();
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
            status,
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

    pub(super) fn record_call(&self, seconds: f64, failure: Option<RecentError>) {
        let mut recent = lock(&self.recent);
        if recent.durations.len() == RECENT_CALLS {
            recent.durations.pop_front();
        }
        recent.durations.push_back(seconds);
        drop(recent);
        if let Some(failure) = failure {
            self.record_error(failure);
        }
    }

    /// Keeps an error among the recent ones.
    pub(super) fn record_error(&self, failure: RecentError) {
        let mut recent = lock(&self.recent);
        if recent.errors.len() == RECENT_ERRORS {
            recent.errors.pop_front();
        }
        recent.errors.push_back(failure);
    }
}
