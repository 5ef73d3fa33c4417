//! A handler's shadow: a second plugin (a new version, say) that gets every event the
//! handler's plugin handles, with the same config, capabilities and limits, so the two can
//! be compared on live traffic before the new one takes over.
//!
//! The shadow's writes are captured and never sent (see
//! [`crate::plugin::imports::capture`]); its cache reads see the daemon's live caches; the
//! primary's writes are recorded as they are sent. Each call's outcome, error and writes
//! are compared with the primary's; the counts and the last [`RECENT_DIFFERENCES`]
//! differences are kept for `GET /handlers/{name}/shadow`.
//!
//! # Decision: after the primary's call, in the same worker, bounded by the timeout
//!
//! The shadow runs once the primary's outcome has been acted on (a retry scheduled, the
//! key forgotten), inside the worker that holds the key, so the two never run on one object
//! at once and the pool holds at most one instance per worker, as without a shadow. The key
//! stays in flight meanwhile: a shadow delays the next event of that one object by at most
//! the handler's `timeout` (a deadline of its own, and an outer timeout that also covers the
//! wait for a pool slot); other keys go to the other workers. Whatever the shadow does is
//! only recorded: it never retries, dead-letters, quarantines or requeues anything.
//!
//! Its metrics are checked as the primary's are, in a registry of the shadow's own that
//! `/metrics` never shows, and dropped; its log lines go to the daemon's log inside a
//! `shadow` span, not to the plugin log feed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

use super::slot::Slot;
use crate::metrics::Metrics;
use crate::plugin::imports::capture::{Capture, CapturedRequest, CapturedWrite};
use crate::plugin::{
    self, CallLimits, Event, EventKind, HostContext, ItemOutcome, Outcome, Plugin, PluginLogs,
    PluginMetrics, PluginUser,
};
use crate::util::{lock, rfc3339};

/// How many differences a shadow remembers.
pub const RECENT_DIFFERENCES: usize = 50;

/// The kinds of difference, as the metric's `kind` label and a difference's `differs`
/// name them.
pub const DIFFERENCE_KINDS: [&str; 4] = ["outcome", "writes", "requests", "errors"];

/// How one call ended, as the comparison sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallResult {
    /// `done`, `requeue-after` or `error`.
    pub outcome: &'static str,
    /// The delay asked for, for `requeue-after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// The error (returned, trap or timeout), for `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The writes the call made (the primary's as sent, the shadow's as captured).
    pub writes: Vec<CapturedWrite>,
    /// The outbound HTTP requests the call made (the primary's as sent, the shadow's as
    /// captured and answered by a stub), credentials redacted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<CapturedRequest>,
    /// For a `handle-batch` call that succeeded, each event's outcome, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ItemResult>,
}

/// One event's outcome in a `handle-batch` call, as the comparison sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemResult {
    /// `namespace/name` of the event's object.
    pub object: String,
    /// `done`, `retry` or `dead-letter`.
    pub outcome: &'static str,
    /// The least delay a `retry` asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Why a `dead-letter` gave the event up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CallResult {
    /// What a call ended with and the writes it made.
    pub fn of(result: &plugin::Result<Outcome>, writes: Vec<CapturedWrite>) -> Self {
        let (outcome, requeue_after_ms, error) = match result {
            Ok(Outcome::Done) => ("done", None, None),
            Ok(Outcome::RequeueAfter(ms)) => ("requeue-after", Some(*ms), None),
            Err(e) => ("error", None, Some(e.to_string())),
        };
        Self {
            outcome,
            requeue_after_ms,
            error,
            writes,
            requests: Vec::new(),
            items: Vec::new(),
        }
    }

    /// What a `handle-batch` call on the events about `objects` ended with (`done` with
    /// each item's outcome, or `error`) and the writes it made.
    pub fn of_batch(
        result: &plugin::Result<Vec<ItemOutcome>>,
        objects: &[String],
        writes: Vec<CapturedWrite>,
    ) -> Self {
        let (outcome, error, items) = match result {
            Ok(outcomes) => {
                let items = objects.iter().zip(outcomes).map(|(object, item)| {
                    let (outcome, retry_after_ms, reason) = match item {
                        ItemOutcome::Done => ("done", None, None),
                        ItemOutcome::Retry(ms) => ("retry", *ms, None),
                        ItemOutcome::DeadLetter(r) => ("dead-letter", None, Some(r.clone())),
                    };
                    ItemResult {
                        object: object.clone(),
                        outcome,
                        retry_after_ms,
                        reason,
                    }
                });
                ("done", None, items.collect())
            }
            Err(e) => ("error", Some(e.to_string()), Vec::new()),
        };
        Self {
            outcome,
            requeue_after_ms: None,
            error,
            writes,
            requests: Vec::new(),
            items,
        }
    }

    /// The same, with the outbound requests the call made.
    #[must_use]
    pub fn with_requests(mut self, requests: Vec<CapturedRequest>) -> Self {
        self.requests = requests;
        self
    }
}

