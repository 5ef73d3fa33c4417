//! Streaming lists (KEP-3157): an informer lists with a `sendInitialEvents` watch where the
//! API server serves one, and with pages where it refuses it (the simulator's `WatchList`
//! feature gate off, as an older kube-apiserver). Either way the cache equals the server's,
//! `/status`'s health says which, and a relist after a 410 delivers the same difference.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchyard::informer::{CacheOptions, Informer, InformerFactory, WatchKey};
use switchyard::sim::{Cluster, ObjectRef, RequestFailure, SimOptions, Simulator};

use crate::informer::Recorder;
use crate::informer_relist::{cm_index, configmaps_everywhere, truth, watching};
use crate::support;

const WAIT: Duration = Duration::from_secs(30);

fn create(cluster: &Cluster, name: &str) {
    let object = json!({"metadata": {"name": name}, "data": {"v": "0"}});
    cluster
        .create(cm_index(cluster), "default", object)
        .unwrap();
}

async fn simulator(watch_list: bool) -> Simulator {
    let options = SimOptions {
        watch_list,
        ..SimOptions::default()
    };
    Simulator::start(options).await.unwrap()
}

#[tokio::test]
async fn a_server_that_serves_streaming_lists_is_never_asked_for_a_list() {
    let sim = simulator(true).await;
    for i in 0..1200 {
        create(sim.cluster(), &format!("cm-{i:04}"));
    }
    // Every list refused: only a streaming list can fill the cache.
    let refused = RequestFailure::forbidden(1_000_000)
        .only(&["list"])
        .on(&["configmaps"]);
    sim.faults().fail_next_requests(refused).unwrap();
    let (factory, informer, _) = watching(&sim).await;
    assert_eq!(informer.store().len(), 1200);
    let health = informer.health();
    assert_eq!(
        (health.list_mode, health.list_fallback),
        (Some("streaming"), None)
    );
    // It goes on as the watch.
    create(sim.cluster(), "later");
    support::eventually("the watch to bring a new object", WAIT, async || {
        (informer.store().len() == 1201).then_some(())
    })
    .await;
    factory.shutdown();
}

#[tokio::test]
async fn a_server_that_refuses_streaming_lists_is_listed_in_pages() {
    let sim = simulator(false).await;
    for i in 0..1200 {
        create(sim.cluster(), &format!("cm-{i:04}"));
    }
    let (factory, informer, _) = watching(&sim).await;
    assert_eq!(informer.store().len(), 1200);
    let health = informer.health();
    assert_eq!(health.list_mode, Some("paged"));
    let why = health.list_fallback.unwrap();
    assert!(
        why.contains(
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
        ) && why.contains("(422)"),
        "{why}"
    );
    create(sim.cluster(), "later");
    support::eventually("the watch to bring a new object", WAIT, async || {
        (informer.store().len() == 1201).then_some(())
    })
    .await;
    factory.shutdown();
}

/// A streaming list refused again and again (a 403 on its watch, which is no refusal of
/// the parameters: it stays a streaming list) is retried with a growing backoff, as a paged
/// list is, and the informer then syncs by streaming.
#[tokio::test]
async fn a_streaming_list_refused_again_and_again_is_retried_with_a_growing_backoff() {
    let sim = simulator(true).await;
    let mode = crate::informer_relist::refused_with_a_growing_backoff(&sim, "watch").await;
    assert_eq!(mode, Some("streaming"));
    sim.stop().await;
}

/// Both ways, a relist delivers exactly what changed while the watch was down: here the API
/// server came back empty (behind the version the watch had seen), so every object it had is
/// deleted with `final_state_unknown` and the one made since is added.
#[tokio::test]
async fn a_relist_delivers_the_difference_streaming_or_paged() {
    for watch_list in [true, false] {
        let sim = simulator(watch_list).await;
        let cluster = sim.cluster().clone();
        for name in ["a", "b"] {
            create(&cluster, name);
        }
        let (factory, informer, recorder) = watching(&sim).await;
        let before = truth(&cluster);
        let addr = sim.addr();
        sim.stop().await;
        cluster.reset();
        create(&cluster, "c");
        let options = SimOptions {
            listen: addr,
            watch_list,
            ..SimOptions::default()
        };
        let sim = Simulator::serve(cluster.clone(), options).await.unwrap();
        support::eventually("the relist to converge", WAIT, async || {
            (informer.is_synced() && support::cached(&informer) == truth(&cluster)).then_some(())
        })
        .await;
        let expected = [
            format!("added default/c {}", truth(&cluster)["default/c"]),
            format!("deleted? default/a {}", before["default/a"]),
            format!("deleted? default/b {}", before["default/b"]),
            "replaced 1".to_string(),
        ];
        assert_eq!(recorder.take_sorted(), expected, "watch_list {watch_list}");
        let mode = if watch_list { "streaming" } else { "paged" };
        assert_eq!(informer.health().list_mode, Some(mode));
        factory.shutdown();
        sim.stop().await;
    }
}

