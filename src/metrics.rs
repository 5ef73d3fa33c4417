//! The Prometheus registry behind `/metrics`. Work queue metrics carry client-go's names
//! (`workqueue_depth`, `workqueue_adds_total`, ...) with a `name` label per handler, so
//! dashboards built for client-go controllers work unchanged.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The label every per-handler metric has.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The handler's name.
    pub name: String,
}

type HistogramFamily = Family<NameLabel, Histogram, fn() -> Histogram>;

/// Latency buckets from 1 µs to about 17 minutes: client-go's work queue buckets (powers of
/// ten) with 2.5 and 5 of each decade between them, so a quantile is read within a step of
/// at most 2.5×, not interpolated across a whole decade (a p99 of 30 ms and one of 300 ms
/// would otherwise share a bucket). Written out rather than multiplied: `1e-6 * 10.0` is
/// 0.000009999999999999999, which the text encoding would print into every `le` label.
const LATENCY_BUCKETS: [f64; 28] = [
    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
    250.0, 500.0, 1000.0,
];

/// A histogram of seconds with the work queue's latency buckets.
pub fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The work queue metric families, one series per handler.
#[derive(Clone)]
pub struct WorkqueueFamilies {
    depth: Family<NameLabel, Gauge>,
    adds: Family<NameLabel, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<NameLabel, Counter>,
    unfinished_work: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    longest_running: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    oldest: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

/// The metric handles of one work queue.
#[derive(Clone)]
pub struct QueueMetrics {
    /// Keys waiting.
    pub depth: Gauge,
    /// Keys added.
    pub adds: Counter,
    /// Seconds keys waited before a worker took them.
    pub queue_duration: Histogram,
    /// Seconds workers spent on keys.
    pub work_duration: Histogram,
    /// Rate-limited re-adds after failures.
    pub retries: Counter,
    /// Seconds of work in progress not yet done, summed over workers.
    pub unfinished_work: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Seconds the longest-running worker has been on its key.
    pub longest_running: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Seconds the oldest key still waiting for a worker has waited (0 when none waits).
    pub oldest: Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// The label of per-route metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The route's name.
    pub route: String,
}

/// The label of per-informer metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InformerLabel {
    /// The watch: resource, and namespace and selectors when set.
    pub informer: String,
}

/// Gauges and counters read from the stages' own state when metrics are scraped. The
/// counters are set to the stage's own count ([`set_counter`]) rather than incremented, so
/// the stages keep one count each and a scrape reads it.
#[derive(Clone, Default)]
pub struct StageFamilies {
    /// 1 while `/readyz` answers 200.
    pub ready: Gauge,
    /// Objects in an informer's cache.
    pub informer_objects: Family<InformerLabel, Gauge>,
    /// 1 once an informer has listed its resource.
    pub informer_synced: Family<InformerLabel, Gauge>,
    /// 1 while an informer's list or watch is failing (its last attempt failed).
    pub informer_failing: Family<InformerLabel, Gauge>,
    /// Watch restarts after failures.
    pub informer_restarts: Family<InformerLabel, Counter>,
    /// Deltas a route handed to its handler.
    pub route_delivered: Family<RouteLabel, Counter>,
    /// Events from a route waiting in its handler's queue.
    pub route_pending: Family<RouteLabel, Gauge>,
    /// Handler calls that succeeded.
    pub handler_processed: Family<NameLabel, Counter>,
    /// Handler calls that failed.
    pub handler_failed: Family<NameLabel, Counter>,
    /// Dead letters waiting.
    pub handler_dead_letters: Family<NameLabel, Gauge>,
    /// 1 while the handler is quarantined.
    pub handler_quarantined: Family<NameLabel, Gauge>,
    /// Events on which a handler's shadow plugin did not do what its plugin did, by kind.
    pub shadow_differences: Family<ShadowLabel, Counter>,
    /// 1 while this replica leads (always in single mode).
    pub leader: Gauge,
    /// Successful renewals of the Lease by this replica.
    pub lease_renewals: Counter,
    /// Times this replica became or stopped being the leader.
    pub leader_transitions: Counter,
    /// 1, labelled with this replica's identity and `ha.mode`.
    pub replica_info: Family<ReplicaLabel, Gauge>,
    /// Times this replica lost its Lease without giving it up.
    pub lease_losses: Counter,
    /// Live members seen (sharded mode).
    pub shard_members: Gauge,
    /// Hash ranges owned, labelled `[start, end)` (sharded mode).
    pub shard_owned: Family<RangeLabel, Gauge>,
}

