//! The running handlers, routes and informers, built from a config, and changed by a reload
//! into those of another config by applying only the difference.
//!
//! [`Topology::apply`] compares the running config with a new one and:
//! - starts new informers first, so a resource that cannot be watched fails the reload
//!   before anything running is touched;
//! - keeps every handler whose settings are equal, with its queue, counters and dead
//!   letters; starts new ones; replaces a changed one by a new handler that is handed the
//!   old one's queued events, dead letters and counters once its calls in flight finish;
//! - keeps every route whose settings (and informer) are equal, pointing it at the
//!   replacement if its handler was replaced; subscribes new or changed routes, which get
//!   every cached object as `added`, as a new subscriber of a client-go informer does;
//! - drains and stops handlers nobody routes to any more, and stops informers nobody
//!   subscribes to any more.
//!
//! A watch whose resource the API server does not serve (a CRD not created yet) does not
//! fail the start or the reload: the routes that need it wait, [`Topology::waiting`] names
//! them, and applying the same config again once the resource is served starts them.
//!
//! Which watches a config needs, and which of them feed each route, is worked out in
//! [`wiring`].

use std::collections::{HashMap, HashSet};

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, HandlerSpec, RouteSpec};
use crate::handler::Handler;
use crate::informer::{CacheOptions, Informer, InformerFactory, SubscriptionId, WatchKey};
use crate::metrics::Metrics;
use crate::plugin::outbound::{Clients, Outbound};
use crate::plugin::{
    HostContext, LogCounters, PluginLogs, PluginMetrics, PluginRegistry, PluginUser,
};
use crate::router::{ObjectFilter, Route};

mod finalizers;
mod wiring;

pub(super) use finalizers::release_stale;
pub use wiring::route_informers;
use wiring::{Wiring, open, wire};

/// A route at run time with what it is subscribed to.
pub struct RunningRoute {
    /// The route's settings.
    pub spec: RouteSpec,
    /// The route.
    pub route: Arc<Route>,
    /// The watches feeding it.
    pub keys: Vec<WatchKey>,
    /// Its subscription to each informer feeding it.
    pub subscriptions: Vec<(Arc<Informer>, SubscriptionId)>,
    /// Whether it waits for a resource the API server does not serve yet (and so has no
    /// subscriptions).
    pub waiting: bool,
}

/// A resource the routes need that the API server does not serve yet.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Waiting {
    /// The watch (`example.com/v1/widgets in default`) or resource (`example.com/v1 Widget`).
    pub watch: String,
    /// What API discovery said.
    pub reason: String,
    /// The routes that start once it is served.
    pub routes: Vec<String>,
}

/// Every handler and route running now, and the config they came from.
pub struct Topology {
    /// The config applied.
    pub config: Config,
    /// Handlers, in config order.
    pub handlers: Vec<Arc<Handler>>,
    /// Routes, in config order.
    pub routes: Vec<RunningRoute>,
    /// The cache options each informer in use was started with.
    pub cache: HashMap<WatchKey, CacheOptions>,
    /// Resources the routes need that the API server does not serve yet.
    pub waiting: Vec<Waiting>,
}

/// How long a reload waits for the state store to commit what the routes it replaces
/// delivered.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The stages a topology is built in.
pub struct Stages<'a> {
    /// Shared informers.
    pub informers: &'a InformerFactory,
    /// Where plugins log.
    pub logs: &'a PluginLogs,
    /// Metrics registry.
    pub metrics: &'a Arc<Metrics>,
    /// Plugins by name.
    pub plugins: &'a Arc<PluginRegistry>,
    /// The client plugins' writes go through.
    pub client: &'a kube::Client,
    /// Where plugins' own metrics go.
    pub plugin_metrics: &'a Arc<PluginMetrics>,
    /// The pooled clients of plugins' outbound HTTP.
    pub outbound: &'a Arc<Clients>,
    /// The Secrets handlers' configs name.
    pub secrets: &'a Arc<crate::secrets::Secrets>,
    /// The replica's gate: handlers run only while it is true.
    pub active: &'a tokio::sync::watch::Sender<bool>,
    /// In sharded mode, this replica's hold on its ranges, checked before each call.
    pub tenure: Option<&'a Arc<crate::sharding::Tenure>>,
    /// The state store (`state_dir:`), if any.
    pub state: Option<&'a crate::state::State>,
    /// Where traces go (`tracing:`), if anywhere.
    pub traces: Option<&'a Arc<crate::traces::Traces>>,
}

