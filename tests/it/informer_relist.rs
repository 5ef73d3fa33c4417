//! An API server that comes back with lower resourceVersions (restarted empty, etcd restored
//! from a backup) accepts a watch resumed from the old version and sends nothing until it
//! passes it. The informer must notice, list again and deliver the difference: every old
//! object deleted (final state unknown), every new one added, the cache equal to the server.

use crate::informer::Recorder;
use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::json;
use switchyard::config::ResourceName;
use switchyard::informer::{CacheOptions, Informer, InformerFactory, WatchKey};
use switchyard::sim::{Cluster, ObjectRef, RequestFailure, SimOptions, Simulator};

pub(crate) fn configmaps_everywhere() -> WatchKey {
    WatchKey {
        resource: ResourceName::parse("configmaps").unwrap(),
        namespace: None,
        label_selector: None,
        field_selector: None,
    }
}

pub(crate) fn cm_index(cluster: &Cluster) -> usize {
    cluster.find_resource("", "v1", "configmaps").unwrap()
}

fn create_namespace(cluster: &Cluster, name: &str) {
    let namespaces = cluster.find_resource("", "v1", "namespaces").unwrap();
    cluster
        .create(namespaces, "", json!({"metadata": {"name": name}}))
        .unwrap();
}

/// Creates ConfigMap `namespace/name` with `v` as its data; returns its resourceVersion.
fn create(cluster: &Cluster, namespace: &str, name: &str, v: &str) -> String {
    let object = json!({"metadata": {"name": name}, "data": {"v": v}});
    let created = cluster
        .create(cm_index(cluster), namespace, object)
        .unwrap();
    created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Updates ConfigMap `namespace/name` `times` times, to move the cluster's version on.
fn churn(cluster: &Cluster, namespace: &str, name: &str, times: usize) {
    let at = ObjectRef {
        resource: cm_index(cluster),
        namespace: namespace.into(),
        name: name.into(),
    };
    for i in 0..times {
        let mut object = (*cluster.get(&at).unwrap()).clone();
        object["data"]["v"] = i.to_string().into();
        cluster.update(&at, object).unwrap();
    }
}

/// The simulator's ConfigMaps: key → resourceVersion.
pub(crate) fn truth(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster
        .list(cm_index(cluster), None)
        .items
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            let key = format!(
                "{}/{}",
                meta["namespace"].as_str().unwrap(),
                meta["name"].as_str().unwrap()
            );
            (key, meta["resourceVersion"].as_str().unwrap().to_string())
        })
        .collect()
}

async fn converge(informer: &Informer, cluster: &Cluster) {
    support::eventually(
        "the cache to equal the simulator",
        Duration::from_secs(30),
        async || (support::cached(informer) == truth(cluster)).then_some(()),
    )
    .await;
}

/// A synced informer on every namespace's ConfigMaps, with a recorder that has seen nothing
/// yet.
pub(crate) async fn watching(sim: &Simulator) -> (InformerFactory, Arc<Informer>, Arc<Recorder>) {
    let factory = InformerFactory::new(sim.client().unwrap());
    let informer = factory
        .informer(configmaps_everywhere(), CacheOptions::default())
        .await
        .unwrap();
    let recorder = Arc::new(Recorder::default());
    informer.subscribe(recorder.clone());
    informer.wait_until_synced().await;
    converge(&informer, sim.cluster()).await;
    recorder.take_sorted();
    (factory, informer, recorder)
}

