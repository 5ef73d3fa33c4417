//! `switchyard record` against the simulator, and `switchyard replay` of what it wrote:
//! plugin logs shown, writes captured and never sent, failures and bad files reported.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support;
use crate::support::process::{switchyard, switchyard_within};
use crate::support::spawned::{self, Spawned};

const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `switchyard replay --config CONFIG --events EVENTS`: its exit code, stdout and stderr.
fn replay(config: &Path, events: &Path) -> (i32, String, String) {
    switchyard(&["replay", "--config", text(config), "--events", text(events)])
}

const CONFIG: &str = "
handlers:
  label-guard:
    config: {label: owner, value: unknown}
    capabilities: {configmaps: [patch]}
  log-events: {}
routes:
  - name: guard
    resource: configmaps
    namespace: default
    handler: label-guard
  - name: log
    resource: configmaps
    namespace: default
    handler: log-events
  - name: deletions
    resource: configmaps
    namespace: default
    events: [deleted]
    handler: log-events
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_writes_what_routes_deliver_and_replay_shows_logs_and_captured_writes() {
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let bare = support::create_configmap(
        &client,
        "default",
        json!({"metadata": {"name": "bare"}, "data": {"a": "1"}}),
    )
    .await;
    support::create_configmap(
        &client,
        "default",
        json!({"metadata": {"name": "owned", "labels": {"owner": "alice"}}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = support::write_config(dir.path(), CONFIG);
    let events = dir.path().join("events.jsonl");

    // Record until Ctrl-C: the two objects listed, then an update made meanwhile.
    let mut child = Spawned::start(
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["record", "--config", text(&config), "--out", text(&events)])
            .args(["--kubeconfig", text(&kubeconfig)])
            .stderr(std::process::Stdio::piped()),
        "switchyard record",
    );
    let recorded = |n: usize| {
        let events = events.clone();
        async move {
            let text = std::fs::read_to_string(&events).unwrap_or_default();
            (text.lines().count() >= n).then_some(())
        }
    };
    support::eventually("the listed objects to be recorded", WAIT, async || {
        recorded(4).await
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let patch = json!({"data": {"b": "2"}});
    let updated = api
        .patch("bare", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    support::eventually("the update to be recorded", WAIT, async || {
        recorded(6).await
    })
    .await;
    spawned::signal(child.id(), "INT");
    let output = tokio::task::spawn_blocking(move || {
        let status = child.child().wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.child().stderr.take().unwrap(), &mut err).unwrap();
        child.stop();
        (status, err)
    })
    .await
    .unwrap();
    let (status, err) = output;
    assert!(status.success(), "{err}");
    assert!(err.contains("recorded 6 event(s)"), "{err}");
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut seen: Vec<(String, String, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["route"].as_str().unwrap().to_string(),
                l["handler"].as_str().unwrap().to_string(),
                l["kind"].as_str().unwrap().to_string(),
                l["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    seen.sort();
    let expected: Vec<(String, String, String, String)> = [
        ("guard", "label-guard", "added", "bare"),
        ("guard", "label-guard", "added", "owned"),
        ("guard", "label-guard", "updated", "bare"),
        ("log", "log-events", "added", "bare"),
        ("log", "log-events", "added", "owned"),
        ("log", "log-events", "updated", "bare"),
    ]
    .iter()
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
    .collect();
    assert_eq!(
        seen, expected,
        "the deletions route delivers no additions or updates"
    );
    for line in &lines {
        match line["kind"].as_str().unwrap() {
            "added" => assert!(line.get("old_object").is_none(), "{line}"),
            _ => {
                assert_eq!(line["old_object"]["data"], json!({"a": "1"}), "{line}");
                assert_eq!(
                    line["object"]["data"],
                    json!({"a": "1", "b": "2"}),
                    "{line}"
                );
            }
        }
    }

    // Text: the plugin's log lines exactly, and the patch label-guard asked for.
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 0, "{out}{err}");
    let rv = bare.metadata.resource_version.clone().unwrap();
    assert!(
        out.contains(&format!(
            "  log info: added ConfigMap default/bare rv={rv} route=log data=[a]\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(r#"  write merge-patch ConfigMap default/bare {"metadata":{"labels":{"owner":"unknown"}}}"#),
        "{out}"
    );
    assert!(
        out.contains("  log info: labelled ConfigMap default/bare owner=unknown\n"),
        "{out}"
    );

    // JSON, one handler: one object per event, the write captured with its body.
    let (code, out, err) = switchyard(&[
        "replay",
        "--config",
        text(&config),
        "--events",
        text(&events),
        "--handler",
        "label-guard",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let reports: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 3, "{out}");
    let of = |name: &str| {
        reports
            .iter()
            .find(|r| r["object"] == format!("default/{name}"))
            .unwrap()
    };
    assert_eq!(of("owned")["outcome"], "done");
    assert_eq!(of("owned")["writes"], json!([]));
    assert_eq!(of("bare")["outcome"], "done");
    assert_eq!(
        of("bare")["writes"],
        json!([{"action": "merge-patch", "resource": "ConfigMap", "namespace": "default",
                "name": "bare", "body": {"metadata": {"labels": {"owner": "unknown"}}}}])
    );

    // Nothing was sent: the simulator's object is as it was.
    let now = api.get("bare").await.unwrap();
    assert_eq!(
        now.metadata.resource_version,
        updated.metadata.resource_version
    );
    assert_eq!(now.metadata.labels, None);
    sim.stop().await;
}

const FAULTY: &str = "
handlers:
  faulty: {}
routes:
  - name: cms
    resource: configmaps
    handler: faulty
";

fn event(name: &str, annotations: Value) -> String {
    json!({"route": "cms", "handler": "faulty", "kind": "added", "object": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations}}})
    .to_string()
}

#[test]
fn replay_exits_1_showing_the_error_of_an_event_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), FAULTY);
    let events = dir.path().join("events.jsonl");
    let lines = [
        event("fine", json!({})),
        event("bad", json!({"faulty/error": "boom"})),
    ];
    std::fs::write(&events, lines.join("\n")).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("line 1: added default/fine (route cms, handler faulty) -> done\n"),
        "{out}"
    );
    assert!(
        out.contains("line 2: added default/bad (route cms, handler faulty) -> error: boom\n"),
        "{out}"
    );
    assert!(err.contains("1 of 2 event(s) failed"), "{err}");
}

/// Under `replay` a plugin sleeping in the host (a WASI clock poll) hung
/// until killed; now its call ends at the handler's `timeout`, as in `run`.
#[test]
fn replay_stops_a_plugin_sleeping_past_its_timeout_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(
        dir.path(),
        &FAULTY.replace("faulty: {}", "faulty: {timeout: 1s}"),
    );
    let events = dir.path().join("events.jsonl");
    let lines = [
        event("asleep", json!({"faulty/sleep-ms": "600000"})),
        event("awake", json!({})),
    ];
    std::fs::write(&events, lines.join("\n")).unwrap();
    let args = [
        "replay",
        "--config",
        text(&config),
        "--events",
        text(&events),
    ];
    let (code, out, err) = switchyard_within(&args, std::time::Duration::from_secs(60));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "line 1: added default/asleep (route cms, handler faulty) -> error: deadline of 1s \
             exceeded; the call was stopped\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("line 2: added default/awake (route cms, handler faulty) -> done\n"),
        "{out}"
    );
}

