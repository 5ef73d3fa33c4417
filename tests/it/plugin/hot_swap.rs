//! Hot swaps lose nothing: while ConfigMaps are created one after another through kube-rs,
//! the plugin file is replaced several times (log-events and faulty in turn, by atomic
//! rename). Every object created is handled, and each (name, resourceVersion) exactly once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::PostParams;
use serde_json::json;
use tokio::sync::broadcast;

use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);
const SWAPS: usize = 6;
/// Objects created between one swap and the next, at least.
const BETWEEN_SWAPS: usize = 25;

/// `(name, resourceVersion)` from a line of log-events (`added ConfigMap default/x rv=5 ...`)
/// or faulty (`handled added default/x rv=5 attempt=1`).
fn handled(message: &str) -> Option<(String, String)> {
    let rest = message.split("default/").nth(1)?;
    let (name, rest) = rest.split_once(" rv=")?;
    let rv = rest.split(' ').next()?;
    Some((name.to_string(), rv.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replacing_the_plugin_under_load_handles_every_object_exactly_once() {
    let yaml = "
handlers:
  h:
    plugin: swap
    concurrency: 4
routes:
  - name: configmaps
    resource: configmaps
    handler: h
";
    let t = TestDaemon::builder(yaml)
        .plugin_file("swap", "log-events")
        .start()
        .await;

    // Every line the plugin logs, in order.
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let lagged = Arc::new(AtomicBool::new(false));
    let mut feed = t.daemon().plugin_logs().subscribe();
    let collector = tokio::spawn({
        let lines = lines.clone();
        let lagged = lagged.clone();
        async move {
            loop {
                match feed.recv().await {
                    Ok(line) => lines.lock().unwrap().push(line.message),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        lagged.store(true, Ordering::Relaxed)
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });

    // Steady load: create ConfigMaps one after another until told to stop.
    let created: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let api = t.configmaps("default");
    let load = tokio::spawn({
        let (created, count, stop) = (created.clone(), count.clone(), stop.clone());
        async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("load-{i:05}");
                let cm = support::configmap(
                    json!({"metadata": {"name": name}, "data": {"i": i.to_string()}}),
                );
                let made = api.create(&PostParams::default(), &cm).await.unwrap();
                created
                    .lock()
                    .unwrap()
                    .push((name, made.metadata.resource_version.unwrap()));
                count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }
    });

    for swap in 0..SWAPS {
        let after = count.load(Ordering::Relaxed) + BETWEEN_SWAPS;
        support::eventually("more objects to be created", WAIT, async || {
            (count.load(Ordering::Relaxed) >= after).then_some(())
        })
        .await;
        // Odd swaps bring in faulty, even ones log-events back.
        let (next, marker) = if swap % 2 == 0 {
            ("faulty", "handled added ")
        } else {
            ("log-events", "added ConfigMap ")
        };
        t.replace_plugin("swap", next);
        let swaps = (swap + 2) as u64;
        support::eventually("the swap to happen", WAIT, async || {
            let (_, body) = t.get("/plugins").await;
            (body["plugins"][0]["swaps"] == swaps).then_some(())
        })
        .await;
        // The new version handles objects created after the swap, while the load goes on.
        let from = count.load(Ordering::Relaxed);
        support::eventually("the new version to handle the load", WAIT, async || {
            let names = created.lock().unwrap()[from..].to_vec();
            let lines = lines.lock().unwrap();
            names
                .iter()
                .any(|(name, _)| {
                    let wanted = format!("{marker}default/{name} ");
                    lines.iter().any(|l| l.starts_with(&wanted))
                })
                .then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let created = created.lock().unwrap().clone();
    assert!(created.len() >= SWAPS * BETWEEN_SWAPS, "{}", created.len());

    // Wait until the handler has handled everything created.
    support::eventually("every object to be handled", WAIT, async || {
        let body = t.status_json().await;
        let h = &body["handlers"][0];
        (h["processed"].as_u64() == Some(created.len() as u64)
            && h["queue_depth"] == 0
            && h["in_flight"] == 0
            && h["delayed"] == 0)
            .then_some(())
    })
    .await;
    t.stop().await;
    collector.abort();
    assert!(
        !lagged.load(Ordering::Relaxed),
        "the test's log reader fell behind; lines were missed"
    );

    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for line in lines.lock().unwrap().iter() {
        let key = handled(line).unwrap_or_else(|| panic!("unexpected line {line:?}"));
        *seen.entry(key).or_default() += 1;
    }
    let missing: Vec<_> = created.iter().filter(|k| !seen.contains_key(*k)).collect();
    assert!(missing.is_empty(), "never handled: {missing:?}");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    assert_eq!(seen.len(), created.len(), "handled something never created");
}

#[test]
fn both_plugins_log_lines_parse() {
    assert_eq!(
        handled("added ConfigMap default/load-00001 rv=17 route=configmaps data=[i]"),
        Some(("load-00001".into(), "17".into()))
    );
    assert_eq!(
        handled("handled added default/load-00002 rv=18 attempt=1"),
        Some(("load-00002".into(), "18".into()))
    );
}
