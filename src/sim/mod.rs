//! The built-in Kubernetes API simulator: kube-apiserver's REST protocol over real HTTP on
//! loopback, so that kube-rs, `kubectl` and switchyard itself can run against it without a
//! cluster.
//!
//! - [`cluster`] and [`object`]: the objects, one resourceVersion counter, the change
//!   history; writes (uid, creationTimestamp, generation, finalizers, CRDs).
//! - [`history`]: reads at a version (paging with consistent snapshots, `Exact` reads) and
//!   where watches start.
//! - [`api`], [`discovery`], [`list`], [`watch`], [`table`], [`openapi`]: the HTTP protocol.
//! - [`authz`]: bearer tokens, impersonation, RBAC and SubjectAccessReviews.
//! - [`faults`] and [`control`]: injected faults, from tests or over HTTP.
//! - [`config`] and [`crd`]: the simulator config and custom resources.
//! - [`churn`]: steady changes for demos and load.
//!
//! [`Simulator::start`] serves a fresh [`Cluster`]; [`Simulator::write_kubeconfig`] points
//! clients at it.

pub mod api;
pub mod authz;
pub mod churn;
pub mod cluster;
pub mod config;
pub mod control;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod features;
pub mod fields;
pub mod history;
pub mod kubeconfig;
pub mod list;
pub mod object;
pub mod openapi;
pub mod protobuf;
pub mod resources;
pub mod table;
pub mod tls;
pub mod watch;
pub mod writes_log;

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use churn::{Churn, ChurnConfig, ChurnCounts, ChurnKind, UnknownChurnKind};
pub use cluster::{Cluster, ObjectRef};
pub use config::SimConfig;
pub use error::ApiError;
pub use faults::{FaultError, Faults, RequestFailure};
pub use features::FeatureGates;

use watch::WatchSignals;

/// How a simulator is started.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// How many changes the history keeps (for watches to resume from, continue tokens and
    /// `Exact` reads) before the oldest are compacted.
    pub history: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// How long a list or watch for a resourceVersion the cluster has not reached waits for
    /// it before answering 504 (kube-apiserver waits 3 seconds).
    pub version_wait: Duration,
    /// Custom resources and objects to start with (applied by [`Simulator::start`], not by
    /// [`Simulator::serve`], whose cluster already has its state).
    pub config: SimConfig,
    /// The admin's token: answer 401 to every request without `Authorization: Bearer TOKEN`
    /// (or a configured user's token). With `authorization: RBAC` in the config and no
    /// token here, one is made at start ([`Simulator::token`]).
    pub token: Option<String>,
    /// Serve HTTPS with a certificate authority made at start ([`tls::SimTls`]).
    pub tls: bool,
    /// The feature gate `ShardedListAndWatch` (Kubernetes 1.36, alpha): honour
    /// `shardSelector` on lists and watches and echo it in `ListMeta.shardInfo`. Off, the
    /// parameter is ignored, as an API server without the feature does.
    pub sharded_list_and_watch: bool,
    /// The feature gate `WatchList` (on by default): serve streaming lists, a watch with
    /// `sendInitialEvents=true`. Off, such a watch is refused as invalid (422), as an API
    /// server without the feature refuses it.
    pub watch_list: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: cluster::DEFAULT_HISTORY,
            bookmark_interval: Duration::from_secs(5),
            version_wait: Duration::from_secs(3),
            config: SimConfig::default(),
            token: None,
            tls: false,
            sharded_list_and_watch: false,
            watch_list: true,
        }
    }
}

/// `listener` with TCP_NODELAY on every connection it accepts.
fn nodelay(listener: TcpListener) -> impl axum::serve::Listener<Addr = SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "simulator: TCP_NODELAY not set");
        }
    })
}

/// What the server loop is asked to do.
#[derive(Debug)]
pub enum ServerCommand {
    /// Stop serving for good.
    Stop,
    /// Stop serving, stay down for `down`, then serve again on the same address.
    Restart {
        /// How long the port stays closed.
        down: Duration,
        /// Told when the server serves again (or could not).
        done: Option<oneshot::Sender<io::Result<()>>>,
    },
}

/// A running simulator. Dropping it stops the server.
pub struct Simulator {
    cluster: Arc<Cluster>,
    faults: Arc<Faults>,
    writes: Arc<writes_log::WriteLog>,
    addr: SocketAddr,
    watches: WatchSignals,
    commands: mpsc::UnboundedSender<ServerCommand>,
    server: Option<JoinHandle<()>>,
    token: Option<String>,
    tls: Option<tls::SimTls>,
}

