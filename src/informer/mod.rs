//! Shared informers: one watch and one cache per watch key, deltas for every change.
//!
//! The [`InformerFactory`] hands out an [`Informer`] per [`WatchKey`]; its reflector keeps
//! the [`Store`] current from a list+watch loop and delivers [`Delta`]s to every subscribed
//! [`DeltaSink`], in the order the API server made the changes.

pub mod delta;
pub mod factory;
mod listwatch;
pub mod object;
mod reflector;
mod shard;
pub mod store;
pub mod transform;
pub mod wire;

use crate::util::FastSet as HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::util::lock;
use std::time::{Duration, SystemTime};

use kube::api::ApiResource;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ResourceName;
pub use delta::{Delta, DeltaSink};
pub use factory::InformerFactory;
pub use object::{CachedObject, ObjectKey};
pub use shard::ShardState;
pub use store::{IndexFn, Indexers, Store};
pub use transform::Transform;

/// Errors starting an informer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// API discovery for the resource's group failed.
    #[error("cannot discover {resource}: {}", shown(source))]
    Discovery {
        /// The resource.
        resource: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// The group/version exists but does not serve the resource.
    #[error("the API server does not serve {resource}; that group/version has: {}", available.join(", "))]
    UnknownResource {
        /// The resource.
        resource: String,
        /// What the group/version does serve.
        available: Vec<String>,
    },
    /// A namespace was given for a cluster-scoped resource.
    #[error("{resource} is cluster-scoped: remove the route's namespace")]
    NamespaceOnClusterScoped {
        /// The resource.
        resource: String,
    },
}

impl Error {
    /// Whether the API server does not serve the resource (yet): its group/version is
    /// unknown to discovery, or the group/version has no such resource. A CRD created later
    /// makes it served.
    pub fn is_not_served(&self) -> bool {
        match self {
            Error::UnknownResource { .. } => true,
            Error::Discovery {
                source: kube::Error::Api(status),
                ..
            } => status.code == 404,
            _ => false,
        }
    }
}

use crate::util::kube_error as shown;

/// Result of informer operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What identifies a shared watch: routes with equal keys share one informer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchKey {
    /// The resource watched.
    pub resource: ResourceName,
    /// Namespace; `None` for all namespaces.
    pub namespace: Option<String>,
    /// Label selector.
    pub label_selector: Option<String>,
    /// Field selector.
    pub field_selector: Option<String>,
}

impl fmt::Display for WatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if let Some(l) = &self.label_selector {
            write!(f, " labels {l}")?;
        }
        if let Some(fs) = &self.field_selector {
            write!(f, " fields {fs}")?;
        }
        Ok(())
    }
}

/// How an informer caches: its indexes and the transform applied before caching.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheOptions {
    /// Indexes besides the namespace index.
    pub indexers: Indexers,
    /// What is dropped from objects before caching.
    pub transform: Transform,
    /// In sharded mode, the field objects are placed by.
    pub shard_by: crate::sharding::ShardField,
}

/// The health of an informer's watch, as /status shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchHealth {
    /// The newest resourceVersion seen: of the last object, list, watch start or bookmark.
    pub resource_version: Option<String>,
    /// Times the list or watch failed and was retried.
    pub restarts: u64,
    /// The error the list or watch is failing with; cleared once a list completes or a
    /// watch is open again.
    pub last_error: Option<String>,
    /// The HTTP status code of that error, when the API server answered with one (403:
    /// forbidden).
    pub last_error_code: Option<u16>,
    /// When the last event arrived.
    #[serde(skip)]
    pub last_event: Option<SystemTime>,
    /// Objects received so far while a list is in progress.
    pub listed: Option<usize>,
    /// How the informer lists: `streaming` (a watch sending every object, KEP-3157) or
    /// `paged`; none until its first list began.
    pub list_mode: Option<&'static str>,
    /// Why it lists in pages although it tried streaming lists: "this API server does not
    /// serve streaming lists (WatchList): listing in pages" and the server's answer.
    pub list_fallback: Option<String>,
}

/// Names one subscription, to end it with [`Informer::unsubscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

/// A subscriber and when its next resync is due.
struct Subscription {
    id: SubscriptionId,
    sink: Arc<dyn DeltaSink>,
    /// The resync period `next_resync` was computed from.
    period: Option<Duration>,
    next_resync: Option<tokio::time::Instant>,
}

