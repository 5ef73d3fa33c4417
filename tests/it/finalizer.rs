//! A route's finalizer (`finalizer:`): the route puts it on each object it delivers, a
//! deletion reaches the handler with the object's final state, and the finalizer comes off
//! only after the handler succeeded; objects leaving the route, or a route removed by a
//! reload, lose it. The daemon killed with SIGKILL or down while objects are deleted misses
//! nothing, and neither does a leader's successor or a shard's next owner.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use reqwest::Method;
use serde_json::{Value, json};
use switchyard::plugin::{PluginHost, loader};

use crate::state::Child;
use crate::support::browser::Browser;
use switchyard::sim::faults::RequestFailure;
use switchyard::sim::resources;
use switchyard::sim::{SimOptions, Simulator};

use crate::support::sim::{Kubectl, blocking, start_with_config};
use crate::support::{self, TestDaemon, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// The route's default finalizer.
const HELD: &str = "switchyard.dev/configmaps";

/// One route with a finalizer over the ConfigMaps of `default`, to `handler`.
fn config(handler: &str, extra_route: &str) -> String {
    format!(
        "handlers:\n  {handler}:\n    max_retries: 0\n    backoff_base: 10ms\nroutes:\n  - name: configmaps\n    resource: configmaps\n    namespace: default\n    finalizer: true\n    handler: {handler}\n{extra_route}"
    )
}

/// The finalizers of ConfigMap `name`, and whether it is being deleted; `None` once gone.
async fn held(api: &Api<ConfigMap>, name: &str) -> Option<(Vec<String>, bool)> {
    let cm = api.get_opt(name).await.unwrap()?;
    Some((
        cm.metadata.finalizers.unwrap_or_default(),
        cm.metadata.deletion_timestamp.is_some(),
    ))
}

/// Waits until ConfigMap `name` has exactly `finalizers`.
async fn wait_for_finalizers(api: &Api<ConfigMap>, name: &str, finalizers: &[&str]) {
    eventually(
        &format!("{name} with finalizers {finalizers:?}"),
        WAIT,
        async || {
            let (list, _) = held(api, name).await?;
            (list == finalizers).then_some(())
        },
    )
    .await;
}

async fn wait_until_gone(api: &Api<ConfigMap>, name: &str) {
    eventually(&format!("{name} gone"), WAIT, async || {
        held(api, name).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_deletion_reaches_the_handler_with_the_final_state_and_the_finalizer_goes_after() {
    let mut t = TestDaemon::start(&config("log-events", "")).await;
    let api = t.configmaps("default");
    // Another controller's finalizer is kept through both writes.
    t.create_configmap(json!({"metadata": {"name": "a", "finalizers": ["example.com/other"]}}))
        .await;
    wait_for_finalizers(&api, "a", &["example.com/other", HELD]).await;

    api.delete("a", &DeleteParams::default()).await.unwrap();
    let terminating = api.get("a").await.unwrap();
    let rv: u64 = terminating
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    let line = support::wait_for_log(&mut t.logs, WAIT, |l| l.message.contains("deleted")).await;
    assert!(
        line.message
            .contains(&format!("deleted ConfigMap default/a rv={rv}")),
        "the deletion carries the terminating object's full state, final state known: {}",
        line.message
    );
    wait_for_finalizers(&api, "a", &["example.com/other"]).await;
    assert!(held(&api, "a").await.unwrap().1, "still terminating");
    // The other controller lets go: the object goes, and nothing is delivered again.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until_gone(&api, "a").await;
    t.create_configmap(json!({"metadata": {"name": "marker"}}))
        .await;
    let next = support::wait_for_log(&mut t.logs, WAIT, |l| {
        l.message.contains("deleted") || l.message.contains("default/marker")
    })
    .await;
    assert!(next.message.contains("default/marker"), "{}", next.message);
    t.stop().await;
}

#[tokio::test]
async fn a_dead_lettered_deletion_holds_the_object_until_the_letter_is_retried() {
    let t = TestDaemon::start(&config("faulty", "")).await;
    let api = t.configmaps("default");
    t.create_configmap(
        json!({"metadata": {"name": "b", "annotations": {"faulty/error": "refused"}}}),
    )
    .await;
    wait_for_finalizers(&api, "b", &[HELD]).await;
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let letters = eventually("the deletion dead-lettered", WAIT, async || {
        let (_, body) = t.get("/handlers/faulty/dead-letters").await;
        let letters = body["dead_letters"].as_array()?.clone();
        (letters.len() == 1 && letters[0]["kind"] == "deleted").then_some(letters)
    })
    .await;
    assert_eq!(letters[0]["holds_finalizer"], HELD, "{letters:?}");
    let status = t.status_json().await;
    let route = &status["routes"][0];
    assert_eq!(route["finalizer"], HELD, "{route}");
    assert_eq!(route["held_by_dead_letters"], 1, "{route}");
    let browser = Browser::start().await;
    browser.open(&t.url("/")).await;
    let shown = format!("{HELD}: 1 held in Terminating");
    eventually("the status page shows the held object", WAIT, async || {
        browser.text("#routes").await.contains(&shown).then_some(())
    })
    .await;
    browser.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        held(&api, "b").await,
        Some((vec![HELD.to_string()], true)),
        "a failed deletion keeps the object terminating"
    );

    // Purging a held deletion gives it up: the finalizer comes off.
    t.create_configmap(
        json!({"metadata": {"name": "b2", "annotations": {"faulty/error": "refused"}}}),
    )
    .await;
    wait_for_finalizers(&api, "b2", &[HELD]).await;
    api.delete("b2", &DeleteParams::default()).await.unwrap();
    eventually("the second deletion dead-lettered", WAIT, async || {
        let (_, body) = t.get("/handlers/faulty/dead-letters").await;
        let letters = body["dead_letters"].as_array()?.clone();
        letters
            .iter()
            .any(|l| l["id"] == "configmaps/default/b2" && l["kind"] == "deleted")
            .then_some(())
    })
    .await;
    let response = t
        .request(Method::POST, "/handlers/faulty/dead-letters/purge")
        .json(&json!({"ids": ["configmaps/default/b2"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    wait_until_gone(&api, "b2").await;
    assert!(
        held(&api, "b").await.is_some(),
        "the other letter still holds b"
    );

    let fixed = PluginHost::new().unwrap();
    let plugin = loader::load(&fixed, &support::plugins_dir(), "log-events").await;
    t.daemon().handler("faulty").unwrap().set_plugin(plugin);
    let response = t
        .request(Method::POST, "/handlers/faulty/dead-letters/retry")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    wait_until_gone(&api, "b").await;
    t.stop().await;
}

#[tokio::test]
async fn objects_leaving_the_route_and_a_route_narrowed_or_removed_by_a_reload_lose_the_finalizer()
{
    let labelled = "  - name: labelled\n    resource: configmaps\n    namespace: default\n    labels: app=web\n    finalizer: example.com/web\n    handler: log-events\n";
    let t = TestDaemon::start(&config("log-events", labelled)).await;
    let api = t.configmaps("default");
    t.create_configmap(json!({"metadata": {"name": "c", "labels": {"app": "web"}}}))
        .await;
    wait_for_finalizers(&api, "c", &[HELD, "example.com/web"]).await;
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": null}})),
    )
    .await
    .unwrap();
    wait_for_finalizers(&api, "c", &[HELD]).await;

    // A reload narrows the labelled route: what it no longer selects loses its finalizer,
    // what it still selects keeps it, and the other route's stays on both.
    for (name, labels) in [
        ("n", json!({"app": "web"})),
        ("f", json!({"app": "web", "tier": "front"})),
    ] {
        t.create_configmap(json!({"metadata": {"name": name, "labels": labels}}))
            .await;
        wait_for_finalizers(&api, name, &[HELD, "example.com/web"]).await;
    }
    t.write_config(&config(
        "log-events",
        &labelled.replace("labels: app=web", "labels: app=web,tier=front"),
    ));
    wait_for_finalizers(&api, "n", &[HELD]).await;
    wait_for_finalizers(&api, "f", &[HELD, "example.com/web"]).await;

    // The route with the finalizer goes; another takes the same objects without one.
    t.write_config(
        "handlers:\n  log-events: {}\nroutes:\n  - name: plain\n    resource: configmaps\n    namespace: default\n    handler: log-events\n",
    );
    for name in ["c", "n", "f"] {
        wait_for_finalizers(&api, name, &[]).await;
    }
    api.delete("c", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&api, "c").await;
    t.stop().await;
}

/// A simulator, a new folder with a kubeconfig for it, and its ConfigMaps in `default`.
async fn sim_and_folder() -> (Simulator, tempfile::TempDir, PathBuf, Api<ConfigMap>) {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    (sim, dir, kubeconfig, api)
}

/// Waits until `child`'s handler has nothing queued and its store has committed all.
async fn committed(child: &Child) {
    eventually("the store committed", WAIT, async || {
        let status: Value = child.status().await;
        (status["state"]["pending_writes"] == 0 && status["handlers"][0]["queue_depth"] == 0)
            .then_some(())
    })
    .await;
}

/// The daemon as a child process with `yaml`, in `dir`.
async fn child(dir: &Path, kubeconfig: &Path, yaml: &str) -> Child {
    support::write_config(dir, yaml);
    Child::start(dir, kubeconfig).await
}

fn child_config(state: bool) -> String {
    let state = if state { "state_dir: state\n" } else { "" };
    format!(
        "{state}admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{}",
        config("faulty", "")
    )
}

#[tokio::test]
async fn a_daemon_killed_while_the_handler_runs_on_a_deletion_leaves_the_object_held() {
    let (_sim, dir, kubeconfig, api) = sim_and_folder().await;
    let first = child(dir.path(), &kubeconfig, &child_config(false)).await;
    let slow = json!({"metadata": {"name": "d", "annotations": {"faulty/sleep-ms": "3000"}}});
    api.create(&PostParams::default(), &support::configmap(slow))
        .await
        .unwrap();
    wait_for_finalizers(&api, "d", &[HELD]).await;
    // The addition and the update that put the finalizer on handled, the handler idle.
    eventually("the handler idle", WAIT, async || {
        let handler = &first.status().await["handlers"][0];
        let idle = handler["queue_depth"] == 0 && handler["in_flight"] == 0;
        (idle && handler["processed"] == 2).then_some(())
    })
    .await;
    api.delete("d", &DeleteParams::default()).await.unwrap();
    eventually("the deletion in the handler", WAIT, async || {
        (first.status().await["handlers"][0]["in_flight"] == 1).then_some(())
    })
    .await;
    let lines = first.process.kill();
    assert!(
        !lines.iter().any(|l| l.contains("handled deleted")),
        "killed before the handler finished"
    );
    assert_eq!(
        held(&api, "d").await,
        Some((vec![HELD.to_string()], true)),
        "the finalizer stays until the handler has succeeded"
    );

    // A deletion while no replica runs waits for the next one, too.
    api.create(
        &PostParams::default(),
        &support::configmap(json!({"metadata": {"name": "e", "finalizers": [HELD]}})),
    )
    .await
    .unwrap();
    api.delete("e", &DeleteParams::default()).await.unwrap();
    let second = child(dir.path(), &kubeconfig, &child_config(false)).await;
    for name in ["d", "e"] {
        second
            .process
            .wait_for_line(WAIT, |l| {
                l.contains(&format!("handled deleted default/{name}"))
            })
            .await;
        wait_until_gone(&api, name).await;
    }
    second.process.kill();
}

#[tokio::test]
async fn a_route_gone_from_the_config_at_a_restart_with_state_dir_lets_go_of_its_objects() {
    let (_sim, dir, kubeconfig, api) = sim_and_folder().await;
    let yaml = child_config(true).replace("faulty", "log-events");
    let first = child(dir.path(), &kubeconfig, &yaml).await;
    let keep = "example.com/keep";
    for (name, finalizers) in [("p", vec![]), ("q", vec![keep]), ("r", vec![])] {
        let object = json!({"metadata": {"name": name, "finalizers": finalizers}});
        api.create(&PostParams::default(), &support::configmap(object))
            .await
            .unwrap();
    }
    for (name, finalizers) in [
        ("p", vec![HELD]),
        ("q", vec![keep, HELD]),
        ("r", vec![HELD]),
    ] {
        wait_for_finalizers(&api, name, &finalizers).await;
    }
    committed(&first).await;
    first.process.kill();
    api.delete("r", &DeleteParams::default()).await.unwrap();

    // Restarted with the route renamed and its finalizer gone: nothing holds the objects.
    let plain = yaml
        .replace("name: configmaps", "name: plain")
        .replace("    finalizer: true\n", "");
    let second = child(dir.path(), &kubeconfig, &plain).await;
    wait_for_finalizers(&api, "p", &[]).await;
    wait_for_finalizers(&api, "q", &[keep]).await;
    wait_until_gone(&api, "r").await;
    second
        .process
        .wait_for_line(WAIT, |l| {
            l.contains("finalizer of a route no longer holding objects with it taken off")
                && l.contains("objects=3")
                && l.contains("failed=0")
        })
        .await;
    // The release is forgotten before that line; a kill before the store commits it would
    // only release again (harmless), but this checks the record goes.
    committed(&second).await;
    let lines = second.process.kill();
    // Forgotten once released: a third start has nothing to take off.
    let third = child(dir.path(), &kubeconfig, &plain).await;
    eventually("the third start synced", WAIT, async || {
        (third.status().await["informers"][0]["synced"] == true).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let third_lines = third.process.kill();
    assert!(
        !third_lines.iter().any(|l| l.contains("taken off")),
        "released again: {third_lines:#?} (before: {lines:#?})"
    );
}

#[tokio::test]
async fn a_finalizer_renamed_while_down_is_taken_off_even_when_the_first_start_could_not() {
    let (sim, dir, kubeconfig, api) = sim_and_folder().await;
    let base = child_config(true).replace("faulty", "log-events");
    let (old, new) = ("example.com/old", "example.com/new");
    let named = |name: &str| base.replace("finalizer: true", &format!("finalizer: {name}"));
    let first = child(dir.path(), &kubeconfig, &named(old)).await;
    api.create(
        &PostParams::default(),
        &support::configmap(json!({"metadata": {"name": "p"}})),
    )
    .await
    .unwrap();
    wait_for_finalizers(&api, "p", &[old]).await;
    committed(&first).await;
    first.process.kill();

    // Renamed; the first start cannot take the old one off (every patch refused).
    let refused = RequestFailure::forbidden(1000)
        .on(&["configmaps"])
        .only(&["patch"]);
    sim.faults().fail_next_requests(refused).unwrap();
    let second = child(dir.path(), &kubeconfig, &named(new)).await;
    second
        .process
        .wait_for_line(WAIT, |l| l.contains("taken off") && l.contains("failed=1"))
        .await;
    eventually("the store committed", WAIT, async || {
        (second.status().await["state"]["pending_writes"] == 0).then_some(())
    })
    .await;
    second.process.kill();
    assert_eq!(held(&api, "p").await, Some((vec![old.to_string()], false)));

    // The next start does, and puts the new one on.
    sim.faults().clear();
    let third = child(dir.path(), &kubeconfig, &named(new)).await;
    wait_for_finalizers(&api, "p", &[new]).await;
    third.process.kill();
}

#[tokio::test]
async fn a_finalizer_removed_by_hand_while_the_daemon_is_down_is_a_deletion_as_without_one() {
    let (_sim, dir, kubeconfig, api) = sim_and_folder().await;
    let yaml = child_config(true).replace("faulty", "log-events");
    let first = child(dir.path(), &kubeconfig, &yaml).await;
    api.create(
        &PostParams::default(),
        &support::configmap(json!({"metadata": {"name": "f"}})),
    )
    .await
    .unwrap();
    wait_for_finalizers(&api, "f", &[HELD]).await;
    first
        .process
        .wait_for_line(WAIT, |l| l.contains("ConfigMap default/f"))
        .await;
    committed(&first).await;
    first.process.kill();
    api.delete("f", &DeleteParams::default()).await.unwrap();
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until_gone(&api, "f").await;
    let second = child(dir.path(), &kubeconfig, &yaml).await;
    second
        .process
        .wait_for_line(WAIT, |l| {
            l.contains("deleted (final state unknown) ConfigMap default/f")
        })
        .await;
    second.process.kill();
}

#[tokio::test]
async fn kubectl_sees_a_held_object_terminate_and_a_json_patch_whose_test_fails_refused() {
    let sim = start_with_config("").await;
    let configmaps = resources::find("", "v1", "configmaps").unwrap();
    let object = json!({"metadata": {"name": "k", "finalizers": ["example.com/a", HELD]}});
    sim.cluster().create(configmaps, "default", object).unwrap();
    let kubectl = Kubectl::new(&sim);
    let remove = |index: usize, name: &str| {
        json!([
            {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": name},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ])
        .to_string()
    };
    let (stale, ours, other) = (
        remove(1, "example.com/a"),
        remove(1, HELD),
        remove(0, "example.com/a"),
    );
    let outputs = blocking(move || {
        let patch = |ops: &str| kubectl.run(&["patch", "configmap", "k", "--type=json", "-p", ops]);
        [
            kubectl.run(&["delete", "configmap", "k", "--wait=false"]),
            kubectl.run(&[
                "get",
                "configmap",
                "k",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ]),
            patch(&stale),
            patch(&ours),
            kubectl.run(&[
                "get",
                "configmap",
                "k",
                "-o",
                "jsonpath={.metadata.finalizers}",
            ]),
            patch(&other),
            kubectl.run(&["get", "configmap", "k"]),
        ]
    })
    .await;
    assert_eq!(
        outputs[0].stdout.trim(),
        r#"configmap "k" deleted"#,
        "{:?}",
        outputs[0]
    );
    assert!(!outputs[1].stdout.trim().is_empty(), "{:?}", outputs[1]);
    assert!(
        !outputs[2].ok,
        "a failed test refuses the patch: {:?}",
        outputs[2]
    );
    assert!(outputs[3].ok, "{:?}", outputs[3]);
    assert_eq!(
        outputs[4].stdout.trim(),
        r#"["example.com/a"]"#,
        "{:?}",
        outputs[4]
    );
    assert!(outputs[5].ok, "{:?}", outputs[5]);
    assert!(
        outputs[6]
            .stderr
            .contains(r#"Error from server (NotFound): configmaps "k" not found"#),
        "{:?}",
        outputs[6]
    );
}

#[test]
fn check_says_what_a_route_finalizer_adds() {
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(dir.path(), &config("log-events", ""));
    let (code, stdout, stderr) =
        support::process::switchyard(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("routes[0].finalizer: route \"configmaps\" puts the finalizer switchyard.dev/configmaps on every object it delivers (one patch per object)"),
        "{stderr}"
    );
    assert!(stderr.contains("needs patch on configmaps"), "{stderr}");
    assert!(stdout.contains("ok (1 handler(s), 1 route(s))"), "{stdout}");
}

/// Leader mode: a 2 s Lease named `router` in `default`, the finalizer route to log-events.
fn leader_config(identity: &str) -> String {
    format!(
        "ha:\n  mode: leader\n  lease_namespace: default\n  lease_name: router\n  lease_duration: 2s\n  renew_deadline: 1500ms\n  retry_period: 300ms\n  identity: {identity}\n{}",
        config("log-events", "")
    )
}

#[tokio::test]
async fn in_leader_mode_only_the_leader_writes_and_its_successor_finishes_a_deletion() {
    let sim_a = support::start_sim().await;
    let sim_b = Simulator::serve(sim_a.cluster().clone(), SimOptions::default())
        .await
        .expect("a second server on the same cluster");
    let a = TestDaemon::builder(&leader_config("a"))
        .sim(sim_a)
        .start()
        .await;
    eventually("a leads", WAIT, async || {
        (a.status_json().await["replica"]["leader"] == true).then_some(())
    })
    .await;
    let b = TestDaemon::builder(&leader_config("b"))
        .sim(sim_b)
        .start()
        .await;
    let api = b.configmaps("default");
    b.create_configmap(json!({"metadata": {"name": "g"}})).await;
    wait_for_finalizers(&api, "g", &[HELD]).await;

    // a's handler paused: the deletion waits in both replicas' queues, and the follower
    // takes nothing off.
    let (code, _) = a.post("/handlers/log-events/pause").await;
    assert_eq!(code, 200);
    api.delete("g", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(held(&api, "g").await, Some((vec![HELD.to_string()], true)));
    assert_eq!(b.status_json().await["handlers"][0]["processed"], 0);

    // The leader goes; its successor handles the deletion and lets the object go.
    a.stop().await;
    wait_until_gone(&api, "g").await;
    let status = b.status_json().await;
    assert_eq!(status["replica"]["leader"], true, "{status}");
    b.stop().await;
}

/// Sharded mode on `default`, the finalizer route to log-events.
fn sharded_config(identity: &str) -> String {
    format!(
        "ha:\n  mode: sharded\n  lease_namespace: default\n  lease_name: shard\n  lease_duration: 6s\n  renew_deadline: 4s\n  retry_period: 300ms\n  identity: {identity}\n{}",
        config("log-events", "")
    )
}

/// How many deletions a replica's handler was called with, from its plugin log.
fn count_deletions(
    logs: &mut tokio::sync::broadcast::Receiver<switchyard::plugin::PluginLog>,
) -> usize {
    let mut count = 0;
    while let Ok(line) = logs.try_recv() {
        count += usize::from(line.message.starts_with("deleted ConfigMap"));
    }
    count
}

/// Two sharded replicas, `a` and `b`, each through an API server of its own on one cluster
/// (filtering by shard when `server_filters`: the `ShardedListAndWatch` gate), once both
/// own ranges; and the 20 ConfigMaps `s-0`..`s-19`, created and held.
async fn sharded_pair_holding_twenty(
    server_filters: bool,
) -> (TestDaemon, TestDaemon, Vec<String>) {
    let options = || SimOptions {
        sharded_list_and_watch: server_filters,
        ..SimOptions::default()
    };
    let sim_a = Simulator::start(options())
        .await
        .expect("start the simulator");
    let sim_b = Simulator::serve(sim_a.cluster().clone(), options())
        .await
        .expect("a second server on the same cluster");
    let (a, b) = tokio::join!(
        TestDaemon::builder(&sharded_config("a")).sim(sim_a).start(),
        TestDaemon::builder(&sharded_config("b")).sim(sim_b).start(),
    );
    eventually(
        "both members own ranges",
        Duration::from_secs(20),
        async || {
            for d in [&a, &b] {
                if d.status_json().await["replica"]["shards"]["members"] != json!(["a", "b"]) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    let api = a.configmaps("default");
    let names: Vec<String> = (0..20).map(|i| format!("s-{i}")).collect();
    for name in &names {
        a.create_configmap(json!({"metadata": {"name": name}}))
            .await;
    }
    for name in &names {
        wait_for_finalizers(&api, name, &[HELD]).await;
    }
    (a, b, names)
}

#[tokio::test]
async fn in_sharded_mode_each_object_is_held_and_let_go_by_its_owner_alone() {
    let (mut a, mut b, names) = sharded_pair_holding_twenty(false).await;
    let api = a.configmaps("default");
    for name in &names {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in &names {
        wait_until_gone(&api, name).await;
    }
    // Each deletion reached exactly one replica's handler, and both replicas had some.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (on_a, on_b) = (count_deletions(&mut a.logs), count_deletions(&mut b.logs));
    assert_eq!(on_a + on_b, 20, "a: {on_a}, b: {on_b}");
    assert!(on_a > 0 && on_b > 0, "a: {on_a}, b: {on_b}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn in_sharded_mode_the_replica_taking_over_a_range_finishes_the_deletions_left_in_it() {
    deletions_left_in_a_range_are_finished_by_its_next_owner(false).await;
}

#[tokio::test]
async fn in_sharded_mode_the_replica_taking_over_a_range_finishes_them_with_server_filtering() {
    deletions_left_in_a_range_are_finished_by_its_next_owner(true).await;
}

/// Two replicas hold 20 objects; `a`'s handler paused, all are deleted: `b` lets its own
/// go, `a`'s stay held; `a` goes and `b`, taking its ranges, finishes each once.
async fn deletions_left_in_a_range_are_finished_by_its_next_owner(server_filters: bool) {
    let (a, mut b, names) = sharded_pair_holding_twenty(server_filters).await;
    let api = b.configmaps("default");
    // a's handler paused: the deletions in a's ranges wait in its queue, held; b lets its
    // own go and takes nothing off a's.
    let (code, _) = a.post("/handlers/log-events/pause").await;
    assert_eq!(code, 200);
    for name in &names {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // Done when what is left is exactly what waits in a's queue, and b handled the rest.
    let (mut left, mut on_b) = (Vec::new(), 0);
    eventually("b's own deletions done", WAIT, async || {
        on_b += count_deletions(&mut b.logs);
        left.clear();
        for name in &names {
            if held(&api, name).await.is_some() {
                left.push(name.clone());
            }
        }
        let waiting = a.status_json().await["routes"][0]["pending"].as_u64()?;
        (waiting as usize == left.len() && on_b + left.len() == names.len()).then_some(())
    })
    .await;
    assert!(!left.is_empty(), "a owned none of the 20");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in &left {
        assert_eq!(
            held(&api, name).await,
            Some((vec![HELD.to_string()], true)),
            "{name}: a's object let go while a was paused"
        );
    }
    // a goes; b takes its ranges and finishes each deletion a left, each once.
    a.stop().await;
    for name in &left {
        wait_until_gone(&api, name).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        count_deletions(&mut b.logs),
        left.len(),
        "left by a: {left:?}"
    );
    let status = b.status_json().await;
    assert_eq!(
        status["replica"]["shards"]["members"],
        json!(["b"]),
        "{status}"
    );
    b.stop().await;
}

/// Regression: the daemon's writes named no field manager and its requests carried no
/// User-Agent, so kube-apiserver recorded `manager: "unknown"` in `managedFields` and no
/// `userAgent` in its audit log. Its finalizer patches and Lease writes name the manager
/// `switchyard`, and each of its requests carries `switchyard/VERSION`.
#[tokio::test]
async fn the_daemons_writes_name_their_field_manager_and_its_requests_their_user_agent() {
    let (sim, dir, kubeconfig, api) = sim_and_folder().await;
    let yaml = format!(
        "ha:\n  mode: leader\n  lease_namespace: default\n{}",
        child_config(false).replace("faulty", "log-events")
    );
    let daemon = child(dir.path(), &kubeconfig, &yaml).await;
    let object = json!({"metadata": {"name": "m"}});
    api.create(&PostParams::default(), &support::configmap(object))
        .await
        .unwrap();
    wait_for_finalizers(&api, "m", &[HELD]).await;
    let managers: Vec<(String, String)> = api
        .get("m")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(managers, [("switchyard".to_string(), "Update".to_string())]);
    let agent = format!("switchyard/{}", env!("CARGO_PKG_VERSION"));
    let writes = sim.writes().all();
    let by_daemon: Vec<_> = writes
        .iter()
        .filter(|w| w.user_agent.as_deref() == Some(agent.as_str()))
        .collect();
    for (verb, resource) in [("patch", "configmaps"), ("create", "leases")] {
        assert!(
            by_daemon
                .iter()
                .any(|w| w.verb == verb && w.resource == resource),
            "no {verb} of {resource} by the daemon: {writes:#?}"
        );
    }
    for write in &by_daemon {
        assert_eq!(
            write.field_manager.as_deref(),
            Some("switchyard"),
            "{write:?}"
        );
    }
    // The only other writer is this test, whose client sends no User-Agent.
    let others: Vec<_> = writes.iter().filter(|w| w.user_agent.is_some()).collect();
    assert_eq!(others.len(), by_daemon.len(), "{writes:#?}");
    daemon.process.kill();
}
