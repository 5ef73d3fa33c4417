//! A bad plugin never hurts the daemon or another handler: traps, endless loops, memory
//! bombs, components of the wrong world, garbage and half-written files each get a clear
//! error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchyard::plugin::{
    CallLimits, Error, Event, EventKind, ItemOutcome, Outcome, PluginHost, PluginLogs, loader,
};

use crate::support::{self, TestDaemon};

fn event(annotations: serde_json::Value) -> Event {
    let object = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "default", "resourceVersion": "7", "annotations": annotations},
    });
    Event {
        kind: EventKind::Added,
        route: "test".into(),
        object: object.to_string(),
        old_object: None,
        attempt: 1,
        final_state_unknown: false,
    }
}

fn limits() -> CallLimits {
    CallLimits {
        timeout: Duration::from_millis(500),
        memory: 16 << 20,
    }
}

async fn call(annotations: serde_json::Value) -> Result<Outcome, Error> {
    let host = PluginHost::new().unwrap();
    let plugin = loader::load(&host, &support::plugins_dir(), "faulty")
        .await
        .unwrap();
    plugin
        .call(
            Arc::from("faulty"),
            &PluginLogs::default(),
            &limits(),
            "null",
            &event(annotations),
        )
        .await
}

#[tokio::test]
async fn a_panicking_plugin_is_a_trap_error() {
    let err = call(json!({"faulty/trap": "true"})).await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("plugin trapped in handle"), "{text}");
}

#[tokio::test]
async fn an_endless_loop_is_stopped_at_the_deadline() {
    let started = std::time::Instant::now();
    let err = call(json!({"faulty/loop": "true"})).await.unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "deadline of 500ms exceeded; the call was stopped"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call must end soon after its deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_is_stopped_after_the_host_sat_idle() {
    // The epoch ticker that drives deadlines parks once no call has run for a second; a
    // call starting must wake it, in a fresh instance and in a kept one.
    let host = PluginHost::new().unwrap();
    let plugin = loader::load(&host, &support::plugins_dir(), "faulty")
        .await
        .unwrap();
    let logs = PluginLogs::default();
    let handler: Arc<str> = Arc::from("faulty");
    let mut kept = plugin
        .instantiate(handler.clone(), &logs, &limits(), "null")
        .await
        .unwrap();
    kept.handle(&event(json!({}))).await.unwrap();
    let looping = event(json!({"faulty/loop": "true"}));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let limits = limits();
    let fresh = plugin.call(handler.clone(), &logs, &limits, "null", &looping);
    let err = tokio::time::timeout(Duration::from_secs(20), fresh)
        .await
        .expect("the fresh call must end at its deadline")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let err = tokio::time::timeout(Duration::from_secs(20), kept.handle(&looping))
        .await
        .expect("the kept instance's call must end at its deadline")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
}

/// A plugin in `std::thread::sleep` waits in the host (a WASI clock
/// poll), where epoch interruption never fires; the call still ends at its deadline.
#[tokio::test]
async fn a_plugin_sleeping_in_the_host_is_stopped_at_the_deadline() {
    let sleeping = call(json!({"faulty/sleep-ms": "600000"}));
    let err = tokio::time::timeout(Duration::from_secs(30), sleeping)
        .await
        .expect("the call must end at its deadline, not after the plugin's 600 s sleep")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "deadline of 500ms exceeded; the call was stopped"
    );
}

#[tokio::test]
async fn a_kept_instance_stopped_at_its_deadline_is_never_called_again() {
    let host = PluginHost::new().unwrap();
    let plugin = loader::load(&host, &support::plugins_dir(), "faulty")
        .await
        .unwrap();
    let logs = PluginLogs::default();
    let mut kept = plugin
        .instantiate(Arc::from("faulty"), &logs, &limits(), "null")
        .await
        .unwrap();
    kept.handle(&event(json!({}))).await.unwrap();
    let asleep = event(json!({"faulty/sleep-ms": "600000"}));
    let err = tokio::time::timeout(Duration::from_secs(30), kept.handle(&asleep))
        .await
        .expect("the kept instance's call must end at its deadline")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err}");
    let err = kept.handle(&event(json!({}))).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin trapped in handle: the instance trapped or timed out in an earlier call and \
         cannot be called again"
    );
}

#[tokio::test]
async fn memory_past_the_cap_is_refused() {
    let err = call(json!({"faulty/allocate-mib": "64"}))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("plugin trapped in handle"), "{text}");
    // Within the cap, the same plugin allocates fine.
    call(json!({"faulty/allocate-mib": "4"})).await.unwrap();
}

