//! Team-owned Route and Handler resources: created with kubectl from the CRDs `switchyard
//! crds` prints, merged into the running daemon, refused with a located condition when
//! wrong, and stopped when deleted.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::process::switchyard;
use crate::support::receiver::Receiver;
use crate::support::sim::{Kubectl, blocking};
use kube::Api;
use kube::api::{ApiResource, DynamicObject};

use switchyard::sim::Simulator;

use crate::support::{self, TestDaemon, create_configmap, eventually};

/// A kubectl run that must succeed; its stdout.
fn ok(kubectl: &Kubectl, args: &[&str]) -> String {
    let out = kubectl.run(args);
    assert!(out.ok, "kubectl {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `kubectl apply -f -` of `yaml`, which must succeed.
fn apply(kubectl: &Kubectl, yaml: &str) {
    let out = kubectl.run_with_input(&["apply", "-f", "-"], yaml);
    assert!(out.ok, "kubectl apply failed: {}\n{yaml}", out.stderr);
}

/// kubectl on `sim`, once the CRDs `switchyard crds` prints, the namespaces `namespaces` and
/// then `resources` are applied with it.
async fn prepared(sim: &Simulator, namespaces: &[&str], resources: Vec<String>) -> Arc<Kubectl> {
    let kubectl = Arc::new(Kubectl::new(sim));
    let (code, crds, stderr) = switchyard(&["crds"]);
    assert_eq!(code, 0, "switchyard crds failed: {stderr}");
    let k = kubectl.clone();
    let namespaces: Vec<String> = namespaces.iter().map(ToString::to_string).collect();
    blocking(move || {
        apply(&k, &crds);
        for namespace in &namespaces {
            ok(&k, &["create", "namespace", namespace]);
        }
        for resource in &resources {
            apply(&k, resource);
        }
    })
    .await;
    kubectl
}

/// The API resource of a team kind.
fn team_kind(kind: &str) -> ApiResource {
    ApiResource {
        group: "switchyard.dev".into(),
        version: "v1alpha1".into(),
        api_version: "switchyard.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// Waits until the team resource `kind`/`name` in `namespace` has condition `condition` =
/// `status`; its message.
async fn condition(
    client: &kube::Client,
    target: (&str, &str, &str),
    condition: &str,
    status: &str,
) -> String {
    condition_saying(client, target, condition, status, "").await
}

/// [`condition`], waiting until its message also contains `text`: the daemon reads Routes
/// and Handlers through two watches, so a Route applied with its Handler may first be judged
/// without it (and said to name a Handler that does not exist) and then again with it.
async fn condition_saying(
    client: &kube::Client,
    (kind, name, namespace): (&str, &str, &str),
    condition: &str,
    status: &str,
    text: &str,
) -> String {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &team_kind(kind));
    let what = format!("{kind} {namespace}/{name} with {condition}={status} saying {text:?}");
    eventually(&what, Duration::from_secs(20), async || {
        let object = api.get_opt(name).await.ok()??;
        let conditions = object.data["status"]["conditions"].as_array()?.clone();
        conditions
            .iter()
            .find(|c| c["type"] == condition && c["status"] == status)
            .map(|c| c["message"].as_str().unwrap_or_default().to_string())
            .filter(|message| message.contains(text))
    })
    .await
}

/// A Handler sending each change to `url` with the built-in webhook sink.
fn webhook_handler(namespace: &str, name: &str, url: &str, extra: &str) -> String {
    format!(
        "apiVersion: switchyard.dev/v1alpha1
kind: Handler
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  plugin: builtin:webhook
  service_account: runner
  backoff_base: 20ms
  config: {{url: \"{url}\"}}
  capabilities: {{http: [\"{url}\"]}}
{extra}"
    )
}

/// A Route of ConfigMaps to `handler`.
fn configmap_route(namespace: &str, name: &str, handler: &str, extra: &str) -> String {
    format!(
        "apiVersion: switchyard.dev/v1alpha1
kind: Route
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  resource: configmaps
  handler: {handler}
  delivery: every
{extra}"
    )
}

/// The names of the ConfigMaps the receiver got, in order.
fn names(receiver: &Receiver) -> Vec<String> {
    receiver
        .received()
        .iter()
        .filter_map(|r| {
            r.body["object"]["metadata"]["name"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_resources_run_a_bad_one_is_refused_with_its_place_and_a_deleted_route_stops() {
    let receiver = Receiver::start().await;
    let url = receiver.url("http");
    let sim = support::start_sim().await;
    let kubectl = prepared(&sim, &["team-a", "team-b"], Vec::new()).await;
    let client = sim.client().unwrap();
    let yaml = format!("tenancy:\n  resources: [configmaps]\n  http: [\"{url}\"]\n");
    let t = TestDaemon::builder(&yaml).sim(sim).start().await;

    let k = kubectl.clone();
    let (handler, route) = (
        webhook_handler("team-a", "notify", &url, ""),
        configmap_route("team-a", "cms", "notify", ""),
    );
    blocking(move || {
        apply(&k, &handler);
        apply(&k, &route);
    })
    .await;
    condition(&client, ("Route", "cms", "team-a"), "Ready", "True").await;
    condition(&client, ("Handler", "notify", "team-a"), "Ready", "True").await;
    create_configmap(&client, "team-b", json!({"metadata": {"name": "theirs"}})).await;
    create_configmap(&client, "team-a", json!({"metadata": {"name": "ours"}})).await;
    eventually("ours delivered", Duration::from_secs(20), async || {
        names(&receiver).contains(&"ours".to_string()).then_some(())
    })
    .await;
    let handlers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "team-a", &team_kind("Handler"));
    eventually("the Handler's count", Duration::from_secs(30), async || {
        let handler = handlers.get("notify").await.ok()?;
        (handler.data["status"]["processed"].as_u64()? >= 1).then_some(())
    })
    .await;
    assert!(
        !names(&receiver).contains(&"theirs".to_string()),
        "a team Route watches its own namespace only"
    );

    // A malformed Handler and a Route on another namespace are refused; the rest runs.
    let k = kubectl.clone();
    let (bad, spy) = (
        webhook_handler("team-a", "broken", &url, "  timeout: soon\n"),
        configmap_route("team-a", "spy", "notify", "  namespace: team-b\n"),
    );
    blocking(move || {
        apply(&k, &bad);
        apply(&k, &spy);
    })
    .await;
    let message = condition(&client, ("Handler", "broken", "team-a"), "Invalid", "True").await;
    assert!(message.starts_with("spec.timeout: "), "{message}");
    let message = condition(&client, ("Route", "spy", "team-a"), "Invalid", "True").await;
    assert_eq!(
        message,
        "spec.namespace: a Route watches only its own namespace (team-a)"
    );
    let k = kubectl.clone();
    let events = blocking(move || ok(&k, &["get", "events", "-n", "team-a", "-o", "json"])).await;
    assert!(
        events.contains("a Route watches only its own namespace"),
        "{events}"
    );
    create_configmap(&client, "team-a", json!({"metadata": {"name": "still"}})).await;
    eventually("still delivered", Duration::from_secs(20), async || {
        names(&receiver)
            .contains(&"still".to_string())
            .then_some(())
    })
    .await;

    // Deleting the Route stops its deliveries.
    let k = kubectl.clone();
    blocking(move || ok(&k, &["delete", "route", "cms", "-n", "team-a"])).await;
    eventually(
        "the Route gone from /status",
        Duration::from_secs(20),
        async || {
            let status = t.status_json().await;
            let routes = status["routes"].as_array().cloned().unwrap_or_default();
            routes
                .iter()
                .all(|r| r["name"] != "team-a.cms")
                .then_some(())
        },
    )
    .await;
    create_configmap(&client, "team-a", json!({"metadata": {"name": "after"}})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !names(&receiver).contains(&"after".to_string()),
        "a deleted Route delivers nothing"
    );
    t.stop().await;
}

/// The simulator with RBAC on: team-a's ServiceAccount `runner` may read and write
/// ConfigMaps in team-a only; team-b's `runner` may do nothing.
const RBAC: &str = r#"
authorization: RBAC
objects:
  - {apiVersion: v1, kind: Namespace, metadata: {name: team-a}}
  - {apiVersion: v1, kind: Namespace, metadata: {name: team-b}}
  - {apiVersion: v1, kind: ServiceAccount, metadata: {name: runner, namespace: team-a}}
  - {apiVersion: v1, kind: ServiceAccount, metadata: {name: runner, namespace: team-b}}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {name: configmaps, namespace: team-a}
    rules:
      - {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, patch]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {name: runner, namespace: team-a}
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmaps}
    subjects: [{kind: ServiceAccount, name: runner, namespace: team-a}]
"#;

/// A Handler running the `writer` test plugin (pulled by digest) as `runner`, writing copies
/// into `target`, and its Route of the ConfigMaps labelled `to=LABEL`.
fn writer(namespace: &str, name: &str, plugin: &str, target: &str, label: &str) -> String {
    format!(
        "apiVersion: switchyard.dev/v1alpha1
kind: Handler
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  plugin: {plugin}
  service_account: runner
  max_retries: 0
  config: {{namespace: {target}}}
  capabilities: {{configmaps: [apply]}}
---
apiVersion: switchyard.dev/v1alpha1
kind: Route
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  resource: configmaps
  labels: to={label}
  handler: {name}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_writes_are_held_to_its_rbac_and_a_route_it_may_not_watch_does_not_start() {
    let sim = switchyard::sim::Simulator::start(switchyard::sim::SimOptions {
        config: switchyard::sim::SimConfig::from_yaml(RBAC, "test config").expect("a sim config"),
        tls: true,
        ..switchyard::sim::SimOptions::default()
    })
    .await
    .expect("start the simulator");
    let kubectl = prepared(&sim, &[], Vec::new()).await;
    let registry = crate::support::registry::Registry::start().await;
    let file = support::built_plugin("writer");
    let (code, out, err) = crate::oci::push(
        file.to_str().unwrap(),
        &registry.reference("team/writer:v1"),
    );
    assert_eq!(code, 0, "{out}{err}");
    let plugin = out
        .trim()
        .strip_prefix("pushed ")
        .expect("the pinned reference")
        .to_string();
    let client = sim.client().unwrap();
    let t = TestDaemon::builder("tenancy: {resources: [configmaps]}\n")
        .sim(sim)
        .start()
        .await;

    let k = kubectl.clone();
    let resources = [
        writer("team-a", "own", &plugin, "team-a", "own"),
        writer("team-a", "across", &plugin, "team-b", "b"),
        writer("team-b", "theirs", &plugin, "team-b", "own"),
    ];
    blocking(move || resources.iter().for_each(|r| apply(&k, r))).await;
    let refused = "system:serviceaccount:team-b:runner may not list configmaps in namespace team-b (SubjectAccessReview)";
    let target = ("Route", "theirs", "team-b");
    condition_saying(&client, target, "Invalid", "True", refused).await;
    condition(&client, ("Route", "own", "team-a"), "Ready", "True").await;
    condition(&client, ("Route", "across", "team-a"), "Ready", "True").await;

    // Writing in its own namespace works; writing in team-b is refused by the API server.
    create_configmap(
        &client,
        "team-a",
        json!({"metadata": {"name": "x", "labels": {"to": "own"}}}),
    )
    .await;
    create_configmap(
        &client,
        "team-a",
        json!({"metadata": {"name": "y", "labels": {"to": "b"}}}),
    )
    .await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "team-a");
    eventually("copy-x in team-a", Duration::from_secs(30), async || {
        cms.get_opt("copy-x").await.ok()?
    })
    .await;
    let letters = eventually(
        "a dead letter of team-a.across",
        Duration::from_secs(30),
        async || {
            let (_, body) = t.get("/handlers/team-a.across/dead-letters").await;
            let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
            (!letters.is_empty()).then_some(letters)
        },
    )
    .await;
    let error = letters[0]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("User \"system:serviceaccount:team-a:runner\" cannot patch resource \"configmaps\" in API group \"\" in the namespace \"team-b\""),
        "{error}"
    );
    let theirs: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "team-b");
    assert!(theirs.get_opt("copy-y").await.unwrap().is_none());
    t.stop().await;
}

/// The ConfigMap names of the requests the receiver answered 200.
fn delivered(receiver: &Receiver) -> Vec<String> {
    receiver
        .delivered()
        .iter()
        .filter_map(|r| {
            r.body["object"]["metadata"]["name"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_edited_in_place_keeps_its_queue_and_a_restart_resumes_team_routes_exactly() {
    let receiver = Receiver::start().await;
    let url = receiver.url("http");
    let sim = support::start_sim().await;
    let resources = vec![
        webhook_handler("team-a", "notify", &url, "  max_retries: 1000\n"),
        configmap_route("team-a", "cms", "notify", ""),
    ];
    let kubectl = prepared(&sim, &["team-a"], resources).await;
    let client = sim.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    support::write_config(
        dir.path(),
        &format!(
            "state_dir: state\nadmin:\n  listen: 127.0.0.1:0\n  probes_listen: null\ntenancy:\n  resources: [configmaps]\n  http: [\"{url}\"]\n"
        ),
    );
    let first = crate::state::Child::start(dir.path(), &kubeconfig).await;
    create_configmap(&client, "team-a", json!({"metadata": {"name": "early"}})).await;
    eventually("early delivered", Duration::from_secs(30), async || {
        delivered(&receiver)
            .contains(&"early".to_string())
            .then_some(())
    })
    .await;

    // The receiver goes down; changes wait in the handler's queue while it is edited.
    receiver.set(crate::support::receiver::Mode::Down);
    for name in ["a", "b"] {
        create_configmap(&client, "team-a", json!({"metadata": {"name": name}})).await;
    }
    eventually("a and b tried", Duration::from_secs(30), async || {
        let tried = names(&receiver);
        (tried.contains(&"a".to_string()) && tried.contains(&"b".to_string())).then_some(())
    })
    .await;
    let k = kubectl.clone();
    let edited = webhook_handler(
        "team-a",
        "notify",
        &url,
        "  max_retries: 1000\n  timeout: 3s\n",
    );
    blocking(move || apply(&k, &edited)).await;
    let status = eventually(
        "the edited Handler applied",
        Duration::from_secs(30),
        async || {
            let status = first.status().await;
            let reload = &status["config"]["last"];
            (reload["trigger"] == "resources"
                && reload["plan"]["handlers"]["changed"] == json!(["team-a.notify"]))
            .then_some(status)
        },
    )
    .await;
    let queued = status["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "team-a.notify")
        .map(|h| {
            h["queue_depth"].as_u64().unwrap()
                + h["delayed"].as_u64().unwrap()
                + h["in_flight"].as_u64().unwrap()
        })
        .unwrap();
    assert_eq!(
        queued, 2,
        "the edited handler kept both waiting changes: {status:#}"
    );

    // Killed with them queued; the next daemon delivers them, and not `early` again.
    first.process.kill();
    receiver.set(crate::support::receiver::Mode::Ok);
    let _second = crate::state::Child::start(dir.path(), &kubeconfig).await;
    eventually(
        "a and b delivered after the restart",
        Duration::from_secs(30),
        async || {
            let done = delivered(&receiver);
            (done.contains(&"a".to_string()) && done.contains(&"b".to_string())).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let early = delivered(&receiver)
        .iter()
        .filter(|n| *n == "early")
        .count();
    assert_eq!(
        early, 1,
        "a change delivered before the restart is not delivered again"
    );
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_team_route_takes_its_finalizer_off_what_it_held() {
    let receiver = Receiver::start().await;
    let url = receiver.url("http");
    let sim = support::start_sim().await;
    let resources = vec![
        webhook_handler("team-a", "notify", &url, ""),
        configmap_route("team-a", "held", "notify", "  finalizer: true\n"),
    ];
    let kubectl = prepared(&sim, &["team-a"], resources).await;
    let client = sim.client().unwrap();
    let yaml = format!("tenancy:\n  resources: [configmaps]\n  http: [\"{url}\"]\n");
    let t = TestDaemon::builder(&yaml).sim(sim).start().await;
    create_configmap(&client, "team-a", json!({"metadata": {"name": "kept"}})).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let finalizers = async || {
        let cm = cms.get("kept").await.ok()?;
        Some(cm.metadata.finalizers.unwrap_or_default())
    };
    eventually(
        "the team Route's finalizer on kept",
        Duration::from_secs(30),
        async || {
            let held = finalizers().await?;
            (held == ["switchyard.dev/team-a.held"]).then_some(())
        },
    )
    .await;
    let k = kubectl.clone();
    blocking(move || ok(&k, &["delete", "route", "held", "-n", "team-a"])).await;
    eventually(
        "the finalizer taken off",
        Duration::from_secs(30),
        async || finalizers().await?.is_empty().then_some(()),
    )
    .await;
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_namespaces_the_selector_picks_have_their_resources_read() {
    let receiver = Receiver::start().await;
    let url = receiver.url("http");
    let sim = support::start_sim().await;
    let resources = vec![
        webhook_handler("team-a", "notify", &url, ""),
        configmap_route("team-a", "cms", "notify", ""),
        webhook_handler("team-b", "notify", &url, ""),
        configmap_route("team-b", "cms", "notify", ""),
    ];
    let kubectl = prepared(&sim, &["team-a", "team-b"], resources).await;
    let k = kubectl.clone();
    blocking(move || ok(&k, &["label", "namespace", "team-a", "tenant=yes"])).await;
    let client = sim.client().unwrap();
    let yaml = format!(
        "tenancy:\n  namespaces: tenant=yes\n  resources: [configmaps]\n  http: [\"{url}\"]\n"
    );
    let t = TestDaemon::builder(&yaml).sim(sim).start().await;
    condition(&client, ("Route", "cms", "team-a"), "Ready", "True").await;
    let routes = |status: &serde_json::Value| -> Vec<String> {
        status["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(routes(&t.status_json().await), ["team-a.cms"]);
    // Labelled, team-b's resources are read and run.
    let k = kubectl.clone();
    blocking(move || ok(&k, &["label", "namespace", "team-b", "tenant=yes"])).await;
    condition(&client, ("Route", "cms", "team-b"), "Ready", "True").await;
    assert_eq!(routes(&t.status_json().await), ["team-a.cms", "team-b.cms"]);
    t.stop().await;
}