/// How two calls on one event (or one batch) differ: `errors` when one failed and the
/// other did not or their errors differ, `outcome` when both succeeded with different
/// outcomes (for a batch, any event's), `writes` when their writes differ (in order,
/// action, resource, object or body).
pub fn differences(primary: &CallResult, shadow: &CallResult) -> Vec<&'static str> {
    let mut kinds = Vec::new();
    let both_succeeded = primary.error.is_none() && shadow.error.is_none();
    let ended = |c: &CallResult| (c.outcome, c.requeue_after_ms, c.items.clone());
    if both_succeeded && ended(primary) != ended(shadow) {
        kinds.push("outcome");
    }
    if primary.writes != shadow.writes {
        kinds.push("writes");
    }
    if primary.requests != shadow.requests {
        kinds.push("requests");
    }
    if primary.error != shadow.error {
        kinds.push("errors");
    }
    kinds
}

/// One event on which the shadow did not do what the primary did.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowDifference {
    /// When the shadow's call ended (RFC 3339).
    pub at: String,
    /// The route that delivered the event.
    pub route: String,
    /// The kind of change: `added`, `updated`, `deleted` or `sync`.
    pub event: &'static str,
    /// `namespace/name` of the object; for a batch, of its first event's, with the
    /// number of the others (`default/a (and 4 more in its batch)`).
    pub object: String,
    /// The object's resourceVersion in the event (a batch's first).
    pub resource_version: Option<String>,
    /// The attempt the call was.
    pub attempt: u32,
    /// What differs: `outcome`, `writes`, `requests`, `errors`.
    pub differs: Vec<&'static str>,
    /// What the primary did.
    pub primary: CallResult,
    /// What the shadow did.
    pub shadow: CallResult,
}

/// A shadow's counts since the handler started (kept across a reload that keeps the
/// shadow plugin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShadowCounts {
    /// Calls both plugins were made with: an event each, or with `batch:` a batch each.
    pub compared: u64,
    /// Calls on which they did the same.
    pub same: u64,
    /// Calls on which both succeeded with different outcomes (for a batch, any event's).
    pub differing_outcome: u64,
    /// Calls on which their writes differed.
    pub differing_writes: u64,
    /// Calls on which the outbound HTTP requests differed.
    pub differing_requests: u64,
    /// Calls on which one failed and the other did not, or their errors differed.
    pub differing_errors: u64,
    /// Calls of the shadow that failed (errors, traps, timeouts).
    pub shadow_errors: u64,
}

/// A shadow as /status shows it in its handler's entry.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowStatus {
    /// The shadow plugin's name (or `oci://` reference).
    pub plugin: String,
    /// Whether a version of it is loaded (no comparisons happen until one is).
    pub loaded: bool,
    /// Why it could not be loaded, if it could not.
    pub plugin_error: Option<String>,
    /// Whether it is being pulled from a registry (until a version loads).
    pub pulling: bool,
    /// The counts.
    #[serde(flatten)]
    pub counts: ShadowCounts,
}

/// A shadow in detail, for GET /handlers/{name}/shadow.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowView {
    /// The handler.
    pub handler: String,
    /// The plugin the shadow is compared with.
    pub primary: String,
    /// Name, load state and counts.
    #[serde(flatten)]
    pub status: ShadowStatus,
    /// SHA-256 of the running version's file, in hex (filled in from the plugin registry).
    pub sha256: Option<String>,
    /// When the running version was loaded (RFC 3339; from the plugin registry).
    pub loaded_at: Option<String>,
    /// The most recent differences, newest last.
    pub recent_differences: Vec<ShadowDifference>,
}

