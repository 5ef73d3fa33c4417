//! [`TestDaemon`]: a daemon running a config written into a temporary folder against a
//! simulator, with an admin client that carries the token, torn down after the test.
//!
//! Starting returns only once every informer has synced, and the fixture subscribes to the
//! plugin log before that: a test begins where the daemon sees the cluster, and no line a
//! plugin logs during the first list is lost.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use reqwest::Method;
use serde_json::Value;
use switchyard::config;
use switchyard::daemon::{self, Daemon};
use switchyard::plugin::PluginLog;
use switchyard::sim::Simulator;
use tokio::sync::broadcast;

/// How long [`TestDaemon::stop`] lets handlers finish queued work.
const GRACE: Duration = Duration::from_secs(5);

/// A simulator, a daemon on a config in a temporary folder, and an authorized admin client.
///
/// [`TestDaemon::stop`] shuts the daemon down and stops the simulator; dropping the fixture
/// without it (a failed assertion) starts the same in the background, and the test's
/// runtime ends whatever is left.
pub struct TestDaemon {
    sim: Option<Simulator>,
    daemon: Option<Daemon>,
    dir: tempfile::TempDir,
    own_plugins: Option<PathBuf>,
    client: kube::Client,
    http: reqwest::Client,
    /// Every line the plugins log, from before the first list on.
    pub logs: broadcast::Receiver<PluginLog>,
}

/// What a [`TestDaemon`] starts with; see [`TestDaemon::builder`].
pub struct Builder {
    yaml: String,
    sim: Option<Simulator>,
    plugin_files: Vec<(String, String)>,
    admin_listen: Option<SocketAddr>,
}

impl Builder {
    /// Listens for the admin API on `addr` instead of a free loopback port (the probes
    /// listener stays on a free loopback port).
    #[must_use]
    pub fn admin_listen(mut self, addr: &str) -> Self {
        self.admin_listen = Some(addr.parse().expect("a socket address"));
        self
    }

    /// Runs against `sim` (which the fixture then owns and stops) instead of a new simulator.
    #[must_use]
    pub fn sim(mut self, sim: Simulator) -> Self {
        self.sim = Some(sim);
        self
    }

    /// Gives the daemon a plugins folder of its own, in the fixture's folder, holding
    /// `FILE.wasm` as a copy of the built plugin `built`; the config's `plugins_dir` points
    /// there.
    #[must_use]
    pub fn plugin_file(mut self, file: &str, built: &str) -> Self {
        self.plugin_files.push((file.into(), built.into()));
        self
    }

    /// Starts the simulator (unless given one) and the daemon, and waits until the daemon's
    /// informers have synced.
    pub async fn start(self) -> TestDaemon {
        let sim = match self.sim {
            Some(sim) => sim,
            None => super::start_sim().await,
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let own_plugins = (!self.plugin_files.is_empty()).then(|| {
            let folder = dir.path().join("plugins");
            std::fs::create_dir(&folder).expect("create the plugins folder");
            for (file, built) in &self.plugin_files {
                std::fs::copy(
                    super::built_plugin(built),
                    folder.join(format!("{file}.wasm")),
                )
                .expect("copy the built plugin");
            }
            folder
        });
        let path = super::write_config(
            dir.path(),
            &with_plugins(own_plugins.as_deref(), &self.yaml),
        );
        // The daemon's client and the test's are separate, as a real cluster's would be.
        let client = sim.client().expect("a client for the simulator");
        let daemon = start_daemon(&sim, &path, self.admin_listen).await;
        let logs = daemon.plugin_logs().subscribe();
        daemon.wait_until_synced().await;
        TestDaemon {
            sim: Some(sim),
            daemon: Some(daemon),
            dir,
            own_plugins,
            client,
            // No kept-alive connections: the admin API closes an idle one after its header
            // read timeout, and a request sent on it just then fails (IncompleteMessage).
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("an HTTP client"),
            logs,
        }
    }
}

/// A daemon on the config at `path` against `sim`, its admin API on `admin_listen` (else a
/// free loopback port), its probes on a free loopback port.
async fn start_daemon(sim: &Simulator, path: &Path, admin_listen: Option<SocketAddr>) -> Daemon {
    let config = config::load(path).expect("a valid config");
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let options = daemon::Options {
        client: Some(sim.client().expect("a client for the simulator")),
        admin_listen: Some(admin_listen.unwrap_or(loopback)),
        probes_listen: Some(Some(loopback)),
        watch_config: true,
        ..daemon::Options::default()
    };
    Daemon::start(config, options)
        .await
        .expect("start the daemon")
}

/// `yaml` with `plugins_dir` set to `folder`, when the fixture has a plugins folder of its own.
fn with_plugins(folder: Option<&Path>, yaml: &str) -> String {
    match folder {
        Some(folder) => format!("plugins_dir: {}\n{yaml}", folder.display()),
        None => yaml.to_string(),
    }
}

impl TestDaemon {
    /// A daemon running `yaml` against a new simulator; see [`super::write_config`] for what
    /// is filled in.
    pub async fn start(yaml: &str) -> Self {
        Self::builder(yaml).start().await
    }

