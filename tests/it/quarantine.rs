//! A plugin that fails on every call is quarantined: its events wait in the queue instead
//! of burning retries into the dead letters, /status and /metrics show it, and a resume or
//! a new plugin version lifts it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

const CONFIG: &str = "
handlers:
  billing:
    plugin: faulty
    max_retries: 1000
    backoff_base: 5ms
    backoff_cap: 5ms
    qps: 0
    quarantine_after: 4
    quarantine_backoff: 10m
routes:
  - name: cms
    resource: configmaps
    handler: billing
";

async fn billing(t: &TestDaemon) -> Value {
    let (_, status) = t.get("/status").await;
    status["handlers"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_failing_on_every_call_is_quarantined_and_lifted_by_resume_or_a_new_version() {
    let mut t = TestDaemon::builder(CONFIG)
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    for name in ["a", "b", "c"] {
        t.create_configmap(json!({"metadata": {"name": name,
            "annotations": {"faulty/error": "cannot reach the billing API"}}}))
            .await;
    }
    let quarantined = support::eventually("the quarantine", WAIT, async || {
        let h = billing(&t).await;
        h["quarantine"].is_object().then_some(h)
    })
    .await;
    assert_eq!(
        quarantined["quarantine"]["last_error"], "cannot reach the billing API",
        "{quarantined:#}"
    );
    assert_eq!(quarantined["quarantines"], 1);
    assert_eq!(quarantined["dead_letters"], 0);
    // Quarantined: no more calls, the events wait. A call already under way when the
    // quarantine began (another worker's) still ends, and counts: start counting after it.
    let settled = support::eventually("the calls in flight to end", WAIT, async || {
        let h = billing(&t).await;
        (h["in_flight"] == 0).then_some(h)
    })
    .await;
    let failed = settled["failed"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let h = billing(&t).await;
    assert_eq!(h["failed"].as_u64().unwrap(), failed, "{h:#}");
    assert!(
        h["queue_depth"].as_u64().unwrap() + h["delayed"].as_u64().unwrap() >= 1,
        "{h:#}"
    );
    let metrics = t.metrics_text().await;
    assert!(
        metrics.contains("switchyard_handler_quarantined{name=\"billing\"} 1"),
        "{metrics}"
    );

    // A resume lifts it: the calls start again (and fail into a second quarantine).
    let (code, _) = t.post("/handlers/billing/resume").await;
    assert_eq!(code, 200);
    support::eventually("a second quarantine", WAIT, async || {
        let h = billing(&t).await;
        (h["quarantines"] == 2 && h["failed"].as_u64().unwrap() > failed).then_some(())
    })
    .await;

    // A new plugin version lifts it at once, and the waiting events are handled.
    t.replace_plugin("faulty", "log-events");
    // In whatever order the workers take them.
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        let mut seen = seen.lock().unwrap();
        for name in ["a", "b", "c"] {
            if l.message
                .starts_with(&format!("added ConfigMap default/{name} "))
            {
                seen.insert(name);
            }
        }
        seen.len() == 3
    })
    .await;
    let h = billing(&t).await;
    assert_eq!(h["quarantine"], Value::Null, "{h:#}");
    assert_eq!(h["dead_letters"], 0);
    t.stop().await;
}

/// Calls under way when the quarantine trips, failing after it, are not its tries: the
/// backoff stays as configured (each used to double it, so eight workers stretched 5 s to
/// ten minutes and a recovered receiver waited that long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_when_it_trips_leave_the_backoff_alone() {
    let config = "
handlers:
  slow:
    plugin: faulty
    concurrency: 4
    max_retries: 1000
    qps: 0
    quarantine_after: 2
    quarantine_backoff: 30s
routes:
  - name: cms
    resource: configmaps
    handler: slow
";
    let t = TestDaemon::builder(config)
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    for name in ["a", "b", "c", "d"] {
        t.create_configmap(json!({"metadata": {"name": name, "annotations": {
            "faulty/error": "the receiver answered 503", "faulty/sleep-ms": "400"}}}))
            .await;
    }
    let settled = support::eventually("the quarantine, with no call in flight", WAIT, async || {
        let h = handler_status(&t, "slow").await;
        (h["quarantine"].is_object() && h["in_flight"] == 0 && h["failed"].as_u64() >= Some(4))
            .then_some(h)
    })
    .await;
    assert_eq!(
        settled["quarantine"]["backoff_seconds"], 30.0,
        "{settled:#}"
    );
    t.stop().await;
}

async fn handler_status(t: &TestDaemon, name: &str) -> Value {
    let (_, status) = t.get("/status").await;
    status["handlers"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["name"] == name))
        .cloned()
        .unwrap_or_default()
}
