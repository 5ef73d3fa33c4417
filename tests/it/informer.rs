//! Shared informers against the simulator and its faults: after a dropped watch, a 410 on
//! reconnect, an API server restart, or deletions while disconnected, the cache equals the
//! simulator's state and subscribers got exactly the difference.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;
use switchyard::config::ResourceName;
use switchyard::informer::{
    CacheOptions, Delta, DeltaSink, IndexFn, Indexers, Informer, InformerFactory, SubscriptionId,
    Transform, WatchKey,
};
use switchyard::sim::{Cluster, ObjectRef, SimOptions, Simulator};

use crate::support;

/// What a subscriber saw, one line per delta: `added default/a 5`, `deleted? default/b 7`
/// (`?` marks final state unknown), `replaced 3`, `sync default/a 5`.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) seen: Mutex<Vec<String>>,
    resync: Option<Duration>,
}

impl DeltaSink for Recorder {
    fn deliver(&self, delta: &Delta) {
        let line = match delta {
            Delta::Added(o) => format!("added {} {}", o.key(), o.resource_version()),
            Delta::Updated { old, new } => {
                format!(
                    "updated {} {}->{}",
                    new.key(),
                    old.resource_version(),
                    new.resource_version()
                )
            }
            Delta::Deleted {
                last_known,
                final_state_unknown,
            } => format!(
                "deleted{} {} {}",
                if *final_state_unknown { "?" } else { "" },
                last_known.key(),
                last_known.resource_version()
            ),
            Delta::Sync(o) => format!("sync {} {}", o.key(), o.resource_version()),
            Delta::Replaced { objects, .. } => format!("replaced {objects}"),
        };
        self.seen.lock().unwrap().push(line);
    }

    fn resync_period(&self) -> Option<Duration> {
        self.resync
    }
}

impl Recorder {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    /// Everything seen so far, sorted, and forgotten.
    pub(crate) fn take_sorted(&self) -> Vec<String> {
        let mut seen = self.take();
        seen.sort();
        seen
    }

    /// The state the deltas describe, applied to an empty map: key → resourceVersion.
    fn replay(lines: &[String]) -> BTreeMap<String, String> {
        let mut state = BTreeMap::new();
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[0] {
                "added" => {
                    state.insert(parts[1].to_string(), parts[2].to_string());
                }
                "updated" => {
                    let new = parts[2].split("->").nth(1).unwrap();
                    state.insert(parts[1].to_string(), new.to_string());
                }
                "deleted" | "deleted?" => {
                    state.remove(parts[1]);
                }
                _ => {}
            }
        }
        state
    }
}

fn configmaps() -> WatchKey {
    WatchKey {
        resource: ResourceName::parse("configmaps").unwrap(),
        namespace: Some("default".into()),
        label_selector: None,
        field_selector: None,
    }
}

fn cm_index(cluster: &Cluster) -> usize {
    cluster.find_resource("", "v1", "configmaps").unwrap()
}

fn at(cluster: &Cluster, name: &str) -> ObjectRef {
    ObjectRef {
        resource: cm_index(cluster),
        namespace: "default".into(),
        name: name.into(),
    }
}

fn create(cluster: &Cluster, name: &str) {
    cluster
        .create(
            cm_index(cluster),
            "default",
            json!({"metadata": {"name": name}, "data": {"v": "0"}}),
        )
        .unwrap();
}

fn update(cluster: &Cluster, name: &str, value: &str) {
    let mut object = (*cluster.get(&at(cluster, name)).unwrap()).clone();
    object["data"]["v"] = value.into();
    cluster.update(&at(cluster, name), object).unwrap();
}