impl Simulator {
    /// Starts a simulator serving a new cluster with what `options.config` declares.
    pub async fn start(options: SimOptions) -> io::Result<Self> {
        let cluster = Arc::new(Cluster::new(options.history));
        cluster
            .apply_config(&options.config)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("sim config: {e}")))?;
        Self::serve(cluster, options).await
    }

    /// Starts serving an existing cluster (to restart a server with its state kept).
    pub async fn serve(cluster: Arc<Cluster>, options: SimOptions) -> io::Result<Self> {
        let listener = TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let (commands, received) = mpsc::unbounded_channel();
        let faults = Arc::new(Faults::default());
        let writes = Arc::new(writes_log::WriteLog::default());
        let watches = WatchSignals::default();
        let config = &options.config;
        let rbac = config.authorization == config::AuthorizationMode::RBAC;
        let token = options
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .or_else(|| rbac.then(|| uuid::Uuid::new_v4().simple().to_string()));
        let access = (token.is_some() || !config.users.is_empty()).then(|| {
            Arc::new(authz::Access::new(
                cluster.clone(),
                token.as_deref(),
                &config.users,
                config.authorization,
            ))
        });
        let state = api::ApiState {
            cluster: cluster.clone(),
            faults: faults.clone(),
            writes: writes.clone(),
            watches: watches.clone(),
            bookmark_interval: options.bookmark_interval,
            version_wait: options.version_wait,
            server: commands.clone(),
            sharded_list_and_watch: options.sharded_list_and_watch,
            watch_list: options.watch_list,
            access: access.clone(),
        };
        let tls = options.tls.then(tls::SimTls::generate).transpose()?;
        let serving = Serving {
            tls: tls.clone(),
            access,
        };
        let server = tokio::spawn(serve_loop(listener, addr, state, serving, received));
        Ok(Self {
            cluster,
            faults,
            writes,
            addr,
            watches,
            commands,
            server: Some(server),
            token,
            tls,
        })
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients use (`http://127.0.0.1:PORT`, or `https://` with TLS).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The admin's bearer token, if the simulator demands one.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The CA certificate (PEM) clients must trust, when the simulator serves HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(tls::SimTls::ca_pem)
    }

    /// The cluster being served.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The faults injected into this simulator's API.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// The writes served, with each client's User-Agent and field manager.
    pub fn writes(&self) -> &Arc<writes_log::WriteLog> {
        &self.writes
    }

    /// Writes a kubeconfig that points at this simulator.
    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        let yaml =
            kubeconfig::kubeconfig_yaml_with(&self.url(), self.ca_pem(), self.token.as_deref());
        kubeconfig::write_kubeconfig_yaml(path, &yaml)
    }

    /// A kube-rs client for this simulator.
    pub fn client(&self) -> Result<kube::Client, kube::Error> {
        let uri = self
            .url()
            .parse()
            .expect("the simulator URL is a valid URI");
        let mut config = kube::Config::new(uri);
        config.root_cert = self.tls.as_ref().map(|t| vec![t.ca_der().to_vec()]);
        config.auth_info.token = self.token.clone().map(Into::into);
        kube::Client::try_from(config)
    }

    /// Ends every open watch stream, as an API server restart or a load balancer would.
    pub fn close_watches(&self) {
        self.watches.close_all();
    }

    /// Starts churning this simulator's cluster until the churn is aborted (or reaches its
    /// `max_changes`).
    pub fn start_churn(&self, config: ChurnConfig) -> Churn {
        churn::start(self.cluster.clone(), config)
    }

    /// Stops the server (every open watch ends, the port closes), waits `down`, and serves
    /// the same cluster on the same address again; returns once it serves.
    pub async fn restart(&self, down: Duration) -> io::Result<()> {
        let (done, result) = oneshot::channel();
        let command = ServerCommand::Restart {
            down,
            done: Some(done),
        };
        self.commands
            .send(command)
            .map_err(|_| io::Error::other("the simulator has stopped"))?;
        result
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the simulator has stopped")))
    }

    /// Stops the server: open watches end, the port is released. The cluster lives on in
    /// [`Simulator::cluster`], so [`Simulator::serve`] can start it again.
    pub async fn stop(mut self) {
        let _ = self.commands.send(ServerCommand::Stop);
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.watches.set_stopping(true);
        let _ = self.commands.send(ServerCommand::Stop);
    }
}

/// How the server loop serves: plain HTTP or TLS, open or behind tokens.
struct Serving {
    tls: Option<tls::SimTls>,
    access: Option<Arc<authz::Access>>,
}

/// Serves until told to stop; a restart closes the listener, waits, and binds the same
/// address again.
async fn serve_loop(
    mut listener: TcpListener,
    addr: SocketAddr,
    state: api::ApiState,
    serving: Serving,
    mut commands: mpsc::UnboundedReceiver<ServerCommand>,
) {
    let watches = state.watches.clone();
    let mut app = api::router(state);
    if let Some(access) = serving.access {
        app = app.layer(axum::middleware::from_fn_with_state(
            access,
            authz::authenticate,
        ));
    }
    loop {
        watches.set_stopping(false);
        let (shutdown, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let server = match &serving.tls {
            Some(tls) => tokio::spawn(
                axum::serve(tls.listener(listener), app.clone())
                    .with_graceful_shutdown(stopped)
                    .into_future(),
            ),
            // TCP_NODELAY, as Go (and so kube-apiserver) sets it: a watch event is a small
            // write, which Nagle's algorithm would hold back until the last one is acknowledged.
            None => tokio::spawn(
                axum::serve(nodelay(listener), app.clone())
                    .with_graceful_shutdown(stopped)
                    .into_future(),
            ),
        };
        let command = commands.recv().await.unwrap_or(ServerCommand::Stop);
        watches.set_stopping(true);
        let _ = shutdown.send(());
        if let Ok(Err(e)) = server.await {
            tracing::error!(error = %e, "simulator server failed");
        }
        let ServerCommand::Restart { down, done } = command else {
            return;
        };
        tokio::time::sleep(down).await;
        let bound = bind_again(addr).await;
        let result = bound
            .as_ref()
            .map(drop)
            .map_err(|e| io::Error::new(e.kind(), e.to_string()));
        if let Some(done) = done {
            let _ = done.send(result);
        }
        match bound {
            Ok(l) => listener = l,
            Err(e) => {
                tracing::error!(error = %e, %addr, "simulator could not listen again");
                return;
            }
        }
    }
}

/// Binds `addr` again, retrying briefly while the old socket lets go of it.
async fn bind_again(addr: SocketAddr) -> io::Result<TcpListener> {
    let mut attempt = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if attempt < 50 && e.kind() == io::ErrorKind::AddrInUse => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
