//! What the host gives a plugin besides `log`: the `metrics`, `cache` and `kube` imports of
//! the `handler` world, one file per interface, all working from the calling handler's
//! [`HostContext`].
//!
//! - [`metrics`]: counters, gauges and histograms a plugin records, exposed on `/metrics`;
//! - [`cache`]: read-only access to the informer caches of the handler's routes;
//! - [`capture`]: writes recorded instead of sent (for `switchyard replay` and a handler's
//!   shadow plugin) or as they are sent (for the plugin a shadow is compared with);
//! - [`kube_writes`]: server-side apply, merge patch, delete and Events, each allowed only
//!   where the handler's `capabilities:` grant it.
//!
//! Every refusal and failure is an `Err(String)` the plugin gets back (it usually returns
//! it from `handle`, so the event is retried and the message shows in the handler's last
//! errors); only a write that runs past the call's deadline ends the call, as a timeout
//! (the host bounds the whole call: see `plugin::host`).

pub mod cache;
pub mod capture;
pub mod kube_writes;
pub mod metrics;

use std::sync::Arc;

use crate::config::{Capabilities, LogLimits};
use crate::informer::Informer;

use super::logs::{LogCounters, PluginLogs};
pub use metrics::{MAX_SERIES_PER_HANDLER, MetricType, PluginMetrics};

/// Everything a handler's plugin calls reach through the host imports: who is calling, what
/// it may read and write, and the client and registry the imports use. Built once per
/// handler and shared by every call; a call that captures its writes gets a copy with a
/// [`capture::Capture`] of its own.
#[derive(Clone)]
pub struct HostContext {
    handler: Arc<str>,
    logs: PluginLogs,
    capabilities: Capabilities,
    resources: Vec<Arc<Informer>>,
    /// The informers the handler `reads:`, whose first list every call waits for.
    reads: Vec<Arc<Informer>>,
    client: Option<kube::Client>,
    metrics: Option<Arc<PluginMetrics>>,
    capture: Option<Arc<capture::Capture>>,
    outbound: Option<Arc<crate::plugin::outbound::Outbound>>,
    log_limits: LogLimits,
    log_counters: LogCounters,
}

