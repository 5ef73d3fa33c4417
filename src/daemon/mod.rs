//! The daemon: builds every stage from a [`Config`] (plugins, handlers, informers, routes,
//! admin API), runs them, reports their status and shuts them down in order. What the
//! stages share with the admin API, and the status read from it, is in [`shared`].

pub mod client;
mod config_watcher;
mod reload;
mod sharded;
mod shared;
mod tenancy;
pub mod topology;
mod waiting;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::host::AllowedHosts;
use crate::admin::server::ListenerLimits;
use crate::config::{Config, HaMode};
use crate::election::Election;
use crate::handler::Handler;
use crate::plugin::{PluginLogs, PluginRegistry, PluginWatcher};
use crate::state::StaleFinalizer;

pub use config_watcher::ConfigWatcher;
pub use reload::{ReloadError, ReloadHistory, ReloadRecord};
pub use shared::{InformerStatus, Shared, Status};
pub use topology::{Changes, Plan, Topology, Waiting};

/// Errors starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file could not be read or used.
    #[error("cannot connect to Kubernetes: {}: {source}", .path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given, none is in `KUBECONFIG` or `~/.kube/config`, and the
    /// daemon is not in a pod.
    #[error(
        "cannot connect to Kubernetes: no --kubeconfig or config `kubeconfig`, no usable KUBECONFIG or ~/.kube/config, and KUBERNETES_SERVICE_HOST is not set: {0}"
    )]
    NoKubeconfig(#[source] kube::config::KubeconfigError),
    /// In a pod, the service account cannot be used.
    #[error("cannot connect to Kubernetes from inside the cluster: {0}")]
    InCluster(#[source] client::InClusterError),
    /// The client could not be built from the config.
    #[error("cannot connect to Kubernetes: {}", crate::util::kube_error(.0))]
    Client(#[source] kube::Error),
    /// The wasm engine could not start.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::Error),
    /// The traces exporter (`tracing:`) could not be built.
    #[error(transparent)]
    Traces(#[from] crate::traces::Error),
    /// A watch could not be set up.
    #[error("{watch}: {source}")]
    Watch {
        /// The watch (`v1/pods in default`) or the informer.
        watch: String,
        /// Why.
        #[source]
        source: crate::informer::Error,
    },
    /// A resource a route watches is not served by the API server.
    #[error("{what}: {why}")]
    NotServed {
        /// What names the resource.
        what: String,
        /// Why it is taken as not served.
        why: String,
    },
    /// A route's kinds match no informer.
    #[error("route {route:?}: no informer watches kind {kind:?}")]
    UnwatchedKind {
        /// The route.
        route: String,
        /// The kind no informer watches.
        kind: String,
    },
    /// The state store cannot be opened or read.
    #[error(transparent)]
    State(#[from] crate::state::Error),
    /// The admin API's token cannot be read.
    #[error("admin API: {0}")]
    AdminToken(#[source] crate::config::TokenError),
    /// The admin API's access rule cannot be set up (no token beyond loopback).
    #[error("admin API: {0}")]
    AdminAccess(#[source] crate::admin::auth::Error),
    /// The admin API could not bind its address.
    #[error("cannot listen on {addr} for the admin API: {source}")]
    AdminBind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The probes and metrics listener could not bind its address.
    #[error("cannot listen on {addr} for the probes and metrics (admin.probes_listen): {source}")]
    ProbesBind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of daemon operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to start a daemon beyond what its config says.
#[derive(Default)]
pub struct Options {
    /// Use this client instead of the one the config's kubeconfig describes.
    pub client: Option<kube::Client>,
    /// Listen for the admin API here instead of the config's address.
    pub admin_listen: Option<SocketAddr>,
    /// Serve the probes and metrics here instead of the config's `admin.probes_listen`:
    /// `Some(None)` for nowhere, `None` to follow the config.
    pub probes_listen: Option<Option<SocketAddr>>,
    /// Reload the config when its file changes (`POST /reload` works either way).
    pub watch_config: bool,
    /// Use this kubeconfig instead of the config's `kubeconfig` (`run --kubeconfig`).
    pub kubeconfig: Option<PathBuf>,
    /// Use this context of the kubeconfig instead of its current one (`run --context`).
    pub context: Option<String>,
    /// Send plugin log lines here (subscribe to it before the start to see every line from
    /// the first list on); a new feed when `None`.
    pub logs: Option<PluginLogs>,
}

/// A running daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    config_watcher: Option<ConfigWatcher>,
    admin_addr: SocketAddr,
    probes_addr: Option<SocketAddr>,
    /// The admin API's server and the probes listener's, each with its stop signal.
    servers: Vec<Server>,
    watcher: Option<PluginWatcher>,
    /// Starts routes waiting for a resource once it is served.
    waiting_task: JoinHandle<()>,
    /// Applies the team resources as they change (`tenancy:`).
    teams_task: Option<JoinHandle<()>>,
    /// The election's stop signal and task, in leader mode.
    election: Option<Stoppable>,
    /// The membership's stop signal and task, in sharded mode.
    membership: Option<Stoppable>,
}

/// The listeners, bound before anything else starts.
struct Listeners {
    admin: TcpListener,
    admin_addr: SocketAddr,
    probes: Option<(TcpListener, SocketAddr)>,
}

impl Listeners {
    /// Binds the admin API's address and the probes listener's, if any: a busy port fails
    /// the start before any informer or handler runs.
    async fn bind(config: &Config, options: &Options) -> Result<Self> {
        let addr = options.admin_listen.unwrap_or(config.admin_listen);
        let admin = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::AdminBind { addr, source })?;
        let admin_addr = admin
            .local_addr()
            .map_err(|source| Error::AdminBind { addr, source })?;
        let probes = match options.probes_listen.unwrap_or(config.probes_listen) {
            Some(addr) => {
                let probes = |source| Error::ProbesBind { addr, source };
                let listener = TcpListener::bind(addr).await.map_err(probes)?;
                let bound = listener.local_addr().map_err(probes)?;
                Some((listener, bound))
            }
            None => None,
        };
        Ok(Self {
            admin,
            admin_addr,
            probes,
        })
    }
}

/// With `tenancy:`, starts the watch of team resources and merges those listed into
/// `config`. Also says whether stale finalizers may be released (every team route is
/// known), and what to write on each team resource once the daemon runs.
async fn with_teams(
    config: Config,
    shared: &mut Arc<Shared>,
) -> (Config, bool, Vec<crate::config::tenancy::Verdict>) {
    let Some((teams, listed)) = tenancy::Teams::start(&config, &shared.client).await else {
        return (config, true, Vec::new());
    };
    Arc::get_mut(shared)
        .expect("nothing else holds the shared state yet")
        .teams = Some(teams);
    match shared.load_with_teams(&config.source).await {
        Ok((merged, verdicts)) => (merged, listed, verdicts),
        Err(e) => {
            tracing::error!(error = %e, "cannot merge the team resources; the daemon starts without them");
            (config, false, Vec::new())
        }
    }
}

/// The API server's client: the one given in `options`, or one from the kubeconfig named
/// there or in `config` (or the default one).
async fn kube_client(config: &Config, options: &mut Options) -> Result<kube::Client> {
    if let Some(client) = options.client.take() {
        return Ok(client);
    }
    let kubeconfig = options
        .kubeconfig
        .as_deref()
        .or(config.kubeconfig.as_deref());
    let kube_config = client::client_config(kubeconfig, options.context.as_deref()).await?;
    tracing::info!(server = %without_userinfo(&kube_config.cluster_url), "API server");
    kube::Client::try_from(kube_config).map_err(Error::Client)
}

/// The API server's URL as logged: without a `user:password@` it may carry.
fn without_userinfo(url: &axum::http::Uri) -> String {
    let text = url.to_string();
    match url.authority().map(|a| a.as_str()) {
        Some(authority) if authority.contains('@') => {
            let host = authority.rsplit('@').next().unwrap_or_default();
            text.replacen(authority, host, 1)
        }
        _ => text,
    }
}

/// A background task and the signal that stops it.
type Stoppable = (watch::Sender<bool>, JoinHandle<()>);

/// A listener's server task and the signal that stops it.
type Server = (oneshot::Sender<()>, JoinHandle<()>);

/// Starts the high-availability tasks `config` asks for, recording their status in
/// `shared`: the shard membership (sharded mode; it starts first, as informers wait for
/// this replica's share before they list) and the leader election (leader mode; it runs
/// before the handlers start, which wait, paused by the gate, until this replica leads,
/// while the informers fill their caches).
fn start_ha(
    config: &Config,
    shared: &mut Arc<Shared>,
    assignment_tx: Option<sharded::AssignmentTx>,
) -> (Option<Stoppable>, Option<Stoppable>) {
    let membership = assignment_tx.map(|tx| {
        let (stop, stopped) = watch::channel(false);
        let (membership, task) = crate::sharding::Membership::start(
            client::with_lease_namespace(&config.ha, &shared.client),
            shared.client.clone(),
            tx,
            stopped,
        );
        let unique = Arc::get_mut(shared).expect("nothing else holds the shared state yet");
        unique.shards = Some(membership.status());
        unique.tenure = Some(membership.tenure());
        (stop, task)
    });
    let election = (config.ha.mode == HaMode::Leader).then(|| {
        let (stop, stopped) = watch::channel(false);
        let (election, task) = Election::start(
            client::with_lease_namespace(&config.ha, &shared.client),
            shared.client.clone(),
            shared.active.clone(),
            stopped,
        );
        Arc::get_mut(shared)
            .expect("nothing else holds the shared state yet")
            .election = Some(election.status());
        (stop, task)
    });
    (membership, election)
}

impl Listeners {
    /// Serves the admin API (and the probes, when their listener is bound); returns the
    /// servers and the probes' address.
    fn serve(
        self,
        config: &Config,
        shared: &Arc<Shared>,
        policy: crate::admin::auth::AccessPolicy,
    ) -> (Vec<Server>, Option<SocketAddr>) {
        let hosts = AllowedHosts::new(self.admin_addr, config.admin_allowed_hosts.clone());
        let app = crate::admin::router(shared.clone(), policy, hosts);
        let limits = |max_connections| ListenerLimits {
            header_read_timeout: config.header_read_timeout,
            max_connections,
        };
        let admin_limits = limits(config.admin_max_connections);
        let mut servers = vec![serve("admin API", self.admin, app, admin_limits)];
        let probes_addr = self.probes.map(|(listener, addr)| {
            let app = crate::admin::probes_router(shared.clone());
            let probes_limits = limits(config.probes_max_connections);
            servers.push(serve("probes listener", listener, app, probes_limits));
            addr
        });
        (servers, probes_addr)
    }
}

/// Serves `app` on `listener` within `limits` until the returned sender is used (or
/// dropped).
fn serve(
    what: &'static str,
    listener: TcpListener,
    app: axum::Router,
    limits: ListenerLimits,
) -> Server {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(crate::admin::server::serve(
        what, listener, app, limits, stopped,
    ));
    (stop, task)
}

impl Daemon {
    /// Builds and starts every stage. Plugins that fail to load are reported in /status and
    /// their events wait in the queue; a route on a resource the API server does not serve
    /// waits for it (in /readyz and /status) while the rest runs; a route whose resource
    /// cannot be watched for another reason is an error.
    pub async fn start(config: Config, mut options: Options) -> Result<Self> {
        // Refuse an unprotected admin API, and bind its port and the probes port, before
        // starting anything: a second daemon on a busy port fails before any handler runs.
        let policy = access_policy(&config, options.admin_listen.unwrap_or(config.admin_listen))?;
        let listeners = Listeners::bind(&config, &options).await?;
        let client = kube_client(&config, &mut options).await?;
        let (assignment_tx, assignment) = sharded::channel(&config);
        let commit_latency = crate::metrics::latency_histogram();
        let state = open_state(&config, &commit_latency)?;
        let (mut shared, watcher) = Shared::new(
            &config,
            client,
            options.logs.unwrap_or_default(),
            assignment,
            state.as_ref(),
        )?;
        if state.is_some() {
            shared.metrics.register(
                "switchyard_state_write_duration_seconds",
                "How long in seconds one group commit of the state store takes",
                commit_latency,
            );
            shared.state_metrics.register(&shared.metrics);
        }
        Arc::get_mut(&mut shared)
            .expect("nothing else holds the shared state yet")
            .state = state;
        let (config, teams_listed, verdicts) = with_teams(config, &mut shared).await;
        // Only once the team routes are merged: the store keeps what the config runs.
        let stale_finalizers = match &shared.state {
            Some(state) if teams_listed => prune_state(state, &config)?,
            _ => Vec::new(),
        };
        let (membership, election) = start_ha(&config, &mut shared, assignment_tx);
        let applied = Topology::empty(config.clone())
            .apply(config.clone(), &shared.stages())
            .await;
        let topology = match applied {
            Ok((topology, _)) => topology,
            Err(e) => {
                if let Some(watcher) = watcher {
                    watcher.stop().await;
                }
                return Err(e);
            }
        };
        for w in &topology.waiting {
            tracing::warn!(watch = %w.watch, reason = %w.reason, routes = %w.routes.join(", "), "the API server does not serve this resource yet: its routes wait for it");
        }
        *crate::util::write(&shared.topology) = Arc::new(topology);
        shared.write_team_status(&verdicts).await;
        let running = Arc::downgrade(&shared);
        let running = Box::new(move || {
            let topology = running.upgrade()?.topology();
            let routes = topology.config.routes.iter();
            Some(
                routes
                    .map(|r| (r.name.clone(), r.finalizer.clone()))
                    .collect(),
            )
        });
        topology::release_stale(stale_finalizers, running, &shared.stages());
        let waiting_task = waiting::spawn(&shared);
        let teams_task = tenancy::spawn(&shared);
        let config_watcher = if options.watch_config {
            match ConfigWatcher::start(shared.clone()) {
                Ok(watcher) => Some(watcher),
                Err(e) => {
                    tracing::warn!(error = %e, "the config file will not be reloaded when it changes");
                    None
                }
            }
        } else {
            None
        };
        let admin_addr = listeners.admin_addr;
        let (servers, probes_addr) = listeners.serve(&config, &shared, policy);
        let probes = probes_addr.map_or_else(|| "off".to_string(), |a| a.to_string());
        let threads = tokio::runtime::Handle::current().metrics().num_workers();
        tracing::info!(admin = %admin_addr, probes, threads, handlers = config.handlers.len(), routes = config.routes.len(), "switchyard started");
        Ok(Self {
            shared,
            config_watcher,
            admin_addr,
            probes_addr,
            servers,
            watcher,
            waiting_task,
            teams_task,
            election,
            membership,
        })
    }

    /// Where the probes and metrics listener listens, if anywhere.
    pub fn probes_addr(&self) -> Option<SocketAddr> {
        self.probes_addr
    }

    /// Where the admin API listens.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The admin API's base URL.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// What plugins log.
    pub fn plugin_logs(&self) -> &PluginLogs {
        &self.shared.logs
    }

    /// A snapshot of every stage's state.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// The running handler named `name`.
    pub fn handler(&self, name: &str) -> Option<Arc<Handler>> {
        self.shared.handler(name)
    }

    /// Reads the config file again and applies the difference; see [`Shared::reload`].
    pub async fn reload(&self) -> Result<Plan, ReloadError> {
        self.shared.reload().await
    }

    /// Waits until every informer has listed its resource.
    pub async fn wait_until_synced(&self) {
        for informer in self.shared.informers.informers() {
            informer.wait_until_synced().await;
        }
    }

    /// The plugins in use.
    pub fn plugins(&self) -> &Arc<PluginRegistry> {
        &self.shared.plugins
    }

    /// Abandons plugin loads under way, stops the plugin folder watcher and the watches,
    /// lets handlers finish queued work for up to `grace`, then stops the admin API and the
    /// probes listener.
    pub async fn shut_down(mut self, grace: Duration) {
        // Pulls under way (a registry that never answers) are abandoned, not waited for.
        self.shared.plugins.shut_down();
        self.waiting_task.abort();
        if let Some(task) = &self.teams_task {
            task.abort();
        }
        if let Some(watcher) = self.config_watcher.take() {
            watcher.stop().await;
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.stop().await;
        }
        // A reload under way finishes first; none starts after.
        let _reloading = self.shared.reloading.lock().await;
        self.shared.informers.shutdown();
        let handlers = self.shared.handlers();
        if let Some((stop, task)) = self.election.take() {
            // In leader mode no call starts from here on: a successor may take over as soon
            // as the Lease is released, so queued events are not drained; calls in flight
            // finish (for up to the grace) before the Lease is released.
            self.shared.active.send_replace(false);
            futures::future::join_all(handlers.iter().map(|h| h.shut_down(grace))).await;
            let _ = stop.send(true);
            let _ = task.await;
        } else {
            futures::future::join_all(handlers.iter().map(|h| h.shut_down(grace))).await;
        }
        if let Some((stop, task)) = self.membership.take() {
            // In sharded mode the Lease goes once the queues are drained, so the others
            // take over this replica's share at their next poll.
            let _ = stop.send(true);
            let _ = task.await;
        }
        if let Some(traces) = self.shared.traces.clone() {
            // The last spans (the drained events') are sent before the daemon stops.
            let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        }
        if let Some(state) = &self.shared.state {
            // While commits fail the writer keeps retrying: wait for it no longer than the
            // grace; what it still holds is delivered again after the next start.
            if tokio::time::timeout(grace, state.flush()).await.is_err() {
                tracing::error!(store = %state.path().display(), "the state store did not commit within the grace; its last changes are delivered again after the next start");
            }
        }
        for (stop, task) in std::mem::take(&mut self.servers) {
            let _ = stop.send(());
            let _ = task.await;
        }
        tracing::info!("switchyard stopped");
    }
}

/// Opens the state store of `config`, if it has one, and drops what it keeps of routes and
/// handlers no longer configured; with the finalizers of routes that no route of `config`
/// holds objects with any more, to take off what they delivered.
fn open_state(
    config: &Config,
    commit_latency: &prometheus_client::metrics::histogram::Histogram,
) -> Result<Option<crate::state::State>> {
    let Some(spec) = &config.state else {
        return Ok(None);
    };
    let histogram = commit_latency.clone();
    let observe = Box::new(move |took: Duration| histogram.observe(took.as_secs_f64()));
    let state = crate::state::State::open(spec, Some(observe))?;
    tracing::info!(store = %state.path().display(), "state store open");
    Ok(Some(state))
}

/// Drops what the store holds for routes and handlers `config` no longer has, and returns
/// the finalizers its objects still carry that no route of `config` holds them with.
fn prune_state(state: &crate::state::State, config: &Config) -> Result<Vec<StaleFinalizer>> {
    let routes = config.routes.iter().map(|r| r.name.as_str()).collect();
    let handlers = config.handlers.iter().map(|h| h.name.as_str()).collect();
    let held = config
        .routes
        .iter()
        .filter_map(|r| r.finalizer.as_deref())
        .collect();
    state.retain(&routes, &handlers, &held)?;
    Ok(state.stale_finalizers(&held)?)
}

/// The admin API's access rule for `addr`: refused beyond loopback without a token.
fn access_policy(config: &Config, addr: SocketAddr) -> Result<crate::admin::auth::AccessPolicy> {
    let token = config
        .admin_token
        .as_ref()
        .map(|source| source.read())
        .transpose()
        .map_err(Error::AdminToken)?;
    crate::admin::auth::AccessPolicy::new(addr, token).map_err(Error::AdminAccess)
}

#[cfg(test)]
mod tests {
    use super::without_userinfo;

    #[test]
    fn the_logged_api_server_url_carries_no_credentials() {
        let with = "https://admin:s3cret@k8s.example.com:6443/base"
            .parse()
            .unwrap();
        assert_eq!(without_userinfo(&with), "https://k8s.example.com:6443/base");
        let plain = "https://10.0.0.1:6443/".parse().unwrap();
        assert_eq!(without_userinfo(&plain), "https://10.0.0.1:6443/");
    }
}
