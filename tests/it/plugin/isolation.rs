//! A fresh instance never sees what the previous event's instance left in memory, whether
//! the pool's slots are kept resident and reset in place or decommitted (`plugin_slots:`);
//! `/status` says which mode runs and why. The `marker` plugin fails an event when it finds
//! the marker an earlier event wrote, which a reused instance does (the control).

use std::time::Duration;

use serde_json::json;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// Starts a daemon whose `marker` handler runs with `instance` under `plugin_slots: slots`,
/// hands it five ConfigMaps, and returns `(processed, failed)` once all five are handled,
/// with the daemon's `/status` `plugin_slots`.
async fn run(slots: &str, instance: &str) -> (u64, u64, serde_json::Value) {
    let t = TestDaemon::builder(&format!(
        "
plugin_slots: {slots}
handlers:
  marker:
    plugin: marker
    instance: {instance}
    max_retries: 0
routes:
  - name: cms
    resource: configmaps
    handler: marker
"
    ))
    .plugin_file("marker", "marker")
    .start()
    .await;
    for i in 0..5 {
        t.create_configmap(json!({"metadata": {"name": format!("c{i}")}}))
            .await;
    }
    let counts = support::eventually("five events handled", WAIT, async || {
        let (_, detail) = t.get("/handlers/marker").await;
        let processed = detail["processed"].as_u64().unwrap_or(0);
        let failed = detail["failed"].as_u64().unwrap_or(0);
        (processed + failed >= 5).then_some((processed, failed))
    })
    .await;
    let (_, status) = t.get("/status").await;
    t.stop().await;
    (counts.0, counts.1, status["plugin_slots"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_instance_never_sees_the_last_events_memory_in_either_slot_mode() {
    for slots in ["resident", "decommit"] {
        let (processed, failed, mode) = run(slots, "per-event").await;
        assert_eq!((processed, failed), (5, 0), "{slots}");
        assert_eq!(mode["mode"], slots, "{mode}");
        assert_eq!(mode["reason"], format!("plugin_slots: {slots}"), "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_finds_the_marker_so_the_check_can_fail() {
    let (_, failed, _) = run("resident", "reuse").await;
    assert!(failed >= 1, "a reused instance never found the marker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_says_which_mode_the_probe_chose_and_why() {
    let (processed, failed, mode) = run("auto", "per-event").await;
    assert_eq!((processed, failed), (5, 0));
    let reason = mode["reason"].as_str().unwrap_or_default();
    match mode["mode"].as_str() {
        Some("resident") => assert!(reason.contains("exactly the pages written"), "{mode}"),
        Some("decommit") => assert!(!reason.is_empty(), "{mode}"),
        other => panic!("unknown mode {other:?}: {mode}"),
    }
}
