//! Per-host statistics of a handler's outbound requests, for `/status` and the status page:
//! counts, errors and the 99th percentile of recent durations.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::util::lock;

/// Durations kept per host for the percentile.
const RECENT: usize = 512;

/// What a handler's requests to one host did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostStatus {
    /// The destination, `scheme://host:port`.
    pub host: String,
    /// Requests made (answered or failed; refused ones are not made).
    pub requests: u64,
    /// Requests that failed or were answered with a 5xx.
    pub errors: u64,
    /// Requests refused by the policy.
    pub refused: u64,
    /// The 99th percentile of the last requests' durations, in milliseconds.
    pub p99_ms: Option<f64>,
}

#[derive(Default)]
struct HostStats {
    requests: u64,
    errors: u64,
    refused: u64,
    recent: VecDeque<Duration>,
}

/// The statistics of one handler, by host.
#[derive(Default)]
pub(super) struct Stats {
    hosts: Mutex<BTreeMap<String, HostStats>>,
}

impl Stats {
    /// Records a request made to `host` that took `took` and failed or not.
    pub(super) fn made(&self, host: &str, took: Duration, error: bool) {
        let mut hosts = lock(&self.hosts);
        let h = hosts.entry(host.to_string()).or_default();
        h.requests += 1;
        h.errors += u64::from(error);
        if h.recent.len() == RECENT {
            h.recent.pop_front();
        }
        h.recent.push_back(took);
    }

    /// Records a request to `host` the policy refused.
    pub(super) fn refused(&self, host: &str) {
        lock(&self.hosts)
            .entry(host.to_string())
            .or_default()
            .refused += 1;
    }

    pub(super) fn status(&self) -> Vec<HostStatus> {
        lock(&self.hosts)
            .iter()
            .map(|(host, h)| {
                let mut recent: Vec<Duration> = h.recent.iter().copied().collect();
                recent.sort();
                let p99 = (!recent.is_empty()).then(|| {
                    let i = (recent.len() * 99).div_ceil(100).saturating_sub(1);
                    recent[i].as_secs_f64() * 1000.0
                });
                HostStatus {
                    host: host.clone(),
                    requests: h.requests,
                    errors: h.errors,
                    refused: h.refused,
                    p99_ms: p99,
                }
            })
            .collect()
    }
}
