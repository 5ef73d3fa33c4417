//! The informer factory: one informer per watch key, shared by every route that uses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

use crate::sharding::Assignment;
use crate::state::Pressure;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersion;
use kube::discovery::Scope;

use super::listwatch::Selectors;
use super::{CacheOptions, Error, Informer, Result, WatchKey, reflector};

/// Creates informers on demand and shares them by watch key.
pub struct InformerFactory {
    client: Client,
    informers: Mutex<HashMap<WatchKey, Arc<Informer>>>,
    retry_delay: Option<Duration>,
    /// This replica's share in sharded mode: every informer caches only its objects.
    assignment: Option<watch::Receiver<Option<Assignment>>>,
    /// The state store's room: informers wait on it before each event they read.
    pressure: Option<Pressure>,
    /// Whether an informer has logged that the API server does not serve streaming lists:
    /// said once (at INFO) for all of this factory's informers.
    fallback_logged: Arc<std::sync::atomic::AtomicBool>,
}

impl InformerFactory {
    /// A factory whose informers watch through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            informers: Mutex::new(HashMap::new()),
            retry_delay: None,
            assignment: None,
            pressure: None,
            fallback_logged: Arc::default(),
        }
    }

    /// Makes every informer it starts wait, before it reads the next event of its watch,
    /// while the state store's writer is full (backpressure: see `state`).
    #[must_use]
    pub fn with_pressure(mut self, pressure: Option<Pressure>) -> Self {
        self.pressure = pressure;
        self
    }

    /// Makes every informer it starts cache only this replica's share of the objects, as
    /// `assignment` says (sharded mode); none until the first assignment is published.
    pub fn sharded(mut self, assignment: watch::Receiver<Option<Assignment>>) -> Self {
        self.assignment = Some(assignment);
        self
    }

    /// Makes the informers it starts retry a failed list or watch after a fixed `delay`
    /// instead of kube-runtime's default backoff (800 ms, doubling up to 30 s): for tests
    /// against an API server that fails on purpose.
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = Some(delay);
        self
    }

    /// The informer for `key`, started with `options` if it was not running yet (a running
    /// one keeps the options it was started with). The resource is resolved through API
    /// discovery the first time.
    pub async fn informer(&self, key: WatchKey, options: CacheOptions) -> Result<Arc<Informer>> {
        if let Some(existing) = self.lock().get(&key) {
            return Ok(existing.clone());
        }
        let (resource, scope) = self.resolve(&key).await?;
        if key.namespace.is_some() && scope == Scope::Cluster {
            return Err(Error::NamespaceOnClusterScoped {
                resource: key.resource.to_string(),
            });
        }
        let api: Api<DynamicObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let selectors = Selectors {
            labels: key.label_selector.clone(),
            fields: key.field_selector.clone(),
            shard: None,
        };
        let mut informers = self.lock();
        // Another caller may have started it while discovery ran.
        if let Some(existing) = informers.get(&key) {
            return Ok(existing.clone());
        }
        let informer = Informer::new(
            key.clone(),
            resource,
            options,
            self.assignment.clone(),
            self.fallback_logged.clone(),
        );
        let task = tokio::spawn(reflector::run(
            informer.clone(),
            api,
            selectors,
            self.retry_delay,
            self.pressure.clone(),
        ));
        informer.set_task(task);
        informers.insert(key, informer.clone());
        Ok(informer)
    }

    /// The plural resource name of `kind` in `group`/`version`, through API discovery.
    pub async fn resolve_kind(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<crate::config::ResourceName> {
        let gv = GroupVersion::gv(group, version);
        let described = if group.is_empty() {
            format!("{version} {kind}")
        } else {
            format!("{group}/{version} {kind}")
        };
        let found = kube::discovery::pinned_group(&self.client, &gv)
            .await
            .map_err(|source| Error::Discovery {
                resource: described.clone(),
                source,
            })?;
        let resources = found.versioned_resources(version);
        let available: Vec<String> = resources.iter().map(|(r, _)| r.kind.clone()).collect();
        resources
            .into_iter()
            .find(|(r, _)| r.kind == kind && !r.plural.contains('/'))
            .map(|(r, _)| crate::config::ResourceName {
                group: group.to_string(),
                version: version.to_string(),
                plural: r.plural,
            })
            .ok_or_else(|| Error::UnknownResource {
                resource: described,
                available,
            })
    }

    /// Every running informer.
    pub fn informers(&self) -> Vec<Arc<Informer>> {
        let mut all: Vec<_> = self.lock().values().cloned().collect();
        all.sort_by_key(|i| i.key().to_string());
        all
    }

    /// Stops the informer for `key` if nobody subscribes to it any more; returns whether it
    /// was stopped. Its watch and cache go away; asking for the key again starts afresh.
    pub fn release(&self, key: &WatchKey) -> bool {
        let mut informers = self.lock();
        match informers.get(key) {
            Some(informer) if informer.subscribers() == 0 => {
                informer.stop();
                informers.remove(key);
                true
            }
            _ => false,
        }
    }

    /// Stops every informer.
    pub fn shutdown(&self) {
        for informer in self.lock().drain().map(|(_, i)| i) {
            informer.stop();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WatchKey, Arc<Informer>>> {
        crate::util::lock(&self.informers)
    }

    /// The kind of `resource`, through API discovery.
    pub async fn kind_of(&self, resource: &crate::config::ResourceName) -> Result<String> {
        Ok(self.describe(resource).await?.0.kind)
    }

    async fn resolve(&self, key: &WatchKey) -> Result<(ApiResource, Scope)> {
        self.describe(&key.resource).await
    }

    async fn describe(&self, name: &crate::config::ResourceName) -> Result<(ApiResource, Scope)> {
        let gv = GroupVersion::gv(&name.group, &name.version);
        let group = kube::discovery::pinned_group(&self.client, &gv)
            .await
            .map_err(|source| Error::Discovery {
                resource: name.to_string(),
                source,
            })?;
        let resources = group.versioned_resources(&name.version);
        let available: Vec<String> = resources.iter().map(|(r, _)| r.plural.clone()).collect();
        resources
            .into_iter()
            .find(|(r, _)| r.plural == name.plural)
            .map(|(r, caps)| (r, caps.scope))
            .ok_or_else(|| Error::UnknownResource {
                resource: name.to_string(),
                available,
            })
    }
}
