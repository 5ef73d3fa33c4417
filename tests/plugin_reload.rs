//! Hot reload from the plugins folder, over real files and real HTTP: a plugin replaced by
//! an atomic rename changes behaviour for every handler using it; garbage written in place,
//! a deleted file and a half-written file each keep the running version and say why in
//! /status and `GET /plugins`; `POST /plugins/{name}/reload` loads on demand.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use switchyard::Daemon;
use switchyard::plugin::PluginLog;
use switchyard::sim::Simulator;
use tokio::sync::broadcast;

const WAIT: Duration = Duration::from_secs(30);

/// Two handlers using the plugin `swap` (the file `swap.wasm`), each fed by its own route.
const TWO_HANDLERS_ONE_PLUGIN: &str = "
handlers:
  first:
    plugin: swap
  second:
    plugin: swap
routes:
  - name: to-first
    resource: configmaps
    handler: first
  - name: to-second
    resource: configmaps
    handler: second
";

struct Fixture {
    sim: Simulator,
    _dir: tempfile::TempDir,
    plugins: PathBuf,
    daemon: Daemon,
    logs: broadcast::Receiver<PluginLog>,
}

/// A daemon whose plugins folder is a temporary folder holding `swap.wasm`, a copy of the
/// built plugin `initial`.
async fn start(initial: &str) -> Fixture {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(built(initial), plugins.join("swap.wasm")).unwrap();
    let yaml = format!(
        "plugins_dir: {}\n{TWO_HANDLERS_ONE_PLUGIN}",
        plugins.display()
    );
    let daemon = common::start_daemon(&sim, dir.path(), &yaml).await;
    let logs = daemon.plugin_logs().subscribe();
    daemon.wait_until_synced().await;
    Fixture {
        sim,
        _dir: dir,
        plugins,
        daemon,
        logs,
    }
}

