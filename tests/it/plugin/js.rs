//! The JavaScript example handler (`plugins/js/event-log`, built with componentize-js)
//! running in the daemon: what it logs, how its errors and requeues reach the work queue,
//! and what the admin API shows about it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

fn configmap(name: &str, annotations: Value) -> ConfigMap {
    support::configmap(json!({
        "metadata": {"name": name, "annotations": annotations},
        "data": {"v": "0"},
    }))
}

/// The `rv=` field of a line the handler logged.
fn rv(line: &str) -> &str {
    line.split(" rv=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or("")
}

#[tokio::test]
async fn the_javascript_handler_logs_every_change_with_its_configured_prefix() {
    let yaml = "
handlers:
  summary:
    plugin: event-log
    config:
      prefix: '[js]'
routes:
  - name: configmaps
    resource: configmaps
    handler: summary
";
    let mut t = TestDaemon::start(yaml).await;

    let api = t.configmaps("default");
    let created = api
        .create(&PostParams::default(), &configmap("hello-js", json!({})))
        .await
        .unwrap();
    let rv_created = created.metadata.resource_version.clone().unwrap();
    let line = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("hello-js")).await;
    assert_eq!(line.handler, "summary");
    assert_eq!(line.level, "info");
    assert_eq!(
        line.message,
        format!("[js] added ConfigMap default/hello-js rv={rv_created} route=configmaps")
    );

    let mut changed = created;
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("v".into(), "1".into());
    let updated = api
        .replace("hello-js", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv_updated = updated.metadata.resource_version.unwrap();
    let line = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("hello-js")).await;
    assert_eq!(
        line.message,
        format!("[js] updated ConfigMap default/hello-js rv={rv_updated} route=configmaps")
    );

    api.delete("hello-js", &DeleteParams::default())
        .await
        .unwrap();
    let line = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("hello-js")).await;
    // The delete itself moves the resourceVersion on.
    assert_eq!(
        line.message.replace(rv(&line.message), "RV"),
        "[js] deleted ConfigMap default/hello-js rv=RV route=configmaps"
    );
    assert!(
        rv(&line.message).parse::<u64>().unwrap() > rv_updated.parse().unwrap(),
        "{}",
        line.message
    );

    let (code, status) = t.get("/status").await;
    assert_eq!(code, 200);
    let handler = &status["handlers"][0];
    assert_eq!(handler["name"], "summary");
    assert_eq!(handler["plugin"], "event-log");
    assert_eq!(handler["plugin_loaded"], true, "{status:#}");
    assert_eq!(handler["processed"], 3, "{status:#}");
    assert_eq!(handler["failed"], 0, "{status:#}");
    assert_eq!(status["routes"][0]["delivered"], 3, "{status:#}");
    t.stop().await;
}

#[tokio::test]
async fn errors_thrown_in_javascript_are_retried_then_dead_lettered_and_shown_as_last_errors() {
    let yaml = "
handlers:
  event-log:
    max_retries: 2
    backoff_base: 10ms
    backoff_cap: 50ms
  misconfigured:
    plugin: event-log
    max_retries: 0
    config:
      prefix: 5
routes:
  - name: configmaps
    resource: configmaps
    labels: '!config'
    handler: event-log
  - name: bad-config
    resource: configmaps
    labels: config=bad
    handler: misconfigured
";
    let mut t = TestDaemon::start(yaml).await;
    let api = t.configmaps("default");
    // An error the handler raises on purpose, and a JavaScript exception it did not expect.
    api.create(
        &PostParams::default(),
        &configmap(
            "broken",
            json!({"event-log/error": "cannot reach the billing API"}),
        ),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &configmap("typo", json!({"event-log/requeue-ms": "soon"})),
    )
    .await
    .unwrap();
    let mut misconfigured = configmap("any", json!({}));
    misconfigured.metadata.labels = Some([("config".to_string(), "bad".to_string())].into());
    api.create(&PostParams::default(), &misconfigured)
        .await
        .unwrap();

    let letters = support::eventually("two dead letters", WAIT, async || {
        let (_, body) = t.get("/handlers/event-log/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (letters.len() == 2).then_some(letters)
    })
    .await;
    let by_id = |id: &str| {
        letters
            .iter()
            .find(|l| l["id"] == id)
            .unwrap_or_else(|| panic!("no dead letter {id} in {letters:#?}"))
            .clone()
    };
    let broken = by_id("configmaps/default/broken");
    assert_eq!(broken["attempts"], 3);
    assert_eq!(broken["last_error"], "cannot reach the billing API");
    let typo = by_id("configmaps/default/typo");
    assert_eq!(typo["last_error"], "SyntaxError: invalid BigInt syntax");
    // The unexpected exception surfaced after the log line, on each of the three attempts.
    let line =
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("default/typo")).await;
    assert!(
        line.message
            .starts_with("event-log added ConfigMap default/typo rv="),
        "{}",
        line.message
    );

    let (code, detail) = t.get("/handlers/event-log").await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            &detail["failed"],
            &detail["retries"],
            &detail["dead_lettered"]
        ),
        (&json!(6), &json!(4), &json!(2)),
        "{detail:#}"
    );
    let errors = detail["last_errors"].as_array().unwrap();
    let mut broken_attempts: Vec<u64> = errors
        .iter()
        .filter(|e| e["object"] == "configmaps/default/broken")
        .inspect(|e| assert_eq!(e["error"], "cannot reach the billing API", "{e}"))
        .map(|e| e["attempt"].as_u64().unwrap())
        .collect();
    broken_attempts.sort();
    assert_eq!(broken_attempts, [1, 2, 3], "{detail:#}");

    // A config init refuses: every call fails with init's message.
    let detail = support::eventually("the init failure", WAIT, async || {
        let (_, detail) = t.get("/handlers/misconfigured").await;
        (detail["dead_lettered"] == 1).then_some(detail)
    })
    .await;
    assert_eq!(
        detail["last_errors"][0]["error"],
        "plugin init failed: config must be an object like {\"prefix\": \"...\"}",
        "{detail:#}"
    );
    assert_eq!(detail["processed"], 0);
    t.stop().await;
}

#[tokio::test]
async fn a_requeue_after_from_javascript_hands_the_object_back_later_without_failing() {
    let yaml = "
handlers:
  event-log: {}
routes:
  - name: configmaps
    resource: configmaps
    handler: event-log
";
    let mut t = TestDaemon::start(yaml).await;
    let api = t.configmaps("default");
    let created = api
        .create(
            &PostParams::default(),
            &configmap("later", json!({"event-log/requeue-ms": "100"})),
        )
        .await
        .unwrap();
    let wanted = format!(
        "event-log added ConfigMap default/later rv={} route=configmaps",
        created.metadata.resource_version.unwrap()
    );
    let first = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("later")).await;
    assert_eq!(first.message, wanted);
    let again = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("later")).await;
    assert_eq!(again.message, wanted);
    assert_eq!(rv(&again.message), rv(&first.message));
    let status = t.daemon().status();
    assert_eq!(status.handlers[0].failed, 0);
    assert!(status.handlers[0].processed >= 2);
    t.stop().await;
}
