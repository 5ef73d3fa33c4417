//! The reflector: runs kube-runtime's watcher (list, watch, relist on 410, backoff) for one
//! watch key and turns its events into store updates and deltas.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::Informer;
use super::object::ObjectKey;

/// Runs until the informer's task is aborted; the watcher retries every failure with backoff.
pub(super) async fn run(informer: Arc<Informer>, api: Api<DynamicObject>, config: watcher::Config) {
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    // Keys seen in the list in progress: whatever the cache holds beyond them at the end of
    // the list was deleted while the watch was down.
    let mut listing: Option<HashSet<ObjectKey>> = None;
    let mut next_resync: Option<tokio::time::Instant> = None;
    loop {
        // The resync tick runs at the smallest period any subscriber wants.
        let tick = informer.resync_tick();
        if tick.is_none() {
            next_resync = None;
        } else if next_resync.is_none() {
            next_resync = tick.map(|t| tokio::time::Instant::now() + t);
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
            Ok(Event::Init) => {
                listing = Some(HashSet::new());
                informer.health_mut().listed = Some(0);
            }
            Ok(Event::InitApply(object)) => {
                let key = informer.apply(object);
                if let Some(seen) = listing.as_mut() {
                    seen.insert(key);
                    informer.health_mut().listed = Some(seen.len());
                    if seen.len().is_multiple_of(10_000) {
                        tracing::info!(informer = %informer.key(), objects = seen.len(), "listing");
                    }
                }
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = listing.take() {
                    informer.remove_unlisted(&seen);
                    tracing::info!(informer = %informer.key(), objects = seen.len(), "list complete");
                }
                informer.health_mut().listed = None;
                informer.mark_synced();
            }
            Ok(Event::Apply(object)) => {
                informer.apply(object);
            }
            Ok(Event::Delete(object)) => informer.delete(object),
            Err(error) => {
                tracing::warn!(informer = %informer.key(), %error, "watch failed; retrying with backoff");
                let mut health = informer.health_mut();
                health.restarts += 1;
                health.last_error = Some(error.to_string());
            }
        }
    }
}

async fn sleep_until_or_forever(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