/// What a reload changed in one kind of stage, by name.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Changes {
    /// Started.
    pub added: Vec<String>,
    /// Stopped (handlers drain first).
    pub removed: Vec<String>,
    /// Replaced by one with new settings.
    pub changed: Vec<String>,
    /// Kept running as they were.
    pub unchanged: Vec<String>,
}

/// What applying a config changed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Plan {
    /// Informers, by watch (`v1/configmaps in default`).
    pub informers: Changes,
    /// Handlers.
    pub handlers: Changes,
    /// Routes.
    pub routes: Changes,
    /// Resources not served yet, with the routes that wait for them.
    pub waiting: Vec<Waiting>,
}

/// How long a replaced or removed handler may take to finish its calls in flight.
fn drain_grace(spec: &HandlerSpec) -> Duration {
    spec.timeout + Duration::from_secs(1)
}

impl Topology {
    /// A topology with nothing running, for `config`'s first start.
    pub fn empty(config: Config) -> Self {
        Self {
            config,
            handlers: Vec::new(),
            routes: Vec::new(),
            cache: HashMap::new(),
            waiting: Vec::new(),
        }
    }

    /// The handler named `name`.
    pub fn handler(&self, name: &str) -> Option<&Arc<Handler>> {
        self.handlers.iter().find(|h| h.name() == name)
    }

    /// Changes the running stages into those `config` describes and returns the new
    /// topology with what changed. Fails, with nothing running touched, when a new
    /// resource cannot be watched or a route's kinds match no informer. A resource the
    /// API server does not serve is no failure: the routes needing it wait.
    pub async fn apply(
        &self,
        config: Config,
        stages: &Stages<'_>,
    ) -> Result<(Topology, Plan), super::Error> {
        let mut plan = Plan::default();
        // 1. The watches the routes need, with their cache options. New ones start now,
        //    before anything running changes.
        let mut wiring = wire(&config, stages.informers).await?;
        let restarted = self.start_informers(&mut wiring, stages, &mut plan).await?;
        plan.waiting = wiring.waiting();
        // 2. Handlers: keep the equal ones, start the rest paused (until routes and plugins
        //    are in place and replaced handlers have handed over).
        stages.plugins.set_oci(config.oci.clone());
        stages.secrets.track(&config).await;
        let handlers = self.start_handlers(&config, stages, &mut plan).await;
        // 3. Routes: unsubscribe the old ones not kept, restart informers whose cache
        //    options changed, then subscribe the new ones.
        let kept = self.unsubscribe_changed_routes(&config, &wiring, &restarted);
        for key in &restarted {
            stages.informers.release(key);
            open(stages.informers, key, &wiring.cache).await?;
        }
        // Each handler's imports read its routes' caches: set before new routes deliver.
        set_host_contexts(&handlers.all, &config, &wiring, stages).await?;
        let routes = self
            .subscribe_routes(&config, &wiring, &kept, &handlers.all, stages, &mut plan)
            .await?;
        finalizers::release_dropped(&self.routes, &routes, stages);
        // 4. Replaced handlers hand their work over; new ones start taking work.
        for (old, new, was_paused) in handlers.replaced {
            old.hand_over(&new, drain_grace(old.spec())).await;
            if !was_paused {
                new.unhold();
            }
        }
        for (new, paused) in handlers.fresh {
            if !paused {
                new.unhold();
            }
        }
        // 5. Removed handlers finish what they have queued; unused informers stop.
        futures::future::join_all(
            handlers
                .removed
                .iter()
                .map(|h| h.shut_down(drain_grace(h.spec()))),
        )
        .await;
        if let Some(state) = stages.state {
            for removed in &handlers.removed {
                state.drop_handler(removed.name());
            }
        }
        for key in self.cache.keys() {
            if !wiring.cache.contains_key(key) {
                stages.informers.release(key);
            }
        }
        let topology = Topology {
            config,
            handlers: handlers.all,
            routes,
            cache: wiring.cache,
            waiting: plan.waiting.clone(),
        };
        Ok((topology, plan))
    }