/// The counts and the recent differences.
#[derive(Debug, Default)]
struct Record {
    counts: ShadowCounts,
    recent: VecDeque<ShadowDifference>,
}

/// A handler's shadow plugin: its slot (filled by the plugin registry), its metrics
/// registry and what the comparisons found.
pub(super) struct Shadow {
    handler: Arc<str>,
    plugin: String,
    user: String,
    slot: Slot,
    metrics: Arc<PluginMetrics>,
    logs: PluginLogs,
    record: Mutex<Record>,
}

/// The event being compared, as a difference names it.
pub(super) struct Compared<'a> {
    pub(super) route: &'a str,
    pub(super) object: String,
    pub(super) call: &'a Event,
}

/// The batch being compared: its events and their objects (`namespace/name`), in order.
pub(super) struct ComparedBatch<'a> {
    pub(super) route: &'a str,
    pub(super) objects: Vec<String>,
    pub(super) calls: &'a [Event],
}

impl Shadow {
    /// A shadow running `plugin` for `handler`, not loaded yet.
    pub(super) fn new(handler: Arc<str>, plugin: String) -> Self {
        Self {
            user: format!("{handler} (shadow)"),
            handler,
            plugin,
            slot: Slot::default(),
            metrics: Arc::new(PluginMetrics::new(Arc::new(Metrics::new()))),
            logs: PluginLogs::default(),
            record: Mutex::new(Record::default()),
        }
    }

    /// The shadow plugin's name.
    pub(super) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Takes over `previous`'s counts and differences (a reload that kept the plugin).
    pub(super) fn take_record(&self, previous: &Shadow) {
        let taken = std::mem::take(&mut *lock(&previous.record));
        *lock(&self.record) = taken;
    }

    /// Name, load state and counts.
    pub(super) fn status(&self) -> ShadowStatus {
        ShadowStatus {
            plugin: self.plugin.clone(),
            loaded: self.slot.is_loaded(),
            plugin_error: self.slot.error(),
            pulling: self.slot.is_pulling(),
            counts: lock(&self.record).counts.clone(),
        }
    }

    /// The status and the recent differences; the registry's digest is filled in by the
    /// caller.
    pub(super) fn view(&self, primary: &str) -> ShadowView {
        ShadowView {
            handler: self.handler.to_string(),
            primary: primary.to_string(),
            status: self.status(),
            sha256: None,
            loaded_at: None,
            recent_differences: lock(&self.record).recent.iter().cloned().collect(),
        }
    }

    /// Calls the shadow plugin with the event the primary was called with (writes
    /// captured, within `limits.timeout` in all) and records how it compares with
    /// `primary`. Does nothing while no version is loaded.
    pub(super) async fn run(
        &self,
        context: &HostContext,
        limits: &CallLimits,
        config_json: &str,
        event: Compared<'_>,
        primary: CallResult,
    ) {
        let Some(plugin) = self.slot.current() else {
            return;
        };
        let object: Value = serde_json::from_str(&event.call.object).unwrap_or(Value::Null);
        let (context, capture) = self.context(context, object);
        let call = plugin.call_in(&context, limits, config_json, event.call);
        let result = self.bounded(limits, call).await;
        let shadow = CallResult::of(&result, capture.writes()).with_requests(capture.requests());
        self.compare(event.route, event.object, event.call, primary, shadow);
    }

    /// Calls the shadow plugin's `handle-batch` with the batch the primary was called with
    /// (writes captured, within `limits.timeout` in all) and records how it compares with
    /// `primary`: one comparison for the batch. Does nothing while no version is loaded.
    pub(super) async fn run_batch(
        &self,
        context: &HostContext,
        limits: &CallLimits,
        config_json: &str,
        batch: ComparedBatch<'_>,
        primary: CallResult,
    ) {
        let (Some(plugin), Some(first)) = (self.slot.current(), batch.calls.first()) else {
            return;
        };
        // A write to the first event's object is answered with that object patched; one to
        // any other with its body (as a shadow's write to another object is).
        let object: Value = serde_json::from_str(&first.object).unwrap_or(Value::Null);
        let (context, capture) = self.context(context, object);
        let call = async {
            let mut instance = plugin
                .instantiate_in(context.clone(), limits, config_json)
                .await?;
            instance.handle_batch(batch.calls).await
        };
        let result = self.bounded(limits, call).await;
        let shadow = CallResult::of_batch(&result, &batch.objects, capture.writes())
            .with_requests(capture.requests());
        let object = match batch.objects.len() {
            1 => batch.objects[0].clone(),
            n => format!("{} (and {} more in its batch)", batch.objects[0], n - 1),
        };
        self.compare(batch.route, object, first, primary, shadow);
    }

