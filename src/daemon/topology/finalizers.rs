//! Routes' finalizers (`finalizer:`) as the topology sets them up: each handler learns the
//! finalizers of the routes feeding it, and a reload that removes a route with a finalizer
//! (or changes its finalizer, or narrows what it selects) takes that finalizer off every
//! object no route holds with it any more, so no object is left stuck in Terminating.
//!
//! Only a replica that acts does the clean-up: the leader in leader mode, a replica whose
//! ranges hold in sharded mode (its caches hold only the objects of its ranges).

use std::sync::Arc;

use super::{RunningRoute, Stages, Wiring, open};
use crate::config::Config;
use crate::handler::Handler;
use crate::handler::finalizer::{Finalizers, RouteFinalizer};
use crate::informer::CachedObject;

/// The finalizers of the routes of `config` feeding `handler`, writing through the
/// daemon's client to the resources each route watches.
pub(super) async fn of_handler(
    handler: &Handler,
    config: &Config,
    wiring: &Wiring,
    stages: &Stages<'_>,
) -> Result<Finalizers, crate::daemon::Error> {
    let mut by_route = Vec::new();
    for route in config.routes.iter().filter(|r| r.handler == handler.name()) {
        let Some(name) = &route.finalizer else {
            continue;
        };
        let mut resources = Vec::new();
        let served = wiring.routes[&route.name]
            .iter()
            .filter(|key| wiring.cache.contains_key(key));
        for key in served {
            let informer = open(stages.informers, key, &wiring.cache).await?;
            resources.push(informer.resource().clone());
        }
        let finalizer = RouteFinalizer::new(name, stages.client.clone(), resources);
        by_route.push((route.name.as_str().into(), Arc::new(finalizer)));
    }
    Ok(Finalizers::new(by_route))
}

/// Objects the running routes `old` held with a finalizer that none of the routes `new`
/// holds with it; with the finalizer to take off each.
fn dropped(old: &[RunningRoute], new: &[RunningRoute]) -> Vec<(String, Arc<CachedObject>)> {
    let mut dropped = Vec::new();
    for route in old {
        let Some(name) = route.spec.finalizer.as_deref() else {
            continue;
        };
        for (informer, _) in &route.subscriptions {
            for object in informer.store().list() {
                if holds(&object, name) && !still_held(new, name, &object) {
                    dropped.push((name.to_string(), object));
                }
            }
        }
    }
    dropped.sort_by(|a, b| (&a.0, a.1.key()).cmp(&(&b.0, b.1.key())));
    dropped.dedup_by(|a, b| a.0 == b.0 && a.1.key() == b.1.key());
    dropped
}

/// Whether one of `routes` holds `object` with the finalizer `name`: it has that finalizer,
/// a cache of its holds the object, and its filter admits it.
fn still_held(routes: &[RunningRoute], name: &str, object: &Arc<CachedObject>) -> bool {
    routes.iter().any(|r| {
        r.spec.finalizer.as_deref() == Some(name)
            && r.route.admits(object)
            && r.subscriptions.iter().any(|(informer, _)| {
                informer
                    .store()
                    .get(object.key())
                    .is_some_and(|o| o.resource_version() == object.resource_version())
            })
    })
}

/// Whether the object (as cached) lists the finalizer `name`.
fn holds(object: &CachedObject, name: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(object.json_str())
        .is_ok_and(|o| crate::handler::finalizer::finalizers(&o).contains(&name))
}

/// Takes the finalizers the routes `old` held objects with, and `new` does not, off those
/// objects, in the background; only on a replica that acts (see the module's docs).
pub(super) fn release_dropped(old: &[RunningRoute], new: &[RunningRoute], stages: &Stages<'_>) {
    let acts = *stages.active.borrow() && stages.tenure.is_none_or(|t| t.holds());
    if !acts {
        return;
    }
    let dropped = dropped(old, new);
    if dropped.is_empty() {
        return;
    }
    let client = stages.client.clone();
    let resources: Vec<_> = old
        .iter()
        .flat_map(|r| r.subscriptions.iter().map(|(i, _)| i.resource().clone()))
        .collect();
    tokio::spawn(async move {
        for (name, object) in dropped {
            let finalizer = RouteFinalizer::new(&name, client.clone(), resources.clone());
            match finalizer.remove(object.json_str()).await {
                Ok(()) => {
                    tracing::info!(finalizer = %name, object = %object.key(), "finalizer removed: no route holds the object with it any more");
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot remove a finalizer no route uses any more; remove it by hand")
                }
            }
        }
    });
}
