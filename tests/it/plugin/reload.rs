//! Hot reload from the plugins folder, over real files and real HTTP: a plugin replaced by
//! an atomic rename changes behaviour for every handler using it; garbage written in place,
//! a deleted file and a half-written file each keep the running version and say why in
//! /status and `GET /plugins`; `POST /plugins/{name}/reload` loads on demand.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, TestDaemon, built_plugin as built};

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

/// A daemon whose plugins folder is a temporary folder holding `swap.wasm`, a copy of the
/// built plugin `initial`.
async fn start(initial: &str) -> TestDaemon {
    TestDaemon::builder(TWO_HANDLERS_ONE_PLUGIN)
        .plugin_file("swap", initial)
        .start()
        .await
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `swap.wasm` in the daemon's plugins folder.
fn swap_file(t: &TestDaemon) -> PathBuf {
    t.plugins_dir().join("swap.wasm")
}

async fn create(t: &TestDaemon, name: &str) {
    t.create_configmap(json!({"metadata": {"name": name}}))
        .await;
}

/// Waits until both handlers logged `prefix` + `default/NAME` (the format tells which
/// plugin handled it: log-events says `added ConfigMap default/x`, faulty says
/// `handled added default/x`).
async fn both_handled(t: &mut TestDaemon, prefix: &str, name: &str) {
    let wanted = format!("{prefix}default/{name} ");
    let mut missing = vec!["first", "second"];
    while !missing.is_empty() {
        let line = support::wait_for_log(&mut t.logs, WAIT, |l| {
            l.message.starts_with(&wanted) && missing.contains(&l.handler.as_str())
        })
        .await;
        missing.retain(|h| *h != line.handler);
    }
}

async fn plugin_view(t: &TestDaemon) -> Value {
    let (code, body) = t.get("/plugins").await;
    assert_eq!(code, 200);
    let plugins = body["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 1, "{body:#}");
    plugins[0].clone()
}

async fn handler_statuses(t: &TestDaemon) -> Vec<Value> {
    let (code, body) = t.get("/status").await;
    assert_eq!(code, 200);
    body["handlers"].as_array().unwrap().clone()
}

/// Waits until `GET /plugins` satisfies `check`.
async fn plugin_becomes(t: &TestDaemon, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    support::eventually(what, WAIT, async || {
        let view = plugin_view(t).await;
        check(&view).then_some(view)
    })
    .await
}

/// Waits until every handler's `plugin_error` contains `text`, and checks each still
/// has a plugin loaded.
async fn error_shown(t: &TestDaemon, text: &str) -> String {
    let statuses = support::eventually("the error in /status", WAIT, async || {
        let statuses = handler_statuses(t).await;
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

async fn errors_cleared(t: &TestDaemon) {
    support::eventually("plugin_error to clear", WAIT, async || {
        let statuses = handler_statuses(t).await;
        statuses
            .iter()
            .all(|h| h["plugin_error"].is_null())
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_atomic_rename_swaps_the_plugin_for_every_handler_using_it() {
    let mut t = start("log-events").await;
    let first = plugin_view(&t).await;
    assert_eq!(first["name"], "swap");
    assert_eq!(first["handlers"], json!(["first", "second"]));
    assert_eq!(first["sha256"], sha256_of(&built("log-events")));
    assert_eq!(first["swaps"], 1);
    assert_eq!(first["file_present"], true);
    assert!(first["last_error"].is_null(), "{first:#}");
    create(&t, "before").await;
    both_handled(&mut t, "added ConfigMap ", "before").await;

    t.replace_plugin("swap", "faulty");
    let faulty_sha = sha256_of(&built("faulty"));
    let view = plugin_becomes(&t, "the faulty plugin to be loaded", |v| {
        v["sha256"] == faulty_sha.as_str()
    })
    .await;
    assert_eq!(view["swaps"], 2);
    assert_eq!(
        view["size"],
        std::fs::metadata(built("faulty")).unwrap().len()
    );
    create(&t, "after").await;
    both_handled(&mut t, "handled added ", "after").await;

    // And back.
    t.replace_plugin("swap", "log-events");
    plugin_becomes(&t, "log-events to be back", |v| v["swaps"] == 3).await;
    create(&t, "again").await;
    both_handled(&mut t, "added ConfigMap ", "again").await;
    t.stop().await;
}

#[tokio::test]
async fn garbage_written_in_place_keeps_the_old_version_running_and_shows_the_error() {
    let mut t = start("log-events").await;
    let good_sha = sha256_of(&built("log-events"));
    std::fs::write(swap_file(&t), b"this is not wasm at all").unwrap();
    let error = error_shown(&t, "not a WebAssembly component").await;
    assert!(
        error.starts_with("plugin \"swap\" is invalid: not a WebAssembly component"),
        "{error}"
    );
    assert!(
        error.contains("still running the version loaded at "),
        "{error}"
    );
    let view = plugin_view(&t).await;
    assert_eq!(view["sha256"], good_sha.as_str(), "{view:#}");
    assert!(
        view["last_error"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly component"),
        "{view:#}"
    );

    // The old version keeps handling events.
    create(&t, "during-garbage").await;
    both_handled(&mut t, "added ConfigMap ", "during-garbage").await;

    // A good file written in place fixes it.
    std::fs::write(swap_file(&t), std::fs::read(built("faulty")).unwrap()).unwrap();
    errors_cleared(&t).await;
    let faulty_sha = sha256_of(&built("faulty"));
    let view = plugin_becomes(&t, "the fixed file to load", |v| {
        v["sha256"] == faulty_sha.as_str()
    })
    .await;
    assert!(view["last_error"].is_null(), "{view:#}");
    create(&t, "fixed").await;
    both_handled(&mut t, "handled added ", "fixed").await;
    t.stop().await;
}

#[tokio::test]
async fn a_deleted_file_keeps_the_running_version_and_status_says_the_file_is_gone() {
    let mut t = start("log-events").await;
    std::fs::remove_file(swap_file(&t)).unwrap();
    let error = error_shown(&t, "there is no such file").await;
    assert!(error.contains("swap.wasm"), "{error}");
    let view = plugin_becomes(&t, "file_present to turn false", |v| {
        v["file_present"] == false
    })
    .await;
    assert_eq!(view["loaded"], true);

    create(&t, "after-delete").await;
    both_handled(&mut t, "added ConfigMap ", "after-delete").await;

    // Reloading on demand says the same, as a JSON error.
    let (code, body) = t.post("/plugins/swap/reload").await;
    assert_eq!(code, 422);
    assert_eq!(body["status"], 422);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("there is no such file"),
        "{body}"
    );

    // Dropping a file in again loads it.
    t.replace_plugin("swap", "faulty");
    errors_cleared(&t).await;
    create(&t, "back").await;
    both_handled(&mut t, "handled added ", "back").await;
    t.stop().await;
}

#[tokio::test]
async fn a_half_written_file_is_rejected_until_the_rest_is_written() {
    let mut t = start("log-events").await;
    let full = std::fs::read(built("faulty")).unwrap();
    let (head, tail) = full.split_at(full.len() / 2);
    let mut file = std::fs::File::create(swap_file(&t)).unwrap();
    file.write_all(head).unwrap();
    file.flush().unwrap();
    // The watcher reads the file while it is half-written: not loaded, old version runs.
    error_shown(&t, "is invalid").await;
    create(&t, "while-half").await;
    both_handled(&mut t, "added ConfigMap ", "while-half").await;

    file.write_all(tail).unwrap();
    drop(file);
    let faulty_sha = sha256_of(&built("faulty"));
    plugin_becomes(&t, "the completed file to load", |v| {
        v["sha256"] == faulty_sha.as_str() && v["last_error"].is_null()
    })
    .await;
    errors_cleared(&t).await;
    create(&t, "complete").await;
    both_handled(&mut t, "handled added ", "complete").await;
    t.stop().await;
}

#[tokio::test]
async fn the_reload_endpoint_loads_now_and_answers_errors_as_json() {
    let mut t = start("log-events").await;
    let (code, body) = t.post("/plugins/nope/reload").await;
    assert_eq!(code, 404);
    assert_eq!(
        body,
        json!({"error": "no handler uses a plugin named \"nope\"", "status": 404})
    );

    let (code, body) = t.post("/plugins/swap/reload").await;
    assert_eq!(code, 200);
    assert_eq!(body["reloaded"], "swapped");
    assert_eq!(body["plugin"]["name"], "swap");
    assert_eq!(body["plugin"]["swaps"], 2);

    // A component of the wrong world: 422 with the compile error; the old version stays.
    std::fs::copy(built("wrongworld"), swap_file(&t)).unwrap();
    let (code, body) = t.post("/plugins/swap/reload").await;
    assert_eq!(code, 422);
    assert_eq!(body["status"], 422);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "plugin \"swap\" is invalid: does not export the switchyard:plugin handler world"
        ),
        "{error}"
    );
    let view = plugin_view(&t).await;
    assert_eq!(view["sha256"], sha256_of(&built("log-events")).as_str());
    create(&t, "still-running").await;
    both_handled(&mut t, "added ConfigMap ", "still-running").await;
    t.stop().await;
}