    /// The handler's context with the shadow's logs and metrics and a capture of its own.
    fn context(&self, context: &HostContext, object: Value) -> (Arc<HostContext>, Arc<Capture>) {
        let capture = Arc::new(Capture::shadow(object));
        let context = Arc::new(
            context
                .clone()
                .with_logs(self.logs.clone())
                .with_metrics(self.metrics.clone())
                .with_capture(capture.clone()),
        );
        (context, capture)
    }

    /// Runs a call of the shadow within `limits.timeout` in all (the wait for a pool slot
    /// included), in the `shadow` span; a failure is logged at debug level.
    async fn bounded<T>(
        &self,
        limits: &CallLimits,
        call: impl Future<Output = plugin::Result<T>>,
    ) -> plugin::Result<T> {
        let span = tracing::info_span!("shadow", plugin = %self.plugin);
        let result = match tokio::time::timeout(limits.timeout, call.instrument(span)).await {
            Ok(result) => result,
            Err(_) => Err(plugin::Error::Timeout(limits.timeout)),
        };
        if let Err(error) = &result {
            tracing::debug!(handler = %self.handler, plugin = %self.plugin, %error, "shadow call failed");
        }
        result
    }

    /// Compares the two calls on the event `call` (a batch's first) and records the result.
    fn compare(
        &self,
        route: &str,
        object: String,
        call: &Event,
        primary: CallResult,
        shadow: CallResult,
    ) {
        let shadow_failed = shadow.error.is_some();
        let differs = differences(&primary, &shadow);
        let difference = (!differs.is_empty()).then(|| {
            let object_json: Value = serde_json::from_str(&call.object).unwrap_or(Value::Null);
            ShadowDifference {
                at: rfc3339(SystemTime::now()),
                route: route.to_string(),
                event: kind_name(call.kind),
                object,
                resource_version: object_json["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string),
                attempt: call.attempt,
                differs,
                primary,
                shadow,
            }
        });
        self.add(difference, shadow_failed);
    }

    /// Counts one comparison, keeping its difference if there is one.
    fn add(&self, difference: Option<ShadowDifference>, shadow_failed: bool) {
        let mut record = lock(&self.record);
        let counts = &mut record.counts;
        counts.compared += 1;
        counts.shadow_errors += u64::from(shadow_failed);
        let Some(difference) = difference else {
            counts.same += 1;
            return;
        };
        for kind in &difference.differs {
            match *kind {
                "outcome" => counts.differing_outcome += 1,
                "writes" => counts.differing_writes += 1,
                "requests" => counts.differing_requests += 1,
                _ => counts.differing_errors += 1,
            }
        }
        if record.recent.len() == RECENT_DIFFERENCES {
            record.recent.pop_front();
        }
        record.recent.push_back(difference);
    }
}

/// The event kind as a difference names it.
fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Added => "added",
        EventKind::Updated => "updated",
        EventKind::Deleted => "deleted",
        EventKind::Sync => "sync",
    }
}

impl ShadowCounts {
    /// The count of differences of `kind` (one of [`DIFFERENCE_KINDS`]).
    pub fn differing(&self, kind: &str) -> u64 {
        match kind {
            "outcome" => self.differing_outcome,
            "writes" => self.differing_writes,
            "requests" => self.differing_requests,
            _ => self.differing_errors,
        }
    }
}

impl PluginUser for Shadow {
    fn user_name(&self) -> &str {
        &self.user
    }

    fn plugin_name(&self) -> &str {
        &self.plugin
    }

    fn install_plugin(&self, plugin: Arc<Plugin>) {
        self.slot.install(plugin);
    }

    fn report_plugin_problem(&self, problem: String) {
        let problem = self.slot.report(problem);
        tracing::error!(handler = %self.handler, shadow = %self.plugin, error = %problem, "shadow plugin problem");
    }

