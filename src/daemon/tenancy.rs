//! Team resources in the running daemon: their watch feeds config reloads (a resource
//! changed is applied as a config change is, unchanged handlers keeping their queues),
//! each team Route is started only if the API server says its ServiceAccount may list and
//! watch what it watches, and each resource's status says how it went.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{ReloadError, Shared};
use crate::config::tenancy::{Merged, TeamKind, TeamResource, Verdict, load_with};
use crate::config::{Config, ResourceRef, RouteSource};
use crate::tenancy::{TeamWatch, may_watch};
use crate::util::lock;

/// How long a start waits for the first list of team resources before it runs without
/// them (and leaves stale finalizers alone).
pub(super) const FIRST_LIST: Duration = Duration::from_secs(30);

/// The team resources as last read, and the watch reading them.
pub(super) struct Teams {
    pub(super) watch: TeamWatch,
    pub(super) resources: std::sync::Mutex<Vec<TeamResource>>,
    pub(super) status: tokio::sync::Mutex<crate::tenancy::StatusWriter>,
}

impl Teams {
    /// Starts the watch for `config`'s `tenancy:` and waits (at most [`FIRST_LIST`]) for its
    /// first complete list; `None` without the section. The flag says whether the list came.
    pub(super) async fn start(config: &Config, client: &kube::Client) -> Option<(Self, bool)> {
        let tenancy = config.tenancy.as_ref()?;
        let watch = TeamWatch::start(client, tenancy.namespaces.as_deref());
        let mut resources = watch.subscribe();
        let listed = tokio::time::timeout(FIRST_LIST, resources.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
        if !listed {
            tracing::warn!(
                "the team Route and Handler resources could not be listed in time: the daemon starts without them and keeps trying"
            );
        }
        let now = resources.borrow().clone().unwrap_or_default();
        let teams = Self {
            watch,
            resources: std::sync::Mutex::new(now),
            status: tokio::sync::Mutex::new(crate::tenancy::StatusWriter::new(client.clone())),
        };
        Some((teams, listed))
    }
}

/// How often a team Handler's counts are written to its status.
const COUNTS_EVERY: Duration = Duration::from_secs(10);

/// Applies the team resources again each time they change, and writes the team Handlers'
/// counts now and then, until the daemon goes away.
pub(super) fn spawn(shared: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let mut changes = shared.teams.as_ref()?.watch.subscribe();
    let shared: Weak<Shared> = Arc::downgrade(shared);
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(COUNTS_EVERY);
        loop {
            let changed = tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    true
                }
                _ = tick.tick() => false,
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if !changed {
                shared.write_team_counts().await;
                continue;
            }
            let now = changes.borrow_and_update().clone().unwrap_or_default();
            if let Some(teams) = &shared.teams {
                *lock(&teams.resources) = now;
            }
            // A rejected reload (the file has mistakes) is in /status and the log already.
            let _ = shared.reload_from("resources").await;
        }
    }))
}

impl Shared {
    /// The config file at `path` with the team resources merged in, each team Route
    /// reviewed; the verdicts to write. Without `tenancy:` running, the file alone.
    pub(super) async fn load_with_teams(
        &self,
        path: &Path,
    ) -> Result<(Config, Vec<Verdict>), ReloadError> {
        let resources = match &self.teams {
            Some(teams) => lock(&teams.resources).clone(),
            None => Vec::new(),
        };
        let mut refused: BTreeMap<(String, String), String> = BTreeMap::new();
        loop {
            let kept: Vec<TeamResource> = resources
                .iter()
                .filter(|r| {
                    r.kind != TeamKind::Route
                        || !refused.contains_key(&(r.namespace.clone(), r.name.clone()))
                })
                .cloned()
                .collect();
            let merged = merge(path, kept).await?;
            let denied = self.review_routes(&merged.config).await;
            if denied.is_empty() {
                let mut verdicts = merged.verdicts;
                verdicts.extend(refused.into_iter().map(|((namespace, name), why)| {
                    let generation = resources
                        .iter()
                        .find(|r| {
                            r.kind == TeamKind::Route && r.namespace == namespace && r.name == name
                        })
                        .and_then(|r| r.generation);
                    Verdict {
                        kind: TeamKind::Route,
                        namespace,
                        name,
                        generation,
                        problems: vec![why],
                    }
                }));
                return Ok((merged.config, verdicts));
            }
            refused.extend(denied);
        }
    }

    /// Each team Route whose ServiceAccount the API server does not let list and watch
    /// what the route watches, with what it said.
    async fn review_routes(&self, config: &Config) -> BTreeMap<(String, String), String> {
        let mut denied = BTreeMap::new();
        for route in &config.routes {
            let Some(owner) = &route.owner else { continue };
            let RouteSource::Informer(informer) = &route.source else {
                continue;
            };
            let Some(spec) = config.informers.iter().find(|i| i.name == *informer) else {
                continue;
            };
            let (group, plural) = match &spec.resource {
                ResourceRef::Plural(name) => (name.group.clone(), name.plural.clone()),
                ResourceRef::Kind {
                    group,
                    version,
                    kind,
                } => {
                    match self.informers.resolve_kind(group, version, kind).await {
                        Ok(name) => (name.group, name.plural),
                        // Not served yet: the route waits for it as any route does.
                        Err(_) => continue,
                    }
                }
            };
            if let Err(why) = may_watch(
                &self.client,
                &owner.user(),
                &group,
                &plural,
                &owner.namespace,
            )
            .await
            {
                denied.insert((owner.namespace.clone(), owner.name.clone()), why);
            }
        }
        denied
    }

    /// Writes each team Handler's counts to its status.
    async fn write_team_counts(&self) {
        let Some(teams) = &self.teams else { return };
        let topology = self.topology();
        let counts: Vec<_> = topology
            .handlers
            .iter()
            .filter_map(|handler| {
                let owner = handler.spec().owner.as_ref()?;
                let detail = handler.detail();
                let counts = crate::tenancy::Counts {
                    processed: detail.status.processed,
                    failed: detail.status.failed,
                    dead_letters: detail.status.dead_letters as u64,
                    // A plugin that cannot be loaded (a pull refused) says why first.
                    last_error: detail
                        .status
                        .plugin_error
                        .clone()
                        .or_else(|| detail.last_errors.last().map(|e| e.error.clone())),
                };
                Some(((owner.namespace.clone(), owner.name.clone()), counts))
            })
            .collect();
        teams.status.lock().await.write_counts(&counts).await;
    }

    /// Writes the team resources' statuses.
    pub(super) async fn write_team_status(&self, verdicts: &[Verdict]) {
        if let Some(teams) = &self.teams {
            teams.status.lock().await.write(verdicts).await;
        }
    }
}

/// [`load_with`], off the async runtime.
async fn merge(path: &Path, resources: Vec<TeamResource>) -> Result<Merged, ReloadError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || load_with(&path, &resources))
        .await
        .map_err(ReloadError::Parse)?
        .map_err(ReloadError::Invalid)
}