    /// Starts the informers `wiring` needs that are not running, and records in `plan` what
    /// changes for informers. Returns the running ones whose cache options change (to be
    /// restarted). A watch of a resource not served is moved to the wiring's missing ones;
    /// if one cannot start for another reason, those started here stop again.
    async fn start_informers(
        &self,
        wiring: &mut Wiring,
        stages: &Stages<'_>,
        plan: &mut Plan,
    ) -> Result<HashSet<WatchKey>, super::Error> {
        let mut started = Vec::new();
        let mut new: Vec<_> = wiring
            .cache
            .iter()
            .filter(|(key, _)| !self.cache.contains_key(key))
            .map(|(key, options)| (key.clone(), options.clone()))
            .collect();
        new.sort_by_key(|(key, _)| key.to_string());
        for (key, options) in new {
            match stages.informers.informer(key.clone(), options).await {
                Ok(_) => started.push(key),
                Err(source) if source.is_not_served() => wiring.miss_watch(&key, &source),
                Err(source) => {
                    for key in &started {
                        stages.informers.release(key);
                    }
                    return Err(super::Error::Watch {
                        watch: key.to_string(),
                        source,
                    });
                }
            }
        }
        let cache = &wiring.cache;
        let restarted: HashSet<WatchKey> = cache
            .iter()
            .filter(|(key, options)| self.cache.get(key).is_some_and(|old| old != *options))
            .map(|(key, _)| key.clone())
            .collect();
        for key in self.cache.keys() {
            if !cache.contains_key(key) {
                plan.informers.removed.push(key.to_string());
            }
        }
        for key in cache.keys() {
            let list = if started.contains(key) {
                &mut plan.informers.added
            } else if restarted.contains(key) {
                &mut plan.informers.changed
            } else {
                &mut plan.informers.unchanged
            };
            list.push(key.to_string());
        }
        plan.informers.sort();
        Ok(restarted)
    }

    /// Keeps every handler whose settings are equal and starts the others paused, then
    /// gives the plugin registry the new set of handlers: plugins new to it are loaded from
    /// their files, or for `oci://` ones pulled in the background.
    async fn start_handlers(
        &self,
        config: &Config,
        stages: &Stages<'_>,
        plan: &mut Plan,
    ) -> HandlerChanges {
        let mut changes = HandlerChanges::default();
        for spec in &config.handlers {
            // Its config with the values of Secrets and environment variables: a handler
            // whose values changed (a Secret rotated) is replaced, with new instances.
            let resolved = stages.secrets.resolve(spec);
            match self.handler(&spec.name) {
                Some(old) if old.spec() == spec && old.has_config(&resolved) => {
                    plan.handlers.unchanged.push(spec.name.clone());
                    changes.all.push(old.clone());
                }
                old => {
                    if let Err(waiting) = &resolved {
                        tracing::warn!(handler = %spec.name, waits_for = %waiting.join("; "), "the handler's config waits for a value: its events queue up");
                    }
                    let new = Handler::start(
                        spec.clone(),
                        resolved,
                        stages.logs.clone(),
                        stages.metrics,
                        stages.active.subscribe(),
                    );
                    if let Some(state) = stages.state {
                        new.set_state(state.clone());
                    }
                    if let Some(tenure) = stages.tenure {
                        new.set_tenure(tenure.clone());
                    }
                    new.hold();
                    match old {
                        Some(old) => {
                            plan.handlers.changed.push(spec.name.clone());
                            // Another plugin: the old one runs until it loads.
                            if old.spec().plugin != spec.plugin
                                && let Some((running, from)) = old.running_plugin()
                            {
                                new.keep_running(running, &from);
                            }
                            let was_paused = old.status().paused;
                            changes
                                .replaced
                                .push((old.clone(), new.clone(), was_paused));
                        }
                        None => {
                            plan.handlers.added.push(spec.name.clone());
                            let paused = stages.state.is_some_and(|s| restore(&new, s));
                            changes.fresh.push((new.clone(), paused));
                        }
                    }
                    changes.all.push(new);
                }
            }
        }
        changes.removed = self
            .handlers
            .iter()
            .filter(|h| config.handlers.iter().all(|s| s.name != h.name()))
            .cloned()
            .collect();
        plan.handlers.removed = changes
            .removed
            .iter()
            .map(|h| h.name().to_string())
            .collect();
        let users: Vec<Arc<dyn PluginUser>> = changes
            .all
            .iter()
            .flat_map(|h| [Some(h.clone() as Arc<dyn PluginUser>), h.shadow_user()])
            .flatten()
            .collect();
        for name in stages.plugins.set_users(&users) {
            if crate::config::oci::Reference::is_oci(&name) {
                // Pulled by a task of its own, tried until it loads: a registry holds
                // neither the start, nor a reload, nor the other handlers.
                stages.plugins.pull_in_background(&name);
            } else {
                // A plugin that fails to load is reported in /status; its events wait.
                let _ = stages.plugins.load(&name, true).await;
            }
        }
        changes
    }

