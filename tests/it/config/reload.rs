//! Config reload over real HTTP and through the config file, while ConfigMaps keep being
//! created: added routes start, removed handlers drain and go, changed handlers hand their
//! queue over, and a config with mistakes is rejected with every mistake and changes
//! nothing. Every object is handled exactly once per route throughout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};
use switchyard::Daemon;

use crate::support::{self, TestDaemon};

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

async fn create_configmap(client: &Client, namespace: &str, name: &str) {
    support::create_configmap(
        client,
        namespace,
        json!({"metadata": {"name": name}, "data": {"k": "v"}}),
    )
    .await;
}

/// Creates ConfigMaps `load-N` in each namespace, a round at a time, until stopped; returns
/// the names created per namespace. A round starts once the daemon has handled the previous
/// round's object in the first namespace, so the load keeps pace with the daemon, not with
/// a clock.
struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    rounds: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    fn start(client: Client, namespaces: &'static [&'static str], seen: Seen) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (rounds_done, rounds) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(async move {
            let mut created = Vec::new();
            let mut i = 0;
            while !*stopped.borrow() {
                for ns in namespaces {
                    let name = format!("load-{i}");
                    create_configmap(&client, ns, &name).await;
                    created.push(format!("{ns}/{name}"));
                }
                let first = format!("{}/load-{i}", namespaces[0]);
                support::eventually_sync("the daemon to handle the last round", WAIT, || {
                    let seen = seen.lock().unwrap();
                    seen.keys().any(|(_, _, o)| *o == first).then_some(())
                })
                .await;
                i += 1;
                rounds_done.send_replace(i);
            }
            created
        });
        Self { stop, rounds, task }
    }

    /// Waits until `more` rounds after the current one were created and handled.
    async fn wait_for_rounds(&mut self, more: usize) {
        let target = *self.rounds.borrow() + more;
        tokio::time::timeout(WAIT, self.rounds.wait_for(|done| *done >= target))
            .await
            .unwrap_or_else(|_| panic!("the load did not make {more} more rounds within {WAIT:?}"))
            .expect("the load runs until stopped");
    }

    async fn stop(self) -> Vec<String> {
        self.stop.send_replace(true);
        self.task.await.unwrap()
    }
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
    support::eventually("every object handled", WAIT, async || {
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

/// A daemon running `yaml` against a simulator that already has `namespaces`.
async fn start_with_namespaces(yaml: &str, namespaces: &[&str]) -> TestDaemon {
    let sim = support::start_sim().await;
    support::create_namespaces(&sim.client().unwrap(), namespaces).await;
    TestDaemon::builder(yaml).sim(sim).start().await
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
    let t = start_with_namespaces(ONE_ROUTE, &["a", "b"]).await;
    let seen = record_handled(t.daemon());
    let mut load = Load::start(t.client(), &["a", "b"], seen.clone());
    support::eventually("some events handled", WAIT, async || {
        (processed(&t.status_json().await, "log-events") >= 5).then_some(())
    })
    .await;
    let before = processed(&t.status_json().await, "log-events");

    t.write_config(&format!(
        "{ONE_ROUTE}  - name: in-b\n    resource: configmaps\n    namespace: b\n    handler: log-events\n"
    ));
    let (code, body) = t.post("/reload").await;
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
    let after = t.status_json().await;
    assert!(processed(&after, "log-events") >= before, "{after:#}");
    assert_eq!(after["config"]["applied"], 1);
    assert_eq!(after["config"]["last"]["trigger"], "api");

    // The load goes on after the reload: both routes get objects made after it.
    load.wait_for_rounds(10).await;
    let created = load.stop().await;
    let (in_a, in_b): (Vec<String>, Vec<String>) =
        created.into_iter().partition(|o| o.starts_with("a/"));
    // Objects in b made before the reload arrive as `added` when the route subscribes.
    assert_each_handled_once(&seen, "log-events", "in-a", &in_a).await;
    assert_each_handled_once(&seen, "log-events", "in-b", &in_b).await;
    t.stop().await;
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
    let t = start_with_namespaces(TWO_HANDLERS, &["a"]).await;
    let seen = record_handled(t.daemon());
    let mut load = Load::start(t.client(), &["a"], seen.clone());
    support::eventually("both handlers busy", WAIT, async || {
        let s = t.status_json().await;
        (processed(&s, "audit") >= 3 && processed(&s, "log-events") >= 3).then_some(())
    })
    .await;

    t.write_config(MAIN_ONLY);
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    let plan = &body["plan"];
    assert_eq!(names(&plan["handlers"]["removed"]), ["audit"], "{plan:#}");
    assert_eq!(names(&plan["routes"]["removed"]), ["audit"], "{plan:#}");
    assert_eq!(names(&plan["informers"]["unchanged"]), ["v1/configmaps"]);
    let (code, _) = t.get("/handlers/audit").await;
    assert_eq!(code, 404);
    // The removed handler drained: nothing it was given is left behind.
    let audited: usize = {
        let seen = seen.lock().unwrap();
        seen.keys().filter(|(h, _, _)| h == "audit").count()
    };

    // Objects made after the reload reach the remaining handler (and only it).
    load.wait_for_rounds(10).await;
    let created = load.stop().await;
    assert_each_handled_once(&seen, "log-events", "main", &created).await;
    let s = t.status_json().await;
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
    t.stop().await;
}

#[tokio::test]
async fn a_config_with_mistakes_is_rejected_with_all_of_them_and_changes_nothing() {
    let t = start_with_namespaces(TWO_HANDLERS, &["a"]).await;
    let seen = record_handled(t.daemon());
    let mut load = Load::start(t.client(), &["a"], seen.clone());

    // Without the token: 401, and nothing is read or changed.
    let response = reqwest::Client::new()
        .post(t.url("/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(t.status_json().await["config"]["rejected"], 0);

    let broken = "
handlers:
  log-events:
    concurrency: 0
routes:
  - name: main
    resource: configmaps
    handler: log-event
";
    t.write_config(broken);
    let (code, body) = t.post("/reload").await;
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
    t.write_config(&format!("{TWO_HANDLERS}kubeconfig: /nowhere\n"));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 422, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("kubeconfig cannot change while running"),
        "{body:#}"
    );

    // So is a memory cap the plugin pool, sized at start, cannot hold.
    t.write_config(&TWO_HANDLERS.replace("log-events: {}", "log-events:\n    memory: 1Gi"));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 422, "{body:#}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("handlers.log-events.memory above"),
        "{body:#}"
    );

    let s = t.status_json().await;
    assert_eq!(s["config"]["rejected"], 3, "{s:#}");
    assert_eq!(s["config"]["applied"], 0, "{s:#}");
    assert_eq!(s["config"]["last"]["applied"], false);
    assert_eq!(s["handlers"].as_array().unwrap().len(), 2);
    assert_eq!(s["routes"].as_array().unwrap().len(), 2);

    // Both handlers still get every object, those made after the rejections too.
    load.wait_for_rounds(10).await;
    let created = load.stop().await;
    assert_each_handled_once(&seen, "log-events", "main", &created).await;
    assert_each_handled_once(&seen, "audit", "audit", &created).await;
    t.stop().await;
}

#[tokio::test]
async fn a_reload_with_values_the_engine_cannot_give_is_rejected_with_their_places() {
    let t = TestDaemon::start(TWO_HANDLERS).await;
    t.write_config(&TWO_HANDLERS.replace(
        "log-events: {}",
        "log-events:\n    timeout: 0s\n    memory: 1000Gi",
    ));
    let (code, body) = t.post("/reload").await;
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
    let s = t.status_json().await;
    assert_eq!(s["config"]["rejected"], 1, "{s:#}");
    assert_eq!(s["handlers"].as_array().unwrap().len(), 2);
    t.stop().await;
}

#[tokio::test]
async fn editing_the_config_file_reloads_it() {
    let t = start_with_namespaces(ONE_ROUTE, &["a", "b"]).await;
    let seen = record_handled(t.daemon());

    t.write_config(&format!(
        "{ONE_ROUTE}  - name: in-b\n    resource: configmaps\n    namespace: b\n    handler: log-events\n"
    ));
    let s = support::eventually("the file reloaded", WAIT, async || {
        let s = t.status_json().await;
        (s["config"]["applied"] == 1).then_some(s)
    })
    .await;
    assert_eq!(s["config"]["last"]["trigger"], "file");
    assert_eq!(s["routes"][1]["name"], "in-b");
    create_configmap(&t.client(), "b", "after-edit").await;
    assert_each_handled_once(&seen, "log-events", "in-b", &["b/after-edit".into()]).await;

    // A broken edit is rejected and shown; the running routes stay.
    std::fs::write(t.dir().join("switchyard.yaml"), "routes: [\n").unwrap();
    let s = support::eventually("the broken file rejected", WAIT, async || {
        let s = t.status_json().await;
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
    t.stop().await;
}

#[tokio::test]
async fn a_changed_handler_hands_its_queue_to_its_replacement() {
    let t = start_with_namespaces(ONE_ROUTE, &["a"]).await;
    let seen = record_handled(t.daemon());
    let client = t.client();
    create_configmap(&client, "a", "first").await;
    assert_each_handled_once(&seen, "log-events", "in-a", &["a/first".into()]).await;

    let (code, _) = t.post("/handlers/log-events/pause").await;
    assert_eq!(code, 200);
    let queued: Vec<String> = (0..20).map(|i| format!("a/queued-{i}")).collect();
    for name in &queued {
        create_configmap(&client, "a", name.trim_start_matches("a/")).await;
    }
    support::eventually("20 events queued", WAIT, async || {
        (t.status_json().await["routes"][0]["pending"] == 20).then_some(())
    })
    .await;

    t.write_config(&ONE_ROUTE.replace("log-events: {}", "log-events:\n    concurrency: 3"));
    let (code, body) = t.post("/reload").await;
    assert_eq!(code, 200, "{body:#}");
    assert_eq!(names(&body["plan"]["handlers"]["changed"]), ["log-events"]);
    assert_eq!(names(&body["plan"]["routes"]["unchanged"]), ["in-a"]);
    let (_, detail) = t.get("/handlers/log-events").await;
    assert_eq!(detail["concurrency"], 3, "{detail:#}");
    assert_eq!(detail["paused"], true, "the pause carries over: {detail:#}");
    assert_eq!(detail["queue_depth"], 20, "{detail:#}");
    assert_eq!(detail["processed"], 1, "counters carry over: {detail:#}");

    let (code, _) = t.post("/handlers/log-events/resume").await;
    assert_eq!(code, 200);
    assert_each_handled_once(&seen, "log-events", "in-a", &queued).await;
    let (_, detail) = t.get("/handlers/log-events").await;
    assert_eq!(detail["processed"], 21, "{detail:#}");
    t.stop().await;
}

#[tokio::test]
async fn a_deleted_config_file_is_said_once_the_running_config_stays_and_a_new_file_loads() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let admin = "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n";
    support::write_config(dir.path(), &format!("{admin}{ONE_ROUTE}"));
    let child = crate::state::Child::start(dir.path(), &kubeconfig).await;
    let said = "the config file cannot be read: the running config stays";
    std::fs::remove_file(dir.path().join("switchyard.yaml")).unwrap();
    child
        .process
        .wait_for_line(WAIT, |l| l.contains(said))
        .await;
    assert_eq!(child.status().await["routes"][0]["name"], "in-a");

    // Written again, with a second route: loaded.
    support::write_config(
        dir.path(),
        &format!(
            "{admin}{ONE_ROUTE}  - name: in-b\n    resource: configmaps\n    namespace: b\n    handler: log-events\n"
        ),
    );
    support::eventually("the new file loaded", WAIT, async || {
        (child.status().await["routes"][1]["name"] == "in-b").then_some(())
    })
    .await;
    let lines = child.process.kill();
    assert_eq!(
        lines.iter().filter(|l| l.contains(said)).count(),
        1,
        "{lines:#?}"
    );
}
