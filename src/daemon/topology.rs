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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, HandlerSpec, RouteSpec};
use crate::handler::Handler;
use crate::informer::{
    CacheOptions, IndexFn, Indexers, Informer, InformerFactory, SubscriptionId, Transform,
    WatchKey,
};
use crate::metrics::Metrics;
use crate::plugin::{PluginLogs, PluginRegistry};
use crate::router::Route;

/// A route at run time with what it is subscribed to.
pub struct RunningRoute {
    /// The route's settings.
    pub spec: RouteSpec,
    /// The route.
    pub route: Arc<Route>,
    /// The informer feeding it.
    pub informer: Arc<Informer>,
    /// Its subscription to the informer.
    pub subscription: SubscriptionId,
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
    /// resource cannot be watched.
    pub async fn apply(
        &self,
        config: Config,
        stages: &Stages<'_>,
    ) -> Result<(Topology, Plan), super::Error> {
        let mut plan = Plan::default();

        // 1. Informers the new config needs, with their cache options. New ones start now,
        //    before anything running changes.
        let mut cache: HashMap<WatchKey, CacheOptions> = HashMap::new();
        for route in &config.routes {
            let key = watch_key(route);
            if !cache.contains_key(&key) {
                let options = cache_options(&config, &key);
                cache.insert(key, options);
            }
        }
        let mut started = Vec::new();
        for (key, options) in &cache {
            if self.cache.contains_key(key) {
                continue;
            }
            let route = config
                .routes
                .iter()
                .find(|r| watch_key(r) == *key)
                .map_or_else(String::new, |r| r.name.clone());
            match stages.informers.informer(key.clone(), options.clone()).await {
                Ok(_) => started.push(key.clone()),
                Err(source) => {
                    for key in &started {
                        stages.informers.release(key);
                    }
                    return Err(super::Error::Route { route, source });
                }
            }
        }
        let restarted: BTreeSet<String> = cache
            .iter()
            .filter(|(key, options)| self.cache.get(key).is_some_and(|old| old != *options))
            .map(|(key, _)| key.to_string())
            .collect();
        let mut informer_names: BTreeSet<String> = cache.keys().map(|k| k.to_string()).collect();
        for key in self.cache.keys() {
            if !cache.contains_key(key) {
                plan.informers.removed.push(key.to_string());
            }
        }
        for name in std::mem::take(&mut informer_names) {
            let list = if started.iter().any(|k| k.to_string() == name) {
                &mut plan.informers.added
            } else if restarted.contains(&name) {
                &mut plan.informers.changed
            } else {
                &mut plan.informers.unchanged
            };
            list.push(name);
        }

        // 2. Handlers: keep the equal ones, start the rest paused (until routes and plugins
        //    are in place and replaced handlers have handed over).
        let mut handlers = Vec::new();
        let mut replaced: Vec<(Arc<Handler>, Arc<Handler>, bool)> = Vec::new();
        let mut fresh = Vec::new();
        for spec in &config.handlers {
            match self.handler(&spec.name) {
                Some(old) if old.spec() == spec => {
                    plan.handlers.unchanged.push(spec.name.clone());
                    handlers.push(old.clone());
                }
                old => {
                    let new = Handler::start(spec.clone(), stages.logs.clone(), stages.metrics);
                    new.pause();
                    match old {
                        Some(old) => {
                            plan.handlers.changed.push(spec.name.clone());
                            let was_paused = old.status().paused;
                            replaced.push((old.clone(), new.clone(), was_paused));
                        }
                        None => {
                            plan.handlers.added.push(spec.name.clone());
                            fresh.push(new.clone());
                        }
                    }
                    handlers.push(new);
                }
            }
        }
        let removed_handlers: Vec<Arc<Handler>> = self
            .handlers
            .iter()
            .filter(|h| config.handlers.iter().all(|s| s.name != h.name()))
            .cloned()
            .collect();
        plan.handlers.removed = removed_handlers
            .iter()
            .map(|h| h.name().to_string())
            .collect();
        for name in stages.plugins.set_handlers(&handlers) {
            // A plugin that fails to load is reported in /status; its events wait.
            let _ = stages.plugins.load(&name, true).await;
        }
        let handler_for = |name: &str| {
            handlers
                .iter()
                .find(|h| h.name() == name)
                .expect("validation checked every route's handler")
                .clone()
        };

        // 3. Routes: unsubscribe the old ones not kept, then subscribe the new ones.
        let mut kept: HashMap<&str, &RunningRoute> = HashMap::new();
        for old in &self.routes {
            let same = config.routes.iter().any(|r| *r == old.spec)
                && !restarted.contains(&watch_key(&old.spec).to_string());
            if same {
                kept.insert(old.spec.name.as_str(), old);
            } else {
                old.informer.unsubscribe(old.subscription);
            }
        }
        for (key, options) in &cache {
            if restarted.contains(&key.to_string()) {
                stages.informers.release(key);
                stages
                    .informers
                    .informer(key.clone(), options.clone())
                    .await
                    .map_err(|source| super::Error::Route {
                        route: key.to_string(),
                        source,
                    })?;
            }
        }
        let mut routes = Vec::new();
        for spec in &config.routes {
            let handler = handler_for(&spec.handler);
            if let Some(old) = kept.get(spec.name.as_str()) {
                if !Arc::ptr_eq(&old.route.handler(), &handler) {
                    let resync_changed = old.route.handler().spec().resync != handler.spec().resync;
                    old.route.set_handler(handler);
                    if resync_changed {
                        old.informer.resync_periods_changed();
                    }
                }
                plan.routes.unchanged.push(spec.name.clone());
                routes.push(RunningRoute {
                    spec: spec.clone(),
                    route: old.route.clone(),
                    informer: old.informer.clone(),
                    subscription: old.subscription,
                });
                continue;
            }
            if self.routes.iter().any(|r| r.spec.name == spec.name) {
                plan.routes.changed.push(spec.name.clone());
            } else {
                plan.routes.added.push(spec.name.clone());
            }
            let key = watch_key(spec);
            let informer = stages
                .informers
                .informer(key.clone(), cache[&key].clone())
                .await
                .map_err(|source| super::Error::Route {
                    route: spec.name.clone(),
                    source,
                })?;
            let route = Arc::new(Route::new(&spec.name, spec.events, spec.delivery, handler));
            let subscription = informer.subscribe(route.clone());
            routes.push(RunningRoute {
                spec: spec.clone(),
                route,
                informer,
                subscription,
            });
        }
        for old in &self.routes {
            if config.routes.iter().all(|r| r.name != old.spec.name) {
                plan.routes.removed.push(old.spec.name.clone());
            }
        }

        // 4. Replaced handlers hand their work over; new ones start taking work.
        for (old, new, was_paused) in replaced {
            old.hand_over(&new, drain_grace(old.spec())).await;
            if !was_paused {
                new.resume();
            }
        }
        for new in fresh {
            new.resume();
        }

        // 5. Removed handlers finish what they have queued; unused informers stop.
        futures::future::join_all(
            removed_handlers
                .iter()
                .map(|h| h.shut_down(drain_grace(h.spec()))),
        )
        .await;
        for key in self.cache.keys() {
            if !cache.contains_key(key) {
                stages.informers.release(key);
            }
        }
        Ok((
            Topology {
                config,
                handlers,
                routes,
                cache,
            },
            plan,
        ))
    }
}