    /// Unsubscribes every running route that does not stay as it is; returns those that
    /// stay, by name.
    fn unsubscribe_changed_routes<'a>(
        &'a self,
        config: &Config,
        wiring: &Wiring,
        restarted: &HashSet<WatchKey>,
    ) -> HashMap<&'a str, &'a RunningRoute> {
        let mut kept = HashMap::new();
        for old in &self.routes {
            let waits = wiring.waits(&old.spec.name);
            let same = config.routes.contains(&old.spec)
                && waits == old.waiting
                && (waits
                    || (wiring.routes.get(&old.spec.name) == Some(&old.keys)
                        && !old.keys.iter().any(|k| restarted.contains(k))));
            if same {
                kept.insert(old.spec.name.as_str(), old);
            } else {
                for (informer, id) in &old.subscriptions {
                    informer.unsubscribe(*id);
                }
            }
        }
        kept
    }

    /// The routes of `config`: kept ones pointed at their (possibly replaced) handler, new
    /// or changed ones subscribed to their informers.
    async fn subscribe_routes(
        &self,
        config: &Config,
        wiring: &Wiring,
        kept: &HashMap<&str, &RunningRoute>,
        handlers: &[Arc<Handler>],
        stages: &Stages<'_>,
        plan: &mut Plan,
    ) -> Result<Vec<RunningRoute>, super::Error> {
        let mut routes = Vec::new();
        if let Some(state) = stages.state {
            for old in &self.routes {
                if config.routes.iter().all(|r| r.name != old.spec.name) {
                    state.drop_route(&old.spec.name);
                }
            }
            // What the routes replaced delivered, and the records of those removed, are
            // on disk before a route starting now reads its records, unless the store
            // cannot commit now: a reload (and a shutdown behind it) does not wait for the
            // disk, and what was not committed yet may be delivered again. At the start
            // nothing ran before: nothing to wait for.
            let reading = !self.routes.is_empty()
                && config
                    .routes
                    .iter()
                    .any(|r| !kept.contains_key(r.name.as_str()));
            let flushed = tokio::time::timeout(FLUSH_WAIT, state.flush());
            if reading && flushed.await.is_err() {
                tracing::warn!(store = %state.path().display(), "the state store has not committed for {FLUSH_WAIT:?}: the routes compare against what it holds and may deliver again what it has not committed");
            }
        }
        for spec in &config.routes {
            let handler = handlers
                .iter()
                .find(|h| h.name() == spec.handler)
                .expect("validation checked every route's handler")
                .clone();
            if let Some(old) = kept.get(spec.name.as_str()) {
                plan.routes.unchanged.push(spec.name.clone());
                routes.push(keep_route(old, spec, handler));
                continue;
            }
            if self.routes.iter().any(|r| r.spec.name == spec.name) {
                plan.routes.changed.push(spec.name.clone());
            } else {
                plan.routes.added.push(spec.name.clone());
            }
            let route = Route::new(
                &spec.name,
                spec.events,
                ObjectFilter::new(&spec.filter),
                spec.delivery,
                handler,
            )
            .with_finalizer(spec.finalizer.as_deref())
            .with_initial(spec.initial)
            .with_traces(stages.traces.cloned());
            let subscribed = if wiring.waits(&spec.name) {
                0
            } else {
                wiring.routes[&spec.name].len()
            };
            let route = Arc::new(match stages.state {
                Some(state) => {
                    let prior = state
                        .route_records(&spec.name)
                        .map_err(super::Error::State)?;
                    route.with_state(state.clone(), prior, subscribed)
                }
                None => route,
            });
            if wiring.waits(&spec.name) {
                routes.push(RunningRoute {
                    spec: spec.clone(),
                    route,
                    keys: Vec::new(),
                    subscriptions: Vec::new(),
                    waiting: true,
                });
                continue;
            }
            let keys = wiring.routes[&spec.name].clone();
            let mut subscriptions = Vec::new();
            for (index, key) in keys.iter().enumerate() {
                let informer = open(stages.informers, key, &wiring.cache).await?;
                let id = informer.subscribe(route.sink(index));
                subscriptions.push((informer, id));
            }
            routes.push(RunningRoute {
                spec: spec.clone(),
                route,
                keys,
                subscriptions,
                waiting: false,
            });
        }
        for old in &self.routes {
            if config.routes.iter().all(|r| r.name != old.spec.name) {
                plan.routes.removed.push(old.spec.name.clone());
            }
        }
        Ok(routes)
    }
}

