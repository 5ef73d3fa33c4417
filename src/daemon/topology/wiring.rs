//! How a config's informers and routes become watches: an informer named by kind has its
//! plural found by discovery, one watch per namespace it names, informers that share a
//! watch share one cache with the union of their options, and a route fed by a resource
//! the API server does not serve (yet) waits for it instead of failing the start.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Waiting;
use crate::config::{Config, InformerSpec, ROUTE_INFORMER_PREFIX, ResourceRef, RouteSource};
use crate::informer::{
    CacheOptions, IndexFn, Indexers, Informer, InformerFactory, Transform, WatchKey,
};

/// The informer for `key` with its cache options, started if it is not running.
pub(super) async fn open(
    factory: &InformerFactory,
    key: &WatchKey,
    cache: &HashMap<WatchKey, CacheOptions>,
) -> Result<Arc<Informer>, crate::daemon::Error> {
    factory
        .informer(key.clone(), cache[key].clone())
        .await
        .map_err(|source| crate::daemon::Error::Watch {
            watch: key.to_string(),
            source,
        })
}

/// The informers feeding each route of `config`, by route name, opened (and started) from
/// `factory`; fails naming the first resource the API server does not serve.
pub async fn route_informers(
    config: &Config,
    factory: &InformerFactory,
) -> Result<HashMap<String, Vec<Arc<Informer>>>, crate::daemon::Error> {
    let wiring = wire(config, factory).await?;
    if let Some((what, why)) = wiring.missing.iter().next() {
        return Err(crate::daemon::Error::NotServed {
            what: what.clone(),
            why: why.clone(),
        });
    }
    let mut routes = HashMap::new();
    for (route, keys) in &wiring.routes {
        let mut informers = Vec::new();
        for key in keys {
            informers.push(open(factory, key, &wiring.cache).await?);
        }
        routes.insert(route.clone(), informers);
    }
    Ok(routes)
}

/// The watches a config needs and which feed each route.
pub(super) struct Wiring {
    /// Every watch of a served resource, with the union of its informers' cache options.
    pub(super) cache: HashMap<WatchKey, CacheOptions>,
    /// Each route's watches, by route name.
    pub(super) routes: HashMap<String, Vec<WatchKey>>,
    /// The watches of the informers each handler `reads:`, by handler name.
    pub(super) reads: HashMap<String, Vec<WatchKey>>,
    /// Resources not served, by what names them, with why.
    pub(super) missing: BTreeMap<String, String>,
    /// What each waiting route waits for, by route name.
    pub(super) waits_for: BTreeMap<String, Vec<String>>,
}

impl Wiring {
    /// Whether the route named `route` waits for a resource not served.
    pub(super) fn waits(&self, route: &str) -> bool {
        self.waits_for.contains_key(route)
    }

    /// Records that the API server does not serve `key`'s resource: the watch is dropped
    /// and every route it feeds waits.
    pub(super) fn miss_watch(&mut self, key: &WatchKey, why: &crate::informer::Error) {
        self.cache.remove(key);
        let watch = key.to_string();
        self.missing.insert(watch.clone(), not_served(why));
        for (route, keys) in &self.routes {
            if keys.contains(key) {
                self.waits_for
                    .entry(route.clone())
                    .or_default()
                    .push(watch.clone());
            }
        }
    }

    /// The missing resources with the routes waiting for each.
    pub(super) fn waiting(&self) -> Vec<Waiting> {
        self.missing
            .iter()
            .map(|(watch, reason)| Waiting {
                watch: watch.clone(),
                reason: reason.clone(),
                routes: self
                    .waits_for
                    .iter()
                    .filter(|(_, whats)| whats.contains(watch))
                    .map(|(route, _)| route.clone())
                    .collect(),
            })
            .collect()
    }
}

/// What a route waiting for `why`'s resource is told.
fn not_served(why: &crate::informer::Error) -> String {
    match why {
        crate::informer::Error::Discovery { .. } => {
            "the API server does not serve this group/version (yet)".to_string()
        }
        other => other.to_string(),
    }
}