/// The state store's gauges and counters (`state_dir:`), registered only with a store and
/// set from its status at scrape time.
#[derive(Clone, Default)]
pub struct StateFamilies {
    /// Changes sent to the writer and not committed yet.
    pub pending_writes: Gauge,
    /// 1 while an informer waits for the writer to catch up.
    pub backpressure: Gauge,
    /// Times an informer had to wait for the writer.
    pub backpressure_waits: Counter,
    /// 1 while commits fail.
    pub failing: Gauge,
    /// Commits that failed.
    pub commit_failures: Counter,
}

impl StateFamilies {
    /// Registers every family in `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        metrics.register(
            "switchyard_state_pending_writes",
            "Changes sent to the state store's writer and not committed yet",
            self.pending_writes.clone(),
        );
        metrics.register(
            "switchyard_state_backpressure",
            "1 while informers wait for the state store's writer to catch up (state_max_pending_writes)",
            self.backpressure.clone(),
        );
        metrics.register(
            "switchyard_state_backpressure_waits",
            "Times an informer waited for the state store's writer to catch up",
            self.backpressure_waits.clone(),
        );
        metrics.register(
            "switchyard_state_failing",
            "1 while the state store cannot commit (plugins wait for their events to be committed)",
            self.failing.clone(),
        );
        metrics.register(
            "switchyard_state_commit_failures",
            "Commits of the state store that failed (each is tried again)",
            self.commit_failures.clone(),
        );
    }
}

/// The labels of `switchyard_shadow_differences_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShadowLabel {
    /// The handler.
    pub handler: String,
    /// `outcome`, `writes` or `errors`.
    pub kind: String,
}

/// What handlers' log limits held back (`plugin::logs`), counted as it happens.
#[derive(Clone, Default)]
pub struct LogLimitFamilies {
    /// Plugin log lines held back, by kind: `truncated` (cut to `log_line_max`) or
    /// `dropped` (past a call's `log_call_max` or `log_call_lines`).
    pub lines: Family<LogLimitLabel, Counter>,
    /// Bytes of plugin log lines not written: cut from lines, and in lines dropped.
    pub bytes: Family<NameLabel, Counter>,
}

/// The labels of `switchyard_handler_log_limited_lines_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LogLimitLabel {
    /// The handler.
    pub name: String,
    /// `truncated` or `dropped`.
    pub kind: String,
}

/// Plugins' outbound HTTP requests (`plugin::outbound`), counted as they are made.
#[derive(Clone)]
pub struct OutboundFamilies {
    /// Requests made, by handler, destination and status code (or failure: `timeout`,
    /// `connection`, `tls`, `dns`, `refused`, `error`).
    pub requests: Family<OutboundLabel, Counter>,
    /// Seconds from sending a request to its response's head, by handler and destination.
    pub duration: Family<OutboundHostLabel, Histogram, fn() -> Histogram>,
    /// Requests refused by a handler's policy, by reason: `not_allowed`, an address class
    /// (`loopback`, `link-local`, `unspecified`, `private`), `request_body_too_large`,
    /// `response_body_too_large`.
    pub refused: Family<OutboundRefusedLabel, Counter>,
}

impl Default for OutboundFamilies {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(outbound_histogram),
            refused: Family::default(),
        }
    }
}

/// Request duration buckets from 5 ms to 30 s.
fn outbound_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// The labels of `switchyard_outbound_requests_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundLabel {
    /// The handler.
    pub handler: String,
    /// The destination, `scheme://host:port`.
    pub host: String,
    /// The status code, or the kind of failure.
    pub code: String,
}

/// The labels of `switchyard_outbound_request_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundHostLabel {
    /// The handler.
    pub handler: String,
    /// The destination, `scheme://host:port`.
    pub host: String,
}

/// The labels of `switchyard_outbound_refused_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundRefusedLabel {
    /// The handler.
    pub handler: String,
    /// Why it was refused.
    pub reason: String,
}

/// The labels of `switchyard_replica_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabel {
    /// This replica's identity.
    pub identity: String,
    /// `single`, `leader` or `sharded`.
    pub mode: String,
}

/// The label of `switchyard_shard_owned_range`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RangeLabel {
    /// `[0x…, 0x…)`.
    pub range: String,
}

/// Sets `counter` to `value`: the count a stage keeps itself. The text encoding names a
/// counter family `NAME_total`.
pub fn set_counter(counter: &Counter, value: u64) {
    counter
        .inner()
        .store(value, std::sync::atomic::Ordering::Relaxed);
}

/// The batch delivery families (`batch:` handlers), one series per handler.
#[derive(Clone)]
pub struct BatchFamilies {
    calls: Family<NameLabel, Counter>,
    size: Family<NameLabel, Histogram>,
}

