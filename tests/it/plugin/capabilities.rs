//! The host imports against the simulator: writes happen only where a handler's
//! `capabilities:` grant them, cache reads only for the resources its routes watch, and
//! plugin metrics show on /metrics; every refusal is an error the handler reports, never a
//! crash. (Reads by index: the recipe pods-per-node, in tests/it/recipes/pods_per_node.rs.)

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

async fn create_configmap(t: &TestDaemon, name: &str, labels: serde_json::Value) -> ConfigMap {
    create_configmap_with(t, name, labels, json!({})).await
}

async fn create_configmap_with(
    t: &TestDaemon,
    name: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> ConfigMap {
    t.create_configmap(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "data": {"k": "v"},
    }))
    .await
}

async fn read_configmap(t: &TestDaemon, name: &str) -> ConfigMap {
    t.configmaps("default").get(name).await.unwrap()
}

fn label(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.metadata.labels.as_ref()?.get(key).cloned()
}

fn rv(cm: &ConfigMap) -> String {
    cm.metadata.resource_version.clone().unwrap()
}

/// The handler's recent errors, from GET /handlers/{name}.
async fn last_errors(t: &TestDaemon, handler: &str) -> Vec<String> {
    let (status, body) = t.get(&format!("/handlers/{handler}")).await;
    assert_eq!(status, 200, "{body}");
    body["last_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until the handler's last errors include one containing `text`; returns it.
async fn wait_for_error(t: &TestDaemon, handler: &str, text: &str) -> String {
    support::eventually(
        &format!("handler {handler} to report an error containing {text:?}"),
        WAIT,
        async || {
            last_errors(t, handler)
                .await
                .into_iter()
                .find(|e| e.contains(text))
        },
    )
    .await
}

/// The value of the series `series` (name and labels, as /metrics writes them).
async fn metric(t: &TestDaemon, series: &str) -> Option<f64> {
    let text = reqwest::get(t.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

async fn processed(t: &TestDaemon, handler: &str) -> u64 {
    let (_, body) = t.get(&format!("/handlers/{handler}")).await;
    body["processed"].as_u64().unwrap()
}

const LABEL_GUARD: &str = "
handlers:
  label-guard:
    config: {label: owner, value: unknown}
    backoff_base: 20ms
    CAPABILITIES
  log-events: {}
routes:
  - name: cms
    resource: configmaps
    namespace: default
    handler: label-guard
  - name: log
    resource: configmaps
    handler: log-events
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_guard_with_the_patch_capability_labels_new_objects_and_leaves_labelled_ones_alone() {
    let yaml = LABEL_GUARD.replace("CAPABILITIES", "capabilities: {configmaps: [patch]}");
    let t = TestDaemon::start(&yaml).await;

    let owned = create_configmap(&t, "owned", json!({"owner": "alice"})).await;
    create_configmap(&t, "bare", json!({"app": "web"})).await;

    let labelled = support::eventually("bare to get the owner label", WAIT, async || {
        let cm = read_configmap(&t, "bare").await;
        (label(&cm, "owner").as_deref() == Some("unknown")).then_some(cm)
    })
    .await;
    assert_eq!(label(&labelled, "app").as_deref(), Some("web"));
    // Added owned, added bare, then the update the patch caused: all handled.
    support::eventually("the three events to be handled", WAIT, async || {
        (processed(&t, "label-guard").await >= 3).then_some(())
    })
    .await;
    // A later object, labelled already, handled with nothing left in the queue: whatever
    // the first three events would write has been written by then.
    create_configmap(&t, "later", json!({"owner": "bob"})).await;
    support::eventually(
        "the later object handled and the queue empty",
        WAIT,
        async || {
            let status = t.daemon().status();
            let guard = status.handlers.iter().find(|h| h.name == "label-guard")?;
            (guard.processed >= 4 && guard.queue_depth == 0 && guard.in_flight == 0).then_some(())
        },
    )
    .await;
    let owned_now = read_configmap(&t, "owned").await;
    assert_eq!(
        rv(&owned_now),
        rv(&owned),
        "a labelled object is not written"
    );
    assert_eq!(label(&owned_now, "owner").as_deref(), Some("alice"));
    assert_eq!(
        rv(&read_configmap(&t, "bare").await),
        rv(&labelled),
        "the plugin's own patch causes no further write"
    );
    assert!(last_errors(&t, "label-guard").await.is_empty());
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_guard_without_the_capability_is_refused_and_the_rest_keeps_working() {
    let yaml = LABEL_GUARD.replace("CAPABILITIES", "max_retries: 2");
    let mut t = TestDaemon::start(&yaml).await;

    let created = create_configmap(&t, "bare", json!({})).await;
    let error = wait_for_error(&t, "label-guard", "capability denied").await;
    assert_eq!(
        error,
        "capability denied: handler \"label-guard\" may not merge-patch configmaps (grant it with handlers.label-guard.capabilities.configmaps: [patch])"
    );
    // The other handler on the same resource got the object.
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.handler == "log-events" && l.message.contains("default/bare")
    })
    .await;
    let letters = support::eventually("the refused event to be given up on", WAIT, async || {
        let letters = t.daemon().handler("label-guard").unwrap().dead_letters();
        (letters.len() == 1).then_some(letters)
    })
    .await;
    assert!(letters[0].last_error.starts_with("capability denied"));
    let now = read_configmap(&t, "bare").await;
    assert_eq!(label(&now, "owner"), None);
    assert_eq!(rv(&now), rv(&created));
    // The daemon keeps serving and handling.
    let live = reqwest::get(t.url("/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    create_configmap(&t, "later", json!({})).await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.handler == "log-events" && l.message.contains("default/later")
    })
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_guard_applies_server_side_and_records_an_event_where_granted_by_kind() {
    let yaml = LABEL_GUARD
        .replace(
            "config: {label: owner, value: unknown}",
            "config: {label: owner, value: unknown, method: apply, event: true}",
        )
        .replace("CAPABILITIES", "capabilities: {ConfigMap: [apply, event]}");
    let t = TestDaemon::start(&yaml).await;

    create_configmap(&t, "bare", json!({})).await;
    let labelled = support::eventually("bare to get the owner label", WAIT, async || {
        let cm = read_configmap(&t, "bare").await;
        (label(&cm, "owner").as_deref() == Some("unknown")).then_some(cm)
    })
    .await;
    assert_eq!(
        labelled.data.unwrap().get("k").map(String::as_str),
        Some("v"),
        "apply keeps the fields it does not name"
    );
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    let event = support::eventually("an Event about bare", WAIT, async || {
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .find(|e| e.involved_object.name.as_deref() == Some("bare"))
    })
    .await;
    assert_eq!(event.reason.as_deref(), Some("LabelAdded"));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(event.involved_object.uid, labelled.metadata.uid);
    assert_eq!(
        event.message.as_deref(),
        Some("added the label owner=unknown")
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_about_an_object_needs_the_event_capability() {
    let yaml = LABEL_GUARD
        .replace(
            "config: {label: owner, value: unknown}",
            "config: {label: owner, value: unknown, event: true}",
        )
        .replace("CAPABILITIES", "capabilities: {v1/configmaps: [patch]}");
    let t = TestDaemon::start(&yaml).await;

    create_configmap(&t, "bare", json!({})).await;
    let error = wait_for_error(&t, "label-guard", "capability denied").await;
    assert_eq!(
        error,
        "capability denied: handler \"label-guard\" may not record events about configmaps (grant it with handlers.label-guard.capabilities.configmaps: [event])"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_still_waiting_at_the_deadline_ends_the_call_as_a_timeout() {
    let yaml = LABEL_GUARD
        .replace(
            "backoff_base: 20ms",
            "backoff_base: 20ms\n    timeout: 300ms\n    max_retries: 0",
        )
        .replace("CAPABILITIES", "capabilities: {configmaps: [patch]}");
    let t = TestDaemon::start(&yaml).await;

    // Every request from now on takes 2 s, the open watches aside.
    t.sim().faults().set_delay(Duration::from_secs(2));
    let started = std::time::Instant::now();
    create_configmap(&t, "slow", json!({})).await;
    let error = wait_for_error(&t, "label-guard", "deadline").await;
    assert_eq!(error, "deadline of 300ms exceeded; the call was stopped");
    assert!(started.elapsed() < Duration::from_secs(10));
    t.sim().faults().clear();
    t.stop().await;
}

const FAULTY: &str = "
handlers:
  faulty:
    max_retries: 0
routes:
  - name: cms
    resource: configmaps
    indexes: {by-app: label:app}
    handler: faulty
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_resource_the_routes_do_not_watch_or_an_unknown_index_is_refused() {
    let mut t = TestDaemon::start(FAULTY).await;

    create_configmap_with(
        &t,
        "secret-reader",
        json!({}),
        json!({"faulty/read": "secrets"}),
    )
    .await;
    let error = wait_for_error(&t, "faulty", "may read only").await;
    assert_eq!(
        error,
        "handler \"faulty\" may read only the resources its routes watch and the informers its `reads:` names, not \"secrets\": configmaps"
    );
    create_configmap_with(
        &t,
        "indexer",
        json!({}),
        json!({"faulty/index": "by-owner"}),
    )
    .await;
    let error = wait_for_error(&t, "faulty", "no index").await;
    assert_eq!(
        error,
        "ConfigMap has no index \"by-owner\"; its indexes: by-app, namespace (add one under the route's or the informer's indexes:)"
    );
    // The watched resource reads fine by kind, plural or full resource string.
    for (i, name) in ["ConfigMap", "configmaps", "v1/configmaps"]
        .iter()
        .enumerate()
    {
        let cm = format!("reader-{i}");
        create_configmap_with(&t, &cm, json!({}), json!({"faulty/read": name})).await;
        support::wait_for_log(&mut t.logs, WAIT, |l| {
            l.message
                .starts_with(&format!("handled added default/{cm} "))
        })
        .await;
    }
    t.stop().await;
}

/// A handler reads an informer no route of it delivers (`reads:`), and is first called only
/// once that cache has listed: here the API server refuses its list and watch a few times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_reads_an_informer_once_it_has_listed() {
    let mut t = TestDaemon::start(FAULTY).await;
    for i in 0..3 {
        let secret = json!({"metadata": {"name": format!("s{i}")}, "stringData": {"k": "v"}});
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(t.client(), "default");
        secrets
            .create(
                &Default::default(),
                &serde_json::from_value(secret).unwrap(),
            )
            .await
            .unwrap();
    }
    let refused = switchyard::sim::RequestFailure::forbidden(3)
        .only(&["list", "watch"])
        .on(&["secrets"]);
    t.sim().faults().fail_next_requests(refused).unwrap();
    let reads = FAULTY.replace(
        "handlers:\n  faulty:\n",
        "informers:\n  secrets: {resource: v1/secrets}\nhandlers:\n  faulty:\n    reads: [secrets]\n",
    );
    t.write_config(&reads);
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    create_configmap_with(&t, "reader", json!({}), json!({"faulty/read": "secrets"})).await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("handled added default/reader ")
    })
    .await;
    // By the call, the refusals were used up and the cache had listed.
    assert!(
        t.sim().faults().status().failures.is_empty(),
        "{:?}",
        t.sim().faults().status()
    );
    let status = t.status_json().await;
    let secrets = (status["informers"].as_array().unwrap().iter())
        .find(|i| i["resource"] == "v1/secrets")
        .unwrap();
    assert_eq!(
        (secrets["synced"].as_bool(), secrets["objects"].as_u64()),
        (Some(true), Some(3)),
        "{secrets}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metric_with_a_bad_name_is_an_error_for_the_plugin_not_a_crash() {
    let t = TestDaemon::start(FAULTY).await;

    create_configmap_with(&t, "bad", json!({}), json!({"faulty/metric": "bad-name"})).await;
    let error = wait_for_error(&t, "faulty", "invalid metric name").await;
    assert!(error.contains("\"bad-name\""), "{error}");
    assert!(
        !last_errors(&t, "faulty")
            .await
            .iter()
            .any(|e| e.contains("trapped")),
        "a refusal is not a trap"
    );
    create_configmap_with(&t, "good", json!({}), json!({"faulty/metric": "good_one"})).await;
    let series = r#"switchyard_plugin_good_one{handler="faulty"}"#;
    support::eventually("the good metric on /metrics", WAIT, async || {
        (metric(&t, series).await == Some(1.0)).then_some(())
    })
    .await;
    let live = reqwest::get(t.url("/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    t.stop().await;
}
