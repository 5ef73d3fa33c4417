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

use std::collections::{HashMap, HashSet};

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::config::{
    Config, HandlerSpec, InformerSpec, ROUTE_INFORMER_PREFIX, ResourceRef, RouteSource, RouteSpec,
};
use crate::handler::Handler;
use crate::informer::{
    CacheOptions, IndexFn, Indexers, Informer, InformerFactory, SubscriptionId, Transform, WatchKey,
};
use crate::metrics::Metrics;
use crate::plugin::{HostContext, PluginLogs, PluginMetrics, PluginRegistry, PluginUser};
use crate::router::{ObjectFilter, Route};

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
}

/// The stages a topology is built in.
pub struct Stages<'a> {
    /// Shared informers.
    pub informers: &'a InformerFactory,
    /// Where plugins log.
    pub logs: &'a PluginLogs,
    /// Metrics registry.
    pub metrics: &'a Arc<Metrics>,
    /// Plugins by name.
    pub plugins: &'a PluginRegistry,
    /// The client plugins' writes go through.
    pub client: &'a kube::Client,
    /// Where plugins' own metrics go.
    pub plugin_metrics: &'a Arc<PluginMetrics>,
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
        }
    }

    /// The handler named `name`.
    pub fn handler(&self, name: &str) -> Option<&Arc<Handler>> {
        self.handlers.iter().find(|h| h.name() == name)
    }

    /// Changes the running stages into those `config` describes and returns the new
    /// topology with what changed. Fails, with nothing running touched, when a new
    /// resource cannot be watched or a route's kinds match no informer.
    pub async fn apply(
        &self,
        config: Config,
        stages: &Stages<'_>,
    ) -> Result<(Topology, Plan), super::Error> {
        let mut plan = Plan::default();
        // 1. The watches the routes need, with their cache options. New ones start now,
        //    before anything running changes.
        let wiring = wire(&config, stages.informers).await?;
        let restarted = self.start_informers(&wiring, stages, &mut plan).await?;
        // 2. Handlers: keep the equal ones, start the rest paused (until routes and plugins
        //    are in place and replaced handlers have handed over).
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
        // 4. Replaced handlers hand their work over; new ones start taking work.
        for (old, new, was_paused) in handlers.replaced {
            old.hand_over(&new, drain_grace(old.spec())).await;
            if !was_paused {
                new.resume();
            }
        }
        for new in handlers.fresh {
            new.resume();
        }
        // 5. Removed handlers finish what they have queued; unused informers stop.
        futures::future::join_all(
            handlers
                .removed
                .iter()
                .map(|h| h.shut_down(drain_grace(h.spec()))),
        )
        .await;
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
        };
        Ok((topology, plan))
    }

    /// Starts the informers `wiring` needs that are not running, and records in `plan` what
    /// changes for informers. Returns the running ones whose cache options change (to be
    /// restarted). If one cannot start, those started here stop again.
    async fn start_informers(
        &self,
        wiring: &Wiring,
        stages: &Stages<'_>,
        plan: &mut Plan,
    ) -> Result<HashSet<WatchKey>, super::Error> {
        let cache = &wiring.cache;
        let mut started = Vec::new();
        for (key, options) in cache {
            if self.cache.contains_key(key) {
                continue;
            }
            if let Err(source) = stages
                .informers
                .informer(key.clone(), options.clone())
                .await
            {
                for key in &started {
                    stages.informers.release(key);
                }
                return Err(super::Error::Watch {
                    watch: key.to_string(),
                    source,
                });
            }
            started.push(key.clone());
        }
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
    /// gives the plugin registry the new set of handlers (loading plugins new to it).
    async fn start_handlers(
        &self,
        config: &Config,
        stages: &Stages<'_>,
        plan: &mut Plan,
    ) -> HandlerChanges {
        let mut changes = HandlerChanges::default();
        for spec in &config.handlers {
            match self.handler(&spec.name) {
                Some(old) if old.spec() == spec => {
                    plan.handlers.unchanged.push(spec.name.clone());
                    changes.all.push(old.clone());
                }
                old => {
                    let new = Handler::start(spec.clone(), stages.logs.clone(), stages.metrics);
                    new.pause();
                    match old {
                        Some(old) => {
                            plan.handlers.changed.push(spec.name.clone());
                            let was_paused = old.status().paused;
                            changes
                                .replaced
                                .push((old.clone(), new.clone(), was_paused));
                        }
                        None => {
                            plan.handlers.added.push(spec.name.clone());
                            changes.fresh.push(new.clone());
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
            .map(|h| h.clone() as Arc<dyn PluginUser>)
            .collect();
        for name in stages.plugins.set_users(&users) {
            // A plugin that fails to load is reported in /status; its events wait.
            let _ = stages.plugins.load(&name, true).await;
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
            let same = config.routes.contains(&old.spec)
                && wiring.routes.get(&old.spec.name) == Some(&old.keys)
                && !old.keys.iter().any(|k| restarted.contains(k));
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
            let route = Arc::new(Route::new(
                &spec.name,
                spec.events,
                ObjectFilter::new(&spec.filter),
                spec.delivery,
                handler,
            ));
            let keys = wiring.routes[&spec.name].clone();
            let mut subscriptions = Vec::new();
            for key in &keys {
                let informer = open(stages.informers, key, &wiring.cache).await?;
                let id = informer.subscribe(route.clone());
                subscriptions.push((informer, id));
            }
            routes.push(RunningRoute {
                spec: spec.clone(),
                route,
                keys,
                subscriptions,
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
    /// Handlers new to the config.
    fresh: Vec<Arc<Handler>>,
    /// Handlers no longer in the config.
    removed: Vec<Arc<Handler>>,
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
    }
}

/// Sets each handler's host context: its capabilities, the client, the metrics, and the
/// caches of the watches feeding its routes.
async fn set_host_contexts(
    handlers: &[Arc<Handler>],
    config: &Config,
    wiring: &Wiring,
    stages: &Stages<'_>,
) -> Result<(), super::Error> {
    for handler in handlers {
        let mut context = HostContext::new(handler.name().into(), stages.logs.clone())
            .with_capabilities(handler.spec().capabilities.clone())
            .with_client(stages.client.clone())
            .with_metrics(stages.plugin_metrics.clone());
        for route in config.routes.iter().filter(|r| r.handler == handler.name()) {
            for key in &wiring.routes[&route.name] {
                context = context.with_resource(open(stages.informers, key, &wiring.cache).await?);
            }
        }
        for unused in context.unmatched_grants() {
            tracing::warn!(handler = %handler.name(), resource = %unused, "capability names no resource the handler's routes watch; it grants nothing");
        }
        handler.set_host_context(context);
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

/// The informer for `key` with its cache options, started if it is not running.
async fn open(
    factory: &InformerFactory,
    key: &WatchKey,
    cache: &HashMap<WatchKey, CacheOptions>,
) -> Result<Arc<Informer>, super::Error> {
    factory
        .informer(key.clone(), cache[key].clone())
        .await
        .map_err(|source| super::Error::Watch {
            watch: key.to_string(),
            source,
        })
}

/// The watches a config needs and which feed each route.
struct Wiring {
    /// Every watch, with the union of its informers' cache options.
    cache: HashMap<WatchKey, CacheOptions>,
    /// Each route's watches, by route name.
    routes: HashMap<String, Vec<WatchKey>>,
}

/// Works out the watches of every informer the routes use (discovering the plural of
/// informers named by kind) and which of them feed each route.
async fn wire(config: &Config, factory: &InformerFactory) -> Result<Wiring, super::Error> {
    let uses_kinds = config
        .routes
        .iter()
        .any(|r| matches!(r.source, RouteSource::Kinds(_)));
    let needed = |spec: &InformerSpec| {
        config.routes.iter().any(|r| match &r.source {
            RouteSource::Informer(name) => *name == spec.name,
            RouteSource::Kinds(_) => false,
        }) || (uses_kinds && !spec.name.starts_with(ROUTE_INFORMER_PREFIX))
    };
    let mut keys_of: HashMap<&str, (Vec<WatchKey>, String)> = HashMap::new();
    let mut cache: HashMap<WatchKey, CacheOptions> = HashMap::new();
    for spec in config.informers.iter().filter(|s| needed(s)) {
        let (resource, kind) = match &spec.resource {
            ResourceRef::Plural(name) => (name.clone(), None),
            ResourceRef::Kind {
                group,
                version,
                kind,
            } => (
                factory
                    .resolve_kind(group, version, kind)
                    .await
                    .map_err(|source| super::Error::Watch {
                        watch: format!("informer {}", spec.name),
                        source,
                    })?,
                Some(kind.clone()),
            ),
        };
        let namespaces: Vec<Option<String>> = if spec.namespaces.is_empty() {
            vec![None]
        } else {
            spec.namespaces.iter().cloned().map(Some).collect()
        };
        let keys: Vec<WatchKey> = namespaces
            .into_iter()
            .map(|namespace| WatchKey {
                resource: resource.clone(),
                namespace,
                label_selector: spec.label_selector.clone(),
                field_selector: spec.field_selector.clone(),
            })
            .collect();
        let options = cache_options(spec);
        for key in &keys {
            cache
                .entry(key.clone())
                .and_modify(|o| *o = union(o, &options))
                .or_insert_with(|| options.clone());
        }
        let kind = match kind {
            Some(kind) => kind,
            None if uses_kinds && !spec.name.starts_with(ROUTE_INFORMER_PREFIX) => factory
                .kind_of(&resource)
                .await
                .map_err(|source| super::Error::Watch {
                    watch: format!("informer {}", spec.name),
                    source,
                })?,
            None => String::new(),
        };
        keys_of.insert(spec.name.as_str(), (keys, kind));
    }
    let mut routes = HashMap::new();
    for route in &config.routes {
        let keys: Vec<WatchKey> = match &route.source {
            RouteSource::Informer(name) => keys_of
                .get(name.as_str())
                .map(|(keys, _)| keys.clone())
                .unwrap_or_default(),
            RouteSource::Kinds(kinds) => {
                let mut keys = Vec::new();
                for kind in kinds {
                    let mut found = keys_of
                        .iter()
                        .filter(|(name, (_, k))| {
                            k == kind && !name.starts_with(ROUTE_INFORMER_PREFIX)
                        })
                        .peekable();
                    if found.peek().is_none() {
                        return Err(super::Error::UnwatchedKind {
                            route: route.name.clone(),
                            kind: kind.clone(),
                        });
                    }
                    keys.extend(found.flat_map(|(_, (k, _))| k.clone()));
                }
                keys.sort_by_key(|k| k.to_string());
                keys.dedup();
                keys
            }
        };
        routes.insert(route.name.clone(), keys);
    }
    Ok(Wiring { cache, routes })
}

/// The cache options an informer asks for.
fn cache_options(spec: &InformerSpec) -> CacheOptions {
    let indexes = spec.indexes.iter().map(|(name, path)| {
        let f = match path.strip_prefix("label:") {
            Some(label) => IndexFn::Label(label.to_string()),
            None => IndexFn::Field(path.clone()),
        };
        (name.clone(), f)
    });
    CacheOptions {
        indexers: Indexers::new(indexes),
        transform: Transform {
            strip_managed_fields: !spec.keep_managed_fields,
            drop: spec.drop_fields.clone(),
        },
    }
}

/// The options of a watch two informers share: every index of either, managed fields kept
/// if either keeps them, only the fields both drop dropped.
fn union(a: &CacheOptions, b: &CacheOptions) -> CacheOptions {
    let mut indexes: Vec<(String, IndexFn)> = a
        .indexers
        .iter()
        .chain(b.indexers.iter())
        .map(|(name, f)| (name.to_string(), f.clone()))
        .collect();
    indexes.sort_by(|x, y| x.0.cmp(&y.0));
    indexes.dedup_by(|x, y| x.0 == y.0);
    CacheOptions {
        indexers: Indexers::new(indexes),
        transform: Transform {
            strip_managed_fields: a.transform.strip_managed_fields
                && b.transform.strip_managed_fields,
            drop: a
                .transform
                .drop
                .iter()
                .filter(|d| b.transform.drop.contains(d))
                .cloned()
                .collect(),
        },
    }
}