/// The built example or test plugin `name`.
fn built(name: &str) -> PathBuf {
    common::plugins_dir().join(format!("{name}.wasm"))
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Replaces `swap.wasm` the way build tools should: write a temporary file, then rename.
fn replace_by_rename(plugins: &Path, source: &Path) {
    let tmp = plugins.join(".swap.wasm.tmp");
    std::fs::copy(source, &tmp).unwrap();
    std::fs::rename(&tmp, plugins.join("swap.wasm")).unwrap();
}

impl Fixture {
    async fn create(&self, name: &str) {
        let api: Api<ConfigMap> = Api::namespaced(self.sim.client().unwrap(), "default");
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }

    /// Waits until both handlers logged `prefix` + `default/NAME` (the format tells which
    /// plugin handled it: log-events says `added ConfigMap default/x`, faulty says
    /// `handled added default/x`).
    async fn both_handled(&mut self, prefix: &str, name: &str) {
        let wanted = format!("{prefix}default/{name} ");
        let mut missing = vec!["first", "second"];
        while !missing.is_empty() {
            let line = common::wait_for_log(&mut self.logs, WAIT, |l| {
                l.message.starts_with(&wanted) && missing.contains(&l.handler.as_str())
            })
            .await;
            missing.retain(|h| *h != line.handler);
        }
    }

    async fn plugin_view(&self) -> Value {
        let (code, body) = common::get_json(&format!("{}/plugins", self.daemon.admin_url())).await;
        assert_eq!(code, 200);
        let plugins = body["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 1, "{body:#}");
        plugins[0].clone()
    }

    async fn handler_statuses(&self) -> Vec<Value> {
        let (code, body) = common::get_json(&format!("{}/status", self.daemon.admin_url())).await;
        assert_eq!(code, 200);
        body["handlers"].as_array().unwrap().clone()
    }

    /// Waits until `GET /plugins` satisfies `check`.
    async fn plugin_becomes(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        common::eventually(what, WAIT, async || {
            let view = self.plugin_view().await;
            check(&view).then_some(view)
        })
        .await
    }

    /// Waits until every handler's `plugin_error` contains `text`, and checks each still
    /// has a plugin loaded.
    async fn error_shown(&self, text: &str) -> String {
        let statuses = common::eventually("the error in /status", WAIT, async || {
            let statuses = self.handler_statuses().await;
            statuses
                .iter()
                .all(|h| h["plugin_error"].as_str().is_some_and(|e| e.contains(text)))
                .then_some(statuses)
        })
        .await;
        for handler in &statuses {
            assert_eq!(handler["plugin_loaded"], true, "{handler:#}");
        }
        statuses[0]["plugin_error"].as_str().unwrap().to_string()
    }

    async fn errors_cleared(&self) {
        common::eventually("plugin_error to clear", WAIT, async || {
            let statuses = self.handler_statuses().await;
            statuses
                .iter()
                .all(|h| h["plugin_error"].is_null())
                .then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn an_atomic_rename_swaps_the_plugin_for_every_handler_using_it() {
    let mut f = start("log-events").await;
    let first = f.plugin_view().await;
    assert_eq!(first["name"], "swap");
    assert_eq!(first["handlers"], json!(["first", "second"]));
    assert_eq!(first["sha256"], sha256_of(&built("log-events")));
    assert_eq!(first["swaps"], 1);
    assert_eq!(first["file_present"], true);
    assert!(first["last_error"].is_null(), "{first:#}");
    f.create("before").await;
    f.both_handled("added ConfigMap ", "before").await;

    replace_by_rename(&f.plugins, &built("faulty"));
    let faulty_sha = sha256_of(&built("faulty"));
    let view = f
        .plugin_becomes("the faulty plugin to be loaded", |v| {
            v["sha256"] == faulty_sha.as_str()
        })
        .await;
    assert_eq!(view["swaps"], 2);
    assert_eq!(
        view["size"],
        std::fs::metadata(built("faulty")).unwrap().len()
    );
    f.create("after").await;
    f.both_handled("handled added ", "after").await;

    // And back.
    replace_by_rename(&f.plugins, &built("log-events"));
    f.plugin_becomes("log-events to be back", |v| v["swaps"] == 3)
        .await;
    f.create("again").await;
    f.both_handled("added ConfigMap ", "again").await;
    f.daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn garbage_written_in_place_keeps_the_old_version_running_and_shows_the_error() {
    let mut f = start("log-events").await;
    let good_sha = sha256_of(&built("log-events"));
    std::fs::write(f.plugins.join("swap.wasm"), b"this is not wasm at all").unwrap();
    let error = f.error_shown("not a WebAssembly component").await;
    assert!(
        error.starts_with("plugin \"swap\" is invalid: not a WebAssembly component"),
        "{error}"
    );
    assert!(
        error.contains("still running the version loaded at "),
        "{error}"
    );
    let view = f.plugin_view().await;
    assert_eq!(view["sha256"], good_sha.as_str(), "{view:#}");
    assert!(
        view["last_error"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly component"),
        "{view:#}"
    );

    // The old version keeps handling events.
    f.create("during-garbage").await;
    f.both_handled("added ConfigMap ", "during-garbage").await;

    // A good file written in place fixes it.
    std::fs::write(
        f.plugins.join("swap.wasm"),
        std::fs::read(built("faulty")).unwrap(),
    )
    .unwrap();
    f.errors_cleared().await;
    let faulty_sha = sha256_of(&built("faulty"));
    let view = f
        .plugin_becomes("the fixed file to load", |v| {
            v["sha256"] == faulty_sha.as_str()
        })
        .await;
    assert!(view["last_error"].is_null(), "{view:#}");
    f.create("fixed").await;
    f.both_handled("handled added ", "fixed").await;
    f.daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_deleted_file_keeps_the_running_version_and_status_says_the_file_is_gone() {
    let mut f = start("log-events").await;
    std::fs::remove_file(f.plugins.join("swap.wasm")).unwrap();
    let error = f.error_shown("the file is gone").await;
    assert!(error.contains("swap.wasm"), "{error}");
    let view = f
        .plugin_becomes("file_present to turn false", |v| v["file_present"] == false)
        .await;
    assert_eq!(view["loaded"], true);

    f.create("after-delete").await;
    f.both_handled("added ConfigMap ", "after-delete").await;

    // Reloading on demand says the same, as a JSON error.
    let response = reqwest::Client::new()
        .post(format!("{}/plugins/swap/reload", f.daemon.admin_url()))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], 422);
    assert!(
        body["error"].as_str().unwrap().contains("the file is gone"),
        "{body}"
    );

    // Dropping a file in again loads it.
    replace_by_rename(&f.plugins, &built("faulty"));
    f.errors_cleared().await;
    f.create("back").await;
    f.both_handled("handled added ", "back").await;
    f.daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_half_written_file_is_rejected_until_the_rest_is_written() {
    let mut f = start("log-events").await;
    let full = std::fs::read(built("faulty")).unwrap();
    let (head, tail) = full.split_at(full.len() / 2);
    let mut file = std::fs::File::create(f.plugins.join("swap.wasm")).unwrap();
    file.write_all(head).unwrap();
    file.flush().unwrap();
    // The watcher reads the file while it is half-written: not loaded, old version runs.
    f.error_shown("is invalid").await;
    f.create("while-half").await;
    f.both_handled("added ConfigMap ", "while-half").await;

    file.write_all(tail).unwrap();
    drop(file);
    let faulty_sha = sha256_of(&built("faulty"));
    f.plugin_becomes("the completed file to load", |v| {
        v["sha256"] == faulty_sha.as_str() && v["last_error"].is_null()
    })
    .await;
    f.errors_cleared().await;
    f.create("complete").await;
    f.both_handled("handled added ", "complete").await;
    f.daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn the_reload_endpoint_loads_now_and_answers_errors_as_json() {
    let mut f = start("log-events").await;
    let client = reqwest::Client::new();
    let base = f.daemon.admin_url();

    let response = client
        .post(format!("{base}/plugins/nope/reload"))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"error": "no handler uses a plugin named \"nope\"", "status": 404})
    );

    let response = client
        .post(format!("{base}/plugins/swap/reload"))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reloaded"], "swapped");
    assert_eq!(body["plugin"]["name"], "swap");
    assert_eq!(body["plugin"]["swaps"], 2);

    // A component of the wrong world: 422 with the compile error; the old version stays.
    std::fs::copy(built("wrongworld"), f.plugins.join("swap.wasm")).unwrap();
    let response = client
        .post(format!("{base}/plugins/swap/reload"))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], 422);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "plugin \"swap\" is invalid: does not export the switchyard:plugin handler world"
        ),
        "{error}"
    );
    let view = f.plugin_view().await;
    assert_eq!(view["sha256"], sha256_of(&built("log-events")).as_str());
    f.create("still-running").await;
    f.both_handled("added ConfigMap ", "still-running").await;
    f.daemon.shut_down(Duration::from_secs(5)).await;
}