/// The simulator's ConfigMaps in `default`: key → resourceVersion.
fn truth(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster
        .list(cm_index(cluster), Some("default"))
        .items
        .iter()
        .map(|o| {
            let meta = &o["metadata"];
            (
                format!("default/{}", meta["name"].as_str().unwrap()),
                meta["resourceVersion"].as_str().unwrap().to_string(),
            )
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

struct Setup {
    sim: Simulator,
    factory: InformerFactory,
    informer: Arc<Informer>,
    recorder: Arc<Recorder>,
    subscription: SubscriptionId,
}

/// A simulator with ConfigMaps a, b, c, d and a synced informer with a recorder on it.
async fn setup(history: usize) -> Setup {
    setup_with(history, &["a", "b", "c", "d"]).await.0
}

/// A simulator with ConfigMaps `names` and a synced informer with a recorder on it; also
/// what the recorder saw until the cache matched the simulator.
async fn setup_with(history: usize, names: &[&str]) -> (Setup, Vec<String>) {
    let sim = Simulator::start(SimOptions {
        history,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    for name in names {
        create(sim.cluster(), name);
    }
    let factory = InformerFactory::new(sim.client().unwrap());
    let informer = factory
        .informer(configmaps(), CacheOptions::default())
        .await
        .unwrap();
    let recorder = Arc::new(Recorder::default());
    let subscription = informer.subscribe(recorder.clone());
    tokio::time::timeout(Duration::from_secs(60), informer.wait_until_synced())
        .await
        .expect("the list completes");
    converge(&informer, sim.cluster()).await;
    let seen = recorder.take();
    let setup = Setup {
        sim,
        factory,
        informer,
        recorder,
        subscription,
    };
    (setup, seen)
}

#[tokio::test]
async fn a_watch_dropped_mid_stream_resumes_without_losing_changes() {
    let s = setup(10_000).await;
    s.sim.close_watches();
    update(s.sim.cluster(), "a", "1");
    s.sim.cluster().delete(&at(s.sim.cluster(), "b")).unwrap();
    create(s.sim.cluster(), "e");
    converge(&s.informer, s.sim.cluster()).await;
    let seen = s.recorder.take();
    let kinds: Vec<&str> = seen.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["updated", "deleted", "added"], "{seen:?}");
    s.factory.shutdown();
}

#[tokio::test]
async fn a_410_on_reconnect_relists_and_delivers_nothing_for_unchanged_objects() {
    let s = setup(10_000).await;
    s.sim.faults().expire_next_watches(1);
    s.sim.close_watches();
    let error = support::eventually("the 410 reported", Duration::from_secs(30), async || {
        s.informer.health().last_error
    })
    .await;
    assert!(
        error.contains("410") || error.contains("too old"),
        "the 410 is reported: {error}"
    );
    support::eventually("a relist", Duration::from_secs(30), async || {
        let seen = s.recorder.seen.lock().unwrap().clone();
        (!seen.is_empty()).then_some(())
    })
    .await;
    assert_eq!(s.recorder.take(), ["replaced 4"]);
    assert!(s.informer.health().restarts >= 1);
    assert_eq!(
        s.informer.health().last_error,
        None,
        "cleared once the relist completes"
    );
    update(s.sim.cluster(), "c", "1");
    converge(&s.informer, s.sim.cluster()).await;
    s.factory.shutdown();
}

/// A list longer than one page (the informer asks for 500 objects a page): every object
/// cached and delivered once, and a relist over the same pages delivers nothing new.
#[tokio::test]
async fn a_list_of_several_pages_delivers_every_object_once_and_a_relist_none_again() {
    let names: Vec<String> = (0..1234).map(|i| format!("cm-{i:04}")).collect();
    let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
    let (s, seen) = setup_with(10_000, &wanted).await;
    let mut added: Vec<&str> = seen
        .iter()
        .filter_map(|line| line.strip_prefix("added default/"))
        .map(|rest| rest.split(' ').next().unwrap())
        .collect();
    added.sort();
    assert_eq!(added, names, "each listed object delivered once");

    s.sim.faults().expire_next_watches(1);
    s.sim.close_watches();
    support::eventually("a relist", Duration::from_secs(30), async || {
        let seen = s.recorder.seen.lock().unwrap().clone();
        (!seen.is_empty()).then_some(())
    })
    .await;
    assert_eq!(s.recorder.take(), ["replaced 1234"]);
    converge(&s.informer, s.sim.cluster()).await;
    s.factory.shutdown();
}

#[tokio::test]
async fn deletions_while_the_api_server_was_down_arrive_as_deleted_after_a_relist() {
    let Setup {
        sim,
        factory,
        informer,
        recorder,
        ..
    } = setup(10_000).await;
    let cluster = sim.cluster().clone();
    let addr = sim.addr();
    sim.stop().await;
    cluster.delete(&at(&cluster, "a")).unwrap();
    update(&cluster, "b", "1");
    create(&cluster, "e");
    // The history no longer reaches back to what the informer saw: it must relist.
    cluster.compact();
    let sim = Simulator::serve(
        cluster.clone(),
        SimOptions {
            listen: addr,
            ..SimOptions::default()
        },
    )
    .await
    .unwrap();
    converge(&informer, &cluster).await;
    support::eventually(
        "the relist to finish",
        Duration::from_secs(30),
        async || {
            recorder
                .seen
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.starts_with("replaced"))
                .then_some(())
        },
    )
    .await;
    let mut seen = recorder.take();
    let last = seen.pop().unwrap();
    assert_eq!(last, "replaced 4");
    seen.sort();
    let b_rv = truth(&cluster)["default/b"].clone();
    let e_rv = truth(&cluster)["default/e"].clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[0].starts_with("added default/e ") && seen[0].ends_with(&e_rv),
        "{seen:?}"
    );
    assert!(seen[1].starts_with("deleted? default/a "), "{seen:?}");
    assert!(
        seen[2].starts_with("updated default/b ") && seen[2].ends_with(&b_rv),
        "{seen:?}"
    );
    factory.shutdown();
    sim.stop().await;
}

#[tokio::test]
async fn an_api_server_restart_with_history_kept_resumes_the_watch() {
    let s = setup(10_000).await;
    s.sim.restart(Duration::from_millis(300)).await.unwrap();
    update(s.sim.cluster(), "d", "1");
    converge(&s.informer, s.sim.cluster()).await;
    let seen = s.recorder.take();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("updated default/d "), "{seen:?}");
    s.factory.shutdown();
}

#[tokio::test(start_paused = false)]
async fn a_subscriber_with_a_resync_period_gets_sync_for_every_object() {
    let s = setup(10_000).await;
    let resyncing = Arc::new(Recorder {
        seen: Mutex::default(),
        resync: Some(Duration::from_millis(300)),
    });
    s.informer.subscribe(resyncing.clone());
    assert_eq!(s.informer.resync_tick(), Some(Duration::from_millis(300)));
    let first = resyncing.take();
    assert_eq!(
        first.iter().filter(|l| l.starts_with("added ")).count(),
        4,
        "a late subscriber first gets every cached object as added: {first:?}"
    );
    assert_eq!(
        first.last().map(String::as_str),
        Some("replaced 4"),
        "then the list's end, as the cache is synced"
    );
    support::eventually("two resyncs", Duration::from_secs(20), async || {
        let seen = resyncing.seen.lock().unwrap().clone();
        (seen.iter().filter(|l| l.starts_with("sync ")).count() >= 8).then_some(())
    })
    .await;
    assert!(
        s.recorder.take().is_empty(),
        "a subscriber without a resync period gets none"
    );
    s.factory.shutdown();
}

#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Update(u8),
    Delete(u8),
    CloseWatches,
    ExpireAndClose,
    CompactAndClose,
    /// Waits until the cache equals the simulator: without it, operations arrive in a burst
    /// while the informer is still catching up.
    Settle,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..8).prop_map(Op::Create),
        4 => (0u8..8).prop_map(Op::Update),
        3 => (0u8..8).prop_map(Op::Delete),
        1 => Just(Op::CloseWatches),
        1 => Just(Op::ExpireAndClose),
        1 => Just(Op::CompactAndClose),
        3 => Just(Op::Settle),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Whatever the operations and faults, every subscriber's deltas, applied to an empty
    /// map, reproduce the simulator's state.
    #[test]
    fn deltas_replayed_reproduce_the_simulators_state(ops in prop::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let sim = Simulator::start(SimOptions { history: 50, ..SimOptions::default() }).await.unwrap();
            let cluster = sim.cluster().clone();
            let factory = InformerFactory::new(sim.client().unwrap());
            let informer = factory.informer(configmaps(), CacheOptions::default()).await.unwrap();
            let recorder = Arc::new(Recorder::default());
            informer.subscribe(recorder.clone());
            informer.wait_until_synced().await;
            for op in ops {
                let name = |i: u8| format!("cm-{i}");
                let exists = |i: u8| cluster.get(&at(&cluster, &name(i))).is_ok();
                match op {
                    Op::Create(i) if !exists(i) => create(&cluster, &name(i)),
                    Op::Update(i) if exists(i) => update(&cluster, &name(i), "x"),
                    Op::Delete(i) if exists(i) => {
                        cluster.delete(&at(&cluster, &name(i))).unwrap();
                    }
                    Op::CloseWatches => sim.close_watches(),
                    Op::ExpireAndClose => {
                        sim.faults().expire_next_watches(1);
                        sim.close_watches();
                    }
                    Op::CompactAndClose => {
                        cluster.compact();
                        sim.close_watches();
                    }
                    Op::Settle => converge(&informer, &cluster).await,
                    _ => {}
                }
            }
            converge(&informer, &cluster).await;
            let replayed = Recorder::replay(&recorder.seen.lock().unwrap());
            factory.shutdown();
            prop_assert_eq!(replayed, truth(&cluster));
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn the_cache_drops_managed_fields_and_configured_pointers_and_keeps_indexes() {
    let sim = support::start_sim().await;
    let cluster = sim.cluster().clone();
    cluster
        .create(
            cm_index(&cluster),
            "default",
            json!({
                "metadata": {
                    "name": "big",
                    "labels": {"app": "web"},
                    "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"huge\":1}", "keep": "me"},
                },
                "data": {"v": "1"},
            }),
        )
        .unwrap();
    let factory = InformerFactory::new(sim.client().unwrap());
    let options = CacheOptions {
        indexers: Indexers::new([("by-app".to_string(), IndexFn::Label("app".into()))]),
        transform: Transform {
            strip_managed_fields: true,
            drop: vec![
                "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration".into(),
            ],
        },
        ..CacheOptions::default()
    };
    let informer = factory.informer(configmaps(), options).await.unwrap();
    informer.wait_until_synced().await;
    let cached: serde_json::Value =
        serde_json::from_str(&informer.store().list()[0].json()).unwrap();
    assert!(
        cached["metadata"].get("managedFields").is_none(),
        "{cached}"
    );
    assert_eq!(cached["metadata"]["annotations"], json!({"keep": "me"}));
    assert_eq!(
        cached["kind"], "ConfigMap",
        "list items get their kind back"
    );
    let by_app = informer.store().list_by_index("by-app", "web").unwrap();
    assert_eq!(by_app.len(), 1);
    assert_eq!(
        informer
            .store()
            .list_by_index("namespace", "default")
            .unwrap()
            .len(),
        1
    );
    factory.shutdown();
}

