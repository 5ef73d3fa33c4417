//! Batch delivery (`batch:`): the `batcher` test plugin (the `handler-batch` world) gets
//! several events in one `handle-batch` call, each item's outcome applies to its own object,
//! a whole-call error retries the batch, the limits hold, several workers fill one batch at a
//! time, a change joins the batch that holds its object, a plugin without `handle-batch` is
//! refused, and a daemon killed mid-batch delivers every event after a restart.

use std::time::Duration;

use serde_json::{Value, json};

use crate::state::Child;
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// The objects named in a `batch of N: NS/NAME rv=RV attempt=A, ...` line, with attempts.
fn batch_items(line: &str) -> Option<Vec<(String, u32)>> {
    let (_, items) = line.strip_prefix("batch of ")?.split_once(": ")?;
    items
        .split(", ")
        .map(|item| {
            let mut parts = item.split_whitespace();
            let name = parts.next()?.to_string();
            let attempt = parts.nth(1)?.strip_prefix("attempt=")?.parse().ok()?;
            Some((name, attempt))
        })
        .collect()
}

/// Creates ConfigMaps in `default`, one after the other: well within a batch's `max_wait`.
async fn create_all(t: &TestDaemon, objects: &[Value]) {
    for object in objects {
        t.create_configmap(object.clone()).await;
    }
}

fn named(name: &str, annotations: Value) -> Value {
    json!({"metadata": {"name": name, "annotations": annotations}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_carries_several_events_and_each_item_outcome_applies_to_its_own_object() {
    let objects = [
        named("a", json!({})),
        named("b", json!({"batcher/fail-attempts": "1"})),
        named(
            "c",
            json!({"batcher/outcome": "dead-letter:the receiver refused it"}),
        ),
        named("d", json!({"batcher/outcome": "retry-ms:300"})),
        named("e", json!({})),
    ];
    let yaml = "
handlers:
  sink:
    plugin: batcher
    concurrency: 1
    max_retries: 3
    backoff_base: 10ms
    backoff_cap: 10ms
    batch:
      max_events: 10
      max_wait: 1s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    handler: sink
";
    let mut t = TestDaemon::start(yaml).await;
    create_all(&t, &objects).await;
    let first =
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("batch of")).await;
    let started = std::time::Instant::now();
    let items = batch_items(&first.message).unwrap();
    let mut names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "default/a",
            "default/b",
            "default/c",
            "default/d",
            "default/e"
        ],
        "{}",
        first.message
    );
    assert!(items.iter().all(|(_, attempt)| *attempt == 1), "{items:?}");
    let handler = t.daemon().handler("sink").unwrap();
    // b asked for a retry once and is done on its second attempt; d asks for a retry after
    // at least 300 ms every time and runs out of retries; c is given up at once.
    let letters = support::eventually("c and d in the dead letters", WAIT, async || {
        let letters = handler.dead_letters();
        (letters.len() == 2).then_some(letters)
    })
    .await;
    let c = letters.iter().find(|l| l.object == "default/c").unwrap();
    assert_eq!(c.last_error, "permanent: the receiver refused it");
    assert_eq!(c.attempts, 1);
    let d = letters.iter().find(|l| l.object == "default/d").unwrap();
    assert_eq!(d.attempts, 4, "{d:?}");
    assert!(d.last_error.contains("after 300 ms"), "{}", d.last_error);
    assert!(
        started.elapsed() >= Duration::from_millis(3 * 300),
        "three waits of at least 300 ms, not the 10 ms backoff: {:?}",
        started.elapsed()
    );
    let status = t.status_json().await;
    let sink = &status["handlers"][0];
    assert_eq!(sink["processed"], 3, "{sink:#}");
    assert_eq!(sink["dead_lettered"], 2, "{sink:#}");
    let metrics = t.metrics_text().await;
    let batches = metric(&metrics, "switchyard_handler_batches_total{name=\"sink\"}");
    let events = metric(&metrics, "switchyard_handler_batch_size_sum{name=\"sink\"}");
    // 5 first events, then b's and d's retries: 10 events handed over in all.
    assert_eq!(events, 5.0 + 1.0 + 3.0, "{metrics}");
    assert!((2.0..=5.0).contains(&batches), "{metrics}");
}

