//! Shadow runs: a handler's `shadow:` plugin gets every event its plugin handles, its writes
//! are captured and never reach the API server, and GET /handlers/{name}/shadow, /status
//! and /metrics show how the two compare. Nothing the shadow does retries, dead-letters or
//! quarantines anything.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// `guard` runs label-guard (owner=team-a) with `shadow` as its shadow.
fn config(shadow: &str) -> String {
    format!(
        "
handlers:
  guard:
    plugin: label-guard
    shadow: {shadow}
    timeout: 1s
    max_retries: 1
    backoff_base: 5ms
    config: {{label: owner, value: team-a}}
    capabilities:
      configmaps: [patch]
  plain:
    plugin: log-events
routes:
  - {{name: cms, resource: configmaps, handler: guard}}
  - {{name: all, resource: configmaps, handler: plain}}
"
    )
}

async fn start(shadow: &str) -> TestDaemon {
    TestDaemon::builder(&config(shadow))
        .plugin_file("label-guard", "label-guard")
        .plugin_file("label-guard-v2", "label-guard")
        .plugin_file("faulty", "faulty")
        .plugin_file("log-events", "log-events")
        .start()
        .await
}

async fn owner(t: &TestDaemon, name: &str) -> Option<String> {
    let cm: ConfigMap = t.configmaps("default").get(name).await.unwrap();
    cm.metadata.labels?.get("owner").cloned()
}

/// GET /handlers/guard/shadow once `done` holds of it.
async fn shadow_when(t: &TestDaemon, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    support::eventually(what, WAIT, async || {
        let (code, body) = t.get("/handlers/guard/shadow").await;
        assert_eq!(code, 200, "{body:#}");
        done(&body).then_some(body)
    })
    .await
}