#[test]
fn replay_exits_2_naming_a_malformed_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(dir.path(), FAULTY);
    let events = dir.path().join("events.jsonl");
    std::fs::write(
        &events,
        format!("{}\n{{\"route\": \"cms\"\n", event("fine", json!({}))),
    )
    .unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!("{}:2: not an event", events.display())),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}

#[test]
fn replay_exits_2_saying_how_to_build_a_plugin_file_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("empty");
    std::fs::create_dir(&plugins).unwrap();
    let yaml = format!("plugins_dir: {}\n{FAULTY}", plugins.display());
    let config = support::write_config(dir.path(), &yaml);
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, event("fine", json!({})) + "\n").unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 2, "{out}{err}");
    let wanted = format!(
        "error: {}: handler \"faulty\": cannot read plugin {}: there is no such file; build it first (`switchyard build` in the plugin's project); nothing was replayed",
        config.display(),
        plugins.join("faulty.wasm").display()
    );
    assert!(err.contains(&wanted), "{err}");
    assert_eq!(err.matches("there is no such file").count(), 1, "{err}");
    assert!(out.is_empty(), "{out}");
}

#[test]
fn replay_shows_the_metrics_a_plugin_records() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(
        dir.path(),
        "
handlers:
  pods-per-node: {}
routes:
  - name: pods
    resource: pods
    indexes: {node: spec.nodeName}
    handler: pods-per-node
",
    );
    let pod = |name: &str, node: &str| {
        json!({"route": "pods", "handler": "pods-per-node", "kind": "added", "object": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node}}})
        .to_string()
    };
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, [pod("a", "n1"), pod("b", "n2")].join("\n")).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 0, "{out}{err}");
    // The replay's cache is empty, so each node counts none.
    assert!(
        out.contains(
            "line 1: added default/a (route pods, handler pods-per-node) -> done\n  metric gauge pods_on_node{node=\"n1\"} 0\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("  metric gauge pods_on_node{node=\"n2\"} 0\n"),
        "{out}"
    );
    let (_, json_out, _) = switchyard(&[
        "replay",
        "--config",
        text(&config),
        "--events",
        text(&events),
        "--json",
    ]);
    let first: Value = serde_json::from_str(json_out.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["metrics"],
        json!([{"kind": "gauge", "name": "pods_on_node", "value": 0.0, "labels": [["node", "n1"]]}])
    );
}