/// The value of the series `series` (name and labels) in a metrics page.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_call_error_retries_every_event_of_the_batch_and_counts_once_for_quarantine() {
    let objects = [
        named(
            "x",
            json!({"batcher/fail-batch": "the receiver is down", "batcher/fail-batch-attempts": "1"}),
        ),
        named("y", json!({})),
    ];
    // Two failed calls on two objects would quarantine it: one failed batch must not.
    let yaml = "
handlers:
  sink:
    plugin: batcher
    concurrency: 1
    backoff_base: 200ms
    backoff_cap: 200ms
    quarantine_after: 2
    batch:
      max_wait: 1s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    handler: sink
";
    let mut t = TestDaemon::start(yaml).await;
    create_all(&t, &objects).await;
    let mut batches: Vec<Vec<(String, u32)>> = Vec::new();
    while batches.iter().flatten().filter(|(_, a)| *a == 2).count() < 2 {
        let line =
            support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("batch of ")).await;
        batches.push(batch_items(&line.message).unwrap());
    }
    batches[0].sort();
    assert_eq!(
        batches[0],
        [("default/x".to_string(), 1), ("default/y".to_string(), 1)]
    );
    for name in ["default/x", "default/y"] {
        let done = format!("done {name} ");
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with(&done)).await;
    }
    let status = t.status_json().await;
    let sink = &status["handlers"][0];
    assert_eq!(
        sink["failed"], 2,
        "each event of the failed batch: {sink:#}"
    );
    assert_eq!(sink["retries"], 2, "{sink:#}");
    assert_eq!(sink["quarantines"], 0, "{sink:#}");
    let (_, detail) = t.get("/handlers/sink").await;
    let error = &detail["last_errors"][0];
    assert_eq!(error["error"], "the receiver is down", "{detail:#}");
    assert!(
        error["object"]
            .as_str()
            .unwrap()
            .ends_with("(and 1 more in its batch)"),
        "{detail:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_stop_at_max_events_and_at_max_bytes() {
    let objects: Vec<Value> = (0..7).map(|i| named(&format!("o{i}"), json!({}))).collect();
    let yaml = "
handlers:
  three:
    plugin: batcher
    concurrency: 1
    batch:
      max_events: 3
      max_wait: 1s
  tiny:
    plugin: batcher
    concurrency: 1
    batch:
      max_bytes: 1
      max_wait: 1s
routes:
  - name: to-three
    resource: configmaps
    namespace: default
    handler: three
  - name: to-tiny
    resource: configmaps
    namespace: default
    handler: tiny
";
    let mut t = TestDaemon::start(yaml).await;
    create_all(&t, &objects).await;
    support::eventually("7 events done by each handler", WAIT, async || {
        let status = t.status_json().await;
        let handlers = status["handlers"].as_array().unwrap().clone();
        handlers.iter().all(|h| h["processed"] == 7).then_some(())
    })
    .await;
    let (mut three, mut tiny) = (Vec::new(), Vec::new());
    while let Ok(line) = t.logs.try_recv() {
        let Some(items) = batch_items(&line.message) else {
            continue;
        };
        match line.handler.as_str() {
            "three" => three.push(items.len()),
            _ => tiny.push(items.len()),
        }
    }
    assert_eq!(three, [3, 3, 1], "max_events: 3");
    assert_eq!(tiny, [1; 7], "max_bytes: 1 lets each event go alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_several_workers_one_gathers_at_a_time_and_a_batch_fills_from_the_whole_stream() {
    let objects: Vec<Value> = (0..6).map(|i| named(&format!("w{i}"), json!({}))).collect();
    let yaml = "
handlers:
  four:
    plugin: batcher
    concurrency: 4
    batch:
      max_events: 6
      max_wait: 2s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    handler: four
";
    let mut t = TestDaemon::start(yaml).await;
    create_all(&t, &objects).await;
    let line =
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("batch of")).await;
    let items = batch_items(&line.message).unwrap();
    // Four workers each gathering their own batch would have split the six among them.
    assert_eq!(items.len(), 6, "{}", line.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_latest_mode_a_change_to_an_object_the_gathering_batch_holds_joins_that_batch() {
    let yaml = "
handlers:
  sink:
    plugin: batcher
    concurrency: 1
    batch:
      max_events: 10
      max_wait: 3s
routes:
  - name: cms
    resource: configmaps
    namespace: default
    handler: sink
";
    let mut t = TestDaemon::start(yaml).await;
    t.create_configmap(named("x", json!({}))).await;
    // The idle worker takes x's key at once and gathers for 3 s; x changes meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(t.client(), "default");
    let patch = json!({"data": {"k": "v"}});
    let changed = api
        .patch(
            "x",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let rv = changed.metadata.resource_version.unwrap();
    t.create_configmap(named("y", json!({}))).await;
    let line =
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("batch of")).await;
    assert!(
        line.message.contains(&format!("default/x rv={rv} ")),
        "x's newest state in its first batch: {}",
        line.message
    );
    assert!(line.message.contains("default/y "), "{}", line.message);
    // Nothing of x is owed after it: the next object's batch holds it alone.
    t.create_configmap(named("z", json!({}))).await;
    let next =
        support::wait_for_log(&mut t.logs, WAIT, |l| l.message.starts_with("batch of")).await;
    assert_eq!(
        batch_items(&next.message).unwrap(),
        [("default/z".to_string(), 1)],
        "{}",
        next.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handler_whose_plugin_has_no_handle_batch_is_refused_and_says_why() {
    let yaml = "
handlers:
  sink:
    plugin: noop
    batch: {}
  plain:
    plugin: batcher
routes:
  - name: cms
    resource: configmaps
    handler: sink
  - name: to-plain
    resource: configmaps
    handler: plain
";
    let mut t = TestDaemon::start(yaml).await;
    // Without batch:, a plugin of the handler-batch world is called with handle.
    t.create_configmap(named("p", json!({}))).await;
    support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.starts_with("single default/p ")
    })
    .await;
    let sink = support::eventually("the plugin refused", WAIT, async || {
        let status = t.status_json().await;
        let handlers = status["handlers"].as_array().unwrap().clone();
        let sink = handlers.into_iter().find(|h| h["name"] == "sink").unwrap();
        sink["plugin_error"].is_string().then_some(sink)
    })
    .await;
    assert_eq!(sink["plugin_loaded"], false, "{sink:#}");
    assert_eq!(
        sink["plugin_error"],
        "plugin \"noop\" does not export handle-batch, which the handler's batch: calls: \
         build it for the handler-batch world, or remove batch: to call handle per event",
        "{sink:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_batch_delivers_every_event_of_it_after_a_restart() {
    let sim = support::start_sim().await;
    for i in 0..10 {
        let object = named(&format!("k{i}"), json!({}));
        support::create_configmap(&sim.client().unwrap(), "default", object).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = |sleep_ms: u64| {
        format!(
            "state_dir: state\nadmin:\n  listen: 127.0.0.1:0\n  probes_listen: null\nhandlers:\n  sink:\n    plugin: batcher\n    concurrency: 1\n    timeout: 1m\n    config:\n      sleep_ms: {sleep_ms}\n    batch:\n      max_events: 4\n      max_wait: 1s\nroutes:\n  - name: cms\n    resource: configmaps\n    namespace: default\n    handler: sink\n"
        )
    };
    support::write_config(dir.path(), &config(30_000));
    let first = Child::start(dir.path(), &kubeconfig).await;
    // The first batch is in the plugin (sleeping 30 s): kill the daemon there.
    first
        .process
        .wait_for_line(WAIT, |l| l.contains("batch of 4"))
        .await;
    let lines = first.process.kill();
    assert!(
        !lines.iter().any(|l| l.contains("done default/")),
        "{lines:#?}"
    );
    support::write_config(dir.path(), &config(0));
    let second = Child::start(dir.path(), &kubeconfig).await;
    let mut done = std::collections::BTreeSet::new();
    support::eventually("every event done after the restart", WAIT, async || {
        for line in second.process.lines() {
            if let Some(rest) = line.split("done default/").nth(1) {
                done.insert(rest.split_whitespace().next().unwrap().to_string());
            }
        }
        (done.len() == 10).then_some(())
    })
    .await;
    let lines = second.process.kill();
    let batches = lines.iter().filter(|l| l.contains("batch of ")).count();
    assert!(
        batches >= 3,
        "10 events in batches of at most 4: {lines:#?}"
    );
}
