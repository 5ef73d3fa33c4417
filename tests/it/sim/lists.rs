//! The simulator's lists against kube-rs, kubectl and raw HTTP: resourceVersion semantics
//! (`NotOlderThan`, `Exact`), paging with consistent snapshots, expired continue tokens.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, VersionMatch};
use serde_json::{Value, json};
use switchyard::sim::{ObjectRef, SimOptions, Simulator, resources};

use crate::support::sim::{Kubectl, Lines, blocking, get_json, start_with_config};
use crate::support::spawned::{self, Spawned};

fn configmaps() -> usize {
    resources::find("", "v1", "configmaps").unwrap()
}

fn cm_ref(name: &str) -> ObjectRef {
    ObjectRef {
        resource: configmaps(),
        namespace: "default".into(),
        name: name.into(),
    }
}

fn create(sim: &Simulator, name: &str, value: &str) -> u64 {
    let object = sim
        .cluster()
        .create(
            configmaps(),
            "default",
            json!({"metadata": {"name": name}, "data": {"v": value}}),
        )
        .unwrap();
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn names(list: &kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    list.items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect()
}

fn api_error(err: kube::Error) -> Box<kube::core::Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn an_exact_list_shows_the_objects_as_they_were_at_that_version() {
    let sim = start_with_config("").await;
    create(&sim, "a", "1");
    let then = create(&sim, "b", "1");
    sim.cluster()
        .update(
            &cm_ref("b"),
            json!({"metadata": {"name": "b"}, "data": {"v": "2"}}),
        )
        .unwrap();
    sim.cluster().delete(&cm_ref("a")).unwrap();
    create(&sim, "c", "1");

    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let past = api
        .list(
            &ListParams::default()
                .at(&then.to_string())
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(names(&past), ["a", "b"]);
    assert_eq!(past.items[1].data.as_ref().unwrap()["v"], "1");
    assert_eq!(
        past.metadata.resource_version.as_deref(),
        Some(then.to_string().as_str())
    );

    let now = api
        .list(
            &ListParams::default()
                .at(&then.to_string())
                .matching(VersionMatch::NotOlderThan),
        )
        .await
        .unwrap();
    assert_eq!(names(&now), ["b", "c"]);
    assert_eq!(now.items[0].data.as_ref().unwrap()["v"], "2");
}

#[tokio::test]
async fn an_exact_list_older_than_the_history_is_410_expired() {
    let sim = Simulator::start(SimOptions {
        history: 2,
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let first = create(&sim, "a", "1");
    for name in ["b", "c", "d"] {
        create(&sim, name, "1");
    }
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let err = api
        .list(
            &ListParams::default()
                .at(&first.to_string())
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    let status = api_error(err);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert_eq!(
        status.message,
        "The resourceVersion for the provided list is too old."
    );
}

#[tokio::test]
async fn a_list_for_a_future_version_waits_for_it_or_answers_504() {
    let sim = Simulator::start(SimOptions {
        version_wait: Duration::from_millis(300),
        ..SimOptions::default()
    })
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let next = sim.cluster().resource_version() + 1;

    // The write may land before or while the list waits; either way the list sees it.
    let waiting = {
        let api = api.clone();
        tokio::spawn(async move { api.list(&ListParams::default().at(&next.to_string())).await })
    };
    create(&sim, "arrives", "1");
    let list = waiting.await.unwrap().unwrap();
    assert_eq!(names(&list), ["arrives"]);

    // kube-rs retries 504s by itself, so ask over plain HTTP.
    let far = sim.cluster().resource_version() + 100;
    let (code, status) = get_json(&format!(
        "{}/api/v1/namespaces/default/configmaps?resourceVersion={far}",
        sim.url()
    ))
    .await;
    assert_eq!((code, status["reason"].as_str()), (504, Some("Timeout")));
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("Too large resource version"),
        "{status}"
    );
}

#[tokio::test]
async fn later_pages_show_the_first_pages_snapshot_not_later_writes() {
    let sim = start_with_config("").await;
    for name in ["a", "b", "c", "d", "e"] {
        create(&sim, name, "1");
    }
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();

    // Writes between the pages: a new object sorting into the rest, an update, a delete.
    create(&sim, "bb", "1");
    sim.cluster()
        .update(
            &cm_ref("c"),
            json!({"metadata": {"name": "c"}, "data": {"v": "changed"}}),
        )
        .unwrap();
    sim.cluster().delete(&cm_ref("e")).unwrap();

    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c", "d"]);
    assert_eq!(second.items[0].data.as_ref().unwrap()["v"], "1");
    // Counted at the snapshot too: "e" still follows (the token carries the count, so a
    // page does not count the rest of a long list again).
    assert_eq!(second.metadata.remaining_item_count, Some(1));
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let third = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&third), ["e"]);
    assert!(third.metadata.continue_.as_deref().unwrap_or("").is_empty());
}

#[tokio::test]
async fn a_continue_token_past_a_compaction_is_410_with_an_inconsistent_token() {
    let sim = start_with_config("").await;
    for name in ["a", "b", "c", "d"] {
        create(&sim, name, "1");
    }
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    create(&sim, "e", "1");
    sim.cluster().compact();

    let err = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err();
    let status = api_error(err);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status
            .message
            .starts_with("The provided continue parameter is too old")
    );
    // The token in the answer continues after "b", at the current version.
    let inconsistent = status.metadata.unwrap().continue_.unwrap();
    let rest = api
        .list(&ListParams::default().continue_token(&inconsistent))
        .await
        .unwrap();
    assert_eq!(names(&rest), ["c", "d", "e"]);
}

#[tokio::test]
async fn contradictory_list_options_are_refused_like_kube_apiserver() {
    let sim = start_with_config("").await;
    let base = format!("{}/api/v1/namespaces/default/configmaps", sim.url());
    let (code, status) = get_json(&format!("{base}?resourceVersionMatch=Exact")).await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    );

    let (code, status) = get_json(&format!(
        "{base}?resourceVersion=0&resourceVersionMatch=Exact"
    ))
    .await;
    assert_eq!(code, 422, "{status}");

    create(&sim, "a", "1");
    create(&sim, "b", "1");
    let (_, page) = get_json(&format!("{base}?limit=1")).await;
    let token = page["metadata"]["continue"].as_str().unwrap();
    let (code, status) = get_json(&format!("{base}?continue={token}&resourceVersion=5")).await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _) = get_json(&format!("{base}?continue=garbage")).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn a_kube_rs_watcher_pages_its_initial_list() {
    use futures::StreamExt;
    use kube::runtime::watcher;

    let sim = start_with_config("").await;
    for i in 0..7 {
        create(&sim, &format!("cm-{i}"), "1");
    }
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let mut events = watcher(api, watcher::Config::default().page_size(2)).boxed();
    let mut seen = Vec::new();
    let listed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            match event.unwrap() {
                watcher::Event::InitApply(cm) => seen.push(cm.metadata.name.unwrap()),
                watcher::Event::InitDone => return,
                _ => {}
            }
        }
    })
    .await;
    assert!(
        listed.is_ok(),
        "the initial list did not finish; saw {seen:?}"
    );
    seen.sort();
    let want: Vec<String> = (0..7).map(|i| format!("cm-{i}")).collect();
    assert_eq!(seen, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_every_row_when_it_lists_in_chunks() {
    let sim = start_with_config("").await;
    for i in 0..5 {
        create(&sim, &format!("cm-{i}"), "1");
    }
    sim.cluster()
        .create(
            configmaps(),
            "kube-system",
            json!({"metadata": {"name": "system-settings"}}),
        )
        .unwrap();
    let kubectl = Kubectl::new(&sim);
    let out = blocking(move || kubectl.run(&["get", "configmaps", "-A", "--chunk-size=2"])).await;
    assert!(out.ok, "{out:?}");
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAMESPACE", "NAME", "DATA", "AGE"]);
    let listed: Vec<(&str, &str)> = rows[1..].iter().map(|r| (r[0], r[1])).collect();
    let mut want: Vec<(&str, &str)> = vec![
        ("default", "cm-0"),
        ("default", "cm-1"),
        ("default", "cm-2"),
        ("default", "cm-3"),
        ("default", "cm-4"),
        ("kube-system", "system-settings"),
    ];
    want.sort();
    assert_eq!(listed, want, "{}", out.stdout);
}

#[tokio::test]
async fn a_table_list_carries_the_continue_token() {
    let sim = start_with_config("").await;
    for name in ["a", "b", "c"] {
        create(&sim, name, "1");
    }
    let response = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?limit=2",
            sim.url()
        ))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap();
    let table: Value = response.json().await.unwrap();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"].as_array().unwrap().len(), 2);
    assert!(table["metadata"]["continue"].is_string(), "{table}");
    assert_eq!(table["metadata"]["remainingItemCount"], 1);
}

