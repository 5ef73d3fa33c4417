//! The alertmanager sink, carried in the binary (`builtin:alertmanager`), against a real
//! Alertmanager (Debian's `prometheus-alertmanager`), the alerts read back from its API v2:
//! a Warning Event becomes an alert (after retries while Alertmanager is not up yet), its
//! deletion resolves it, and an alert Alertmanager refuses is a dead letter naming why.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{WAIT, config_for, core_event};
use crate::support::alertmanager::Alertmanager;
use crate::support::{self, TestDaemon};

/// The handler's status (`GET /handlers/sink`).
async fn status(t: &TestDaemon) -> Value {
    t.get("/handlers/sink").await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_gets_an_alert_from_a_warning_event_resolved_when_it_is_deleted() {
    let port = support::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let sink = json!({"url": url, "labels": {"cluster": "test"},
                      "generator_url": "https://k8s.example/{{object.metadata.name}}"});
    let yaml = config_for(
        "builtin:alertmanager",
        sink,
        &url,
        "    resource: v1/events",
    );
    let t = TestDaemon::builder(&yaml).start().await;
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    let warning = core_event("web-1.2", "Warning", "BackOff", "Back-off restarting app");
    events
        .create(&PostParams::default(), &warning)
        .await
        .unwrap();
    // Nothing listens yet: the alert is retried until Alertmanager is up.
    support::eventually("two retries", WAIT, async || {
        let status = status(&t).await;
        (status["retries"].as_u64() >= Some(2)).then_some(())
    })
    .await;
    let am = Alertmanager::start_on(port).await;
    let alert = support::eventually("an alert", WAIT, async || {
        am.alerts().await.into_iter().next()
    })
    .await;
    assert_eq!(
        alert["labels"],
        json!({"alertname": "BackOff", "severity": "warning", "kind": "Pod",
               "namespace": "default", "name": "web-1", "cluster": "test"}),
        "{alert:#}"
    );
    assert_eq!(
        alert["annotations"],
        json!({"summary": "Warning BackOff on Pod default/web-1",
               "description": "Back-off restarting app"})
    );
    assert_eq!(alert["status"]["state"], "active", "{alert:#}");
    assert_eq!(alert["generatorURL"], "https://k8s.example/web-1.2");
    let errors = status(&t).await["last_errors"].to_string();
    assert!(errors.contains("connection failed"), "{errors}");

    // Deleting the Event resolves its alert at once (not after the 5-minute resolve_timeout):
    // a resolved alert leaves the API's list.
    events
        .delete("web-1.2", &DeleteParams::default())
        .await
        .unwrap();
    support::eventually("the alert resolved", WAIT, async || {
        am.alerts().await.is_empty().then_some(())
    })
    .await;

    // An Event that starts in 2100 makes an alert Alertmanager refuses (it would end,
    // after resolve_timeout, before it starts): a dead letter at once, naming its answer.
    let mut future = core_event("web-1.3", "Warning", "BackOff", "later");
    future.first_timestamp = Some(serde_json::from_value(json!("2100-01-01T00:00:00Z")).unwrap());
    events
        .create(&PostParams::default(), &future)
        .await
        .unwrap();
    let letter = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        body["dead_letters"].as_array()?.first().cloned()
    })
    .await;
    let error = letter["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("permanent: the receiver answered 400:"),
        "{letter:#}"
    );
    assert!(
        error.contains("start time must be before end time"),
        "{letter:#}"
    );
    assert_eq!(letter["attempts"], 1, "{letter:#}");
    t.stop().await;
    am.stop();
}
