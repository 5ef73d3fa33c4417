//! The built-in Kubernetes API simulator: kube-apiserver's REST protocol (discovery, list,
//! watch, get, create, update, patch, delete) over real HTTP on loopback, so that kube-rs,
//! `kubectl` and switchyard itself can run against it without a cluster.
//!
//! [`Simulator::start`] serves a fresh [`Cluster`]; [`Simulator::write_kubeconfig`] points
//! clients at it.

pub mod api;
pub mod churn;
pub mod cluster;
pub mod error;
pub mod kubeconfig;
pub mod protobuf;
pub mod resources;
pub mod table;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub use churn::ChurnConfig;
pub use cluster::{Cluster, ObjectRef};
pub use error::ApiError;

/// How a simulator is started.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// How many changes the watch history keeps.
    pub history: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: cluster::DEFAULT_HISTORY,
            bookmark_interval: Duration::from_secs(5),
        }
    }
}

/// A running simulator. Dropping it stops the server.
pub struct Simulator {
    cluster: Arc<Cluster>,
    addr: SocketAddr,
    close_watches: watch::Sender<u64>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
}

impl Simulator {
    /// Starts a simulator serving a new, empty cluster.
    pub async fn start(options: SimOptions) -> std::io::Result<Self> {
        let cluster = Arc::new(Cluster::new(options.history));
        Self::serve(cluster, options).await
    }

    /// Starts serving an existing cluster (to restart a server with its state kept).
    pub async fn serve(cluster: Arc<Cluster>, options: SimOptions) -> std::io::Result<Self> {
        let listener = TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let close_watches = watch::channel(0).0;
        let state = api::ApiState {
            cluster: cluster.clone(),
            close_watches: close_watches.clone(),
            bookmark_interval: options.bookmark_interval,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let app = api::router(state);
        let server = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "simulator server failed");
            }
        });
        Ok(Self {
            cluster,
            addr,
            close_watches,
            stop: Some(stop),
            server,
        })
    }

    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL clients use (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The cluster being served.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Writes a kubeconfig that points at this simulator.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        kubeconfig::write_kubeconfig(path, &self.url())
    }

    /// A kube-rs client for this simulator.
    pub fn client(&self) -> Result<kube::Client, kube::Error> {
        let uri = self
            .url()
            .parse()
            .expect("the simulator URL is a valid URI");
        kube::Client::try_from(kube::Config::new(uri))
    }

    /// Ends every open watch stream, as an API server restart or a load balancer would.
    pub fn close_watches(&self) {
        self.close_watches
            .send_modify(|generation| *generation += 1);
    }

    /// Starts churning ConfigMaps in this simulator's cluster until the task is aborted.
    pub fn start_churn(&self, config: ChurnConfig) -> JoinHandle<()> {
        churn::start(self.cluster.clone(), config)
    }

    /// Stops the server: open watches end, the port is released. The cluster lives on in
    /// [`Simulator::cluster`], so [`Simulator::serve`] can start it again.
    pub async fn stop(mut self) {
        self.shutdown();
        let server = std::mem::replace(&mut self.server, tokio::spawn(async {}));
        let _ = server.await;
    }

    fn shutdown(&mut self) {
        self.close_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}