/// The guard handler's entry in /status.
async fn guard_status(t: &TestDaemon) -> Value {
    let status = t.status_json().await;
    status["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "guard")
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_writing_something_else_is_shown_as_a_write_difference_and_never_sent() {
    let t = start("faulty").await;
    t.create_configmap(json!({"metadata": {"name": "a",
        "annotations": {"faulty/label": "owner=team-b"}}}))
        .await;
    let view = shadow_when(&t, "a write difference", |v| {
        v["differing_writes"].as_u64() >= Some(1)
    })
    .await;
    // The primary's patch reached the simulator; the shadow's never did.
    assert_eq!(owner(&t, "a").await.as_deref(), Some("team-a"));
    assert_eq!(view["plugin"], "faulty", "{view:#}");
    assert_eq!(view["primary"], "label-guard", "{view:#}");
    assert!(view["loaded"].as_bool().unwrap(), "{view:#}");
    assert_eq!(view["sha256"].as_str().map(str::len), Some(64), "{view:#}");
    assert_eq!(view["shadow_errors"], 0, "{view:#}");
    let first = &view["recent_differences"][0];
    assert_eq!(first["route"], "cms", "{view:#}");
    assert_eq!(first["event"], "added", "{view:#}");
    assert_eq!(first["object"], "default/a", "{view:#}");
    assert!(first["resource_version"].is_string(), "{view:#}");
    assert_eq!(first["differs"], json!(["writes"]), "{view:#}");
    let label =
        |side: &str| first[side]["writes"][0]["body"]["metadata"]["labels"]["owner"].clone();
    assert_eq!(label("primary"), "team-a", "{view:#}");
    assert_eq!(label("shadow"), "team-b", "{view:#}");
    assert_eq!(first["shadow"]["writes"][0]["action"], "merge-patch");
    assert_eq!(first["primary"]["outcome"], "done");
    assert_eq!(first["shadow"]["outcome"], "done");

    // Still team-a after every call of the shadow so far (each update calls it again).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(owner(&t, "a").await.as_deref(), Some("team-a"));
    let status = guard_status(&t).await;
    assert_eq!(status["shadow"]["plugin"], "faulty", "{status:#}");
    assert!(
        status["shadow"]["differing_writes"].as_u64() >= Some(1),
        "{status:#}"
    );
    let metrics = t.metrics_text().await;
    let series = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchyard_shadow_differences_total{handler=\"guard\",kind=\"writes\"}")
        })
        .unwrap_or_else(|| panic!("no shadow differences series in:\n{metrics}"));
    assert_ne!(series.rsplit(' ').next(), Some("0"), "{series}");

    let (code, body) = t.get("/handlers/nope/shadow").await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["error"], "no handler named \"nope\"");
    let (code, body) = t.get("/handlers/plain/shadow").await;
    assert_eq!(code, 404, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("handler \"plain\" has no shadow"),
        "{body}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_shadow_is_only_recorded_while_the_primary_succeeds() {
    let t = start("faulty").await;
    t.create_configmap(json!({"metadata": {"name": "err",
        "annotations": {"faulty/error": "the new version broke"}}}))
        .await;
    t.create_configmap(json!({"metadata": {"name": "trap",
        "annotations": {"faulty/trap": "true"}}}))
        .await;
    t.create_configmap(json!({"metadata": {"name": "slow",
        "annotations": {"faulty/loop": "true"}}}))
        .await;
    // Its cache reads see the daemon's caches (an empty stand-in would have any index).
    t.create_configmap(json!({"metadata": {"name": "index",
        "annotations": {"faulty/index": "by-nothing"}}}))
        .await;
    // Two calls per object (added, then the update the primary's patch makes).
    let view = shadow_when(&t, "eight failed shadow calls", |v| {
        v["shadow_errors"].as_u64() >= Some(8)
    })
    .await;
    for name in ["err", "trap", "slow", "index"] {
        assert_eq!(owner(&t, name).await.as_deref(), Some("team-a"), "{name}");
    }
    assert_eq!(view["differing_errors"], view["shadow_errors"], "{view:#}");
    let errors: Vec<&str> = view["recent_differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["primary"]["outcome"], "done", "{d:#}");
            assert_eq!(d["shadow"]["outcome"], "error", "{d:#}");
            d["shadow"]["error"].as_str().unwrap()
        })
        .collect();
    assert!(errors.contains(&"the new version broke"), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("trapped")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("deadline of 1s exceeded")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("has no index \"by-nothing\"")),
        "{errors:?}"
    );

    // The primary's record is clean: nothing failed, retried, dead-lettered or quarantined.
    let status = guard_status(&t).await;
    assert_eq!(status["failed"], 0, "{status:#}");
    assert_eq!(status["retries"], 0, "{status:#}");
    assert_eq!(status["dead_letters"], 0, "{status:#}");
    assert_eq!(status["quarantines"], 0, "{status:#}");
    assert!(status["processed"].as_u64() >= Some(8), "{status:#}");
    let (_, letters) = t.get("/handlers/guard/dead-letters").await;
    assert_eq!(letters["dead_letters"], json!([]), "{letters:#}");
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_shadow_shows_no_differences() {
    let t = start("label-guard-v2").await;
    for name in ["a", "b", "c"] {
        t.create_configmap(json!({"metadata": {"name": name}}))
            .await;
    }
    // Per object: added (both patch), then the update the patch makes (neither writes).
    let view = shadow_when(&t, "six comparisons", |v| v["compared"].as_u64() >= Some(6)).await;
    assert_eq!(view["same"], view["compared"], "{view:#}");
    for kind in [
        "differing_outcome",
        "differing_writes",
        "differing_errors",
        "shadow_errors",
    ] {
        assert_eq!(view[kind], 0, "{kind}: {view:#}");
    }
    assert_eq!(view["recent_differences"], json!([]), "{view:#}");
    for name in ["a", "b", "c"] {
        assert_eq!(owner(&t, name).await.as_deref(), Some("team-a"), "{name}");
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_a_shadow_without_losing_the_queue() {
    let t = start("label-guard-v2").await;
    let without = config("label-guard-v2").replace("    shadow: label-guard-v2\n", "");
    t.write_config(&without);
    support::eventually("the shadow to go", WAIT, async || {
        let (code, _) = t.get("/handlers/guard/shadow").await;
        (code == 404).then_some(())
    })
    .await;
    assert!(guard_status(&t).await.get("shadow").is_none());

    // Events queued while the handler is paused survive the reload that adds the shadow.
    let (code, _) = t.post("/handlers/guard/pause").await;
    assert_eq!(code, 200);
    t.create_configmap(json!({"metadata": {"name": "queued"}}))
        .await;
    support::eventually("the event to queue", WAIT, async || {
        (guard_status(&t).await["queue_depth"].as_u64() >= Some(1)).then_some(())
    })
    .await;
    t.write_config(&config("label-guard-v2"));
    support::eventually("the shadow to come back", WAIT, async || {
        let (code, _) = t.get("/handlers/guard/shadow").await;
        (code == 200).then_some(())
    })
    .await;
    assert_eq!(owner(&t, "queued").await, None);
    let (code, _) = t.post("/handlers/guard/resume").await;
    assert_eq!(code, 200);
    let view = shadow_when(&t, "the queued event compared", |v| {
        v["compared"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(view["plugin"], "label-guard-v2", "{view:#}");
    assert_eq!(owner(&t, "queued").await.as_deref(), Some("team-a"));

    // A shadow naming a plugin that is not there is refused where it is written.
    t.write_config(&config("label-guard-v3"));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 422, "{body:#}");
    let error = &body["errors"][0];
    assert_eq!(error["path"], "handlers.guard.shadow", "{body:#}");
    assert!(error["line"].as_u64() > Some(0), "{body:#}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("shadow plugin \"label-guard-v3\" not found"),
        "{body:#}"
    );
    t.stop().await;
}

/// With a shadow, a plugin sleeping in the host (a WASI clock poll) is
/// stopped at the deadline too, the primary as the shadow: the primary's failure is a
/// timeout that dead-letters its event, the shadow's is counted, and the one worker goes
/// on to the next object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_and_shadow_sleeping_past_the_timeout_both_end_at_the_deadline() {
    let yaml = "
handlers:
  sleepy:
    plugin: faulty
    shadow: faulty-v2
    concurrency: 1
    timeout: 1s
    max_retries: 0
routes:
  - {name: cms, resource: configmaps, handler: sleepy}
";
    let t = TestDaemon::builder(yaml)
        .plugin_file("faulty", "faulty")
        .plugin_file("faulty-v2", "faulty")
        .start()
        .await;
    t.create_configmap(json!({"metadata": {"name": "asleep",
        "annotations": {"faulty/sleep-ms": "600000"}}}))
        .await;
    t.create_configmap(json!({"metadata": {"name": "awake"}}))
        .await;
    let view = support::eventually(
        "both events compared, the sleeping one failed on both sides",
        WAIT,
        async || {
            let (_, view) = t.get("/handlers/sleepy/shadow").await;
            (view["compared"] == 2 && view["shadow_errors"] == 1).then_some(view)
        },
    )
    .await;
    assert_eq!(view["same"], 2, "{view:#}");
    let (_, letters) = t.get("/handlers/sleepy/dead-letters").await;
    let letters = letters["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0]["object"], "default/asleep");
    assert_eq!(
        letters[0]["last_error"],
        "deadline of 1s exceeded; the call was stopped"
    );
    t.stop_within(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handlers_shadow_gets_the_same_batches_and_is_compared_item_by_item() {
    let yaml = "
handlers:
  twin:
    plugin: batcher
    shadow: batcher-v2
    concurrency: 1
    batch: {max_events: 10, max_wait: 1s}
  lacking:
    plugin: batcher
    shadow: log-events
    concurrency: 1
    batch: {max_events: 10, max_wait: 1s}
routes:
  - {name: to-twin, resource: configmaps, namespace: default, handler: twin}
  - {name: to-lacking, resource: configmaps, namespace: default, handler: lacking}
";
    let t = TestDaemon::builder(yaml)
        .plugin_file("batcher", "batcher")
        .plugin_file("batcher-v2", "batcher")
        .plugin_file("log-events", "log-events")
        .start()
        .await;
    for name in ["b1", "b2", "b3"] {
        let annotations = match name {
            "b2" => json!({"batcher/outcome": "dead-letter:refused"}),
            _ => json!({}),
        };
        t.create_configmap(json!({"metadata": {"name": name, "annotations": annotations}}))
            .await;
    }
    // The twin does what the primary does with each batch: every call compared the same.
    let twin = support::eventually("the twin's batches compared", WAIT, async || {
        let (_, view) = t.get("/handlers/twin/shadow").await;
        let metrics = t.metrics_text().await;
        let batches = metrics
            .lines()
            .find_map(|l| l.strip_prefix("switchyard_handler_batches_total{name=\"twin\"} "))
            .and_then(|v| v.trim().parse::<u64>().ok())?;
        (view["compared"].as_u64() == Some(batches) && batches >= 1).then_some(view)
    })
    .await;
    assert_eq!(twin["same"], twin["compared"], "{twin:#}");
    assert_eq!(twin["shadow_errors"], 0, "{twin:#}");
    // A shadow without handle-batch fails every batch: an error difference naming why,
    // beside the primary's outcome of each event.
    let lacking = support::eventually("the lacking shadow's difference", WAIT, async || {
        let (_, view) = t.get("/handlers/lacking/shadow").await;
        (view["differing_errors"].as_u64() >= Some(1)).then_some(view)
    })
    .await;
    let first = &lacking["recent_differences"][0];
    assert_eq!(first["differs"], json!(["errors"]), "{lacking:#}");
    assert!(
        first["shadow"]["error"]
            .as_str()
            .unwrap()
            .contains("handle-batch: the plugin does not export it"),
        "{lacking:#}"
    );
    let items = first["primary"]["items"].as_array().unwrap();
    let object = first["object"].as_str().unwrap();
    if items.len() > 1 {
        assert!(
            object.ends_with(&format!("(and {} more in its batch)", items.len() - 1)),
            "{lacking:#}"
        );
    }
    let b2 = items.iter().find(|i| i["object"] == "default/b2");
    if let Some(b2) = b2 {
        assert_eq!(b2["outcome"], "dead-letter", "{lacking:#}");
        assert_eq!(b2["reason"], "refused", "{lacking:#}");
    }
    assert!(
        items
            .iter()
            .all(|i| i["object"] == "default/b2" || i["outcome"] == "done"),
        "{lacking:#}"
    );
    t.stop_within(Duration::ZERO).await;
}