/// A loopback API server for ConfigMaps in `default`: each streaming list gets the next
/// scripted body (then the stream stays open); a paged list gets `listed`; a resumed watch
/// stays open and silent.
struct Scripted {
    streams: std::sync::Mutex<std::collections::VecDeque<Vec<serde_json::Value>>>,
    listed: Vec<serde_json::Value>,
}

fn cm(name: &str, rv: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string()}})
}

fn end_bookmark(rv: u64) -> serde_json::Value {
    json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
        "resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}})
}

async fn scripted_configmaps(
    axum::extract::State(server): axum::extract::State<Arc<Scripted>>,
    axum::extract::Query(query): axum::extract::Query<BTreeMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use futures::StreamExt;
    if query.get("watch").map(String::as_str) != Some("true") {
        let list = json!({"kind": "ConfigMapList", "apiVersion": "v1",
                          "metadata": {"resourceVersion": "100"}, "items": server.listed});
        return axum::Json(list).into_response();
    }
    let lines = match query.contains_key("sendInitialEvents") {
        true => server.streams.lock().unwrap().pop_front(),
        false => Some(Vec::new()),
    };
    let Some(lines) = lines else {
        return (axum::http::StatusCode::GONE, "no more scripted streams").into_response();
    };
    // A script that ends without the end bookmark ends the stream; one with it stays open.
    let stays_open = lines.iter().any(|l| l["type"] == "BOOKMARK") || lines.is_empty();
    let body = lines
        .iter()
        .map(|l| Ok::<_, std::convert::Infallible>(format!("{l}\n")));
    let body = futures::stream::iter(body.collect::<Vec<_>>());
    let body = match stays_open {
        true => body.chain(futures::stream::pending()).boxed(),
        false => body.boxed(),
    };
    axum::body::Body::from_stream(body).into_response()
}

/// An informer on the scripted server.
async fn scripted(
    streams: Vec<Vec<serde_json::Value>>,
    listed: Vec<serde_json::Value>,
) -> (InformerFactory, Arc<Informer>, Arc<Recorder>) {
    let server = Arc::new(Scripted {
        streams: std::sync::Mutex::new(streams.into()),
        listed,
    });
    let resources = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": ["get", "list", "watch"]}]});
    let app = axum::Router::new()
        .route(
            "/api",
            axum::routing::get(async || {
                axum::Json(json!({"kind": "APIVersions", "versions": ["v1"]}))
            }),
        )
        .route(
            "/api/v1",
            axum::routing::get(async move || axum::Json(resources.clone())),
        )
        .route(
            "/api/v1/namespaces/default/configmaps",
            axum::routing::get(scripted_configmaps),
        )
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let factory = InformerFactory::new(client).with_retry_delay(Duration::from_millis(2));
    let key = WatchKey {
        namespace: Some("default".into()),
        ..configmaps_everywhere()
    };
    let informer = factory
        .informer(key, CacheOptions::default())
        .await
        .unwrap();
    let recorder = Arc::new(Recorder::default());
    informer.subscribe(recorder.clone());
    (factory, informer, recorder)
}

#[tokio::test]
async fn changes_before_the_end_bookmark_are_part_of_the_list() {
    let stream = vec![
        json!({"type": "ADDED", "object": cm("a", 1)}),
        json!({"type": "ADDED", "object": cm("b", 2)}),
        json!({"type": "MODIFIED", "object": cm("a", 3)}),
        json!({"type": "DELETED", "object": cm("b", 4)}),
        end_bookmark(4),
    ];
    let (factory, informer, recorder) = scripted(vec![stream], Vec::new()).await;
    informer.wait_until_synced().await;
    let cached: Vec<(String, String)> = support::cached(&informer).into_iter().collect();
    assert_eq!(cached, [("default/a".to_string(), "3".to_string())]);
    assert_eq!(
        recorder.take_sorted(),
        [
            "added default/a 1",
            "added default/b 2",
            "deleted default/b 4",
            "replaced 1",
            "updated default/a 1->3"
        ]
    );
    assert_eq!(informer.health().list_mode, Some("streaming"));
    factory.shutdown();
}

