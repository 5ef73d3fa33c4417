//! What the running stages share with the admin API: the informers, the plugins, the
//! topology and its reloads, the replica's election or membership and the state store;
//! the status and metrics read from them; and the admin API's view of the daemon
//! ([`crate::admin::Backend`]), so the admin stage never imports the daemon.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::watch;

use super::topology::Stages;
use super::{Plan, ReloadError, ReloadHistory, Result, Topology, Waiting, reload, sharded};
use crate::config::{Config, HaMode};
use crate::election::{ElectionStatus, ReplicaStatus};
use crate::handler::{Handler, HandlerStatus};
use crate::informer::{Informer, InformerFactory, WatchHealth};
use crate::metrics::Metrics;
use crate::plugin::host::{RESIDENT_SLOT_RESET, SlotReset, default_cache_dir, pool_instances};
use crate::plugin::{
    HostOptions, PluginHost, PluginLogs, PluginMetrics, PluginRegistry, PluginWatcher, PoolOptions,
};
use crate::router::{Route, RouteStatus};

/// What the stages share with the admin API.
pub struct Shared {
    /// The shared informers.
    pub informers: InformerFactory,
    /// Where plugins are loaded from.
    pub plugins_dir: PathBuf,
    /// The plugins in use: loading, swapping and their state.
    pub plugins: Arc<PluginRegistry>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    pub(super) logs: PluginLogs,
    pub(super) client: kube::Client,
    pub(super) plugin_metrics: Arc<PluginMetrics>,
    /// The pooled clients of plugins' outbound HTTP, shared across reloads.
    outbound: Arc<crate::plugin::outbound::Clients>,
    /// The Secrets handlers' configs name, watched.
    pub(super) secrets: Arc<crate::secrets::Secrets>,
    /// The largest memory a plugin instance may have in the pool, sized at start.
    pub(super) pool_memory: u64,
    /// Plugin instances the pool holds, sized at start: the most concurrency the handlers
    /// may add up to.
    pub(super) pool_instances: u32,
    pub(super) topology: RwLock<Arc<Topology>>,
    /// Held for a whole reload, so reloads apply one at a time.
    pub(super) reloading: tokio::sync::Mutex<()>,
    pub(super) reloads: Mutex<ReloadHistory>,
    pub(super) started: Instant,
    /// Whether this replica's handlers may run: always in single mode, while it leads in
    /// leader mode.
    pub(super) active: watch::Sender<bool>,
    /// The election's counters, in leader mode.
    pub(super) election: Option<Arc<ElectionStatus>>,
    /// The membership's counters, in sharded mode.
    pub(super) shards: Option<Arc<crate::sharding::ShardStatus>>,
    /// In sharded mode, this replica's hold on its ranges, which handlers check.
    pub(super) tenure: Option<Arc<crate::sharding::Tenure>>,
    /// How replicas share the work.
    pub(super) ha: crate::config::HaSpec,
    /// The state store (`state_dir:`), if any.
    pub(super) state: Option<crate::state::State>,
    /// Where traces go (`tracing:`), if anywhere.
    pub(super) traces: Option<Arc<crate::traces::Traces>>,
    /// The state store's metrics, registered when there is a store.
    pub(super) state_metrics: crate::metrics::StateFamilies,
    /// How the plugin pool's slots are reset, decided at start.
    pub(super) slots: crate::plugin::slots::SlotMode,
    /// Team Route and Handler resources (`tenancy:`), when read.
    pub(super) teams: Option<super::tenancy::Teams>,
}

/// The daemon's state as /status reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Seconds since the daemon started.
    pub uptime_seconds: u64,
    /// Every informer.
    pub informers: Vec<InformerStatus>,
    /// Every route.
    pub routes: Vec<RouteStatus>,
    /// Every handler.
    pub handlers: Vec<HandlerStatus>,
    /// The config file and its reloads.
    pub config: reload::ConfigStatus,
    /// Resources the routes need that the API server does not serve yet, with the routes
    /// waiting for each.
    pub waiting: Vec<Waiting>,
    /// This replica and its election.
    pub replica: ReplicaStatus,
    /// The state store (`state_dir:`); null without one.
    pub state: Option<crate::state::StateStatus>,
    /// How the plugin pool's slots are reset between instances, and why.
    pub plugin_slots: crate::plugin::slots::SlotMode,
}

