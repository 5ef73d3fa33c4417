//! Injected faults, from tests and over the `/_switchyard/faults` control endpoint: closed
//! watches, 410 on the next watches, 429 and 500 answers, delays, compaction, and restarts
//! on the same port that a kube-rs watcher survives.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use switchyard::sim::{RequestFailure, SimOptions, Simulator, resources};

use crate::support;
use crate::support::sim::{RawWatch, get_json, post_json, start_with_config};

fn cm(name: &str) -> ConfigMap {
    support::configmap(json!({"metadata": {"name": name}}))
}

fn faults_url(sim: &Simulator, what: &str) -> String {
    format!("{}/_switchyard/faults{what}", sim.url())
}

fn watch_url(sim: &Simulator, rv: &str) -> String {
    format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}",
        sim.url()
    )
}

#[tokio::test]
async fn the_control_endpoint_shows_sets_and_clears_faults() {
    let sim = start_with_config("").await;
    let (code, faults) = get_json(&faults_url(&sim, "")).await;
    assert_eq!(code, 200);
    assert_eq!(
        faults,
        json!({"expireWatches": 0, "failures": [], "delayMs": 0, "watchListUnsupportedByStorage": false})
    );

    let failure = json!({"count": 2, "code": 500, "verbs": ["get", "list"]});
    let (code, faults) = post_json(&faults_url(&sim, "/fail-requests"), &failure).await;
    assert_eq!(code, 200);
    assert_eq!(faults["failures"], json!([failure]));
    let (_, faults) = post_json(&faults_url(&sim, "/expire-watches"), &json!({"count": 3})).await;
    assert_eq!(faults["expireWatches"], 3);
    let (_, faults) = post_json(&faults_url(&sim, "/delay"), &json!({"ms": 5})).await;
    assert_eq!(faults["delayMs"], 5);
    let fail = json!({"fail": true});
    let (_, faults) = post_json(&faults_url(&sim, "/watch-list-storage"), &fail).await;
    assert_eq!(faults["watchListUnsupportedByStorage"], true);

    for (path, body) in [
        ("/fail-requests", json!({"count": 1, "code": 200})),
        (
            "/fail-requests",
            json!({"count": 1, "code": 500, "verbs": ["explode"]}),
        ),
        ("/delay", json!({"seconds": 1})),
        ("/watch-list-storage", json!({"fail": "yes"})),
    ] {
        let (code, answer) = post_json(&faults_url(&sim, path), &body).await;
        assert_eq!(code, 400, "{path} {body}");
        assert!(answer["error"].is_string(), "{answer}");
    }

    let response = reqwest::Client::new()
        .delete(faults_url(&sim, ""))
        .send()
        .await
        .unwrap();
    let cleared: Value = response.json().await.unwrap();
    assert_eq!(
        cleared,
        json!({"expireWatches": 0, "failures": [], "delayMs": 0, "watchListUnsupportedByStorage": false})
    );
    assert_eq!(sim.faults().status(), Default::default());
}

#[tokio::test]
async fn the_next_requests_answer_429_with_retry_after_which_kube_rs_honours() {
    let sim = start_with_config("").await;
    let failure = json!({"count": 1, "code": 429, "retryAfterSeconds": 1, "verbs": ["list"]});
    post_json(&faults_url(&sim, "/fail-requests"), &failure).await;
    let list_url = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    let response = reqwest::get(&list_url).await.unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    // The failure is used up.
    assert_eq!(
        reqwest::get(&list_url).await.unwrap().status().as_u16(),
        200
    );

    // kube-rs retries a 429 after the Retry-After the server asked for.
    sim.faults()
        .fail_next_requests(RequestFailure::too_many_requests(1, 1))
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let started = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(sim.faults().status().failures.is_empty());
}

#[tokio::test]
async fn the_next_requests_answer_500_internal_error() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    sim.faults()
        .fail_next_requests(RequestFailure::internal_error(1).only(&["get"]))
        .unwrap();
    // A list is not a get: unaffected.
    api.list(&ListParams::default()).await.unwrap();
    match api.get("c").await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (500, "InternalError")
            );
        }
        other => panic!("expected a 500, got {other}"),
    }
    api.get("c").await.unwrap();
}