/// A server that ends a streaming list before its end bookmark (one that does not know the
/// parameters sends the objects and never says the list is complete) is listed in pages at
/// once, the first time.
#[tokio::test]
async fn a_server_that_ends_a_streaming_list_before_its_end_bookmark_is_listed_in_pages_at_once() {
    let cut = vec![json!({"type": "ADDED", "object": cm("a", 1)})];
    let listed = vec![cm("a", 5), cm("b", 6)];
    let (factory, informer, _) = scripted(vec![cut], listed).await;
    informer.wait_until_synced().await;
    let cached: Vec<(String, String)> = support::cached(&informer).into_iter().collect();
    assert_eq!(
        cached,
        [
            ("default/a".to_string(), "5".to_string()),
            ("default/b".to_string(), "6".to_string())
        ]
    );
    let health = informer.health();
    assert_eq!((health.list_mode, health.restarts), (Some("paged"), 0));
    assert_eq!(
        health.list_fallback.as_deref(),
        Some(
            "this API server does not serve streaming lists (WatchList): listing in pages; \
             its answer: the stream ended before its end bookmark"
        )
    );
    factory.shutdown();
}

/// The text kube-apiserver 1.36 fails a streaming list with over an etcd without
/// `RequestWatchProgress`.
const NO_WATCH_PROGRESS: &str = "Internal error occurred: a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled (500)";

/// Regression: a streaming list accepted (200) and then failed with an ERROR event, 500, was
/// retried as a streaming list forever (only a 400 or 422 made the informer list in pages):
/// the informer never synced. It lists in pages at once, without a failure or a backoff.
#[tokio::test]
async fn a_streaming_list_failed_by_the_servers_storage_is_listed_in_pages_at_once() {
    let sim = simulator(true).await;
    for i in 0..700 {
        create(sim.cluster(), &format!("cm-{i:04}"));
    }
    sim.faults().fail_watch_lists_in_storage(true);
    let (factory, informer, _) = watching(&sim).await;
    assert_eq!(informer.store().len(), 700);
    let health = informer.health();
    assert_eq!((health.list_mode, health.restarts), (Some("paged"), 0));
    assert_eq!(
        health.list_fallback.unwrap(),
        format!(
            "this API server does not serve streaming lists (WatchList): listing in pages; \
             its answer: {NO_WATCH_PROGRESS}"
        )
    );
    create(sim.cluster(), "later");
    support::eventually("the watch to bring a new object", WAIT, async || {
        (informer.store().len() == 701).then_some(())
    })
    .await;
    factory.shutdown();
}

/// Regression: `/status`'s `resource_version` was null after a paged list of no objects,
/// though the watch went on from the list's version; it is the list's version, and then the
/// watch's.
#[tokio::test]
async fn an_informer_that_listed_no_objects_shows_the_lists_resource_version() {
    for watch_list in [false, true] {
        let sim = simulator(watch_list).await;
        // A change elsewhere: the cluster's version is past zero, no ConfigMap exists.
        create(sim.cluster(), "gone");
        let gone = ObjectRef {
            resource: cm_index(sim.cluster()),
            namespace: "default".into(),
            name: "gone".into(),
        };
        sim.cluster().delete(&gone).unwrap();
        let (factory, informer, _) = watching(&sim).await;
        assert_eq!(informer.store().len(), 0);
        let rv = sim.cluster().resource_version().to_string();
        assert_eq!(
            informer.health().resource_version,
            Some(rv),
            "watch_list {watch_list}"
        );
        factory.shutdown();
        sim.stop().await;
    }
}

/// Regression (kube-apiserver 1.36 with `WatchList` on, over an etcd older than 3.5.13): the
/// daemon stayed unsynced and unready, retrying streaming lists. It syncs by pages with no
/// failure counted (no backoff), says why in `/status`, and is ready.
#[tokio::test]
async fn a_daemon_whose_streaming_lists_fail_in_storage_syncs_by_pages_without_a_backoff() {
    let sim = support::start_sim().await;
    sim.faults().fail_watch_lists_in_storage(true);
    let t = support::TestDaemon::builder(support::CONFIGMAPS_TO_LOG_EVENTS)
        .sim(sim)
        .start()
        .await;
    let status = t.status_json().await;
    let informer = &status["informers"][0];
    assert_eq!(
        (
            &informer["synced"],
            &informer["restarts"],
            &informer["list_mode"]
        ),
        (&json!(true), &json!(0), &json!("paged")),
        "{status:#}"
    );
    let why = informer["list_fallback"].as_str().unwrap();
    assert_eq!(
        why,
        format!(
            "this API server does not serve streaming lists (WatchList): listing in pages; \
             its answer: {NO_WATCH_PROGRESS}"
        )
    );
    let readyz = reqwest::get(t.probes_url("/readyz")).await.unwrap();
    assert_eq!(readyz.status().as_u16(), 200);
    t.stop().await;
}