#[tokio::test]
async fn routes_share_an_informer_and_it_stops_when_the_last_one_goes() {
    let s = setup(10_000).await;
    let same = s
        .factory
        .informer(configmaps(), CacheOptions::default())
        .await
        .unwrap();
    assert!(
        Arc::ptr_eq(&same, &s.informer),
        "an equal watch key shares the informer"
    );
    let other = Arc::new(Recorder::default());
    let second = s.informer.subscribe(other.clone());
    assert_eq!(
        other.take().len(),
        5,
        "a new subscriber starts from the cache: 4 added, then replaced 4"
    );
    assert!(!s.factory.release(&configmaps()), "still in use");
    assert_eq!(s.informer.unsubscribe(second), 1);
    create(s.sim.cluster(), "late");
    converge(&s.informer, s.sim.cluster()).await;
    assert!(
        other.take().is_empty(),
        "an ended subscription gets nothing"
    );
    assert_eq!(s.recorder.take().len(), 1);
    assert_eq!(s.informer.unsubscribe(s.subscription), 0);
    assert!(
        s.factory.release(&configmaps()),
        "the last route went: the informer stops"
    );
    assert!(s.factory.informers().is_empty());
    let fresh = s
        .factory
        .informer(configmaps(), CacheOptions::default())
        .await
        .unwrap();
    assert!(
        !Arc::ptr_eq(&fresh, &s.informer),
        "asking again starts a new informer"
    );
    fresh.wait_until_synced().await;
    assert_eq!(fresh.store().len(), 5);
    s.factory.shutdown();
}
