//! The janitor recipe, in place of kube-janitor, through kube-janitor's documented scenario:
//! objects annotated `janitor/ttl` (age since creation) or `janitor/expires` (a time) are
//! deleted once due and not before, with an Event; the others stay. Then the same across a
//! restart with `state_dir`, where an unchanged object gets no event: the timer is the
//! `requeue-after` the store kept.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::state::Child;
use crate::support::sim::{Kubectl, blocking};
use crate::support::{self, TestDaemon, eventually};

const WAIT: Duration = Duration::from_secs(60);

/// How late after its time an object may go: the plugin asks to be called again at the
/// time, so this only covers a loaded machine.
const LATE: SignedDuration = SignedDuration::from_secs(10);

fn created(object: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Timestamp {
    object
        .creation_timestamp
        .as_ref()
        .expect("a creationTimestamp")
        .0
}

/// Creates the ConfigMap `name` in `default` with `annotations`; returns when it is due by
/// `ttl` (its creationTimestamp and the time to live), if given.
async fn configmap(
    client: &kube::Client,
    name: &str,
    annotations: Value,
    ttl: Option<SignedDuration>,
) -> Option<Timestamp> {
    let cm = support::create_configmap(
        client,
        "default",
        json!({"metadata": {"name": name, "annotations": annotations}}),
    )
    .await;
    ttl.map(|ttl| created(&cm.metadata) + ttl)
}

/// An object the test expects gone at `due`, and not before.
struct Expiring {
    what: String,
    due: Timestamp,
    exists: Box<dyn Fn() -> futures::future::BoxFuture<'static, bool>>,
}

impl Expiring {
    fn configmap(client: &kube::Client, name: &str, due: Timestamp) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let name = name.to_string();
        Self {
            what: format!("ConfigMap {name}"),
            due,
            exists: Box::new(move || {
                let (api, name) = (api.clone(), name.clone());
                Box::pin(async move { api.get_opt(&name).await.unwrap().is_some() })
            }),
        }
    }

    fn deployment(client: &kube::Client, name: &str, due: Timestamp) -> Self {
        let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let name = name.to_string();
        Self {
            what: format!("Deployment {name}"),
            due,
            exists: Box::new(move || {
                let (api, name) = (api.clone(), name.clone());
                Box::pin(async move { api.get_opt(&name).await.unwrap().is_some() })
            }),
        }
    }
}

/// Polls every object until each is gone, failing if one goes before its time or more than
/// [`LATE`] after it.
async fn gone_in_time(objects: Vec<Expiring>) {
    let mut left = objects;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !left.is_empty() {
        let mut still = Vec::new();
        for object in left {
            // Read before the check: an object seen gone was deleted before `now`.
            let exists = (object.exists)().await;
            let now = Timestamp::now();
            if exists {
                assert!(
                    now < object.due + LATE,
                    "{} is still there at {now}, due at {}",
                    object.what,
                    object.due
                );
                still.push(object);
            } else {
                assert!(
                    now >= object.due,
                    "{} was deleted before {now}, but is due only at {}",
                    object.what,
                    object.due
                );
            }
        }
        left = still;
        assert!(tokio::time::Instant::now() < deadline, "objects left");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Events recorded in `default` about `name`: (type, reason, message).
async fn events_about(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// kube-janitor's example: a Deployment made by hand, then annotated.
const TEMP_NGINX: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: temp-nginx, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: temp-nginx}}
  template:
    metadata: {labels: {app: temp-nginx}}
    spec: {containers: [{name: nginx, image: nginx}]}
";

#[tokio::test]
async fn objects_go_when_their_ttl_or_expiry_comes_and_not_before_and_the_rest_stay() {
    let daemon = TestDaemon::start(&super::fragment("janitor")).await;
    let client = daemon.client();
    let secs = SignedDuration::from_secs;
    let short = configmap(
        &client,
        "short",
        json!({"janitor/ttl": "3s"}),
        Some(secs(3)),
    )
    .await;
    configmap(&client, "plain", json!({}), None).await;
    configmap(&client, "long", json!({"janitor/ttl": "1h"}), None).await;
    configmap(&client, "typo", json!({"janitor/ttl": "soon"}), None).await;
    // kube-janitor's own format, to the second.
    let at = Timestamp::now() + secs(6);
    let text = at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let dated = text.parse::<Timestamp>().unwrap();
    configmap(&client, "dated", json!({"janitor/expires": text}), None).await;
    let kubectl = Kubectl::new(daemon.sim());
    let nginx = blocking(move || {
        let applied = kubectl.run_with_input(&["apply", "-f", "-"], TEMP_NGINX);
        assert!(applied.ok, "{}", applied.stderr);
        let annotated = kubectl.run(&["annotate", "deploy", "temp-nginx", "janitor/ttl=5s"]);
        assert!(annotated.ok, "{}", annotated.stderr);
        kubectl
    })
    .await;
    let deployment = Api::<Deployment>::namespaced(client.clone(), "default")
        .get("temp-nginx")
        .await
        .unwrap();
    let nginx_due = created(&deployment.metadata) + secs(5);

    gone_in_time(vec![
        Expiring::configmap(&client, "short", short.unwrap()),
        Expiring::configmap(&client, "dated", dated),
        Expiring::deployment(&client, "temp-nginx", nginx_due),
    ])
    .await;
    let gone = blocking(move || nginx.run(&["get", "deploy", "temp-nginx"])).await;
    assert!(gone.stderr.contains("NotFound"), "{gone:?}");

    // The others stay, and each deletion and the typo are on record as Events.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["plain", "long", "typo"] {
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "{name} was deleted"
        );
    }
    for (name, kind, reason, message) in [
        (
            "short",
            "Normal",
            "TimeToLiveExpired",
            "deleted by the janitor: janitor/ttl 3s expired at ",
        ),
        (
            "dated",
            "Normal",
            "ExpiryTimeReached",
            "deleted by the janitor: janitor/expires ",
        ),
        (
            "temp-nginx",
            "Normal",
            "TimeToLiveExpired",
            "deleted by the janitor: janitor/ttl 5s expired at ",
        ),
        (
            "typo",
            "Warning",
            "InvalidTTL",
            "annotation janitor/ttl \"soon\" is not valid: ",
        ),
    ] {
        let events = eventually(&format!("an Event about {name}"), WAIT, async || {
            let events = events_about(&client, name).await;
            (!events.is_empty()).then_some(events)
        })
        .await;
        let [(t, r, m)] = events.as_slice() else {
            panic!("one Event about {name}: {events:?}")
        };
        assert_eq!((t.as_str(), r.as_str()), (kind, reason), "{m}");
        assert!(m.starts_with(message), "{m}");
    }
    assert!(events_about(&client, "long").await.is_empty());
    daemon.stop().await;
}