/// One informer in /status.
#[derive(Debug, Clone, Serialize)]
pub struct InformerStatus {
    /// `v1/configmaps`, `apps/v1/deployments`.
    pub resource: String,
    /// Namespace watched, or none for all.
    pub namespace: Option<String>,
    /// Label selector of the watch.
    pub label_selector: Option<String>,
    /// Field selector of the watch.
    pub field_selector: Option<String>,
    /// Objects in the cache.
    pub objects: usize,
    /// Whether the first list has completed.
    pub synced: bool,
    /// Watch health.
    #[serde(flatten)]
    pub health: WatchHealth,
    /// Seconds since the last event, if any arrived.
    pub seconds_since_last_event: Option<u64>,
    /// In sharded mode: this replica's share and who filters it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::informer::ShardState>,
}

impl Shared {
    /// The shared state for `config` with nothing running yet: the wasm engine sized for
    /// its handlers, the plugin registry and its folder watcher (started before the first
    /// load, so a file changed meanwhile is loaded again), the metrics registry.
    pub(super) fn new(
        config: &Config,
        client: kube::Client,
        logs: PluginLogs,
        assignment: Option<sharded::AssignmentRx>,
        state: Option<&crate::state::State>,
    ) -> Result<(Arc<Self>, Option<PluginWatcher>)> {
        let slots = crate::plugin::slots::decide(config.plugin_slots);
        tracing::info!(mode = slots.mode, reason = %slots.reason, "plugin pool slots");
        let host_options = host_options(config, &slots);
        let pool_memory = host_options
            .pool
            .as_ref()
            .map_or(u64::MAX, |p| p.max_memory);
        let pool_instances = host_options.pool.as_ref().map_or(u32::MAX, |p| p.instances);
        let host = PluginHost::with_options(host_options)?;
        let plugins = Arc::new(PluginRegistry::new(host, config.plugins_dir.clone(), &[]));
        let watcher = match PluginWatcher::start(plugins.clone()) {
            Ok(watcher) => Some(watcher),
            Err(e) => {
                tracing::warn!(error = %e, "plugin files will not be reloaded when they change");
                None
            }
        };
        let metrics = Arc::new(Metrics::new());
        let traces = match &config.tracing {
            Some(spec) => {
                let traces = crate::traces::Traces::start(spec)?;
                tracing::info!(endpoint = %spec.endpoint, sample_ratio = spec.sample_ratio, "sending traces");
                Some(traces)
            }
            None => None,
        };
        let ha = super::client::with_lease_namespace(&config.ha, &client);
        let shared = Arc::new(Shared {
            informers: match assignment {
                Some(rx) => InformerFactory::new(client.clone()).sharded(rx),
                None => InformerFactory::new(client.clone()),
            }
            .with_pressure(state.map(|s| s.pressure())),
            plugins_dir: config.plugins_dir.clone(),
            plugins,
            plugin_metrics: Arc::new(PluginMetrics::new(metrics.clone())),
            outbound: Arc::default(),
            secrets: crate::secrets::Secrets::new(client.clone()),
            metrics,
            client,
            pool_memory,
            pool_instances,
            logs,
            topology: RwLock::new(Arc::new(Topology::empty(config.clone()))),
            reloading: tokio::sync::Mutex::new(()),
            reloads: Mutex::new(ReloadHistory::default()),
            started: Instant::now(),
            active: watch::channel(config.ha.mode != HaMode::Leader).0,
            election: None,
            shards: None,
            tenure: None,
            ha,
            state: None,
            traces,
            state_metrics: Default::default(),
            slots,
            teams: None,
        });
        Ok((shared, watcher))
    }

    /// The stages running now.
    pub fn topology(&self) -> Arc<Topology> {
        crate::util::read(&self.topology).clone()
    }

    /// The handler named `name`.
    pub fn handler(&self, name: &str) -> Option<Arc<Handler>> {
        self.topology().handler(name).cloned()
    }

    /// Every handler, in config order.
    pub fn handlers(&self) -> Vec<Arc<Handler>> {
        self.topology().handlers.clone()
    }