/// The handlers of a new topology and how they differ from the running ones.
#[derive(Default)]
struct HandlerChanges {
    /// Every handler, in config order.
    all: Vec<Arc<Handler>>,
    /// (running, its replacement, whether the running one was paused).
    replaced: Vec<(Arc<Handler>, Arc<Handler>, bool)>,
    /// Handlers new to the config, with whether the state store had them paused.
    fresh: Vec<(Arc<Handler>, bool)>,
    /// Handlers no longer in the config.
    removed: Vec<Arc<Handler>>,
}

/// Puts back what the state store kept for a handler new to the running config; returns
/// whether it was paused. A store that cannot be read is logged and the handler starts
/// empty.
fn restore(handler: &Handler, state: &crate::state::State) -> bool {
    match state.handler(handler.name()) {
        Ok(snapshot) => handler.restore(snapshot),
        Err(e) => {
            tracing::error!(handler = %handler.name(), error = %e, "cannot read the handler's stored queue; it starts empty");
            false
        }
    }
}

/// A route that stays, pointed at `handler` (the replacement if its handler was replaced).
fn keep_route(old: &RunningRoute, spec: &RouteSpec, handler: Arc<Handler>) -> RunningRoute {
    let current = old.route.handler().clone();
    if !Arc::ptr_eq(&current, &handler) {
        let resync_changed = current.spec().resync != handler.spec().resync;
        old.route.set_handler(handler);
        if resync_changed {
            for (informer, _) in &old.subscriptions {
                informer.resync_periods_changed();
            }
        }
    }
    RunningRoute {
        spec: spec.clone(),
        route: old.route.clone(),
        keys: old.keys.clone(),
        subscriptions: old.subscriptions.clone(),
        waiting: old.waiting,
    }
}

/// The client a handler's plugin reaches Kubernetes through: a team handler's makes every
/// request as its ServiceAccount.
fn client_of(spec: &crate::config::HandlerSpec, client: &kube::Client) -> kube::Client {
    match &spec.owner {
        Some(owner) => crate::tenancy::impersonating(client, &owner.user()),
        None => client.clone(),
    }
}

/// Sets each handler's host context: its capabilities, the client, the metrics, and the
/// caches of the watches feeding its routes and of the informers it reads.
async fn set_host_contexts(
    handlers: &[Arc<Handler>],
    config: &Config,
    wiring: &Wiring,
    stages: &Stages<'_>,
) -> Result<(), super::Error> {
    for handler in handlers {
        let mut context = HostContext::new(handler.name().into(), stages.logs.clone())
            .with_capabilities(handler.spec().capabilities.clone())
            .with_client(client_of(handler.spec(), stages.client))
            .with_metrics(stages.plugin_metrics.clone())
            .with_log_limits(
                handler.spec().logs,
                LogCounters::of(stages.metrics, handler.name()),
            );
        // Every handler gets one, so a refused request is logged once and counted even
        // when the handler may reach nothing.
        let outbound = Outbound::new(
            handler.name().into(),
            handler.spec().outbound.clone(),
            stages.outbound.clone(),
            stages.metrics.outbound.clone(),
        );
        if !handler.spec().outbound.egress.is_empty()
            && let Err(e) = outbound.client()
        {
            tracing::error!(handler = %handler.name(), error = %e, "the handler's outbound requests will fail until its outbound TLS files are fixed");
        }
        context = context.with_outbound(Arc::new(outbound));
        // A watch not served yet grants nothing until it is.
        let served = |key: &&crate::informer::WatchKey| wiring.cache.contains_key(*key);
        let routes = config.routes.iter().filter(|r| r.handler == handler.name());
        for key in routes
            .flat_map(|route| &wiring.routes[&route.name])
            .filter(served)
        {
            context = context.with_resource(open(stages.informers, key, &wiring.cache).await?);
        }
        for key in wiring
            .reads
            .get(handler.name())
            .into_iter()
            .flatten()
            .filter(served)
        {
            context = context.with_read(open(stages.informers, key, &wiring.cache).await?);
        }
        for unused in context.unmatched_grants() {
            tracing::warn!(handler = %handler.name(), resource = %unused, "capability names no resource the handler's routes watch or it reads; it grants nothing");
        }
        handler.set_host_context(context);
        handler.set_finalizers(finalizers::of_handler(handler, config, wiring, stages).await?);
    }
    Ok(())
}

impl Changes {
    fn sort(&mut self) {
        for list in [
            &mut self.added,
            &mut self.removed,
            &mut self.changed,
            &mut self.unchanged,
        ] {
            list.sort();
        }
    }
}