/// One shared watch and its cache.
pub struct Informer {
    key: WatchKey,
    resource: ApiResource,
    store: Store,
    transform: Transform,
    /// Subscribers; held while the store changes and deltas go out, so a new subscriber
    /// sees either the old state and the delta, or the new state.
    sinks: Mutex<Vec<Subscription>>,
    health: Mutex<WatchHealth>,
    synced: watch::Sender<bool>,
    /// Whether a list has ever completed (a relist does not take it back).
    listed: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the reflector when the subscribers' resync periods change.
    resync_changed: tokio::sync::Notify,
    next_subscription: std::sync::atomic::AtomicU64,
    /// This replica's share of the objects, in sharded mode.
    shard: Option<shard::Shard>,
    /// Whether an informer of the same factory has logged that the API server does not
    /// serve streaming lists.
    fallback_logged: Arc<std::sync::atomic::AtomicBool>,
}

impl Informer {
    fn new(
        key: WatchKey,
        resource: ApiResource,
        options: CacheOptions,
        assignment: Option<watch::Receiver<Option<crate::sharding::Assignment>>>,
        fallback_logged: Arc<std::sync::atomic::AtomicBool>,
    ) -> Arc<Self> {
        let shard = assignment.map(|rx| shard::Shard::new(options.shard_by, rx));
        let store = Store::watching(options.indexers, key.namespace.as_deref());
        Arc::new(Self {
            shard,
            key,
            resource,
            store,
            transform: options.transform,
            sinks: Mutex::new(Vec::new()),
            health: Mutex::new(WatchHealth::default()),
            synced: watch::channel(false).0,
            listed: watch::channel(false).0,
            task: Mutex::new(None),
            resync_changed: tokio::sync::Notify::new(),
            next_subscription: std::sync::atomic::AtomicU64::new(1),
            fallback_logged,
        })
    }

    /// The watch key.
    pub fn key(&self) -> &WatchKey {
        &self.key
    }

