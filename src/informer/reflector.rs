//! The reflector: runs the list+watch loop ([`super::listwatch`]) for one watch key, with
//! kube-runtime's default backoff after failures, and turns what it reports into store
//! updates and deltas.
//!
//! The backoff is reset only by progress (the server answering a list page, a watch
//! starting, a change), not by every event as kube's `StreamBackoff` alone would: a list
//! announced (`ListStarted`) and then refused (403) would otherwise be retried at the first
//! step, every second or so, forever.

use crate::util::FastSet as HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;

use super::Informer;
use super::listwatch::{self, Event, Selectors};
use super::object::ObjectKey;
use crate::state::Pressure;

/// Runs until the informer's task is aborted; every failure is retried with backoff, or
/// after `retry_delay` when one is given. With `pressure`, each event waits until the state
/// store's writer has room for what it will cause. In sharded mode each change of this replica's
/// share hands over what it lost and starts the list and watch again with the new selector
/// (a rebalance: the cache stays synced meanwhile, as what it holds is still current).
pub(super) async fn run(
    informer: Arc<Informer>,
    api: Api<DynamicObject>,
    selectors: Selectors,
    retry_delay: Option<Duration>,
    pressure: Option<Pressure>,
) {
    let mut rebalance = false;
    loop {
        let shard = informer.next_shard().await;
        let selectors = Selectors {
            shard,
            ..selectors.clone()
        };
        tokio::select! {
            () = watch_until_ended(&informer, api.clone(), selectors, retry_delay, rebalance, pressure.as_ref()) => return,
            () = informer.shard_changed() => {}
        }
        rebalance = true;
    }
}

/// One list+watch loop with fixed selectors; returns only if the stream ends.
async fn watch_until_ended(
    informer: &Informer,
    api: Api<DynamicObject>,
    selectors: Selectors,
    retry_delay: Option<Duration>,
    rebalance: bool,
    pressure: Option<&Pressure>,
) {
    let progressed = Arc::new(AtomicBool::new(false));
    let seen = progressed.clone();
    // Runs before the backoff sees the event, so its reset knows what the event was.
    let events = listwatch::list_watch(api, selectors, informer.decoder()).inspect(move |e| {
        let progress = matches!(
            e,
            Ok(event) if !matches!(event, Event::ListStarted | Event::ListMode { .. })
        );
        seen.store(progress, Ordering::Relaxed);
    });
    let mut events = match retry_delay {
        None => events
            .backoff(ResetOnProgress {
                inner: DefaultBackoff::default(),
                progressed,
            })
            .boxed(),
        Some(delay) => events.backoff(FixedDelay(delay)).boxed(),
    };
    let mut listing: Option<Listing> = None;
    let mut next_resync: Option<tokio::time::Instant> = None;
    // A rebalance's first list keeps the cache synced.
    let mut keep_synced = rebalance && informer.is_synced();
    loop {
        // The resync tick runs at the smallest period any subscriber wants.
        let tick = informer.resync_tick();
        if tick.is_none() {
            next_resync = None;
        } else if next_resync.is_none() {
            next_resync = tick.map(|t| tokio::time::Instant::now() + t);
        }
        if let Some(pressure) = pressure {
            pressure.room().await;
        }
        let event = tokio::select! {
            event = events.next() => match event {
                Some(event) => event,
                None => return,
            },
            _ = sleep_until_or_forever(next_resync) => {
                informer.resync_due();
                next_resync = tick.map(|t| tokio::time::Instant::now() + t);
                continue;
            }
            _ = informer.resync_changed.notified() => {
                // A subscriber with a shorter period may have arrived: tick sooner.
                next_resync = match (next_resync, informer.resync_tick()) {
                    (Some(at), Some(t)) => Some(at.min(tokio::time::Instant::now() + t)),
                    (_, t) => t.map(|t| tokio::time::Instant::now() + t),
                };
                continue;
            }
        };
        match event {
            Ok(Event::ListStarted) if keep_synced => {
                keep_synced = false;
                listing = Some(Listing::new(informer));
            }
            Ok(event) => handle(informer, &mut listing, event),
            Err(error) => failed(informer, &error),
        }
    }
}

/// A list in progress: how many objects it listed, and which, when the cache held objects as
/// it began (a relist): whatever the cache holds beyond them at the end of the list was
/// deleted while the watch was down. A first list, into an empty cache, needs no keys.
struct Listing {
    count: usize,
    seen: Option<HashSet<ObjectKey>>,
}

impl Listing {
    fn new(informer: &Informer) -> Self {
        Self {
            count: 0,
            seen: (!informer.store.is_empty()).then(HashSet::default),
        }
    }
}