    /// A daemon running `yaml`, with the options the [`Builder`] takes.
    pub fn builder(yaml: &str) -> Builder {
        Builder {
            yaml: yaml.to_string(),
            sim: None,
            plugin_files: Vec::new(),
            admin_listen: None,
        }
    }

    /// The simulator the daemon watches.
    pub fn sim(&self) -> &Simulator {
        self.sim.as_ref().expect("the simulator runs until stop")
    }

    /// The daemon.
    pub fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("the daemon runs until stop")
    }

    /// The folder holding the config (`switchyard.yaml`) and the admin token.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The plugins folder the daemon loads from.
    pub fn plugins_dir(&self) -> PathBuf {
        self.own_plugins.clone().unwrap_or_else(super::plugins_dir)
    }

    /// A kube-rs client for the simulator.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The ConfigMaps in `namespace`, through kube-rs.
    pub fn configmaps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client(), namespace)
    }

    /// Creates the ConfigMap `object` (JSON) in `default`; returns it as stored.
    pub async fn create_configmap(&self, object: Value) -> ConfigMap {
        super::create_configmap(&self.client, "default", object).await
    }

    /// The admin API's base URL.
    pub fn admin_url(&self) -> String {
        self.daemon().admin_url()
    }

    /// The admin API's URL for `path` (`/status`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.admin_url())
    }

    /// The probes listener's URL for `path` (`/metrics`).
    pub fn probes_url(&self, path: &str) -> String {
        let addr = self
            .daemon()
            .probes_addr()
            .expect("the fixture serves probes");
        format!("http://{addr}{path}")
    }

    /// A request to the admin API's `path`, carrying the admin token.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .bearer_auth(super::TOKEN)
    }

    /// GET `/metrics` with the token: the exposition text.
    pub async fn metrics_text(&self) -> String {
        self.request(Method::GET, "/metrics")
            .send()
            .await
            .expect("the admin API answers")
            .text()
            .await
            .expect("a text body")
    }

    /// GET `path` with the token; the status and the JSON body.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        send(self.request(Method::GET, path)).await
    }

    /// POST to `path` with the token and no body; the status and the JSON answer.
    pub async fn post(&self, path: &str) -> (u16, Value) {
        send(self.request(Method::POST, path)).await
    }

    /// `GET /status`: the JSON body.
    pub async fn status_json(&self) -> Value {
        self.get("/status").await.1
    }

    /// Writes `yaml` as the config file again, the way the fixture first wrote it.
    pub fn write_config(&self, yaml: &str) {
        super::write_config(self.dir(), &with_plugins(self.own_plugins.as_deref(), yaml));
    }

    /// Replaces `FILE.wasm` in the daemon's own plugins folder with the built plugin `built`,
    /// the way build tools should: a temporary file, then a rename.
    pub fn replace_plugin(&self, file: &str, built: &str) {
        let folder = self
            .own_plugins
            .as_ref()
            .expect("a plugins folder of its own (Builder::plugin_file)");
        let temporary = folder.join(format!(".{file}.wasm.tmp"));
        std::fs::copy(super::built_plugin(built), &temporary).expect("copy the built plugin");
        std::fs::rename(&temporary, folder.join(format!("{file}.wasm")))
            .expect("rename the plugin into place");
    }

    /// Replaces the daemon with a new one on the same config and simulator, as a pod
    /// replaced after a config edit: the old one shuts down (handlers get 5 s), the new one
    /// starts on a free admin port and has synced when this returns. (Not with `state_dir`:
    /// the store is held until the test's runtime ends; restart a `switchyard run` child.)
    pub async fn restart(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            daemon.shut_down(GRACE).await;
        }
        let path = self.dir.path().join("switchyard.yaml");
        let daemon = start_daemon(self.sim(), &path, None).await;
        self.logs = daemon.plugin_logs().subscribe();
        daemon.wait_until_synced().await;
        self.daemon = Some(daemon);
    }

    /// Shuts the daemon down (handlers get 5 s to finish queued work) and stops the simulator.
    pub async fn stop(self) {
        self.stop_within(GRACE).await;
    }

    /// Shuts the daemon down, giving handlers `grace` to finish queued work, and stops the
    /// simulator.
    pub async fn stop_within(mut self, grace: Duration) {
        if let Some(daemon) = self.daemon.take() {
            daemon.shut_down(grace).await;
        }
        if let Some(sim) = self.sim.take() {
            sim.stop().await;
        }
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        // Not stopped (an assertion failed): shut down in the background. The simulator
        // closes its port on drop; the test's runtime ends whatever is still running.
        if let Some(daemon) = self.daemon.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(daemon.shut_down(Duration::ZERO));
        }
    }
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("a response from the admin API");
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}