#[tokio::test]
async fn the_next_watches_get_410_and_a_kube_rs_watcher_relists() {
    let sim = start_with_config("").await;
    let rv = sim.cluster().resource_version().to_string();
    sim.faults().expire_next_watches(1);
    let mut expired = RawWatch::open(&watch_url(&sim, &rv)).await;
    let event = expired.next().await.unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(
        (
            event["object"]["code"].as_u64(),
            event["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
    assert_eq!(expired.next().await, None);

    // Over HTTP, for a kube-rs watcher: its first watch is expired, so it lists again.
    post_json(&faults_url(&sim, "/expire-watches"), &json!({"count": 1})).await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let (mut lists, mut gone) = (0, 0);
    tokio::time::timeout(Duration::from_secs(10), async {
        while lists < 2 {
            match events.next().await.unwrap() {
                Ok(watcher::Event::InitDone) => lists += 1,
                Ok(_) => {}
                Err(watcher::Error::WatchError(status)) if status.code == 410 => gone += 1,
                Err(e) => panic!("unexpected watcher error {e}"),
            }
        }
    })
    .await
    .expect("the watcher lists again after the 410");
    assert_eq!(gone, 1);
}

#[tokio::test]
async fn delayed_responses_wait_at_least_the_delay() {
    let sim = start_with_config("").await;
    post_json(&faults_url(&sim, "/delay"), &json!({"ms": 300})).await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    let started = Instant::now();
    let (code, _) = get_json(&url).await;
    assert_eq!(code, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    // The control endpoint itself is never delayed, and the delay can be lifted.
    post_json(&faults_url(&sim, "/delay"), &json!({"ms": 0})).await;
    assert_eq!(sim.faults().status().delay_ms, 0);
}

#[tokio::test]
async fn compacting_over_http_expires_older_versions() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let first = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    let (code, answer) = post_json(&faults_url(&sim, "/compact"), &json!({})).await;
    assert_eq!(code, 200);
    assert_eq!(
        answer["compactedResourceVersion"],
        sim.cluster().resource_version().to_string()
    );
    let rv = first.metadata.resource_version.unwrap();
    let mut watch = RawWatch::open(&watch_url(&sim, &rv)).await;
    let event = watch.next().await.unwrap();
    assert_eq!(event["object"]["code"], 410, "{event}");
}

#[tokio::test]
async fn closing_watches_over_http_ends_open_streams() {
    let sim = start_with_config("").await;
    let rv = sim.cluster().resource_version().to_string();
    let mut watch = RawWatch::open(&watch_url(&sim, &rv)).await;
    post_json(&faults_url(&sim, "/close-watches"), &json!({})).await;
    assert_eq!(watch.next().await, None);
}

#[tokio::test]
async fn a_kube_rs_watcher_survives_a_restart_on_the_same_port() {
    let sim = start_with_config("").await;
    let addr = sim.addr();
    let cluster = sim.cluster().clone();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let mut applied = async |name: &str| {
        tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                // Errors while the server is down are expected; the watcher retries.
                if let Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) =
                    events.next().await
                    && o.metadata.name.as_deref() == Some(name)
                {
                    return;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the watcher never saw {name}"));
    };
    applied("before").await;

    sim.stop().await;
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    cluster
        .create(
            configmaps,
            "default",
            json!({"metadata": {"name": "while-down"}}),
        )
        .unwrap();
    let sim = Simulator::serve(
        cluster,
        SimOptions {
            listen: addr,
            ..SimOptions::default()
        },
    )
    .await
    .expect("the port is free again");
    assert_eq!(sim.addr(), addr);
    applied("while-down").await;
    sim.cluster()
        .create(
            configmaps,
            "default",
            json!({"metadata": {"name": "after"}}),
        )
        .unwrap();
    applied("after").await;
}

#[tokio::test]
async fn a_restart_over_http_ends_watches_and_keeps_the_state() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    api.create(&PostParams::default(), &cm("kept"))
        .await
        .unwrap();
    let rv = sim.cluster().resource_version().to_string();
    let mut watch = RawWatch::open(&watch_url(&sim, &rv)).await;

    let (code, answer) = post_json(&faults_url(&sim, "/restart"), &json!({"downMs": 200})).await;
    assert_eq!((code, answer["restarting"].as_bool()), (202, Some(true)));
    assert_eq!(watch.next().await, None);

    let kept = support::eventually(
        "the simulator to come back",
        Duration::from_secs(5),
        async || api.get_opt("kept").await.ok().flatten(),
    )
    .await;
    assert_eq!(kept.metadata.resource_version.as_deref(), Some(rv.as_str()));

    // And the method does the same from a test, returning once it serves again.
    sim.restart(Duration::from_millis(50)).await.unwrap();
    api.get("kept").await.unwrap();
}

/// The fault `watch-list-storage` answers a streaming list as kube-apiserver 1.36 with
/// `WatchList` on does over an etcd without `RequestWatchProgress`: 200, then one ERROR
/// event with a 500, and the end of the stream; other watches are served as usual.
#[tokio::test]
async fn a_streaming_list_failed_by_storage_is_accepted_then_ended_with_a_500_error_event() {
    let sim = start_with_config("").await;
    sim.faults().fail_watch_lists_in_storage(true);
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
        sim.url()
    );
    let response = reqwest::get(&url).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(lines[0]["type"], "ERROR");
    let status = &lines[0]["object"];
    assert_eq!(
        (&status["code"], &status["reason"]),
        (&json!(500), &json!("InternalError"))
    );
    assert_eq!(
        status["message"],
        "Internal error occurred: a watch stream was requested by the client but the \
         required storage feature RequestWatchProgress is disabled"
    );
    // A plain watch is served.
    let mut plain = RawWatch::open(&watch_url(&sim, "0")).await;
    sim.cluster()
        .create(
            resources::find("", "v1", "configmaps").unwrap(),
            "default",
            json!({"metadata": {"name": "a"}}),
        )
        .unwrap();
    assert_eq!(plain.next().await.unwrap()["type"], "ADDED");
}