/// The watch a route needs.
pub fn watch_key(route: &RouteSpec) -> WatchKey {
    WatchKey {
        resource: route.resource.clone(),
        namespace: route.namespace.clone(),
        label_selector: route.label_selector.clone(),
        field_selector: route.field_selector.clone(),
    }
}

/// The cache options of a shared watch: the union of what its routes ask for. Managed
/// fields are kept if any route keeps them.
fn cache_options(config: &Config, key: &WatchKey) -> CacheOptions {
    let routes: Vec<_> = config
        .routes
        .iter()
        .filter(|r| watch_key(r) == *key)
        .collect();
    let mut indexes: Vec<(String, IndexFn)> = routes
        .iter()
        .flat_map(|r| r.indexes.iter())
        .map(|(name, path)| {
            let f = match path.strip_prefix("label:") {
                Some(label) => IndexFn::Label(label.to_string()),
                None => IndexFn::Field(path.clone()),
            };
            (name.clone(), f)
        })
        .collect();
    indexes.sort_by(|a, b| a.0.cmp(&b.0));
    indexes.dedup_by(|a, b| a.0 == b.0);
    let mut drop: Vec<String> = routes
        .iter()
        .flat_map(|r| r.drop_fields.iter().cloned())
        .collect();
    drop.sort();
    drop.dedup();
    CacheOptions {
        indexers: Indexers::new(indexes),
        transform: Transform {
            strip_managed_fields: !routes.iter().any(|r| r.keep_managed_fields),
            drop,
        },
    }
}
