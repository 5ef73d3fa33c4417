//! `instance: reuse`: a worker keeps its plugin instance across events, and drops it when a
//! call fails; `per-event` (the default) makes a fresh one for every event.

use std::time::Duration;

use serde_json::json;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

fn config(instance: &str) -> String {
    format!(
        "
handlers:
  counter:
    plugin: faulty
    concurrency: 1
    max_retries: 0
{instance}routes:
  - name: cms
    resource: configmaps
    handler: counter
"
    )
}

/// Creates ConfigMap `name` (failing as the annotation `failure` asks, if given) and
/// returns the number of the call the plugin logged for it, once the call is over.
async fn call_number(t: &mut TestDaemon, name: &str, failure: Option<(&str, &str)>) -> u32 {
    let mut annotations = json!({"faulty/count": "true"});
    if let Some((annotation, value)) = failure {
        annotations[annotation] = value.into();
    }
    t.create_configmap(json!({"metadata": {"name": name, "annotations": annotations}}))
        .await;
    let line = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("call ")).await;
    let number = line.message["call ".len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a call number in {:?}", line.message));
    if failure.is_some() {
        support::eventually("the dead letter", WAIT, async || {
            let (_, status) = t.get("/status").await;
            (status["handlers"][0]["dead_letters"].as_u64() > Some(0)).then_some(())
        })
        .await;
    } else {
        support::wait_for_log(&mut t.logs, WAIT, |l| {
            l.message
                .starts_with(&format!("handled added default/{name} "))
        })
        .await;
    }
    number
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_counts_its_calls_until_one_fails() {
    let mut t = TestDaemon::builder(&config("    instance: reuse\n"))
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    let mut seen = Vec::new();
    for name in ["a", "b", "c"] {
        seen.push(call_number(&mut t, name, None).await);
    }
    assert_eq!(seen, [1, 2, 3]);
    assert_eq!(
        call_number(&mut t, "bad", Some(("faulty/error", "broken"))).await,
        4
    );
    // The failed call's instance is gone: the next event starts a fresh one.
    assert_eq!(call_number(&mut t, "d", None).await, 1);
    t.stop().await;
}

/// A call stopped at its deadline while the plugin slept in the host
/// drops the instance, as a trap does; the next event gets a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_stopped_at_its_deadline_is_dropped() {
    let mut t = TestDaemon::builder(&config("    instance: reuse\n    timeout: 1s\n"))
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    assert_eq!(call_number(&mut t, "a", None).await, 1);
    let asleep = Some(("faulty/sleep-ms", "600000"));
    assert_eq!(call_number(&mut t, "asleep", asleep).await, 2);
    assert_eq!(call_number(&mut t, "b", None).await, 1);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_instance_for_every_event_by_default() {
    let mut t = TestDaemon::builder(&config(""))
        .plugin_file("faulty", "faulty")
        .start()
        .await;
    for name in ["a", "b", "c"] {
        assert_eq!(call_number(&mut t, name, None).await, 1);
    }
    t.stop().await;
}