/// Events per batch: the buckets of `switchyard_handler_batch_size`.
pub const BATCH_SIZE_BUCKETS: [f64; 13] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
];

fn batch_size_histogram() -> Histogram {
    Histogram::new(BATCH_SIZE_BUCKETS)
}

/// One handler's batch delivery metrics.
#[derive(Clone)]
pub struct BatchMetrics {
    calls: Counter,
    size: Histogram,
}

impl BatchMetrics {
    /// Counts one `handle-batch` call with `events` events.
    pub fn record(&self, events: usize) {
        self.calls.inc();
        self.size.observe(events as f64);
    }
}

/// The daemon's metrics registry.
pub struct Metrics {
    batches: BatchFamilies,
    registry: Mutex<Registry>,
    workqueue: WorkqueueFamilies,
    /// Stage state, set at scrape time.
    pub stages: StageFamilies,
    /// What handlers' log limits held back.
    pub log_limits: LogLimitFamilies,
    /// Plugins' outbound HTTP requests.
    pub outbound: OutboundFamilies,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let workqueue = WorkqueueFamilies {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(latency_histogram),
            work_duration: Family::new_with_constructor(latency_histogram),
            retries: Family::default(),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            oldest: Family::default(),
        };
        register_workqueue(&mut registry, &workqueue);
        let stages = StageFamilies::default();
        register_stages(&mut registry, &stages);
        let log_limits = LogLimitFamilies::default();
        registry.register(
            "switchyard_handler_log_limited_lines",
            "Plugin log lines held back by the handler's log limits, by kind (truncated, dropped)",
            log_limits.lines.clone(),
        );
        registry.register(
            "switchyard_handler_log_limited_bytes",
            "Bytes of plugin log lines not written: cut from lines, and in lines dropped",
            log_limits.bytes.clone(),
        );
        let outbound = OutboundFamilies::default();
        registry.register(
            "switchyard_outbound_requests",
            "Plugins' outbound HTTP requests, by handler, destination and status code or failure",
            outbound.requests.clone(),
        );
        registry.register(
            "switchyard_outbound_request_duration_seconds",
            "Seconds from sending a plugin's outbound request to its response's head",
            outbound.duration.clone(),
        );
        registry.register(
            "switchyard_outbound_refused",
            "Plugins' outbound requests refused by the handler's policy, by reason",
            outbound.refused.clone(),
        );
        let batches = BatchFamilies {
            calls: Family::default(),
            size: Family::new_with_constructor(batch_size_histogram),
        };
        registry.register(
            "switchyard_handler_batches",
            "Calls of a batch handler's handle-batch",
            batches.calls.clone(),
        );
        registry.register(
            "switchyard_handler_batch_size",
            "Events per call of a batch handler's handle-batch",
            batches.size.clone(),
        );
        Self {
            batches,
            registry: Mutex::new(registry),
            workqueue,
            stages,
            log_limits,
            outbound,
        }
    }

    /// The work queue metric handles for the handler `name`.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let label = NameLabel {
            name: name.to_string(),
        };
        let w = &self.workqueue;
        QueueMetrics {
            depth: w.depth.get_or_create_owned(&label),
            adds: w.adds.get_or_create_owned(&label),
            queue_duration: w.queue_duration.get_or_create_owned(&label),
            work_duration: w.work_duration.get_or_create_owned(&label),
            retries: w.retries.get_or_create_owned(&label),
            unfinished_work: w.unfinished_work.get_or_create_owned(&label),
            longest_running: w.longest_running.get_or_create_owned(&label),
            oldest: w.oldest.get_or_create_owned(&label),
        }
    }

    /// The batch delivery metric handles for the handler `name`.
    pub fn batch(&self, name: &str) -> BatchMetrics {
        let label = NameLabel {
            name: name.to_string(),
        };
        BatchMetrics {
            calls: self.batches.calls.get_or_create_owned(&label),
            size: self.batches.size.get_or_create_owned(&label),
        }
    }

    /// Registers a metric family of another stage.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        crate::util::lock(&self.registry).register(name, help, metric);
    }

    /// Every metric in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = crate::util::lock(&self.registry);
        // Writing into a String cannot fail.
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode metrics");
        out
    }
}

/// Registers client-go's work queue metric families.
fn register_workqueue(registry: &mut Registry, w: &WorkqueueFamilies) {
    registry.register(
        "workqueue_depth",
        "Current depth of the work queue",
        w.depth.clone(),
    );
    registry.register(
        "workqueue_adds",
        "Total number of adds handled by the work queue",
        w.adds.clone(),
    );
    registry.register(
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in the work queue before being requested",
        w.queue_duration.clone(),
    );
    registry.register(
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from the work queue takes",
        w.work_duration.clone(),
    );
    registry.register(
        "workqueue_retries",
        "Total number of retries handled by the work queue",
        w.retries.clone(),
    );
    registry.register(
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
        w.unfinished_work.clone(),
    );
    registry.register(
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for the work queue been running",
        w.longest_running.clone(),
    );
    registry.register(
        "switchyard_queue_oldest_seconds",
        "Seconds the oldest key waiting in the handler's work queue has waited so far (0 when none waits)",
        w.oldest.clone(),
    );
}

