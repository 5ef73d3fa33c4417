//! The watch of every `Route` and `Handler` in the cluster (and, with a namespace
//! selector, of the Namespaces it picks): the set of team resources, published whole each
//! time it changes, once both kinds have been listed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::crds::{GROUP, VERSION};
use crate::config::tenancy::{TeamKind, TeamResource};
use crate::util::lock;

/// The team resources as last read.
#[derive(Debug, Default)]
struct Known {
    /// Each kind's objects, once that kind has been listed.
    kinds: BTreeMap<TeamKind, BTreeMap<(String, String), TeamResource>>,
    /// The namespaces the selector picks, once listed; `None` without a selector.
    namespaces: Option<Option<BTreeSet<String>>>,
}

impl Known {
    /// Every resource in a picked namespace, once everything has been listed.
    fn resources(&self) -> Option<Vec<TeamResource>> {
        if self.kinds.len() < 2 {
            return None;
        }
        let picked = match &self.namespaces {
            None => None,
            Some(None) => return None,
            Some(Some(names)) => Some(names),
        };
        Some(
            self.kinds
                .values()
                .flat_map(|objects| objects.values())
                .filter(|r| picked.is_none_or(|p| p.contains(&r.namespace)))
                .cloned()
                .collect(),
        )
    }
}

/// The running watches, and the set of team resources they publish.
pub struct TeamWatch {
    resources: watch::Receiver<Option<Vec<TeamResource>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl TeamWatch {
    /// Watches Routes and Handlers in every namespace, and Namespaces when `selector`
    /// (a label selector) picks some.
    pub fn start(client: &kube::Client, selector: Option<&str>) -> Self {
        let known = Arc::new(Mutex::new(Known {
            namespaces: selector.map(|_| None),
            ..Known::default()
        }));
        let (tx, resources) = watch::channel(None);
        let tx = Arc::new(tx);
        let mut tasks = Vec::new();
        for kind in [TeamKind::Handler, TeamKind::Route] {
            tasks.push(tokio::spawn(watch_kind(
                client.clone(),
                kind,
                known.clone(),
                tx.clone(),
            )));
        }
        if let Some(selector) = selector {
            let api: Api<Namespace> = Api::all(client.clone());
            let config = watcher::Config::default().labels(selector);
            tasks.push(tokio::spawn(watch_namespaces(api, config, known, tx)));
        }
        Self { resources, tasks }
    }

    /// The resources as last published (`None` until everything has been listed), and
    /// each change after.
    pub fn subscribe(&self) -> watch::Receiver<Option<Vec<TeamResource>>> {
        self.resources.clone()
    }
}

impl Drop for TeamWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The API resource of a kind.
fn api_resource(kind: TeamKind) -> ApiResource {
    let (kind, plural) = match kind {
        TeamKind::Handler => ("Handler", "handlers"),
        TeamKind::Route => ("Route", "routes"),
    };
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A resource as the config merges it.
fn team_resource(kind: TeamKind, object: &DynamicObject) -> TeamResource {
    TeamResource {
        kind,
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
        generation: object.metadata.generation,
        spec: object
            .data
            .get("spec")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
    }
}

/// Publishes the set when it is complete and differs from the last one.
fn publish(known: &Mutex<Known>, tx: &watch::Sender<Option<Vec<TeamResource>>>) {
    let resources = lock(known).resources();
    if resources.is_some() {
        tx.send_if_modified(|current| {
            let changed = *current != resources;
            if changed {
                current.clone_from(&resources);
            }
            changed
        });
    }
}

/// Watches one kind until aborted, retrying with backoff when the API server fails (a
/// CRD not installed is logged at each try).
async fn watch_kind(
    client: kube::Client,
    kind: TeamKind,
    known: Arc<Mutex<Known>>,
    tx: Arc<watch::Sender<Option<Vec<TeamResource>>>>,
) {
    let resource = api_resource(kind);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = BTreeMap::new();
    while let Some(event) = events.next().await {
        let key = |o: &DynamicObject| (o.namespace().unwrap_or_default(), o.name_any());
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(o)) => {
                listing.insert(key(&o), team_resource(kind, &o));
            }
            Ok(Event::InitDone) => {
                lock(&known)
                    .kinds
                    .insert(kind, std::mem::take(&mut listing));
            }
            Ok(Event::Apply(o)) => {
                lock(&known)
                    .kinds
                    .entry(kind)
                    .or_default()
                    .insert(key(&o), team_resource(kind, &o));
            }
            Ok(Event::Delete(o)) => {
                lock(&known).kinds.entry(kind).or_default().remove(&key(&o));
            }
            Err(e) => {
                tracing::warn!(resource = %format!("{}.{GROUP}", resource.plural), error = %e, "cannot watch the team resources (are the CRDs installed? `switchyard crds | kubectl apply -f -`)");
                continue;
            }
        }
        publish(&known, &tx);
    }
}

/// Watches the Namespaces a selector picks until aborted.
async fn watch_namespaces(
    api: Api<Namespace>,
    config: watcher::Config,
    known: Arc<Mutex<Known>>,
    tx: Arc<watch::Sender<Option<Vec<TeamResource>>>>,
) {
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let mut listing = BTreeSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(ns)) => {
                listing.insert(ns.name_any());
            }
            Ok(Event::InitDone) => {
                lock(&known).namespaces = Some(Some(std::mem::take(&mut listing)));
            }
            Ok(Event::Apply(ns)) => {
                if let Some(Some(names)) = &mut lock(&known).namespaces {
                    names.insert(ns.name_any());
                }
            }
            Ok(Event::Delete(ns)) => {
                if let Some(Some(names)) = &mut lock(&known).namespaces {
                    names.remove(&ns.name_any());
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the namespaces tenancy.namespaces picks");
                continue;
            }
        }
        publish(&known, &tx);
    }
}