/// Stops `sim`, lets `change` empty and refill its cluster while it is down, and serves the
/// cluster again on the same address.
async fn restart_with(sim: Simulator, change: impl FnOnce(&Cluster)) -> Simulator {
    let cluster = sim.cluster().clone();
    let addr = sim.addr();
    sim.stop().await;
    change(&cluster);
    Simulator::serve(
        cluster,
        SimOptions {
            listen: addr,
            ..SimOptions::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_api_server_back_empty_with_lower_versions_is_listed_again_and_old_objects_deleted() {
    let sim = support::start_sim().await;
    let cluster = sim.cluster().clone();
    create_namespace(&cluster, "team");
    let a = create(&cluster, "team", "a", "0");
    let b = create(&cluster, "team", "b", "0");
    create(&cluster, "default", "c", "0");
    churn(&cluster, "default", "c", 30);
    let c = truth(&cluster)["default/c"].clone();
    let (factory, informer, recorder) = watching(&sim).await;

    // The server comes back empty (namespace "team" gone) with two new objects, far below
    // the version the informer's watch has seen.
    let mut new = BTreeMap::new();
    let sim = restart_with(sim, |cluster| {
        cluster.reset();
        for name in ["x", "y"] {
            new.insert(name, create(cluster, "default", name, "new"));
        }
    })
    .await;
    // Slow answers, to see the relist in progress.
    sim.faults().set_delay(Duration::from_millis(300));
    support::eventually(
        "the informer to say it is not synced while it lists again",
        Duration::from_secs(30),
        async || (!informer.is_synced()).then_some(()),
    )
    .await;
    converge(&informer, &cluster).await;
    support::eventually(
        "the relist to finish",
        Duration::from_secs(30),
        async || informer.is_synced().then_some(()),
    )
    .await;

    let expected = vec![
        format!("added default/x {}", new["x"]),
        format!("added default/y {}", new["y"]),
        format!("deleted? default/c {c}"),
        format!("deleted? team/a {a}"),
        format!("deleted? team/b {b}"),
        "replaced 2".to_string(),
    ];
    assert_eq!(recorder.take_sorted(), expected);
    let health = informer.health();
    assert!(health.restarts >= 1, "the failed resume is counted");
    assert_eq!(health.last_error, None, "recovered: the error is cleared");
    factory.shutdown();
}

#[tokio::test]
async fn an_object_made_again_under_the_same_name_and_version_arrives_as_updated() {
    let sim = support::start_sim().await;
    let cluster = sim.cluster().clone();
    let old = create(&cluster, "default", "same", "before");
    create(&cluster, "default", "other", "0");
    churn(&cluster, "default", "other", 10);
    let other = truth(&cluster)["default/other"].clone();
    let (factory, informer, recorder) = watching(&sim).await;

    let mut again = String::new();
    let sim = restart_with(sim, |cluster| {
        cluster.reset();
        again = create(cluster, "default", "same", "after");
    })
    .await;
    assert_eq!(again, old, "the new server gave it the old version");
    converge(&informer, &cluster).await;
    support::eventually(
        "the relist to finish",
        Duration::from_secs(30),
        async || {
            let seen = recorder.seen.lock().unwrap();
            seen.iter().any(|l| l.starts_with("replaced")).then_some(())
        },
    )
    .await;

    assert_eq!(
        recorder.take_sorted(),
        [
            format!("deleted? default/other {other}"),
            "replaced 1".to_string(),
            format!("updated default/same {old}->{again}"),
        ]
    );
    let cached = informer.store().list();
    let same = cached.iter().find(|o| o.key().as_str() == "default/same");
    assert!(
        same.unwrap().json().contains("after"),
        "the cache has the new object"
    );
    assert_eq!(informer.health().last_error, None);
    factory.shutdown();
    sim.stop().await;
}

#[tokio::test]
async fn a_watch_from_a_version_the_server_has_not_reached_is_quiet_until_it_passes_it() {
    // kube-apiserver accepts the watch and drops every event up to the requested version;
    // it does not answer 504 (only a list, or a watch with sendInitialEvents, waits and
    // then does).
    let sim = Simulator::start(SimOptions {
        version_wait: Duration::from_millis(100),
        bookmark_interval: Duration::from_millis(100),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let cluster = sim.cluster().clone();
    let ahead = cluster.resource_version() + 3;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let mut events = api
        .watch(&WatchParams::default(), &ahead.to_string())
        .await
        .expect("the watch is accepted")
        .boxed();
    let quiet = tokio::time::timeout(Duration::from_millis(500), events.next()).await;
    assert!(
        quiet.is_err(),
        "nothing, not even a bookmark, before the server reaches the version: {quiet:?}"
    );
    for name in ["one", "two", "three", "four"] {
        create(&cluster, "default", name, "0");
    }
    let first = events.next().await.unwrap().unwrap();
    let WatchEvent::Added(first) = first else {
        panic!("the first event is the first change after the version: {first:?}");
    };
    assert_eq!(first.metadata.name.as_deref(), Some("four"));
}

#[tokio::test]
async fn the_control_endpoint_restarts_the_server_empty() {
    let sim = support::start_sim().await;
    let cluster = sim.cluster().clone();
    for name in ["a", "b", "c"] {
        create(&cluster, "default", name, "0");
    }
    let before = cluster.resource_version();
    let answer = reqwest::Client::new()
        .post(format!("{}/_switchyard/faults/restart", sim.url()))
        .json(&json!({"downMs": 50, "empty": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["empty"], true);
    assert!(truth(&cluster).is_empty());
    assert!(cluster.resource_version() < before);
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let listed = support::eventually(
        "the server to serve again",
        Duration::from_secs(10),
        async || api.list(&Default::default()).await.ok(),
    )
    .await;
    assert!(listed.items.is_empty());
}

/// Regression: the informer learnt that the server came back behind (its cache holds objects
/// the server no longer has) yet stayed synced, and `/readyz` 200, until the relist started
/// after the backoff. The backoff here is an hour: only the moment of knowing can tell.
#[tokio::test]
async fn a_server_found_behind_marks_the_cache_unsynced_at_once_not_after_the_backoff() {
    let sim = support::start_sim().await;
    let cluster = sim.cluster().clone();
    create(&cluster, "default", "old", "0");
    churn(&cluster, "default", "old", 20);
    let factory =
        InformerFactory::new(sim.client().unwrap()).with_retry_delay(Duration::from_secs(3600));
    let informer = factory
        .informer(configmaps_everywhere(), CacheOptions::default())
        .await
        .unwrap();
    informer.wait_until_synced().await;
    // A change seen through the watch: it is open.
    churn(&cluster, "default", "old", 1);
    converge(&informer, &cluster).await;

    // The server goes back to an empty cluster while serving; its watches end, and the
    // informer, resuming, finds it behind.
    cluster.reset();
    sim.close_watches();
    let health = support::eventually(
        "the informer to find the server behind",
        Duration::from_secs(10),
        async || {
            let health = informer.health();
            let behind = health.last_error.as_deref()?.contains("behind");
            behind.then_some(health)
        },
    )
    .await;
    assert!(
        !informer.is_synced(),
        "synced while the cache holds what the server lost: {health:?}"
    );
    assert_eq!(
        informer.store().len(),
        1,
        "the relist waits for the backoff"
    );
    factory.shutdown();
    sim.stop().await;
}

/// Regression: a list refused with 403 was retried every second or so forever, the backoff
/// reset by the `ListStarted` before each try. Each wait must be longer than the last, the
/// third beyond what the first step can ever be (0.8 s, up to twice that with jitter).
#[tokio::test]
async fn a_list_refused_again_and_again_is_retried_with_a_growing_backoff() {
    // Paged lists: a streaming list is a watch, which the fault below leaves alone.
    let sim = Simulator::start(SimOptions {
        watch_list: false,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let mode = refused_with_a_growing_backoff(&sim, "list").await;
    assert_eq!(mode, Some("paged"));
    sim.stop().await;
}

/// Refuses the next four `verb` requests on ConfigMaps with 403 and checks that an informer
/// retries them with a growing backoff, then syncs; returns how it listed in the end.
pub async fn refused_with_a_growing_backoff(sim: &Simulator, verb: &str) -> Option<&'static str> {
    let tries = 4u64;
    sim.faults()
        .fail_next_requests(
            RequestFailure::forbidden(tries)
                .only(&[verb])
                .on(&["configmaps"]),
        )
        .unwrap();
    let factory = InformerFactory::new(sim.client().unwrap());
    let informer = factory
        .informer(configmaps_everywhere(), CacheOptions::default())
        .await
        .unwrap();
    // When each refusal was answered, seen as the fault's count going down.
    let mut refused = Vec::new();
    let mut left = tries;
    while left > 0 {
        let now = sim
            .faults()
            .status()
            .failures
            .first()
            .map_or(0, |f| f.count);
        for _ in now..left {
            refused.push(Instant::now());
        }
        left = now;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waits: Vec<Duration> = refused.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        waits.windows(2).all(|w| w[1] > w[0]),
        "{verb}: the waits do not grow: {waits:?}"
    );
    assert!(
        waits[2] > Duration::from_millis(2500),
        "{verb}: the third wait is still the first step's: {waits:?}"
    );
    informer.wait_until_synced().await;
    let mode = informer.health().list_mode;
    factory.shutdown();
    mode
}