/// Registers the stages' own metric families.
fn register_stages(registry: &mut Registry, st: &StageFamilies) {
    registry.register(
        "switchyard_ready",
        "1 while /readyz answers 200: every informer synced, no route waiting for its resource, the state store committing",
        st.ready.clone(),
    );
    registry.register(
        "switchyard_leader",
        "1 while this replica leads and its handlers run",
        st.leader.clone(),
    );
    registry.register(
        "switchyard_lease_renewals",
        "Successful renewals of the leader election Lease by this replica",
        st.lease_renewals.clone(),
    );
    registry.register(
        "switchyard_leader_transitions",
        "Times this replica became or stopped being the leader",
        st.leader_transitions.clone(),
    );
    registry.register(
        "switchyard_replica_info",
        "1, labelled with this replica's identity and ha.mode",
        st.replica_info.clone(),
    );
    registry.register(
        "switchyard_lease_losses",
        "Times this replica lost its Lease (leadership or shard) without giving it up",
        st.lease_losses.clone(),
    );
    registry.register(
        "switchyard_shard_members",
        "Live replicas seen through their shard Leases (sharded mode)",
        st.shard_members.clone(),
    );
    registry.register(
        "switchyard_shard_owned_range",
        "1 for each hash range [start, end) this replica owns (sharded mode)",
        st.shard_owned.clone(),
    );
    registry.register(
        "switchyard_informer_objects",
        "Objects in the informer's cache",
        st.informer_objects.clone(),
    );
    registry.register(
        "switchyard_informer_synced",
        "1 once the informer has listed its resource",
        st.informer_synced.clone(),
    );
    registry.register(
        "switchyard_informer_failing",
        "1 while the informer's list or watch is failing: its last attempt failed and none has succeeded since",
        st.informer_failing.clone(),
    );
    registry.register(
        "switchyard_informer_watch_restarts",
        "Times the informer's watch failed and was restarted",
        st.informer_restarts.clone(),
    );
    registry.register(
        "switchyard_route_delivered",
        "Deltas the route handed to its handler",
        st.route_delivered.clone(),
    );
    registry.register(
        "switchyard_route_pending",
        "Events from the route waiting in its handler's queue",
        st.route_pending.clone(),
    );
    registry.register(
        "switchyard_handler_processed",
        "Handler calls that succeeded",
        st.handler_processed.clone(),
    );
    registry.register(
        "switchyard_handler_failed",
        "Handler calls that failed",
        st.handler_failed.clone(),
    );
    registry.register(
        "switchyard_handler_dead_letters",
        "Events given up on, waiting for a retry or purge",
        st.handler_dead_letters.clone(),
    );
    registry.register(
        "switchyard_shadow_differences",
        "Events on which the handler's shadow plugin did not do what its plugin did, by kind (outcome, writes, errors)",
        st.shadow_differences.clone(),
    );
    registry.register(
        "switchyard_handler_quarantined",
        "1 while the handler's plugin is quarantined for failing on every call",
        st.handler_quarantined.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_counts_are_counters_named_total() {
        let metrics = Metrics::new();
        let label = NameLabel { name: "h".into() };
        set_counter(&metrics.stages.handler_processed.get_or_create(&label), 7);
        set_counter(&metrics.stages.handler_failed.get_or_create(&label), 2);
        let text = metrics.encode();
        assert!(
            text.contains("# TYPE switchyard_handler_processed counter"),
            "{text}"
        );
        assert!(
            text.contains("switchyard_handler_processed_total{name=\"h\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("switchyard_handler_failed_total{name=\"h\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn latency_buckets_print_as_plain_decimals() {
        let metrics = Metrics::new();
        metrics.queue("h").work_duration.observe(0.002);
        let text = metrics.encode();
        let les: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("workqueue_work_duration_seconds_bucket"))
            .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(les.len(), 29, "{text}");
        assert!(
            les.contains(&"0.025") && les.contains(&"0.0000025"),
            "{les:?}"
        );
        for le in les {
            assert!(
                le == "+Inf" || (le.len() <= 12 && !le.contains('e')),
                "bucket bound {le:?} is not a plain decimal: {text}"
            );
        }
    }
}