/// Works out the watches of every informer the routes use (discovering the plural of
/// informers named by kind) and which of them feed each route. An informer whose resource
/// is not served is missing, and the routes fed by it wait.
pub(super) async fn wire(
    config: &Config,
    factory: &InformerFactory,
) -> Result<Wiring, crate::daemon::Error> {
    let uses_kinds = config
        .routes
        .iter()
        .any(|r| matches!(r.source, RouteSource::Kinds(_)));
    let needed = |spec: &InformerSpec| {
        config.routes.iter().any(|r| match &r.source {
            RouteSource::Informer(name) => *name == spec.name,
            RouteSource::Kinds(_) => false,
        }) || (uses_kinds && !spec.name.starts_with(ROUTE_INFORMER_PREFIX))
            || config.handlers.iter().any(|h| h.reads.contains(&spec.name))
    };
    let mut wiring = Wiring {
        cache: HashMap::new(),
        routes: HashMap::new(),
        reads: HashMap::new(),
        missing: BTreeMap::new(),
        waits_for: BTreeMap::new(),
    };
    // Informer name -> (its watches, its kind), or what is missing for it.
    let mut keys_of: HashMap<&str, (Vec<WatchKey>, String)> = HashMap::new();
    let mut unresolved: HashMap<&str, String> = HashMap::new();
    for spec in config.informers.iter().filter(|s| needed(s)) {
        let kind_needed = uses_kinds && !spec.name.starts_with(ROUTE_INFORMER_PREFIX);
        let (keys, kind) = match informer_watches(spec, factory, kind_needed).await {
            Ok(found) => found,
            Err((what, source)) if source.is_not_served() => {
                wiring.missing.insert(what.clone(), not_served(&source));
                unresolved.insert(spec.name.as_str(), what);
                continue;
            }
            Err((_, source)) => {
                return Err(crate::daemon::Error::Watch {
                    watch: format!("informer {}", spec.name),
                    source,
                });
            }
        };
        let options = cache_options(spec);
        for key in &keys {
            wiring
                .cache
                .entry(key.clone())
                .and_modify(|o| *o = union(o, &options))
                .or_insert_with(|| options.clone());
        }
        keys_of.insert(spec.name.as_str(), (keys, kind));
    }
    for route in &config.routes {
        let mut keys = Vec::new();
        let mut waits = Vec::new();
        match &route.source {
            RouteSource::Informer(name) => match unresolved.get(name.as_str()) {
                Some(what) => waits.push(what.clone()),
                None => keys.extend(
                    keys_of
                        .get(name.as_str())
                        .into_iter()
                        .flat_map(|k| k.0.clone()),
                ),
            },
            RouteSource::Kinds(kinds) => {
                for kind in kinds {
                    let mut found = keys_of
                        .iter()
                        .filter(|(name, (_, k))| {
                            k == kind && !name.starts_with(ROUTE_INFORMER_PREFIX)
                        })
                        .peekable();
                    if found.peek().is_some() {
                        keys.extend(found.flat_map(|(_, (k, _))| k.clone()));
                    } else if unresolved.is_empty() {
                        return Err(crate::daemon::Error::UnwatchedKind {
                            route: route.name.clone(),
                            kind: kind.clone(),
                        });
                    } else {
                        // One of the informers not served yet may be of this kind.
                        waits.extend(unresolved.values().cloned());
                    }
                }
                keys.sort_by_key(|k| k.to_string());
                keys.dedup();
            }
        }
        if !waits.is_empty() {
            waits.sort();
            waits.dedup();
            wiring.waits_for.insert(route.name.clone(), waits);
        }
        wiring.routes.insert(route.name.clone(), keys);
    }
    wiring.reads = reads(config, &keys_of);
    Ok(wiring)
}

/// The watches of the informers each handler reads, by handler name (from `keys_of`: the
/// watches of each informer by name).
fn reads(
    config: &Config,
    keys_of: &HashMap<&str, (Vec<WatchKey>, String)>,
) -> HashMap<String, Vec<WatchKey>> {
    let watches = |names: &[String]| -> Vec<WatchKey> {
        (names.iter())
            .filter_map(|name| keys_of.get(name.as_str()))
            .flat_map(|(keys, _)| keys.clone())
            .collect()
    };
    (config.handlers.iter())
        .map(|h| (h.name.clone(), watches(&h.reads)))
        .collect()
}

/// The watches of one informer, one per namespace, and its kind when `kind_needed` (routes
/// that take changes by kind) or it is named by kind. Fails with what names the resource
/// and why discovery failed.
async fn informer_watches(
    spec: &InformerSpec,
    factory: &InformerFactory,
    kind_needed: bool,
) -> Result<(Vec<WatchKey>, String), (String, crate::informer::Error)> {
    let (resource, kind) = match &spec.resource {
        ResourceRef::Plural(name) => (name.clone(), None),
        ResourceRef::Kind {
            group,
            version,
            kind,
        } => {
            let described = if group.is_empty() {
                format!("{version} {kind}")
            } else {
                format!("{group}/{version} {kind}")
            };
            let plural = factory
                .resolve_kind(group, version, kind)
                .await
                .map_err(|e| (described, e))?;
            (plural, Some(kind.clone()))
        }
    };
    let kind = match kind {
        Some(kind) => kind,
        None if kind_needed => factory
            .kind_of(&resource)
            .await
            .map_err(|e| (resource.to_string(), e))?,
        None => String::new(),
    };
    let namespaces: Vec<Option<String>> = if spec.namespaces.is_empty() {
        vec![None]
    } else {
        spec.namespaces.iter().cloned().map(Some).collect()
    };
    let keys = namespaces
        .into_iter()
        .map(|namespace| WatchKey {
            resource: resource.clone(),
            namespace,
            label_selector: spec.label_selector.clone(),
            field_selector: spec.field_selector.clone(),
        })
        .collect();
    Ok((keys, kind))
}

/// The cache options an informer asks for.
fn cache_options(spec: &InformerSpec) -> CacheOptions {
    let source = |source: &String| match source.strip_prefix("label:") {
        Some(label) => IndexFn::Label(label.trim().to_string()),
        None => IndexFn::Field(source.clone()),
    };
    let indexes = spec.indexes.iter().map(|(name, sources)| {
        let f = match sources.as_slice() {
            [one] => source(one),
            several => IndexFn::Any(several.iter().map(source).collect()),
        };
        (name.clone(), f)
    });
    CacheOptions {
        indexers: Indexers::new(indexes),
        transform: Transform {
            strip_managed_fields: !spec.keep_managed_fields,
            drop: spec.drop_fields.clone(),
        },
        shard_by: match spec.shard_by {
            crate::config::ShardBy::Uid => crate::sharding::ShardField::Uid,
            crate::config::ShardBy::Namespace => crate::sharding::ShardField::Namespace,
        },
    }
}

/// The options of a watch two informers share: every index of either, managed fields kept
/// if either keeps them, only the fields both drop dropped, sharded by namespace if either
/// is (a namespace on one replica also spreads the objects between replicas).
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
        shard_by: if b.shard_by == crate::sharding::ShardField::Namespace {
            b.shard_by
        } else {
            a.shard_by
        },
    }
}
