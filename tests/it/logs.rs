//! The daemon's own log, from the binary: JSON with the worker's and the event's span
//! fields, text without colour when standard error is not a terminal, and one line per
//! event in both, even for a rejected reload that lists several mistakes; and what a
//! plugin logs held to its handler's log limits.

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

/// What a plugin logs had no cap (five calls logging 40 MiB each made
/// 200 MB of the daemon's log). With the default limits, one call logging a 40 MiB line
/// and then 5,000 lines writes its first 1,000 lines, the long one cut to 16 KiB, and one
/// line saying what was dropped; the handler's counters count both.
#[tokio::test]
async fn a_plugin_flooding_its_log_writes_a_bounded_log_and_is_counted() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let probes = support::free_port();
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\n  probes_listen: 127.0.0.1:{probes}\nhandlers:\n  faulty: {{}}\nroutes:\n  - name: configmaps\n    resource: configmaps\n    handler: faulty\n"
    );
    let config = support::write_config(dir.path(), &yaml);
    let args = ["run", "--config", config.to_str().unwrap()];
    let kube = ["--kubeconfig", kubeconfig.to_str().unwrap()];
    let daemon = Process::start(&[&args[..], &kube[..]].concat(), &[], &["RUST_LOG"]);
    daemon
        .wait_for_line(WAIT, |l| l.contains("list complete"))
        .await;
    let huge = (40 << 20).to_string();
    create_configmap(
        &sim.client().unwrap(),
        "default",
        json!({"metadata": {"name": "flood", "annotations":
            {"faulty/log-bytes": huge, "faulty/log-lines": "5000"}}}),
    )
    .await;
    // The call's last line: the note on what was dropped (with no limits, the plugin's
    // own `handled` line).
    daemon
        .wait_for_line(WAIT, |l| {
            l.contains("object=default/flood")
                && (l.contains("handled added") || l.contains("dropped"))
        })
        .await;
    let lines = daemon.lines();
    let written: usize = lines.iter().map(|l| l.len() + 1).sum();
    assert!(
        written < 1 << 20,
        "the daemon logged {written} bytes for one call"
    );
    let cut = lines
        .iter()
        .find(|l| l.contains(" more bytes cut: log_line_max]"))
        .expect("the long line, cut");
    assert!(
        cut.contains(&format!(" … [{} more bytes cut", (40 << 20) - (16 << 10))),
        "{}",
        &cut[cut.len() - 100..]
    );
    assert!(lines.iter().any(|l| l.contains("line 999 of 5000")));
    assert!(!lines.iter().any(|l| l.contains("line 1000 of 5000")));
    let note = lines
        .iter()
        .find(|l| l.contains("more log line(s) of this call dropped"))
        .expect("the line saying what was dropped");
    assert!(
        note.contains("4002 more log line(s) of this call dropped")
            && note.contains("a call may log 1000 line(s) or 256 KiB"),
        "{note}"
    );

    let metrics = reqwest::get(format!("http://127.0.0.1:{probes}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
    };
    let lines_limited = "switchyard_handler_log_limited_lines_total";
    assert_eq!(
        series(&format!(
            "{lines_limited}{{name=\"faulty\",kind=\"truncated\"}}"
        )),
        1
    );
    assert_eq!(
        series(&format!(
            "{lines_limited}{{name=\"faulty\",kind=\"dropped\"}}"
        )),
        4002
    );
    let bytes = series("switchyard_handler_log_limited_bytes_total{name=\"faulty\"}");
    assert!(bytes > (40 << 20) - (16 << 10), "{bytes}");
    drop(daemon);
    sim.stop().await;
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
