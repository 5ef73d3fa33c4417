//! Test support: the example plugins built once, a simulator, a daemon on a written config,
//! and waiting for what a plugin logs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use switchyard::daemon::{self, Daemon};
use switchyard::plugin::PluginLog;
use switchyard::sim::{SimOptions, Simulator};
use tokio::sync::broadcast;

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
        let status = std::process::Command::new("bash")
            .arg(root().join("scripts/build-plugins.sh"))
            .status()
            .expect("run scripts/build-plugins.sh");
        assert!(status.success(), "building the example plugins failed");
    });
    root().join("plugins")
}

/// A simulator on a free loopback port.
pub async fn start_sim() -> Simulator {
    Simulator::start(SimOptions::default())
        .await
        .expect("start the simulator")
}

/// The admin token [`start_daemon`] configures.
pub const TOKEN: &str = "test-admin-token";

/// A daemon running `yaml` against `sim`, with its admin API on a free port. The config is
/// written into `dir`; `plugins_dir` is set to the built example plugins unless `yaml`
/// says, and the admin token is [`TOKEN`] unless `yaml` has an `admin:` section.
pub async fn start_daemon(sim: &Simulator, dir: &Path, yaml: &str) -> Daemon {
    let path = write_config(dir, yaml);
    let config = switchyard::config::load(&path).expect("a valid config");
    let options = daemon::Options {
        client: Some(sim.client().expect("a client for the simulator")),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        watch_config: true,
    };
    Daemon::start(config, options)
        .await
        .expect("start the daemon")
}

/// Writes `yaml` as `dir/switchyard.yaml` the way [`start_daemon`] does (plugins folder and
/// admin token filled in unless `yaml` sets them), through a temporary file and a rename so
/// a watcher never reads it half-written. Returns the path.
pub fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let mut text = String::new();
    if !yaml.contains("plugins_dir:") {
        text.push_str(&format!("plugins_dir: {}\n", plugins_dir().display()));
    }
    if !yaml.contains("admin:") {
        std::fs::write(dir.join("admin-token"), format!("{TOKEN}\n")).expect("write the token");
        text.push_str("admin:\n  token_file: admin-token\n");
    }
    text.push_str(yaml);
    let path = dir.join("switchyard.yaml");
    let temporary = dir.join(".switchyard.yaml.tmp");
    std::fs::write(&temporary, text).expect("write the config");
    std::fs::rename(&temporary, &path).expect("rename the config into place");
    path
}

/// POSTs to `url` with the admin token and parses the JSON answer.
pub async fn post_json(url: &str) -> (u16, serde_json::Value) {
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

/// GET `url` and parse the JSON body.
pub async fn get_json(url: &str) -> (u16, serde_json::Value) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    let body = response.json().await.expect("a JSON body");
    (status, body)
}
