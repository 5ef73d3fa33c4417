//! Test support: the example plugins built once, a simulator, a daemon on a written config
//! ([`TestDaemon`]), every child process started and ended with what it started
//! ([`spawned`]), ConfigMaps and namespaces made through kube-rs, and waiting for a
//! condition or for what a plugin logs. Tests wait by polling with a deadline
//! ([`eventually`], [`wait_for_log`]), never by sleeping a fixed time.

pub mod alertmanager;
pub mod browser;
pub mod daemon;
pub mod hostile;
pub mod process;
pub mod prometheus;
pub mod promql;
pub mod python;
pub mod rabbitmq;
pub mod receiver;
pub mod registry;
pub mod sim;
pub mod spawned;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use switchyard::plugin::PluginLog;
use switchyard::sim::{SimOptions, Simulator};
use tokio::sync::broadcast;

pub use daemon::TestDaemon;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder the example plugins (Rust and Python) are built into, after building them with
/// scripts/build-plugins.sh once per test binary (the Python ones come from the build cache
/// after the first build).
pub fn plugins_dir() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = spawned::status(
            std::process::Command::new("bash").arg(root().join("scripts/build-plugins.sh")),
            "scripts/build-plugins.sh",
        );
        assert!(status.success(), "building the example plugins failed");
    });
    root().join("plugins")
}

/// The built example or test plugin `name` (`plugins/NAME.wasm`).
pub fn built_plugin(name: &str) -> PathBuf {
    plugins_dir().join(format!("{name}.wasm"))
}

/// A simulator on a free loopback port.
pub async fn start_sim() -> Simulator {
    Simulator::start(SimOptions::default())
        .await
        .expect("start the simulator")
}

/// The admin token [`write_config`] configures.
pub const TOKEN: &str = "test-admin-token";

/// Writes `yaml` as `dir/switchyard.yaml` with the plugins folder and admin token filled in
/// unless `yaml` sets them (`plugins_dir` is the built example plugins, the token is
/// [`TOKEN`] unless `yaml` has an `admin:` section), through a temporary file and a rename
/// so a watcher never reads it half-written. The file `dir/admin-token` holds [`TOKEN`]
/// unless it is there already, so an `admin:` section can name it. Returns the path.
pub fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let mut text = String::new();
    if !yaml.contains("plugins_dir:") {
        text.push_str(&format!("plugins_dir: {}\n", plugins_dir().display()));
    }
    let token = dir.join("admin-token");
    if !token.exists() {
        std::fs::write(&token, format!("{TOKEN}\n")).expect("write the token");
    }
    if !yaml.contains("admin:") {
        text.push_str("admin:\n  token_file: admin-token\n");
    }
    text.push_str(yaml);
    let path = dir.join("switchyard.yaml");
    let temporary = dir.join(".switchyard.yaml.tmp");
    std::fs::write(&temporary, text).expect("write the config");
    std::fs::rename(&temporary, &path).expect("rename the config into place");
    path
}

/// A ConfigMap from its JSON (`{"metadata": {"name": "x"}, "data": {...}}`).
pub fn configmap(object: Value) -> ConfigMap {
    serde_json::from_value(object).expect("a valid ConfigMap")
}

/// Creates the ConfigMap `object` (JSON, as [`configmap`] takes it) in `namespace` through
/// kube-rs; returns it as the API server stored it.
pub async fn create_configmap(client: &kube::Client, namespace: &str, object: Value) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &configmap(object))
        .await
        .expect("create the ConfigMap")
}

/// Creates the namespaces `names` through kube-rs.
pub async fn create_namespaces(client: &kube::Client, names: &[&str]) {
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("a Namespace");
        api.create(&PostParams::default(), &namespace)
            .await
            .expect("create the namespace");
    }
}

/// Waits until a plugin logs a line that satisfies `wanted`; panics after `timeout`,
/// listing what was logged.
pub async fn wait_for_log(
    logs: &mut broadcast::Receiver<PluginLog>,
    timeout: Duration,
    wanted: impl Fn(&PluginLog) -> bool,
) -> PluginLog {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(timeout, async {
        loop {
            match logs.recv().await {
                Ok(line) if wanted(&line) => return line,
                Ok(line) => seen.push(line.message),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("plugin log feed closed"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!("no matching plugin log line within {timeout:?}; saw: {seen:#?}")
    })
}

/// Held while a test runs a daemon that takes the admin API's default port,
/// 127.0.0.1:9470, as a user's would: `switchyard demo` (which moves to a free port only
/// when 9470 is taken) and the README's commands (which do not).
pub fn default_admin_port() -> std::sync::MutexGuard<'static, ()> {
    static PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    PORT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after `timeout`.
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to 20 s until `GET url` answers 2xx (a server's `/-/ready`); panics naming
/// `name` with what `log` returns (its log so far).
pub async fn wait_until_ready(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    log: impl Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = http.get(url).send().await;
        if response.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} was not ready after 20 s; its log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`eventually`] for a check that needs no `.await`; its future is `Send` whenever the
/// check is, so it also serves inside spawned tasks.
pub async fn eventually_sync<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// GET `url` (without a token) and parse the JSON body.
pub async fn get_json(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}

/// POST `url` with the admin token and parse the JSON body.
pub async fn post_json(url: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("POST");
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}

/// An informer's cache: each object's key and resourceVersion.
pub fn cached(
    informer: &switchyard::informer::Informer,
) -> std::collections::BTreeMap<String, String> {
    informer
        .store()
        .list()
        .iter()
        .map(|o| (o.key().to_string(), o.resource_version().to_string()))
        .collect()
}

/// A config routing every ConfigMap to the `log-events` plugin.
pub const CONFIGMAPS_TO_LOG_EVENTS: &str = "
handlers:
  log-events: {}
routes:
  - name: configmaps
    resource: configmaps
    handler: log-events
";

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}