#[tokio::test]
async fn a_plugin_error_is_returned_as_is() {
    let err = call(json!({"faulty/error": "quota exceeded"}))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "quota exceeded");
}

#[tokio::test]
async fn files_that_are_not_handler_components_get_a_clear_error() {
    let host = PluginHost::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(support::plugins_dir().join("log-events.wasm")).unwrap();
    std::fs::write(
        dir.path().join("garbage.wasm"),
        b"\x00asm garbage that is not wasm",
    )
    .unwrap();
    std::fs::write(dir.path().join("half.wasm"), &good[..good.len() / 2]).unwrap();
    std::fs::copy(
        support::plugins_dir().join("wrongworld.wasm"),
        dir.path().join("wrongworld.wasm"),
    )
    .unwrap();

    let err = loader::load(&host, dir.path(), "garbage")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("plugin \"garbage\" is invalid: not a WebAssembly component"),
        "{err}"
    );
    let err = loader::load(&host, dir.path(), "half")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("plugin \"half\" is invalid: not a WebAssembly component"),
        "{err}"
    );
    let err = loader::load(&host, dir.path(), "wrongworld")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "plugin \"wrongworld\" is invalid: does not export the switchyard:plugin handler world"
        ),
        "{err}"
    );
    assert!(
        err.contains("handle"),
        "the error names what is missing: {err}"
    );
    let err = loader::load(&host, dir.path(), "absent")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot read plugin") && err.contains("absent.wasm"),
        "{err}"
    );
}

/// On one runtime thread, as `switchyard run` works by default: a plugin looping in two
/// workers yields at every epoch tick, so another handler's event, the retries and the
/// probes all go on meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_looping_plugin_does_not_stall_another_handler() {
    let yaml = "
handlers:
  faulty:
    concurrency: 2
    timeout: 300ms
    max_retries: 1
    backoff_base: 10ms
  log-events: {}
routes:
  - name: to-faulty
    resource: configmaps
    labels: app=loop
    handler: faulty
  - name: to-log
    resource: configmaps
    handler: log-events
";
    let mut t = TestDaemon::start(yaml).await;
    for i in 0..4 {
        t.create_configmap(json!({
            "metadata": {"name": format!("loop-{i}"), "labels": {"app": "loop"}, "annotations": {"faulty/loop": "true"}},
        }))
        .await;
    }
    t.create_configmap(json!({"metadata": {"name": "normal"}}))
        .await;
    support::wait_for_log(&mut t.logs, Duration::from_secs(30), |l| {
        l.handler == "log-events" && l.message.contains("default/normal")
    })
    .await;

    let letters = support::eventually(
        "the looping events to be given up on",
        Duration::from_secs(60),
        async || {
            let letters = t.daemon().handler("faulty").unwrap().dead_letters();
            (letters.len() == 4).then_some(letters)
        },
    )
    .await;
    for letter in letters {
        assert_eq!(letter.attempts, 2);
        assert!(
            letter.last_error.contains("deadline of 300ms exceeded"),
            "{}",
            letter.last_error
        );
    }
    let live = reqwest::get(t.url("/livez")).await.unwrap();
    assert_eq!(live.status().as_u16(), 200);
    t.stop().await;
}

#[tokio::test]
async fn a_plugin_built_for_a_contract_version_the_daemon_does_not_speak_is_refused_by_version() {
    let host = PluginHost::new().unwrap();
    let err = loader::load(&host, &support::plugins_dir(), "nextmajor")
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "plugin \"nextmajor\" is invalid: it is built for switchyard:plugin@1.0.0, which this daemon \
         does not speak (it speaks switchyard:plugin@0.1.1): rebuild the plugin against the \
         daemon's wit/world.wit, or run a daemon that speaks 1.0.0"
    );
}

#[tokio::test]
async fn a_plugin_built_for_the_contract_before_this_one_loads_and_is_called_unchanged() {
    let host = PluginHost::new().unwrap();
    let plugin = loader::load(&host, &support::plugins_dir(), "oldcontract")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let logs = PluginLogs::default();
    let handler: Arc<str> = Arc::from("old");
    let mut instance = plugin
        .instantiate(handler.clone(), &logs, &limits(), "null")
        .await
        .unwrap();
    let outcome = instance.handle(&event(json!({}))).await.unwrap();
    assert!(matches!(outcome, Outcome::Done), "{outcome:?}");
    let outcomes = instance
        .handle_batch(&[event(json!({})), event(json!({}))])
        .await
        .unwrap();
    assert!(
        matches!(
            &outcomes[..],
            [ItemOutcome::Done, ItemOutcome::DeadLetter(reason)] if reason == "the second"
        ),
        "{outcomes:?}"
    );
}