/// `switchyard sim --prefill 20 --history H` and the first version of the ConfigMaps
/// listed exactly: the answer's status code.
async fn exact_list_of_the_first_version(history: &str) -> (u16, Value) {
    let child = Spawned::start(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["sim", "--prefill", "20", "--history", history])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
        "switchyard sim",
    );
    let (line, _running) = blocking(move || {
        let mut lines = Lines::follow(child);
        let line = lines.wait_for(Duration::from_secs(20), |l| l.starts_with("simulator: "));
        (line, lines)
    })
    .await;
    let base = line.trim_start_matches("simulator: ").trim();
    let (_, list) = get_json(&format!("{base}/api/v1/namespaces/default/configmaps")).await;
    let first = list["items"][0]["metadata"]["resourceVersion"]
        .as_str()
        .expect("a version")
        .to_string();
    get_json(&format!(
        "{base}/api/v1/namespaces/default/configmaps?resourceVersion={first}&resourceVersionMatch=Exact"
    ))
    .await
}

#[tokio::test]
async fn switchyard_sim_keeps_as_many_changes_as_its_history_flag_says() {
    let (code, list) = exact_list_of_the_first_version("25").await;
    assert_eq!(code, 200, "{list}");
    let (code, status) = exact_list_of_the_first_version("5").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (410, Some("Expired")),
        "{status}"
    );

    let refused = spawned::output(
        std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args([
            "sim",
            "--history",
            "0",
        ]),
        "switchyard sim",
    );
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--history"), "{stderr}");
}
