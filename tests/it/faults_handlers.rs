//! Handlers under pressure lose nothing silently and hurt no other handler: a handler whose
//! concurrency a reload raises keeps to its share of the plugin instance pool, a reload
//! beyond the pool is refused, events left at shutdown are counted and logged, a plugin
//! asking to be called again at once is paced by its handler's rate limit, and one sleeping
//! past its deadline frees its worker at the deadline.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use switchyard::daemon::ReloadError;
use switchyard::sim::Simulator;

use crate::support::{self, TestDaemon};

async fn create_configmap(sim: &Simulator, name: &str, labels: Value, annotations: Value) {
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// A handler whose plugin spends every call at its deadline, and log-events.
fn spin_and_log(spin_concurrency: usize) -> String {
    format!(
        "
handlers:
  spin:
    plugin: faulty
    concurrency: {spin_concurrency}
    timeout: 2s
    max_retries: 1000000
    backoff_base: 1ms
    backoff_cap: 1ms
    qps: 0
  log-events: {{}}
routes:
  - name: to-spin
    resource: configmaps
    labels: app=spin
    handler: spin
  - name: to-log
    resource: configmaps
    labels: app=normal
    handler: log-events
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_one_handlers_concurrency_on_reload_does_not_starve_another() {
    let t = TestDaemon::start(&spin_and_log(2)).await;
    let (sim, daemon) = (t.sim(), t.daemon());
    daemon.wait_until_synced().await;
    for i in 0..20 {
        let annotations = json!({"faulty/loop": "true"});
        create_configmap(
            sim,
            &format!("spin-{i}"),
            json!({"app": "spin"}),
            annotations,
        )
        .await;
    }
    t.write_config(&spin_and_log(16));
    daemon.reload().await.expect("the reload is applied");
    support::eventually(
        "every one of the 16 spinning workers to hold an event",
        Duration::from_secs(30),
        async || {
            let spin = daemon.handler("spin")?;
            (spin.spec().concurrency == 16 && spin.status().in_flight == 16).then_some(())
        },
    )
    .await;

    for i in 0..20 {
        create_configmap(
            sim,
            &format!("normal-{i}"),
            json!({"app": "normal"}),
            json!({}),
        )
        .await;
    }
    // Sharing 4 instances with 16 calls that each last 2 s, log-events would handle about
    // one event every 4 s; with its own slots, the batch takes well under a second.
    support::eventually(
        "log-events to handle its 20 events while spin keeps 16 calls at their deadline",
        Duration::from_secs(20),
        async || (daemon.handler("log-events")?.status().processed >= 20).then_some(()),
    )
    .await;
    t.stop_within(Duration::ZERO).await;
}

#[tokio::test]
async fn a_reload_raising_concurrency_beyond_the_instance_pool_is_refused() {
    let t = TestDaemon::start(&spin_and_log(2)).await;
    let daemon = t.daemon();
    // 2 + 2 workers at start: the pool holds its minimum of 64 instances.
    t.write_config(&spin_and_log(63));
    let error = daemon.reload().await.expect_err("the reload is refused");
    assert!(matches!(error, ReloadError::NeedsRestart(_)), "{error}");
    assert_eq!(
        error.to_string(),
        "handlers' total concurrency of 65 above the 64 plugin instances the pool was sized \
         for cannot change while running (restart to apply); the running config stays"
    );
    assert_eq!(daemon.handler("spin").unwrap().spec().concurrency, 2);

    t.write_config(&spin_and_log(62));
    daemon.reload().await.expect("64 workers fit in the pool");
    assert_eq!(daemon.handler("spin").unwrap().spec().concurrency, 62);
    t.stop_within(Duration::ZERO).await;
}

/// Log lines written while it is the thread's default subscriber.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Captures the warnings and errors logged on this thread while the guard lives.
    fn warnings() -> (Self, tracing::subscriber::DefaultGuard) {
        let log = Self::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish();
        (log, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The first line containing `text`, or a panic showing the whole log.
    fn line(&self, text: &str) -> String {
        let all = self.text();
        all.lines()
            .find(|l| l.contains(text))
            .unwrap_or_else(|| panic!("no line with {text:?} in:\n{all}"))
            .to_string()
    }
}

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread: every task of the daemon logs through the test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn events_queued_for_a_paused_handler_at_shutdown_are_counted_and_logged() {
    let (log, _default) = CapturedLog::warnings();
    let yaml = "
handlers:
  log-events: {}
routes:
  - name: to-log
    resource: configmaps
    labels: app=held
    handler: log-events
";
    let t = TestDaemon::start(yaml).await;
    let (sim, daemon) = (t.sim(), t.daemon());
    daemon.wait_until_synced().await;
    let handler = daemon.handler("log-events").unwrap();
    assert!(handler.pause());
    for i in 0..3 {
        create_configmap(sim, &format!("held-{i}"), json!({"app": "held"}), json!({})).await;
    }
    support::eventually(
        "the 3 events to wait in the paused handler",
        Duration::from_secs(30),
        async || (handler.pending_for_route("to-log") == 3).then_some(()),
    )
    .await;

    t.stop_within(Duration::from_secs(1)).await;
    let status = handler.status();
    assert_eq!(status.processed, 0);
    assert_eq!(status.undelivered, 3);
    let line = log.line("handler stopped with events undelivered; they are lost");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("handler=log-events"), "{line}");
    assert!(line.contains("undelivered=3"), "{line}");
    assert!(line.contains("paused=true"), "{line}");
}

/// A newcomer's report: without `state_dir`, the dead letters went at shutdown without a
/// word. A warning now says how many were lost.
#[tokio::test(flavor = "current_thread")]
async fn dead_letters_lost_at_shutdown_without_state_dir_are_counted_in_a_warning() {
    let (log, _default) = CapturedLog::warnings();
    let yaml = "
handlers:
  faulty:
    max_retries: 1
    backoff_base: 10ms
routes:
  - name: to-faulty
    resource: configmaps
    labels: app=doomed
    handler: faulty
";
    let t = TestDaemon::start(yaml).await;
    let (sim, daemon) = (t.sim(), t.daemon());
    daemon.wait_until_synced().await;
    for i in 0..2 {
        let annotations = json!({"faulty/error": "always"});
        create_configmap(
            sim,
            &format!("doomed-{i}"),
            json!({"app": "doomed"}),
            annotations,
        )
        .await;
    }
    let handler = daemon.handler("faulty").unwrap();
    support::eventually(
        "both events dead-lettered",
        Duration::from_secs(30),
        async || (handler.dead_letters().len() == 2).then_some(()),
    )
    .await;

    t.stop_within(Duration::from_secs(1)).await;
    let line = log.line("handler stopped with dead letters; without state_dir they are lost");
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("handler=faulty"), "{line}");
    assert!(line.contains("dead_letters=2"), "{line}");
    // Nothing was queued or in flight: no word about undelivered events.
    assert!(!log.text().contains("events undelivered"), "{}", log.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_zero_answered_forever_is_paced_by_the_handlers_rate_limit() {
    const QPS: f64 = 5.0;
    const BURST: u64 = 5;
    let yaml = format!(
        "
handlers:
  faulty:
    qps: {QPS}
    burst: {BURST}
routes:
  - name: to-faulty
    resource: configmaps
    labels: app=again
    handler: faulty
"
    );
    let t = TestDaemon::start(&yaml).await;
    let (sim, daemon) = (t.sim(), t.daemon());
    daemon.wait_until_synced().await;
    let annotations = json!({"faulty/requeue-ms": "0"});
    create_configmap(sim, "again", json!({"app": "again"}), annotations).await;
    let handler = daemon.handler("faulty").unwrap();
    support::eventually("the first call", Duration::from_secs(30), async || {
        (handler.status().processed >= 1).then_some(())
    })
    .await;

    let (start, first) = (Instant::now(), handler.status().processed);
    let calls = support::eventually("15 more calls", Duration::from_secs(30), async || {
        let calls = handler.status().processed - first;
        (calls >= 15).then_some(calls)
    })
    .await;
    let window = start.elapsed().as_secs_f64();
    // Each call is a requeue that took a token: at most the burst and `qps` a second (and
    // the call under way when the window opened).
    let allowed = QPS * window + BURST as f64 + 1.0;
    assert!(
        calls as f64 <= allowed,
        "{calls} calls in {window:.2}s; the bucket allows {allowed:.1}"
    );
    t.stop_within(Duration::ZERO).await;
}

/// A plugin sleeping (a WASI clock poll: it waits in the host, where
/// epoch interruption never fires) held its worker and its key for as long as it slept.
/// Now the call ends at the handler's `timeout`, is retried and dead-lettered as any
/// timeout, and the one worker goes on to the other objects meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sleeping_past_its_timeout_fails_as_a_timeout_and_its_worker_moves_on() {
    let yaml = "
handlers:
  faulty:
    concurrency: 1
    timeout: 2s
    max_retries: 1
    backoff_base: 10ms
routes:
  - name: to-faulty
    resource: configmaps
    labels: app=sleepy
    handler: faulty
";
    let t = TestDaemon::start(yaml).await;
    let (sim, daemon) = (t.sim(), t.daemon());
    daemon.wait_until_synced().await;
    let labels = json!({"app": "sleepy"});
    let annotations = json!({"faulty/sleep-ms": "600000"});
    create_configmap(sim, "asleep", labels.clone(), annotations).await;
    for i in 0..3 {
        create_configmap(sim, &format!("awake-{i}"), labels.clone(), json!({})).await;
    }
    let handler = daemon.handler("faulty").unwrap();
    let letters = support::eventually(
        "the sleeping event to time out twice and be dead-lettered, the others handled",
        Duration::from_secs(60),
        async || {
            let letters = handler.dead_letters();
            (letters.len() == 1 && handler.status().processed == 3).then_some(letters)
        },
    )
    .await;
    assert_eq!(letters[0].object, "default/asleep");
    assert_eq!(letters[0].attempts, 2);
    assert_eq!(
        letters[0].last_error,
        "deadline of 2s exceeded; the call was stopped"
    );
    assert_eq!(handler.status().failed, 2);
    t.stop_within(Duration::ZERO).await;
}