    fn report_plugin_pulling(&self, pulling: bool) {
        self.slot.set_pulling(pulling);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patch(value: &str) -> CapturedWrite {
        CapturedWrite {
            action: "merge-patch",
            resource: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: "a".into(),
            body: json!({"metadata": {"labels": {"owner": value}}}),
        }
    }

    fn done(writes: Vec<CapturedWrite>) -> CallResult {
        CallResult::of(&Ok(Outcome::Done), writes)
    }

    #[test]
    fn the_same_outcome_and_writes_are_no_difference() {
        assert!(differences(&done(vec![patch("a")]), &done(vec![patch("a")])).is_empty());
    }

    #[test]
    fn a_different_body_is_a_write_difference_only() {
        assert_eq!(
            differences(&done(vec![patch("a")]), &done(vec![patch("b")])),
            ["writes"]
        );
        assert_eq!(
            differences(&done(vec![patch("a")]), &done(vec![])),
            ["writes"]
        );
    }

    #[test]
    fn a_failing_shadow_differs_by_errors_not_by_outcome() {
        let failed = CallResult::of(&Err(plugin::Error::Handler("boom".into())), Vec::new());
        assert_eq!(differences(&done(vec![]), &failed), ["errors"]);
        let other = CallResult::of(&Err(plugin::Error::Handler("bang".into())), Vec::new());
        assert_eq!(differences(&failed, &other), ["errors"]);
        assert!(differences(&failed, &failed.clone()).is_empty());
    }

    #[test]
    fn a_batch_differs_by_outcome_when_any_items_outcome_differs() {
        let objects = ["default/a".to_string(), "default/b".to_string()];
        let batch = |second: ItemOutcome| {
            CallResult::of_batch(&Ok(vec![ItemOutcome::Done, second]), &objects, Vec::new())
        };
        let done = batch(ItemOutcome::Done);
        assert!(differences(&done, &done.clone()).is_empty());
        assert_eq!(done.items[1].object, "default/b");
        assert_eq!(
            differences(&done, &batch(ItemOutcome::Retry(Some(5)))),
            ["outcome"]
        );
        let letter = batch(ItemOutcome::DeadLetter("no".into()));
        assert_eq!(letter.items[1].reason.as_deref(), Some("no"));
        assert_eq!(
            differences(&letter, &batch(ItemOutcome::DeadLetter("nah".into()))),
            ["outcome"]
        );
        let failed = CallResult::of_batch(
            &Err(plugin::Error::Handler("boom".into())),
            &objects,
            Vec::new(),
        );
        assert!(failed.items.is_empty());
        assert_eq!(differences(&done, &failed), ["errors"]);
    }

    #[test]
    fn another_requeue_delay_is_an_outcome_difference() {
        let later = CallResult::of(&Ok(Outcome::RequeueAfter(10)), Vec::new());
        assert_eq!(differences(&done(vec![]), &later), ["outcome"]);
    }

    #[test]
    fn only_the_most_recent_differences_are_kept_and_every_one_is_counted() {
        let shadow = Shadow::new("h".into(), "v2".into());
        for i in 0..RECENT_DIFFERENCES + 5 {
            let difference = ShadowDifference {
                at: String::new(),
                route: "r".into(),
                event: "added",
                object: format!("default/{i}"),
                resource_version: None,
                attempt: 1,
                differs: vec!["writes", "errors"],
                primary: done(vec![]),
                shadow: done(vec![]),
            };
            shadow.add(Some(difference), true);
        }
        shadow.add(None, false);
        let view = shadow.view("v1");
        assert_eq!(view.recent_differences.len(), RECENT_DIFFERENCES);
        assert_eq!(view.recent_differences[0].object, "default/5");
        let counts = view.status.counts;
        assert_eq!(counts.compared, RECENT_DIFFERENCES as u64 + 6);
        assert_eq!(counts.same, 1);
        assert_eq!(counts.differing_writes, RECENT_DIFFERENCES as u64 + 5);
        assert_eq!(counts.differing_errors, RECENT_DIFFERENCES as u64 + 5);
        assert_eq!(counts.differing_outcome, 0);
        assert_eq!(counts.shadow_errors, RECENT_DIFFERENCES as u64 + 5);
    }
}
