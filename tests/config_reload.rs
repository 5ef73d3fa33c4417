//! Config reload over real HTTP and through the config file, while ConfigMaps keep being
//! created: added routes start, removed handlers drain and go, changed handlers hand their
//! queue over, and a config with mistakes is rejected with every mistake and changes
//! nothing. Every object is handled exactly once per route throughout.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use switchyard::Daemon;

const WAIT: Duration = Duration::from_secs(30);

/// (handler, route, namespace/name) → how many times the plugin logged it.
type Seen = Arc<Mutex<BTreeMap<(String, String, String), usize>>>;

/// Counts every `added` line the log-events plugin writes, by handler, route and object.
fn record_handled(daemon: &Daemon) -> Seen {
    let seen: Seen = Arc::default();
    let mut logs = daemon.plugin_logs().subscribe();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok(line) = logs.recv().await {
            // "added ConfigMap ns/name rv=N route=R data=[...]"
            let words: Vec<&str> = line.message.split(' ').collect();
            if words.first() != Some(&"added") {
                continue;
            }
            let route = words
                .iter()
                .find_map(|w| w.strip_prefix("route="))
                .unwrap_or_default();
            let key = (
                line.handler.clone(),
                route.to_string(),
                words[2].to_string(),
            );
            *record.lock().unwrap().entry(key).or_default() += 1;
        }
    });
    seen
}

async fn create_namespaces(client: &Client, names: &[&str]) {
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &ns).await.unwrap();
    }
}

async fn create_configmap(client: &Client, namespace: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// Creates ConfigMaps `load-N` in each namespace, one round every 10 ms, until stopped;
/// returns the names created per namespace.
struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    fn start(client: Client, namespaces: &'static [&'static str]) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut created = Vec::new();
            let mut i = 0;
            while !*stopped.borrow() {
                for ns in namespaces {
                    let name = format!("load-{i}");
                    create_configmap(&client, ns, &name).await;
                    created.push(format!("{ns}/{name}"));
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            created
        });
        Self { stop, task }
    }

    async fn stop(self) -> Vec<String> {
        self.stop.send_replace(true);
        self.task.await.unwrap()
    }
}

async fn status(daemon: &Daemon) -> Value {
    common::get_json(&format!("{}/status", daemon.admin_url()))
        .await
        .1
}