    /// The resource as discovery described it.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The cache.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether the cache reflects a completed list, kept current by the watch since: false
    /// until the first list completes, and again while a relist (after a 410, or a server
    /// that went behind the watch) replaces the cache.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until [`Informer::is_synced`].
    pub async fn wait_until_synced(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives as long as self, so this cannot fail while we hold a reference.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Waits until the first list has completed; unlike [`Informer::wait_until_synced`], a
    /// relist in progress does not hold it up (the cache then holds at least what it held).
    pub async fn wait_until_listed(&self) {
        let mut rx = self.listed.subscribe();
        let _ = rx.wait_for(|listed| *listed).await;
    }

    /// A copy of the watch's health.
    pub fn health(&self) -> WatchHealth {
        self.health_mut().clone()
    }

    /// Adds a subscriber. It first gets an `Added` delta for every cached object (then,
    /// if the cache reflects a completed list, a `Replaced` closing them, as a list
    /// would), then every delta after.
    pub fn subscribe(&self, sink: Arc<dyn DeltaSink>) -> SubscriptionId {
        let id = SubscriptionId(
            self.next_subscription
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let mut sinks = lock(&self.sinks);
        let objects = self.store.list();
        let listed = objects.len();
        for object in objects {
            sink.deliver(&Delta::Added(object));
        }
        if self.is_synced() {
            sink.deliver(&Delta::Replaced {
                objects: listed,
                shard: self.shard_selector(),
            });
        }
        let period = sink.resync_period();
        let next_resync = period.map(|p| tokio::time::Instant::now() + p);
        if next_resync.is_some() {
            self.resync_changed.notify_one();
        }
        sinks.push(Subscription {
            id,
            sink,
            period,
            next_resync,
        });
        id
    }

    /// Ends a subscription; returns how many remain.
    pub fn unsubscribe(&self, id: SubscriptionId) -> usize {
        let mut sinks = lock(&self.sinks);
        sinks.retain(|s| s.id != id);
        sinks.len()
    }

    /// Re-reads every subscriber's resync period after one changed (its handler was
    /// replaced): each next resync is one new period from now, and the reflector
    /// recomputes how often to tick.
    pub fn resync_periods_changed(&self) {
        let now = tokio::time::Instant::now();
        for sub in lock(&self.sinks).iter_mut() {
            let period = sub.sink.resync_period();
            if period != sub.period {
                sub.period = period;
                sub.next_resync = period.map(|p| now + p);
            }
        }
        self.resync_changed.notify_one();
    }

    /// How many subscribers the informer has.
    pub fn subscribers(&self) -> usize {
        lock(&self.sinks).len()
    }

    /// The smallest resync period any subscriber wants: how often the reflector ticks.
    pub fn resync_tick(&self) -> Option<Duration> {
        lock(&self.sinks)
            .iter()
            .filter_map(|s| s.sink.resync_period())
            .min()
    }

    /// Delivers a [`Delta::Sync`] for every cached object to each subscriber whose resync
    /// period has passed.
    fn resync_due(&self) {
        if !self.is_synced() {
            return;
        }
        let now = tokio::time::Instant::now();
        let mut sinks = lock(&self.sinks);
        let mut objects: Option<Vec<Arc<CachedObject>>> = None;
        for sub in sinks.iter_mut() {
            let (Some(due), Some(period)) = (sub.next_resync, sub.sink.resync_period()) else {
                continue;
            };
            if due > now {
                continue;
            }
            sub.next_resync = Some(now + period);
            for object in objects.get_or_insert_with(|| self.store.list()) {
                sub.sink.deliver(&Delta::Sync(object.clone()));
            }
        }
    }

    fn health_mut(&self) -> MutexGuard<'_, WatchHealth> {
        lock(&self.health)
    }

    fn set_task(&self, task: JoinHandle<()>) {
        *lock(&self.task) = Some(task);
    }

    fn stop(&self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }

    fn mark_synced(&self) {
        self.synced.send_replace(true);
        self.listed.send_replace(true);
    }

    fn mark_unsynced(&self) {
        self.synced.send_replace(false);
    }

    fn note_event(&self, object: &CachedObject, received: SystemTime) {
        let mut health = self.health_mut();
        health.resource_version = Some(object.resource_version().to_string());
        health.last_event = Some(received);
    }

    /// What the list+watch loop decodes objects with: this resource's kind, this
    /// informer's transform.
    fn decoder(&self) -> wire::Decoder {
        wire::Decoder::new(&self.resource, self.transform.clone())
    }

    /// Turns a received object into its cached form: index values computed.
    fn cache_form(&self, object: wire::Received) -> Arc<CachedObject> {
        let index_values = self.store.index_values(&object);
        Arc::new(CachedObject::received(object, index_values))
    }

    /// Stores an added or changed object and delivers the delta; returns its key.
    fn apply(&self, object: wire::Received) -> ObjectKey {
        let received = SystemTime::now();
        let new = self.cache_form(object);
        let key = new.key().clone();
        self.note_event(&new, received);
        let sinks = lock(&self.sinks);
        let old = self.store.write().insert(new.clone());
        let delta = match old {
            None => Delta::Added(new),
            // Unchanged (a relist of an object the watch already delivered). Equal versions
            // with a different content come from a server that went back in time and made
            // another object under this key and version: that is a change.
            Some(old)
                if old.resource_version() == new.resource_version() && same_content(&old, &new) =>
            {
                return key;
            }
            Some(old) => Delta::Updated { old, new },
        };
        for sub in sinks.iter() {
            sub.sink.deliver_received(&delta, received);
        }
        key
    }

    /// Removes a deleted object and delivers the delta.
    fn delete(&self, object: wire::Received) {
        let received = SystemTime::now();
        let last_known = self.cache_form(object);
        self.note_event(&last_known, received);
        let sinks = lock(&self.sinks);
        self.store.write().remove(last_known.key());
        let delta = Delta::Deleted {
            last_known,
            final_state_unknown: false,
        };
        for sub in sinks.iter() {
            sub.sink.deliver_received(&delta, received);
        }
    }

    /// After a list of `count` objects: deletes every cached object the list did not contain
    /// (`listed`; `None` when the cache was empty as the list began, so it holds nothing
    /// else), then announces the list with [`Delta::Replaced`].
    fn remove_unlisted(&self, listed: Option<&HashSet<ObjectKey>>, count: usize) {
        let sinks = lock(&self.sinks);
        let gone: Vec<Arc<CachedObject>> = match listed {
            None => Vec::new(),
            Some(listed) => {
                let mut store = self.store.write();
                let keys: Vec<ObjectKey> = store
                    .keys()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                keys.iter().filter_map(|k| store.remove(k)).collect()
            }
        };
        for last_known in gone {
            deliver(
                &sinks,
                &Delta::Deleted {
                    last_known,
                    final_state_unknown: true,
                },
            );
        }
        deliver(
            &sinks,
            &Delta::Replaced {
                objects: count,
                shard: self.shard_selector(),
            },
        );
        // Synced under the subscribers' lock: a subscriber joining now gets its own
        // `Replaced` (see `subscribe`), one that joined before got the one above.
        self.mark_synced();
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether two states of an object hold the same content: the same text, or text that
/// parses to the same JSON (the same object from a server that laid it out differently).
fn same_content(old: &CachedObject, new: &CachedObject) -> bool {
    let (a, b) = (old.json(), new.json());
    a == b
        || serde_json::from_str::<serde_json::Value>(&a).ok()
            == serde_json::from_str::<serde_json::Value>(&b).ok()
}

fn deliver(sinks: &[Subscription], delta: &Delta) {
    for sub in sinks {
        sub.sink.deliver(delta);
    }
}
