//! End to end: changes made in the simulator reach the wasm plugin through the informer,
//! the router and the work queue, and the admin API reports it.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const CONFIGMAPS_TO_LOG_EVENTS: &str = "
handlers:
  log-events: {}
routes:
  - name: configmaps
    resource: configmaps
    handler: log-events
";

#[tokio::test]
async fn a_configmap_created_in_the_simulator_reaches_the_wasm_plugin() {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), CONFIGMAPS_TO_LOG_EVENTS).await;
    let mut logs = daemon.plugin_logs().subscribe();
    daemon.wait_until_synced().await;

    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "hello-plugin"},
        "data": {"greeting": "hi", "target": "world"},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let rv = created.metadata.resource_version.unwrap();

    let line = common::wait_for_log(&mut logs, Duration::from_secs(30), |l| {
        l.message.contains("default/hello-plugin")
    })
    .await;
    assert_eq!(line.handler, "log-events");
    assert_eq!(
        line.message,
        format!(
            "added ConfigMap default/hello-plugin rv={rv} route=configmaps data=[greeting,target]"
        )
    );

    let (code, status) = common::get_json(&format!("{}/status", daemon.admin_url())).await;
    assert_eq!(code, 200);
    let handler = &status["handlers"][0];
    assert_eq!(handler["name"], "log-events");
    assert!(handler["processed"].as_u64().unwrap() >= 1, "{status:#}");
    assert_eq!(handler["failed"], 0);
    let informer = &status["informers"][0];
    assert_eq!(informer["resource"], "v1/configmaps");
    assert_eq!(informer["synced"], true);
    assert_eq!(informer["objects"], 1);
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn updates_and_deletes_reach_the_plugin_in_order() {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), CONFIGMAPS_TO_LOG_EVENTS).await;
    let mut logs = daemon.plugin_logs().subscribe();
    daemon.wait_until_synced().await;

    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"v": "1"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    common::wait_for_log(&mut logs, Duration::from_secs(30), |l| {
        l.message.starts_with("added ConfigMap default/c ")
    })
    .await;

    let mut changed = api.get("c").await.unwrap();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("w".into(), "2".into());
    api.replace("c", &PostParams::default(), &changed)
        .await
        .unwrap();
    common::wait_for_log(&mut logs, Duration::from_secs(30), |l| {
        l.message.starts_with("updated ConfigMap default/c ") && l.message.ends_with("data=[v,w]")
    })
    .await;

    api.delete("c", &DeleteParams::default()).await.unwrap();
    common::wait_for_log(&mut logs, Duration::from_secs(30), |l| {
        l.message.starts_with("deleted ConfigMap default/c ")
    })
    .await;
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn health_endpoints_answer_over_http() {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), CONFIGMAPS_TO_LOG_EVENTS).await;
    daemon.wait_until_synced().await;
    for path in ["/livez", "/readyz"] {
        let response = reqwest::get(format!("{}{path}", daemon.admin_url()))
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        assert_eq!(response.text().await.unwrap(), "ok\n");
    }
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_missing_plugin_is_reported_and_its_events_wait_in_the_queue() {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = "
handlers:
  ghost:
    plugin: does-not-exist
routes:
  - name: configmaps
    resource: configmaps
    handler: ghost
";
    let daemon = common::start_daemon(&sim, dir.path(), yaml).await;
    daemon.wait_until_synced().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "waiting"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();

    let url = format!("{}/status", daemon.admin_url());
    let status = common::eventually(
        "the event to be queued",
        Duration::from_secs(30),
        async || {
            let (_, status) = common::get_json(&url).await;
            (status["handlers"][0]["queue_depth"] == 1).then_some(status)
        },
    )
    .await;
    let handler = &status["handlers"][0];
    assert_eq!(handler["plugin_loaded"], false);
    let error = handler["plugin_error"].as_str().unwrap();
    assert!(error.contains("does-not-exist.wasm"), "{error}");
    assert_eq!(handler["processed"], 0);
    // The daemon itself is fine.
    let live = reqwest::get(format!("{}/livez", daemon.admin_url()))
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);
    daemon.shut_down(Duration::from_millis(200)).await;
}
