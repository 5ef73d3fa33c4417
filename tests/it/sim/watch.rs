//! The simulator's watches against kube-rs, kubectl and raw HTTP: bookmarks, streaming
//! lists (`sendInitialEvents`), `timeoutSeconds`, label and field selectors, and Table
//! watches for `kubectl get -w`.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use switchyard::sim::{ObjectRef, SimOptions, Simulator, resources};

use crate::support::sim::{Kubectl, RawWatch, blocking, get_json, start_with_config};

fn resource(plural: &str) -> usize {
    resources::find("", "v1", plural).unwrap()
}

fn create_cm(sim: &Simulator, name: &str, labels: Value) -> String {
    let object = sim
        .cluster()
        .create(
            resource("configmaps"),
            "default",
            json!({"metadata": {"name": name, "labels": labels}}),
        )
        .unwrap();
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

fn create_pod(sim: &Simulator, name: &str, node: &str, phase: &str, app: &str) {
    sim.cluster()
        .create(
            resource("pods"),
            "default",
            json!({
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "nginx"}]},
                "status": {"phase": phase},
            }),
        )
        .unwrap();
}

fn at(plural: &str, name: &str) -> ObjectRef {
    ObjectRef {
        resource: resource(plural),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// Sets one field (a JSON pointer) of a stored object.
fn set(sim: &Simulator, plural: &str, name: &str, pointer: &str, value: Value) {
    sim.cluster()
        .modify(&at(plural, name), |current| {
            let mut object = current.clone();
            let field = pointer
                .split('/')
                .skip(1)
                .fold(&mut object, |v, part| &mut v[part]);
            *field = value;
            Ok(object)
        })
        .unwrap();
}

async fn next<K>(
    events: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a watch event within 5 seconds")
        .expect("the watch is open")
        .expect("a valid watch event")
}

fn name_of<K: kube::Resource>(event: &WatchEvent<K>) -> (&'static str, String) {
    match event {
        WatchEvent::Added(o) => ("ADDED", o.meta().name.clone().unwrap()),
        WatchEvent::Modified(o) => ("MODIFIED", o.meta().name.clone().unwrap()),
        WatchEvent::Deleted(o) => ("DELETED", o.meta().name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
    }
}

#[tokio::test]
async fn bookmarks_arrive_periodically_with_the_latest_version() {
    let sim = Simulator::start(SimOptions {
        bookmark_interval: Duration::from_millis(100),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let start = sim.cluster().resource_version().to_string();
    let mut events = api
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        name_of(&next(&mut events).await),
        ("BOOKMARK", start.clone())
    );

    let created = create_cm(&sim, "one", json!({}));
    // Another resource's change moves the version too; bookmarks report the latest.
    create_pod(&sim, "elsewhere", "n", "Running", "x");
    let latest = sim.cluster().resource_version().to_string();
    loop {
        match name_of(&next(&mut events).await) {
            ("BOOKMARK", rv) => assert_eq!(rv, start),
            event => {
                assert_eq!(event, ("ADDED", "one".into()));
                break;
            }
        }
    }
    loop {
        match next(&mut events).await {
            WatchEvent::Bookmark(b) if b.metadata.resource_version == created => continue,
            WatchEvent::Bookmark(b) => {
                assert_eq!(b.metadata.resource_version, latest);
                assert!(b.metadata.annotations.is_empty());
                break;
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
}

#[tokio::test]
async fn send_initial_events_streams_the_state_then_an_annotated_bookmark() {
    let sim = start_with_config("").await;
    create_cm(&sim, "a", json!({"tier": "web"}));
    create_cm(&sim, "b", json!({"tier": "db"}));
    create_cm(&sim, "c", json!({"tier": "web"}));
    let listed_at = sim.cluster().resource_version().to_string();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let params = WatchParams::streaming_lists().labels("tier=web");
    let mut events = api.watch(&params, "0").await.unwrap().boxed();
    assert_eq!(name_of(&next(&mut events).await), ("ADDED", "a".into()));
    assert_eq!(name_of(&next(&mut events).await), ("ADDED", "c".into()));
    match next(&mut events).await {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.resource_version, listed_at);
            assert_eq!(
                b.metadata.annotations.get("k8s.io/initial-events-end"),
                Some(&"true".to_string())
            );
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    create_cm(&sim, "d", json!({"tier": "web"}));
    assert_eq!(name_of(&next(&mut events).await), ("ADDED", "d".into()));
}

#[tokio::test]
async fn a_kube_rs_watcher_with_streaming_lists_gets_the_whole_state() {
    let sim = start_with_config("").await;
    for name in ["a", "b", "c"] {
        create_cm(&sim, name, json!({}));
    }
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match events.next().await.unwrap().unwrap() {
                watcher::Event::InitApply(cm) => names.push(cm.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
    })
    .await
    .expect("the streaming list ends with its bookmark");
    assert_eq!(names, ["a", "b", "c"]);
}

#[tokio::test]
async fn send_initial_events_without_not_older_than_is_invalid() {
    let sim = start_with_config("").await;
    let base = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true",
        sim.url()
    );
    let (code, status) = get_json(&format!("{base}&sendInitialEvents=true")).await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        "{status}"
    );
    let (code, _) = get_json(&format!("{base}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn a_watch_ends_after_its_timeout_seconds() {
    let sim = start_with_config("").await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let started = Instant::now();
    let rv = sim.cluster().resource_version().to_string();
    let mut events = api
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("the server ends the watch");
    assert!(end.is_none(), "expected the end of the stream, got {end:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the watch ended before its timeout: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn field_selectors_select_pods_by_node_and_phase_in_lists() {
    let sim = start_with_config("").await;
    create_pod(&sim, "web-a", "node-a", "Running", "web");
    create_pod(&sim, "web-b", "node-b", "Running", "web");
    create_pod(&sim, "job-a", "node-a", "Succeeded", "job");
    sim.cluster()
        .create(
            resource("pods"),
            "default",
            json!({"metadata": {"name": "unscheduled"}, "spec": {"containers": []}}),
        )
        .unwrap();
    let api: Api<Pod> = Api::namespaced(sim.client().unwrap(), "default");
    let names = async |params: ListParams| -> Vec<String> {
        let list = api.list(&params).await.unwrap();
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    assert_eq!(
        names(ListParams::default().fields("spec.nodeName=node-a")).await,
        ["job-a", "web-a"]
    );
    assert_eq!(
        names(ListParams::default().fields("status.phase=Running")).await,
        ["web-a", "web-b"]
    );
    assert_eq!(
        names(ListParams::default().fields("spec.nodeName=node-a,status.phase!=Running")).await,
        ["job-a"]
    );
    assert_eq!(
        names(ListParams::default().fields("spec.nodeName=")).await,
        ["unscheduled"]
    );
    assert_eq!(
        names(
            ListParams::default()
                .labels("app=web")
                .fields("metadata.name!=web-a")
        )
        .await,
        ["web-b"]
    );
}

#[tokio::test]
async fn an_object_moving_across_a_selector_arrives_as_added_or_deleted() {
    let sim = start_with_config("").await;
    create_pod(&sim, "p", "node-a", "Pending", "web");
    let api: Api<Pod> = Api::namespaced(sim.client().unwrap(), "default");
    let rv = sim.cluster().resource_version().to_string();

    let running = WatchParams::default()
        .fields("status.phase=Running")
        .disable_bookmarks();
    let mut by_phase = api.watch(&running, &rv).await.unwrap().boxed();
    let web = WatchParams::default().labels("app=web").disable_bookmarks();
    let mut by_label = api.watch(&web, &rv).await.unwrap().boxed();
    let on_b = WatchParams::default()
        .fields("spec.nodeName=node-b")
        .disable_bookmarks();
    let mut by_node = api.watch(&on_b, &rv).await.unwrap().boxed();

    set(&sim, "pods", "p", "/status/phase", json!("Running"));
    set(&sim, "pods", "p", "/metadata/labels/app", json!("api"));
    set(&sim, "pods", "p", "/metadata/labels/app", json!("web"));
    set(&sim, "pods", "p", "/spec/nodeName", json!("node-b"));
    sim.cluster().delete(&at("pods", "p")).unwrap();

    // Moved to node-b: it enters that node's selection, then is deleted there.
    assert_eq!(name_of(&next(&mut by_node).await), ("ADDED", "p".into()));
    assert_eq!(name_of(&next(&mut by_node).await), ("DELETED", "p".into()));

    // Pending → Running: the pod enters the phase selection.
    assert_eq!(name_of(&next(&mut by_phase).await), ("ADDED", "p".into()));
    assert_eq!(
        name_of(&next(&mut by_phase).await),
        ("MODIFIED", "p".into())
    );
    // app=web → api → web: it leaves the label selection, then comes back.
    assert_eq!(
        name_of(&next(&mut by_label).await),
        ("MODIFIED", "p".into())
    );
    match next(&mut by_label).await {
        WatchEvent::Deleted(pod) => {
            // The last state that matched, at the version of the change.
            assert_eq!(pod.metadata.labels.unwrap()["app"], "web");
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    assert_eq!(name_of(&next(&mut by_label).await), ("ADDED", "p".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_the_kind_cannot_select_on_is_a_bad_request() {
    let sim = start_with_config("").await;
    let (code, status) = get_json(&format!(
        "{}/api/v1/configmaps?fieldSelector=spec.nodeName%3Dx",
        sim.url()
    ))
    .await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(
        status["message"],
        "field label not supported: spec.nodeName"
    );
    let (code, _) = get_json(&format!(
        "{}/api/v1/pods?fieldSelector=spec.nodeName%20in%20(a)",
        sim.url()
    ))
    .await;
    assert_eq!(code, 400);

    let kubectl = Kubectl::new(&sim);
    let out = blocking(move || {
        kubectl.run(&["get", "configmaps", "--field-selector", "spec.nodeName=x"])
    })
    .await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("field label not supported: spec.nodeName"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_selects_pods_by_node_phase_and_label() {
    let sim = start_with_config("").await;
    create_pod(&sim, "web-a", "node-a", "Running", "web");
    create_pod(&sim, "web-b", "node-b", "Running", "web");
    create_pod(&sim, "job-a", "node-a", "Succeeded", "job");
    let kubectl = Kubectl::new(&sim);
    let outputs = blocking(move || {
        [
            kubectl.run(&[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=node-a,status.phase=Running",
                "-o",
                "name",
            ]),
            kubectl.run(&["get", "pods", "-l", "app=web", "-o", "name"]),
        ]
    })
    .await;
    assert!(outputs[0].ok, "{:?}", outputs[0]);
    assert_eq!(outputs[0].stdout.trim(), "pod/web-a");
    assert_eq!(outputs[1].stdout.trim(), "pod/web-a\npod/web-b");
}

#[tokio::test]
async fn a_table_watch_sends_each_object_as_a_one_row_table() {
    let sim = start_with_config("").await;
    create_cm(&sim, "first", json!({}));
    let response = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true",
            sim.url()
        ))
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await
        .unwrap();
    let mut watch = RawWatch::from_response(response);
    let event = watch.next().await.unwrap();
    assert_eq!(event["type"], "ADDED");
    let table = &event["object"];
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["cells"][0], "first");
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");

    sim.cluster().delete(&at("configmaps", "first")).unwrap();
    let event = watch.next().await.unwrap();
    assert_eq!(event["type"], "DELETED");
    assert_eq!(event["object"]["rows"][0]["cells"][0], "first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_rows_live() {
    let sim = start_with_config("").await;
    create_cm(&sim, "before", json!({}));
    let kubectl = Kubectl::new(&sim);
    let mut lines = kubectl.spawn(&["get", "configmaps", "-w"]);
    let wait = Duration::from_secs(10);
    let (header, lines) = blocking(move || {
        let header = lines.wait_for(wait, |l| l.starts_with("NAME"));
        lines.wait_for(wait, |l| l.starts_with("before "));
        (header, lines)
    })
    .await;
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "DATA", "AGE"]
    );

    // Rows appear as the changes happen, after kubectl has listed.
    let mut lines = lines;
    create_cm(&sim, "during", json!({}));
    set(&sim, "configmaps", "during", "/data", json!({"k": "v"}));
    let lines = blocking(move || {
        let added = lines.wait_for(wait, |l| l.starts_with("during "));
        assert_eq!(added.split_whitespace().nth(1), Some("0"));
        let modified = lines.wait_for(wait, |l| l.starts_with("during "));
        assert_eq!(modified.split_whitespace().nth(1), Some("1"));
        lines
    })
    .await;
    let headers = lines
        .seen()
        .iter()
        .filter(|l| l.starts_with("NAME"))
        .count();
    assert_eq!(headers, 1, "{:#?}", lines.seen());
}