/// Waits until the daemon's store has committed everything it was sent.
async fn committed(child: &Child) {
    eventually("the store committed", WAIT, async || {
        (child.status().await["state"]["pending_writes"] == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_timer_set_before_a_restart_with_state_dir_fires_after_it() {
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let config = format!(
        "state_dir: state\nadmin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{}",
        super::fragment("janitor")
    );
    support::write_config(dir.path(), &config);
    let client = sim.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secs = SignedDuration::from_secs;

    let first = Child::start(dir.path(), &kubeconfig).await;
    // Due while the daemon is down; due after the restart; and one whose annotation is
    // removed while the daemon is down, which must then stay.
    let down = configmap(&client, "down", json!({"janitor/ttl": "5s"}), Some(secs(5))).await;
    let later = configmap(
        &client,
        "later",
        json!({"janitor/ttl": "20s"}),
        Some(secs(20)),
    )
    .await;
    configmap(&client, "kept", json!({"janitor/ttl": "5s"}), None).await;
    for name in ["down", "later", "kept"] {
        first
            .process
            .wait_for_line(WAIT, |l| {
                l.contains(&format!("ConfigMap default/{name} expires at "))
            })
            .await;
    }
    committed(&first).await;
    let lines = first.process.terminate(WAIT);
    assert!(
        !lines.iter().any(|l| l.contains("deleted ConfigMap")),
        "{lines:#?}"
    );

    let unannotate = json!({"metadata": {"annotations": {"janitor/ttl": null}}});
    api.patch("kept", &PatchParams::default(), &Patch::Merge(&unannotate))
        .await
        .unwrap();
    let down = down.unwrap();
    let wait = down
        .duration_since(Timestamp::now())
        .max(SignedDuration::ZERO)
        + secs(1);
    tokio::time::sleep(wait.unsigned_abs()).await;
    assert!(api.get_opt("down").await.unwrap().is_some());

    // Unchanged since the first run: the informers deliver nothing for `down` and `later`;
    // what the store kept of their requeue-after does.
    let second = Child::start(dir.path(), &kubeconfig).await;
    let later = later.unwrap();
    assert!(
        Timestamp::now() + secs(2) < later,
        "the restart took too long to see `later` fall due after it"
    );
    second
        .process
        .wait_for_line(WAIT, |l| {
            l.contains("deleted ConfigMap default/down: janitor/ttl 5s expired at ")
        })
        .await;
    assert!(api.get_opt("down").await.unwrap().is_none());
    let lines = second.process.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("restored the queue and dead letters of the last run")),
        "{lines:#?}"
    );
    gone_in_time(vec![Expiring::configmap(&client, "later", later)]).await;
    // Its restored event still had the annotation; the plugin went by the cache.
    assert!(api.get_opt("kept").await.unwrap().is_some());
    let lines = second.process.lines();
    assert!(
        !lines.iter().any(|l| l.contains("ConfigMap default/kept")
            && (l.contains("deleted") || l.contains("expires at"))),
        "{lines:#?}"
    );
    drop(second);
    sim.stop().await;
}

#[test]
fn rbac_grants_reading_and_deleting_the_watched_kinds_and_creating_events_only() {
    assert_eq!(
        super::granted("janitor"),
        [
            "ClusterRole apps deployments delete,get,list,watch",
            "ClusterRole apps statefulsets delete,get,list,watch",
            "ClusterRole batch cronjobs delete,get,list,watch",
            "ClusterRole batch jobs delete,get,list,watch",
            "ClusterRole core configmaps delete,get,list,watch",
            "ClusterRole core events create",
            "ClusterRole core namespaces delete,get,list,watch",
            "ClusterRole core persistentvolumeclaims delete,get,list,watch",
            "ClusterRole core services delete,get,list,watch",
            "ClusterRole networking.k8s.io ingresses delete,get,list,watch",
        ]
    );
}