fn processed(status: &Value, handler: &str) -> u64 {
    status["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == handler)
        .and_then(|h| h["processed"].as_u64())
        .unwrap_or_else(|| panic!("no handler {handler} in {status:#}"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// Waits until every object in `objects` was handled by `handler` through `route`, then
/// checks none was handled twice.
async fn assert_each_handled_once(seen: &Seen, handler: &str, route: &str, objects: &[String]) {
    common::eventually("every object handled", WAIT, async || {
        let seen = seen.lock().unwrap();
        objects
            .iter()
            .all(|o| seen.contains_key(&(handler.into(), route.into(), o.clone())))
            .then_some(())
    })
    .await;
    let seen = seen.lock().unwrap();
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
}

const ONE_ROUTE: &str = "
handlers:
  log-events: {}
routes:
  - name: in-a
    resource: configmaps
    namespace: a
    handler: log-events
";

#[tokio::test]
async fn a_reload_that_adds_a_route_starts_it_while_the_running_route_keeps_its_counters() {
    let sim = common::start_sim().await;
    let client = sim.client().unwrap();
    create_namespaces(&client, &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), ONE_ROUTE).await;
    let seen = record_handled(&daemon);
    daemon.wait_until_synced().await;
    let load = Load::start(client.clone(), &["a", "b"]);
    common::eventually("some events handled", WAIT, async || {
        (processed(&status(&daemon).await, "log-events") >= 5).then_some(())
    })
    .await;
    let before = processed(&status(&daemon).await, "log-events");

    common::write_config(
        dir.path(),
        &format!(
            "{ONE_ROUTE}  - name: in-b\n    resource: configmaps\n    namespace: b\n    handler: log-events\n"
        ),
    );
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 200, "{body:#}");
    let plan = &body["plan"];
    assert_eq!(names(&plan["routes"]["added"]), ["in-b"], "{plan:#}");
    assert_eq!(names(&plan["routes"]["unchanged"]), ["in-a"], "{plan:#}");
    assert_eq!(
        names(&plan["handlers"]["unchanged"]),
        ["log-events"],
        "{plan:#}"
    );
    assert_eq!(
        names(&plan["informers"]["added"]),
        ["v1/configmaps in b"],
        "{plan:#}"
    );
    let after = status(&daemon).await;
    assert!(processed(&after, "log-events") >= before, "{after:#}");
    assert_eq!(after["config"]["applied"], 1);
    assert_eq!(after["config"]["last"]["trigger"], "api");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = load.stop().await;
    let (in_a, in_b): (Vec<String>, Vec<String>) =
        created.into_iter().partition(|o| o.starts_with("a/"));
    // Objects in b made before the reload arrive as `added` when the route subscribes.
    assert_each_handled_once(&seen, "log-events", "in-a", &in_a).await;
    assert_each_handled_once(&seen, "log-events", "in-b", &in_b).await;
    daemon.shut_down(Duration::from_secs(5)).await;
}

const TWO_HANDLERS: &str = "
handlers:
  log-events: {}
  audit:
    plugin: log-events
routes:
  - name: main
    resource: configmaps
    handler: log-events
  - name: audit
    resource: configmaps
    handler: audit
";

const MAIN_ONLY: &str = "
handlers:
  log-events: {}
routes:
  - name: main
    resource: configmaps
    handler: log-events
";

#[tokio::test]
async fn a_reload_that_removes_a_handler_drains_it_and_the_other_keeps_working() {
    let sim = common::start_sim().await;
    let client = sim.client().unwrap();
    create_namespaces(&client, &["a"]).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), TWO_HANDLERS).await;
    let seen = record_handled(&daemon);
    daemon.wait_until_synced().await;
    let load = Load::start(client.clone(), &["a"]);
    common::eventually("both handlers busy", WAIT, async || {
        let s = status(&daemon).await;
        (processed(&s, "audit") >= 3 && processed(&s, "log-events") >= 3).then_some(())
    })
    .await;

    common::write_config(dir.path(), MAIN_ONLY);
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 200, "{body:#}");
    let plan = &body["plan"];
    assert_eq!(names(&plan["handlers"]["removed"]), ["audit"], "{plan:#}");
    assert_eq!(names(&plan["routes"]["removed"]), ["audit"], "{plan:#}");
    assert_eq!(names(&plan["informers"]["unchanged"]), ["v1/configmaps"]);
    let (code, _) = common::get_json(&format!("{}/handlers/audit", daemon.admin_url())).await;
    assert_eq!(code, 404);
    // The removed handler drained: nothing it was given is left behind.
    let audited: usize = {
        let seen = seen.lock().unwrap();
        seen.keys().filter(|(h, _, _)| h == "audit").count()
    };

    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = load.stop().await;
    assert_each_handled_once(&seen, "log-events", "main", &created).await;
    let s = status(&daemon).await;
    let handlers: Vec<&str> = s["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(handlers, ["log-events"]);
    let audited_later = seen
        .lock()
        .unwrap()
        .keys()
        .filter(|(h, _, _)| h == "audit")
        .count();
    assert_eq!(
        audited, audited_later,
        "the removed handler got events after the reload"
    );
    assert!(audited >= 3);
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_config_with_mistakes_is_rejected_with_all_of_them_and_changes_nothing() {
    let sim = common::start_sim().await;
    let client = sim.client().unwrap();
    create_namespaces(&client, &["a"]).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), TWO_HANDLERS).await;
    let seen = record_handled(&daemon);
    daemon.wait_until_synced().await;
    let load = Load::start(client.clone(), &["a"]);

    // Without the token: 401, and nothing is read or changed.
    let response = reqwest::Client::new()
        .post(format!("{}/reload", daemon.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(status(&daemon).await["config"]["rejected"], 0);

    let broken = "
handlers:
  log-events:
    concurrency: 0
routes:
  - name: main
    resource: configmaps
    handler: log-event
";
    common::write_config(dir.path(), broken);
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 422, "{body:#}");
    let errors: Vec<(u64, u64, &str)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["line"].as_u64().unwrap(),
                e["column"].as_u64().unwrap(),
                e["path"].as_str().unwrap(),
            )
        })
        .collect();
    // Three lines of header (plugins_dir, admin, token_file) precede the YAML above.
    assert_eq!(
        errors,
        [
            (7, 18, "handlers.log-events.concurrency"),
            (11, 14, "routes[0].handler")
        ],
        "{body:#}"
    );
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("running config stays")
    );

    // A setting fixed at start is refused too.
    common::write_config(dir.path(), &format!("{TWO_HANDLERS}kubeconfig: /nowhere\n"));
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 422, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("kubeconfig cannot change while running"),
        "{body:#}"
    );

    // So is a memory cap the plugin pool, sized at start, cannot hold.
    common::write_config(
        dir.path(),
        &TWO_HANDLERS.replace("log-events: {}", "log-events:\n    memory: 1Gi"),
    );
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 422, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("handlers.log-events.memory above"),
        "{body:#}"
    );

    let s = status(&daemon).await;
    assert_eq!(s["config"]["rejected"], 3, "{s:#}");
    assert_eq!(s["config"]["applied"], 0, "{s:#}");
    assert_eq!(s["config"]["last"]["applied"], false);
    assert_eq!(s["handlers"].as_array().unwrap().len(), 2);
    assert_eq!(s["routes"].as_array().unwrap().len(), 2);

    // Both handlers still get every object.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let created = load.stop().await;
    assert_each_handled_once(&seen, "log-events", "main", &created).await;
    assert_each_handled_once(&seen, "audit", "audit", &created).await;
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_reload_with_values_the_engine_cannot_give_is_rejected_with_their_places() {
    let sim = common::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), TWO_HANDLERS).await;
    common::write_config(
        dir.path(),
        &TWO_HANDLERS.replace(
            "log-events: {}",
            "log-events:\n    timeout: 0s\n    memory: 1000Gi",
        ),
    );
    let (code, body) = common::post_json(&format!("{}/reload", daemon.admin_url())).await;
    assert_eq!(code, 422, "{body:#}");
    let errors: Vec<(u64, &str)> = body["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), e["path"].as_str().unwrap()))
        .collect();
    // Three lines of header (plugins_dir, admin, token_file) precede the YAML.
    assert_eq!(
        errors,
        [
            (7, "handlers.log-events.timeout"),
            (8, "handlers.log-events.memory")
        ],
        "{body:#}"
    );
    let s = status(&daemon).await;
    assert_eq!(s["config"]["rejected"], 1, "{s:#}");
    assert_eq!(s["handlers"].as_array().unwrap().len(), 2);
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn editing_the_config_file_reloads_it() {
    let sim = common::start_sim().await;
    let client = sim.client().unwrap();
    create_namespaces(&client, &["a", "b"]).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), ONE_ROUTE).await;
    let seen = record_handled(&daemon);
    daemon.wait_until_synced().await;

    common::write_config(
        dir.path(),
        &format!(
            "{ONE_ROUTE}  - name: in-b\n    resource: configmaps\n    namespace: b\n    handler: log-events\n"
        ),
    );
    let s = common::eventually("the file reloaded", WAIT, async || {
        let s = status(&daemon).await;
        (s["config"]["applied"] == 1).then_some(s)
    })
    .await;
    assert_eq!(s["config"]["last"]["trigger"], "file");
    assert_eq!(s["routes"][1]["name"], "in-b");
    create_configmap(&client, "b", "after-edit").await;
    assert_each_handled_once(&seen, "log-events", "in-b", &["b/after-edit".into()]).await;

    // A broken edit is rejected and shown; the running routes stay.
    std::fs::write(dir.path().join("switchyard.yaml"), "routes: [\n").unwrap();
    let s = common::eventually("the broken file rejected", WAIT, async || {
        let s = status(&daemon).await;
        (s["config"]["rejected"] == 1).then_some(s)
    })
    .await;
    assert!(
        s["config"]["last"]["error"]
            .as_str()
            .unwrap()
            .contains("switchyard.yaml:"),
        "{s:#}"
    );
    assert_eq!(s["routes"].as_array().unwrap().len(), 2);
    daemon.shut_down(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_changed_handler_hands_its_queue_to_its_replacement() {
    let sim = common::start_sim().await;
    let client = sim.client().unwrap();
    create_namespaces(&client, &["a"]).await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = common::start_daemon(&sim, dir.path(), ONE_ROUTE).await;
    let seen = record_handled(&daemon);
    daemon.wait_until_synced().await;
    let url = daemon.admin_url();
    create_configmap(&client, "a", "first").await;
    assert_each_handled_once(&seen, "log-events", "in-a", &["a/first".into()]).await;

    let (code, _) = common::post_json(&format!("{url}/handlers/log-events/pause")).await;
    assert_eq!(code, 200);
    let queued: Vec<String> = (0..20).map(|i| format!("a/queued-{i}")).collect();
    for name in &queued {
        create_configmap(&client, "a", name.trim_start_matches("a/")).await;
    }
    common::eventually("20 events queued", WAIT, async || {
        (status(&daemon).await["routes"][0]["pending"] == 20).then_some(())
    })
    .await;

    common::write_config(
        dir.path(),
        &ONE_ROUTE.replace("log-events: {}", "log-events:\n    concurrency: 3"),
    );
    let (code, body) = common::post_json(&format!("{url}/reload")).await;
    assert_eq!(code, 200, "{body:#}");
    assert_eq!(names(&body["plan"]["handlers"]["changed"]), ["log-events"]);
    assert_eq!(names(&body["plan"]["routes"]["unchanged"]), ["in-a"]);
    let (_, detail) = common::get_json(&format!("{url}/handlers/log-events")).await;
    assert_eq!(detail["concurrency"], 3, "{detail:#}");
    assert_eq!(detail["paused"], true, "the pause carries over: {detail:#}");
    assert_eq!(detail["queue_depth"], 20, "{detail:#}");
    assert_eq!(detail["processed"], 1, "counters carry over: {detail:#}");

    let (code, _) = common::post_json(&format!("{url}/handlers/log-events/resume")).await;
    assert_eq!(code, 200);
    assert_each_handled_once(&seen, "log-events", "in-a", &queued).await;
    let (_, detail) = common::get_json(&format!("{url}/handlers/log-events")).await;
    assert_eq!(detail["processed"], 21, "{detail:#}");
    daemon.shut_down(Duration::from_secs(5)).await;
}