impl std::fmt::Debug for HostContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostContext")
            .field("handler", &self.handler)
            .field("capabilities", &self.capabilities)
            .field(
                "resources",
                &self
                    .resources
                    .iter()
                    .map(|i| i.key().to_string())
                    .collect::<Vec<_>>(),
            )
            .field("client", &self.client.is_some())
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl HostContext {
    /// A context for `handler` that may log and nothing else: no caches to read, no writes
    /// and no metrics (each such call gets an error saying so). Add more with the builder
    /// methods.
    pub fn new(handler: Arc<str>, logs: PluginLogs) -> Self {
        Self {
            handler,
            logs,
            capabilities: Capabilities::default(),
            resources: Vec::new(),
            reads: Vec::new(),
            client: None,
            metrics: None,
            capture: None,
            outbound: None,
            log_limits: LogLimits::default(),
            log_counters: LogCounters::default(),
        }
    }

    /// Holds each call's log lines to `limits` (the defaults otherwise), counting what they
    /// hold back in `counters`.
    #[must_use]
    pub fn with_log_limits(mut self, limits: LogLimits, counters: LogCounters) -> Self {
        self.log_limits = limits;
        self.log_counters = counters;
        self
    }

    /// Sends the plugin's log lines to `logs` instead.
    #[must_use]
    pub fn with_logs(mut self, logs: PluginLogs) -> Self {
        self.logs = logs;
        self
    }

    /// Grants these writes.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Lets the plugin read this informer's cache (and write its resource, where granted).
    /// An informer already added is not added twice.
    #[must_use]
    pub fn with_resource(mut self, informer: Arc<Informer>) -> Self {
        if !self.resources.iter().any(|i| Arc::ptr_eq(i, &informer)) {
            self.resources.push(informer);
        }
        self
    }

    /// Lets the plugin read this informer's cache, as [`HostContext::with_resource`], and
    /// has every call wait for its first list ([`HostContext::caches_listed`]).
    #[must_use]
    pub fn with_read(mut self, informer: Arc<Informer>) -> Self {
        if !self.reads.iter().any(|i| Arc::ptr_eq(i, &informer)) {
            self.reads.push(informer.clone());
        }
        self.with_resource(informer)
    }

    /// Makes writes through this client.
    #[must_use]
    pub fn with_client(mut self, client: kube::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Records plugin metrics in this registry.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<PluginMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Records writes in `capture`: instead of sending them (offline and shadow mode) or as
    /// they are sent (record mode); offline, cache reads see an empty cache (see [`capture`]).
    #[must_use]
    pub fn with_capture(mut self, capture: Arc<capture::Capture>) -> Self {
        self.capture = Some(capture);
        self
    }

    /// Lets the plugin send HTTP requests under this handler's outbound policy.
    #[must_use]
    pub fn with_outbound(mut self, outbound: Arc<crate::plugin::outbound::Outbound>) -> Self {
        self.outbound = Some(outbound);
        self
    }

    /// The handler's outbound HTTP, if it may send any.
    pub fn outbound(&self) -> Option<&Arc<crate::plugin::outbound::Outbound>> {
        self.outbound.as_ref()
    }

    /// The capture the call records into, of any kind.
    pub fn capture(&self) -> Option<&capture::Capture> {
        self.capture.as_deref()
    }

    /// The handler's name.
    pub fn handler(&self) -> &Arc<str> {
        &self.handler
    }

    /// Where the plugin's log lines go.
    pub fn logs(&self) -> &PluginLogs {
        &self.logs
    }

    /// How much one call may log.
    pub fn log_limits(&self) -> LogLimits {
        self.log_limits
    }

    /// Where what the log limits hold back is counted.
    pub fn log_counters(&self) -> &LogCounters {
        &self.log_counters
    }

    /// Waits until every informer the handler `reads:` has completed its first list, so that
    /// a call never reads such a cache still filling at start (client-go's
    /// WaitForCacheSync). The caches of the routes are not waited for: their changes are
    /// handled as they are listed.
    pub async fn caches_listed(&self) {
        for informer in &self.reads {
            informer.wait_until_listed().await;
        }
    }

    /// The writes granted.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The informers whose resource `name` names, by plural (`pods`), kind (`Pod`) or the
    /// route's resource string (`v1/pods`); an error listing what the handler may read when
    /// none does.
    pub fn resolve(&self, name: &str) -> Result<Vec<&Arc<Informer>>, String> {
        let found: Vec<&Arc<Informer>> = self
            .resources
            .iter()
            .filter(|i| names_of(i).iter().any(|n| n == name))
            .collect();
        if found.is_empty() {
            return Err(format!(
                "handler {:?} may read only the resources its routes watch and the informers its `reads:` names, not {name:?}: {}",
                self.handler,
                self.readable().join(", ")
            ));
        }
        Ok(found)
    }

    /// The resources named in the capabilities (as written) that name none of the
    /// resources the handler may read: grants that can never be used, such as a kind that
    /// discovery spelled differently.
    pub fn unmatched_grants(&self) -> Vec<String> {
        self.capabilities
            .grants()
            .map(|(name, _)| name)
            .filter(|name| {
                !self
                    .resources
                    .iter()
                    .any(|i| names_of(i).iter().any(|n| n == name))
            })
            .map(str::to_string)
            .collect()
    }

    /// The plurals of the resources the handler may read, sorted, each once.
    fn readable(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .resources
            .iter()
            .map(|i| i.key().resource.plural.clone())
            .collect();
        names.sort();
        names.dedup();
        if names.is_empty() {
            names.push("(none)".into());
        }
        names
    }
}

/// The names a plugin may use for an informer's resource: plural, kind, and the full
/// resource string (`v1/pods`, `apps/v1/deployments`).
pub(crate) fn names_of(informer: &Informer) -> [String; 3] {
    [
        informer.key().resource.plural.clone(),
        informer.resource().kind.clone(),
        informer.key().resource.to_string(),
    ]
}