/// A recipe's handler reads informers no route of it delivers (`reads:`) and the caches of
/// its other routes: a replay lets it, as the daemon does (its caches are empty offline).
#[test]
fn replay_lets_a_handler_read_what_it_reads_in_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let fragment =
        std::fs::read_to_string(support::root().join("plugins/recipes/reloader/switchyard.yaml"))
            .unwrap();
    let config = support::write_config(dir.path(), &fragment);
    let configmap = |data: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "app-config", "namespace": "default"}, "data": {"mode": data}})
    };
    let event = json!({"route": "reloader-configmaps", "handler": "reloader", "kind": "updated",
        "object": configmap("green"), "old_object": configmap("blue")});
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, event.to_string()).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("line 1: updated default/app-config (route reloader-configmaps, handler reloader) -> done\n"),
        "{out}"
    );
}

/// A sink whose URL comes from a Secret failed its URL check under
/// `replay` (the placeholder was `<Secret slack key "url">`); now it gets a URL on its
/// allow-list's host, its request is captured, and replay says what stood in.
#[test]
fn replay_gives_a_secret_url_a_placeholder_url_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(
        dir.path(),
        "
handlers:
  to-slack:
    plugin: slack
    config:
      url: {valueFrom: {secretKeyRef: {name: slack, key: url}}}
      channel: {valueFrom: {env: SLACK_CHANNEL}}
    capabilities:
      http: [https://hooks.slack.com]
routes:
  - {name: warnings, resource: v1/events, handler: to-slack}
",
    );
    let events = dir.path().join("events.jsonl");
    let event = json!({"route": "warnings", "handler": "to-slack", "kind": "added", "object": {
        "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "BackOff",
        "message": "restarting", "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web"},
        "metadata": {"name": "web.1", "namespace": "shop"}}});
    std::fs::write(&events, format!("{event}\n{event}\n")).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 0, "{out}{err}");
    let url = "https://hooks.slack.com/switchyard-replay-placeholder/secret/slack/url";
    assert!(
        out.contains("line 1: added shop/web.1 (route warnings, handler to-slack) -> done\n"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  note: config.url: the URL {url} stands in for the value of Secret slack key \"url\", which replay never reads\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("  note: config.channel: <environment variable SLACK_CHANNEL> stands in"),
        "{out}"
    );
    assert!(out.contains(&format!("  request POST {url} ")), "{out}");
    // Said once per handler, not with every event.
    assert_eq!(out.matches("  note: config.url").count(), 1, "{out}");
}