    /// Every route, in config order.
    pub fn routes(&self) -> Vec<Arc<Route>> {
        self.topology()
            .routes
            .iter()
            .map(|r| r.route.clone())
            .collect()
    }

    pub(super) fn stages(&self) -> Stages<'_> {
        Stages {
            informers: &self.informers,
            logs: &self.logs,
            metrics: &self.metrics,
            plugins: &self.plugins,
            client: &self.client,
            plugin_metrics: &self.plugin_metrics,
            outbound: &self.outbound,
            secrets: &self.secrets,
            active: &self.active,
            tenure: self.tenure.as_ref(),
            state: self.state.as_ref(),
            traces: self.traces.as_ref(),
        }
    }

    /// Every metric in the Prometheus text format, stage gauges read now.
    pub fn metrics_text(&self) -> String {
        use crate::metrics::{InformerLabel, NameLabel, RouteLabel, set_counter};
        for handler in self.handlers() {
            handler.update_time_metrics();
        }
        let status = self.status();
        let st = &self.metrics.stages;
        st.ready
            .set(i64::from(<Self as crate::admin::Backend>::ready(self)));
        st.leader.set(i64::from(status.replica.leader));
        set_counter(&st.lease_renewals, status.replica.renewals);
        set_counter(&st.leader_transitions, status.replica.transitions);
        sharded::set_metrics(&self.metrics, &status.replica);
        if let Some(state) = &status.state {
            let sm = &self.state_metrics;
            sm.pending_writes.set(state.pending_writes as i64);
            sm.backpressure.set(i64::from(state.backpressure));
            set_counter(&sm.backpressure_waits, state.backpressure_waits);
            sm.failing.set(i64::from(state.failing_since.is_some()));
            set_counter(&sm.commit_failures, state.failures);
        }
        for (informer, s) in self.informers.informers().iter().zip(&status.informers) {
            let label = InformerLabel {
                informer: informer.key().to_string(),
            };
            st.informer_objects
                .get_or_create(&label)
                .set(s.objects as i64);
            st.informer_synced
                .get_or_create(&label)
                .set(i64::from(s.synced));
            st.informer_failing
                .get_or_create(&label)
                .set(i64::from(s.health.last_error.is_some()));
            set_counter(
                &st.informer_restarts.get_or_create(&label),
                s.health.restarts,
            );
        }
        for r in &status.routes {
            let label = RouteLabel {
                route: r.name.clone(),
            };
            set_counter(&st.route_delivered.get_or_create(&label), r.delivered);
            st.route_pending.get_or_create(&label).set(r.pending as i64);
        }
        for h in &status.handlers {
            let label = NameLabel {
                name: h.name.clone(),
            };
            set_counter(&st.handler_processed.get_or_create(&label), h.processed);
            set_counter(&st.handler_failed.get_or_create(&label), h.failed);
            st.handler_dead_letters
                .get_or_create(&label)
                .set(h.dead_letters as i64);
            st.handler_quarantined
                .get_or_create(&label)
                .set(i64::from(h.quarantine.is_some()));
            if let Some(shadow) = &h.shadow {
                for kind in crate::handler::shadow::DIFFERENCE_KINDS {
                    let label = crate::metrics::ShadowLabel {
                        handler: h.name.clone(),
                        kind: kind.to_string(),
                    };
                    let count = shadow.counts.differing(kind);
                    set_counter(&st.shadow_differences.get_or_create(&label), count);
                }
            }
        }
        self.metrics.encode()
    }

    /// A snapshot of every stage's state.
    pub fn status(&self) -> Status {
        let informers = self
            .informers
            .informers()
            .iter()
            .map(|i| {
                let health = i.health();
                let key = i.key();
                InformerStatus {
                    resource: key.resource.to_string(),
                    namespace: key.namespace.clone(),
                    label_selector: key.label_selector.clone(),
                    field_selector: key.field_selector.clone(),
                    objects: i.store().len(),
                    shard: i.shard_state(),
                    synced: i.is_synced(),
                    seconds_since_last_event: health
                        .last_event
                        .and_then(|t| t.elapsed().ok())
                        .map(|d| d.as_secs()),
                    health,
                }
            })
            .collect();
        Status {
            uptime_seconds: self.started.elapsed().as_secs(),
            informers,
            routes: self.routes().iter().map(|r| r.status()).collect(),
            handlers: self.handlers().iter().map(|h| h.status()).collect(),
            config: self.config_status(),
            waiting: self.topology().waiting.clone(),
            replica: self.replica(),
            state: self.state.as_ref().map(|s| s.status()),
            plugin_slots: self.slots.clone(),
        }
    }

    /// `/status`'s `replica`.
    fn replica(&self) -> ReplicaStatus {
        if let Some(shards) = &self.shards {
            return sharded::replica(&self.ha, shards);
        }
        match &self.election {
            Some(election) => election.snapshot(),
            None => ReplicaStatus {
                identity: self.ha.identity.clone(),
                mode: self.ha.mode.as_str(),
                leader: true,
                lease: None,
                holder: None,
                renewals: 0,
                losses: 0,
                transitions: 0,
                shards: None,
            },
        }
    }
}

