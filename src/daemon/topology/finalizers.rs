//! Routes' finalizers (`finalizer:`) as the topology sets them up: each handler learns the
//! finalizers of the routes feeding it, and a reload that removes a route with a finalizer
//! (or changes its finalizer, or narrows what it selects) takes that finalizer off every
//! object no route holds with it any more, so no object is left stuck in Terminating. With
//! `state_dir` each route's finalizer is recorded, and a start whose config no longer holds
//! objects with one takes it off what the route last delivered ([`release_stale`]).
//!
//! Only a replica that acts does the clean-up: the leader in leader mode, a replica whose
//! ranges hold in sharded mode (its caches hold only the objects of its ranges).

use std::sync::Arc;
use std::time::Duration;

use kube::discovery::ApiResource;

use super::{RunningRoute, Stages, Wiring, open};
use crate::config::Config;
use crate::handler::Handler;
use crate::handler::finalizer::{Finalizers, RouteFinalizer};
use crate::informer::CachedObject;
use crate::state::{StaleFinalizer, StoredFinalizer, StoredResource};

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
        if let Some(state) = stages.state
            && !resources.is_empty()
        {
            state.record_finalizer(&route.name, stored(name, &resources));
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

/// The finalizer `name` on `resources` as the store keeps it.
fn stored(name: &str, resources: &[ApiResource]) -> StoredFinalizer {
    let resources = resources
        .iter()
        .map(|r| StoredResource {
            group: r.group.clone(),
            version: r.version.clone(),
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            plural: r.plural.clone(),
        })
        .collect();
    StoredFinalizer {
        name: name.to_string(),
        resources,
    }
}

/// A stored resource as the client names it.
fn api_resource(r: &StoredResource) -> ApiResource {
    ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        plural: r.plural.clone(),
    }
}

/// The routes of the running config, each with the finalizer it holds objects with;
/// `None` once the daemon is gone.
pub(in crate::daemon) type RunningFinalizers =
    Box<dyn Fn() -> Option<Vec<(String, Option<String>)>> + Send>;

/// Takes the finalizers of routes the config no longer holds objects with (removed, or
/// their finalizer turned off or renamed while the daemon was down) off the objects those
/// routes last delivered, in the background, once this replica acts; then forgets them,
/// and the records of a route no longer configured. `running` gives the routes of the
/// config running then: a finalizer a reload has brought back meanwhile is left alone.
/// What cannot be taken off now stays recorded for the next start.
///
/// A finalizer taken off is forgotten (the write queued for the store) before its "taken
/// off" line is logged. A daemon killed before the store commits that write takes the
/// finalizer off again at its next start: harmless, as taking off a finalizer an object
/// does not carry (or of an object gone) changes nothing.
pub(in crate::daemon) fn release_stale(
    stale: Vec<StaleFinalizer>,
    running: RunningFinalizers,
    stages: &Stages<'_>,
) {
    if stale.is_empty() {
        return;
    }
    let (client, state) = (stages.client.clone(), stages.state.cloned());
    let mut active = stages.active.subscribe();
    let tenure = stages.tenure.cloned();
    tokio::spawn(async move {
        // Only a replica that acts writes finalizers (see the module's docs).
        while !(*active.borrow_and_update() && tenure.as_ref().is_none_or(|t| t.holds())) {
            let changed = tokio::time::timeout(Duration::from_millis(500), active.changed());
            if let Ok(Err(_)) = changed.await {
                return; // the daemon stopped
            }
            if running().is_none() {
                return;
            }
        }
        let mut unreleased: Vec<String> = Vec::new();
        for stale in &stale {
            let Some(now) = running() else { return };
            let held = now
                .iter()
                .any(|(_, f)| f.as_deref() == Some(&*stale.finalizer.name));
            if held || !release_one(stale, &client, state.as_ref()).await {
                unreleased.push(stale.route.clone());
            }
        }
        // A route no longer configured whose every finalizer went needs its records no more.
        let (Some(state), Some(now)) = (&state, running()) else {
            return;
        };
        for stale in &stale {
            let configured = now.iter().any(|(route, _)| *route == stale.route);
            if !configured && !unreleased.contains(&stale.route) {
                state.drop_route(&stale.route);
            }
        }
    });
}

/// Takes `stale`'s finalizer off each object its route last delivered, and when all went,
/// forgets it in `state`; whether all went.
async fn release_one(
    stale: &StaleFinalizer,
    client: &kube::Client,
    state: Option<&crate::state::State>,
) -> bool {
    let name = &stale.finalizer.name;
    let resources = stale.finalizer.resources.iter().map(api_resource).collect();
    let finalizer = RouteFinalizer::new(name, client.clone(), resources);
    let mut failed = 0;
    let mut keys: Vec<&String> = stale.records.keys().collect();
    keys.sort();
    for key in keys {
        let object = stale.records[key].stub_json(key);
        if let Err(e) = finalizer.remove(&object).await {
            failed += 1;
            tracing::error!(error = %e, route = %stale.route, "cannot take off the finalizer of a route no longer configured; tried again at the next start");
        }
    }
    if failed == 0
        && let Some(state) = state
    {
        state.forget_finalizer(&stale.route, name);
    }
    tracing::info!(finalizer = %name, route = %stale.route, objects = stale.records.len(), failed, "finalizer of a route no longer holding objects with it taken off what the route last delivered");
    failed == 0
}
