//! The daemon's own log, from the binary: JSON with the worker's and the event's span
//! fields, text without colour when standard error is not a terminal, and one line per
//! event in both, even for a rejected reload that lists several mistakes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::process::Process;
use crate::support::spawned;
use crate::support::{self, create_configmap};

const WAIT: Duration = Duration::from_secs(60);

const CONFIG: &str = "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nhandlers:\n  log-events: {}\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: log-events\n";

/// The same config with two mistakes, for a reload that is rejected listing both.
const TWO_MISTAKES: &str = "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nhandlers:\n  log-events:\n    concurrency: lots\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: log-event\n";

/// Starts `switchyard run` on a simulator with `env`, has the plugin handle one ConfigMap
/// and a reload be rejected, and returns everything the daemon logged.
async fn run_and_log(env: &[(&str, &str)], flags: &[&str]) -> Vec<String> {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = support::write_config(dir.path(), CONFIG);
    let mut args = vec!["run", "--config", config.to_str().unwrap()];
    args.extend(["--kubeconfig", kubeconfig.to_str().unwrap()]);
    args.extend(flags);
    let daemon = Process::start(
        &args,
        env,
        &["RUST_LOG", "NO_COLOR", "SWITCHYARD_LOG_FORMAT"],
    );
    daemon
        .wait_for_line(WAIT, |l| l.contains("list complete"))
        .await;
    create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "logged"}}),
    )
    .await;
    daemon
        .wait_for_line(WAIT, |l| l.contains("default/logged "))
        .await;
    support::write_config(dir.path(), TWO_MISTAKES);
    daemon
        .wait_for_line(WAIT, |l| l.contains("config reload rejected"))
        .await;
    let lines = daemon.lines();
    drop(daemon);
    sim.stop().await;
    lines
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_span_fields() {
    let lines = run_and_log(&[("SWITCHYARD_LOG_FORMAT", "json")], &[]).await;
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for event in &events {
        for field in ["timestamp", "level", "target", "message"] {
            assert!(event.get(field).is_some(), "no {field}: {event}");
        }
    }
    let plugin = events
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("default/logged "))
        })
        .unwrap();
    let spans = plugin["spans"].as_array().expect("the span list");
    assert_eq!(spans[0]["name"], "worker", "{plugin}");
    assert_eq!(spans[0]["handler"], "log-events", "{plugin}");
    assert_eq!(spans[1]["name"], "event", "{plugin}");
    assert_eq!(spans[1]["route"], "configmaps", "{plugin}");
    assert_eq!(spans[1]["object"], "default/logged", "{plugin}");
    let rejected = events
        .iter()
        .find(|e| e["message"] == "config reload rejected")
        .unwrap();
    let error = rejected["error"].as_str().unwrap();
    assert!(
        error.contains("handlers.log-events.concurrency"),
        "{rejected}"
    );
    assert!(error.contains("routes[0].handler"), "{rejected}");
    let started = events
        .iter()
        .find(|e| e["message"] == "switchyard started")
        .unwrap();
    assert!(
        started["admin"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{started}"
    );
}

#[tokio::test]
async fn text_logs_have_no_colour_off_a_terminal_and_one_line_per_event() {
    let lines = run_and_log(&[], &["--log-format", "text"]).await;
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "colour codes in: {line:?}");
    }
    let rejected = lines
        .iter()
        .find(|l| l.contains("config reload rejected"))
        .unwrap();
    // Both mistakes, on the event's own line, joined.
    assert!(
        rejected.contains("handlers.log-events.concurrency"),
        "{rejected}"
    );
    assert!(rejected.contains(" | "), "{rejected}");
    assert!(rejected.contains("routes[0].handler"), "{rejected}");
    let plugin = lines
        .iter()
        .find(|l| l.contains("default/logged "))
        .unwrap();
    assert!(
        plugin.contains("worker{handler=log-events worker=")
            && plugin.contains("event{route=configmaps object=default/logged}"),
        "{plugin}"
    );
}

#[test]
fn an_unknown_log_format_is_refused() {
    let output = spawned::output(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args([
            "run",
            "--config",
            "nowhere.yaml",
            "--log-format",
            "yaml",
        ]),
        "switchyard run",
    );
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("unknown log format \"yaml\": use text or json"),
        "{err}"
    );
}