impl crate::admin::Backend for Shared {
    type Status = Status;
    type Plan = Plan;
    type ReloadError = ReloadError;

    fn informers(&self) -> Vec<Arc<Informer>> {
        self.informers.informers()
    }

    fn status(&self) -> Status {
        Shared::status(self)
    }

    fn routes(&self) -> Vec<RouteStatus> {
        Shared::routes(self).iter().map(|r| r.status()).collect()
    }

    fn metrics_text(&self) -> String {
        Shared::metrics_text(self)
    }

    async fn reload(&self) -> Result<Plan, ReloadError> {
        Shared::reload(self).await
    }

    fn plugins(&self) -> &PluginRegistry {
        &self.plugins
    }

    fn handler(&self, name: &str) -> Option<Arc<Handler>> {
        Shared::handler(self, name)
    }

    fn waiting(&self) -> Vec<(String, String)> {
        self.topology()
            .waiting
            .iter()
            .map(|w| (w.watch.clone(), w.reason.clone()))
            .collect()
    }

    fn unready(&self) -> Vec<(String, String)> {
        let store = self.state.as_ref().and_then(|s| s.problem());
        // A replica refused its Lease can never lead or own a range: its Role is missing
        // or in another namespace than the Lease.
        let lease = self
            .election
            .as_ref()
            .and_then(|e| e.refused())
            .or_else(|| self.shards.as_ref().and_then(|s| s.refused()));
        let store = store.map(|why| ("state store".to_string(), why));
        let lease = lease.map(|why| ("lease".to_string(), why));
        // A handler whose config waits for a Secret or an environment variable.
        let handlers = self
            .handlers()
            .into_iter()
            .filter(|h| !h.waiting_for().is_empty())
            .map(|h| {
                let why = format!("waits for {}", h.waiting_for().join("; "));
                (format!("handler {}", h.name()), why)
            });
        store.into_iter().chain(lease).chain(handlers).collect()
    }
}

/// The engine's settings for `config`: compiled plugins cached in the default folder, and a
/// pooling allocator with room for every worker of every handler and headroom for reloads
/// ([`pool_instances`]), each slot as large as the largest handler memory cap (see
/// `plugin::host` for why).
fn host_options(config: &Config, slots: &crate::plugin::slots::SlotMode) -> HostOptions {
    const WASM_PAGE: u64 = 64 << 10;
    let mut workers: usize = config.handlers.iter().map(|h| h.concurrency).sum();
    let mut largest = config.handlers.iter().map(|h| h.memory).max().unwrap_or(0);
    // Room for every team Handler the ceilings allow, added later without a restart.
    if let Some(tenancy) = &config.tenancy {
        workers += tenancy.max_handlers * tenancy.max_concurrency;
        largest = largest.max(tenancy.max_memory);
    }
    HostOptions {
        cache_dir: default_cache_dir(),
        pool: Some(PoolOptions {
            instances: pool_instances(workers),
            // Whole wasm pages (64 KiB): the limiter enforces each handler's exact cap.
            max_memory: (largest.div_ceil(WASM_PAGE) * WASM_PAGE).max(WASM_PAGE),
            reset: if slots.resident() {
                RESIDENT_SLOT_RESET
            } else {
                SlotReset::Decommit
            },
        }),
    }
}