/// Applies one event of the list+watch loop to the informer.
fn handle(informer: &Informer, listing: &mut Option<Listing>, event: Event) {
    match event {
        Event::ListStarted => {
            *listing = Some(Listing::new(informer));
            // Until this list completes the cache is not known to match the server (a
            // relist is replacing it): say so.
            informer.mark_unsynced();
            informer.health_mut().listed = Some(0);
        }
        // Not this replica's share: the API server ignored the shard selector.
        Event::Listed(object) | Event::Applied(object) | Event::Deleted(object)
            if !informer.owns(&object) => {}
        Event::ShardApplied(applied) => informer.shard_applied(applied),
        Event::ListMode { streaming, why } => list_mode(informer, streaming, why),
        Event::ListSize(size) => {
            if let Some(seen) = listing.as_mut().and_then(|l| l.seen.as_mut()) {
                seen.reserve(size);
            }
            informer.store.write().reserve(size);
        }
        Event::Listed(object) => {
            let key = informer.apply(object);
            if let Some(listing) = listing.as_mut() {
                if let Some(seen) = listing.seen.as_mut() {
                    seen.insert(key);
                }
                listing.count += 1;
                informer.health_mut().listed = Some(listing.count);
                if listing.count.is_multiple_of(10_000) {
                    tracing::info!(informer = %informer.key(), objects = listing.count, "listing");
                }
            }
        }
        Event::ListDone { rv } => {
            {
                let mut health = informer.health_mut();
                health.resource_version = Some(rv);
                health.listed = None;
                health.last_error = None;
                health.last_error_code = None;
            }
            if let Some(listing) = listing.take() {
                // What the list holds: a streaming list may have sent an object twice (it
                // changed) or taken one back (deleted) before its end.
                let objects = match &listing.seen {
                    Some(seen) => seen.len(),
                    None => informer.store.len(),
                };
                informer.remove_unlisted(listing.seen.as_ref(), objects);
                tracing::info!(informer = %informer.key(), objects, "list complete");
            }
            informer.mark_synced();
        }
        Event::Watching { rv } => {
            let mut health = informer.health_mut();
            health.resource_version = Some(rv);
            health.last_error = None;
            health.last_error_code = None;
        }
        Event::Bookmark { rv } => informer.health_mut().resource_version = Some(rv),
        Event::Applied(object) => {
            informer.apply(object);
        }
        Event::Deleted(object) => {
            // A streaming list can report a deletion before its end: the object is no
            // longer among those listed.
            if let Some(seen) = listing.as_mut().and_then(|l| l.seen.as_mut()) {
                let meta = object.meta();
                let name = meta.name.as_deref().unwrap_or_default();
                seen.remove(&ObjectKey::new(meta.namespace.as_deref(), name));
            }
            informer.delete(object);
        }
    }
}

/// Records how the informer lists. The first informer of a start to list in pages because
/// the server failed its streaming list says so at INFO; the others (each resource of the
/// same server would say the same) at DEBUG.
fn list_mode(informer: &Informer, streaming: bool, why: Option<String>) {
    let mode = if streaming { "streaming" } else { "paged" };
    match &why {
        Some(why) if !informer.fallback_logged.swap(true, Ordering::Relaxed) => {
            tracing::info!(informer = %informer.key(), "{why}");
        }
        Some(why) => tracing::debug!(informer = %informer.key(), "{why}"),
        None => tracing::debug!(informer = %informer.key(), mode, "list mode"),
    }
    let mut health = informer.health_mut();
    health.list_mode = Some(mode);
    health.list_fallback = why;
}

/// Records a failure; the loop retries after the backoff. A failure that means listing
/// again (the server came back behind, or cannot resume from the version seen) marks the
/// cache unsynced at once: it may hold objects the server no longer has, and it is not
/// known to match until the relist, after the backoff, completes.
fn failed(informer: &Informer, error: &listwatch::Error) {
    if error.relists() {
        informer.mark_unsynced();
        tracing::warn!(informer = %informer.key(), %error, "the watch cannot resume; listing again after backoff");
    } else {
        tracing::warn!(informer = %informer.key(), %error, "watch failed; retrying with backoff");
    }
    let mut health = informer.health_mut();
    health.restarts += 1;
    health.last_error = Some(error.to_string());
    health.last_error_code = error.code();
}

/// A backoff that `StreamBackoff`'s reset (on every `Ok` event) resets only when the event
/// was progress: `progressed` is set for each event before the backoff sees it.
struct ResetOnProgress<B> {
    inner: B,
    progressed: Arc<AtomicBool>,
}

impl<B: Iterator<Item = Duration>> Iterator for ResetOnProgress<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.inner.next()
    }
}

impl<B: Backoff> Backoff for ResetOnProgress<B> {
    fn reset(&mut self) {
        if self.progressed.load(Ordering::Relaxed) {
            self.inner.reset();
        }
    }
}

/// The same delay before every retry.
struct FixedDelay(Duration);

impl Iterator for FixedDelay {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl Backoff for FixedDelay {
    fn reset(&mut self) {}
}

async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