/// A JavaScript plugin whose `fetch` is refused trapped under `replay`
/// where the daemon gives it a catchable `TypeError`; replay refuses as the daemon does.
/// A refusal that dropped the request's body before the plugin had written it made
/// StarlingMonkey abort on the failed write ("event loop error, but no exception is
/// pending"); the send path now reads the body before it answers a refusal.
#[test]
fn replay_refuses_a_javascript_fetch_as_the_daemon_does() {
    let dir = tempfile::tempdir().unwrap();
    let config = support::write_config(
        dir.path(),
        "
handlers:
  js:
    plugin: notify-js
    config: {url: \"http://127.0.0.2:9/js\"}
    capabilities:
      http: [\"http://127.0.0.1:1\"]
  js-allowed:
    plugin: notify-js
    config: {url: \"http://127.0.0.1:1/js\"}
    capabilities:
      http: [\"http://127.0.0.1:1\"]
routes:
  - {name: cms, resource: configmaps, handler: js}
  - {name: cms-allowed, resource: configmaps, handler: js-allowed}
",
    );
    let events = dir.path().join("events.jsonl");
    let event = |route: &str, handler: &str| {
        json!({"route": route, "handler": handler, "kind": "added", "object": {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default"}}})
        .to_string()
    };
    // The refusal raced the plugin's write of the request body: several calls, so a
    // lost race shows.
    let mut lines = vec![event("cms-allowed", "js-allowed")];
    lines.extend((0..8).map(|_| event("cms", "js")));
    std::fs::write(&events, lines.join("\n")).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 1, "{out}{err}");
    for line in 2..=9 {
        assert!(
            out.contains(&format!(
                "line {line}: added default/a (route cms, handler js) -> error: TypeError: NetworkError when attempting to fetch resource\n"
            )),
            "line {line}: {out}{err}"
        );
    }
    // An allowed request is captured and answered by the stub.
    assert!(
        out.contains("line 1: added default/a (route cms-allowed, handler js-allowed) -> done"),
        "{out}{err}"
    );
    assert!(
        out.contains("  request POST http://127.0.0.1:1/js "),
        "{out}"
    );
}

#[test]
fn replay_calls_a_batch_handlers_handle_batch_with_each_event_alone() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
handlers:
  bulk:
    plugin: batcher
    batch: {max_events: 10}
routes:
  - name: cms
    resource: configmaps
    handler: bulk
";
    let config = support::write_config(dir.path(), yaml);
    let events = dir.path().join("events.jsonl");
    let line = |name: &str, annotations: Value| event(name, annotations).replace("faulty", "bulk");
    let lines = [
        line("fine", json!({})),
        line("later", json!({"batcher/outcome": "retry-ms:500"})),
        line(
            "lost",
            json!({"batcher/outcome": "dead-letter:no such team"}),
        ),
    ];
    std::fs::write(&events, lines.join("\n")).unwrap();
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 1, "{out}{err}");
    for expected in [
        "line 1: added default/fine (route cms, handler bulk) -> done\n",
        "  log info: batch of 1: default/fine rv= attempt=1\n",
        "line 2: added default/later (route cms, handler bulk) -> retry after 500 ms\n",
        "line 3: added default/lost (route cms, handler bulk) -> dead letter: no such team\n",
    ] {
        assert!(out.contains(expected), "{expected:?} in {out}");
    }
    assert!(!out.contains("single"), "handle was called: {out}");
    assert!(err.contains("2 of 3 event(s) failed"), "{err}");

    // A plugin without handle-batch is refused as the daemon refuses it.
    let config = support::write_config(dir.path(), &yaml.replace("batcher", "noop"));
    let (code, out, err) = replay(&config, &events);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(
            "handler \"bulk\": plugin \"noop\" does not export handle-batch, which the handler's \
             batch: calls: build it for the handler-batch world, or remove batch: to call handle \
             per event"
        ),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
}
