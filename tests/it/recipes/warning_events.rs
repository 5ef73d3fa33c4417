//! The recipe warning-events (plugins/recipes/warning-events) played through
//! kubernetes-event-exporter's own scenario: Warning Events about Pods (BackOff,
//! FailedScheduling) reach a webhook and Slack with their reason, message and involved
//! object, Normal ones reach neither; then both receivers go down (the webhook answers 503,
//! Slack's port refuses connections) while more Warnings happen, and once they are back each
//! of those Warnings arrives, once.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::receiver::{Mode, Received, Receiver};
use crate::support::{self, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);
const RECIPE: &str = "warning-events";
const WEBHOOK: &str = "warnings-to-webhook";
const SLACK: &str = "warnings-to-slack";

/// The fragment as shipped, its two allow-lists naming the loopback receivers instead of
/// hooks.example.com and hooks.slack.com (what a user edits to name their own).
fn fragment(webhook: &Receiver, slack: &Receiver) -> String {
    let shipped = super::fragment(RECIPE);
    let mut yaml = shipped.clone();
    for (from, to) in [
        ("https://hooks.example.com", webhook),
        ("https://hooks.slack.com", slack),
    ] {
        let entry = format!("http: [{from}]");
        assert!(shipped.contains(&entry), "the fragment allows {from}");
        yaml = yaml.replace(&entry, &format!("http: [\"{}\"]", to.url("http")));
    }
    yaml
}

/// The Secret `warning-events` the fragment takes both URLs from.
async fn create_secret(t: &TestDaemon, webhook: &Receiver, slack: &Receiver) {
    create_secret_with(&t.client(), webhook, slack).await;
}

/// Creates the Secret `warning-events` through `client`.
async fn create_secret_with(client: &kube::Client, webhook: &Receiver, slack: &Receiver) {
    let data = [
        ("webhook-url", format!("{}/events", webhook.url("http"))),
        (
            "slack-url",
            format!("{}/services/T0/B0/s3cret", slack.url("http")),
        ),
    ];
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(RECIPE.into()),
            ..Default::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// When the events [`create_event`] makes first and last happened: a minute ago and now,
/// to the second as Kubernetes writes them.
fn just_now() -> (String, String) {
    let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap();
    let before = now - jiff::SignedDuration::from_secs(60);
    (before.to_string(), now.to_string())
}

/// Creates a core v1 Event `event_type`/`reason` about the Pod `pod`, reported by the
/// kubelet (the scheduler for FailedScheduling), seen 3 times, last just now.
async fn create_event(t: &TestDaemon, pod: &str, event_type: &str, reason: &str, message: &str) {
    create_event_at(&t.client(), pod, event_type, reason, message, just_now()).await;
}

/// Creates an Event as [`create_event`] does, first and last seen at `(first, last)`.
async fn create_event_at(
    client: &kube::Client,
    pod: &str,
    event_type: &str,
    reason: &str,
    message: &str,
    (first, last): (String, String),
) {
    let component = if reason == "FailedScheduling" {
        "default-scheduler"
    } else {
        "kubelet"
    };
    let event: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}.{}", reason.to_lowercase()), "namespace": "default"},
        "type": event_type,
        "reason": reason,
        "message": message,
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                           "name": pod},
        "source": {"component": component},
        "count": 3,
        "firstTimestamp": first,
        "lastTimestamp": last,
    }))
    .unwrap();
    Api::<CoreEvent>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &event)
        .await
        .unwrap();
}

/// The requests `receiver` answered 200, keyed by the Pod each is about (read by `pod`),
/// each Pod's in the order they came; waits until there are `count` of them.
async fn delivered_by_pod(
    receiver: &Receiver,
    count: usize,
    pod: fn(&Received) -> String,
) -> BTreeMap<String, Vec<Received>> {
    let delivered = support::eventually_sync(&format!("{count} deliveries"), WAIT, || {
        let delivered = receiver.delivered();
        (delivered.len() >= count).then_some(delivered)
    })
    .await;
    let mut by_pod: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    for request in delivered {
        by_pod.entry(pod(&request)).or_default().push(request);
    }
    by_pod
}

/// The Pod a webhook request is about.
fn webhook_pod(request: &Received) -> String {
    request.body["involvedObject"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// The Pod a Slack message is about (`Warning REASON on Pod default/POD: ...`).
fn slack_pod(request: &Received) -> String {
    let text = request.body["text"].as_str().unwrap_or("?");
    let after = text.split_once(" on Pod default/").map_or("?", |(_, a)| a);
    after.split(':').next().unwrap_or("?").to_string()
}

/// The errors the handler's calls ended with lately.
async fn last_errors(t: &TestDaemon, handler: &str) -> Vec<String> {
    let (_, detail) = t.get(&format!("/handlers/{handler}")).await;
    detail["last_errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["error"].as_str().map(str::to_string))
        .collect()
}

/// How many changes each route delivered to its handler.
async fn routes_delivered(t: &TestDaemon) -> BTreeMap<String, u64> {
    let (_, routes) = t.get("/routes").await;
    routes["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["delivered"].as_u64().unwrap(),
            )
        })
        .collect()
}

const BACKOFF: &str = "Back-off restarting failed container app in pod web-1_default";
const UNSCHEDULABLE: &str = "0/3 nodes are available: 3 Insufficient cpu.";

/// The Warnings made while the receivers are down: Pod, reason, message.
const DURING: [(&str, &str, &str); 3] = [
    ("web-3", "FailedScheduling", UNSCHEDULABLE),
    (
        "web-4",
        "BackOff",
        "Back-off restarting failed container app",
    ),
    (
        "web-5",
        "Unhealthy",
        "Readiness probe failed: connection refused",
    ),
];

/// kubernetes-event-exporter's scenario: a Normal Event and two Warnings about Pods; the
/// Warnings reach both receivers with what a user reads, the Normal one neither.
async fn warnings_arrive_and_normal_events_do_not(
    t: &TestDaemon,
    webhook: &Receiver,
    slack: &Receiver,
) {
    // The Normal one first: the routes see the three in this order, so had they let it
    // through, it would have been counted before the Warnings were delivered.
    create_event(t, "web-1", "Normal", "Pulled", "Successfully pulled image").await;
    let (first, last) = just_now();
    let times = (first.clone(), last.clone());
    create_event_at(&t.client(), "web-1", "Warning", "BackOff", BACKOFF, times).await;
    create_event(t, "web-2", "Warning", "FailedScheduling", UNSCHEDULABLE).await;

    let hooked = delivered_by_pod(webhook, 2, webhook_pod).await;
    assert_eq!(
        hooked["web-1"][0].body,
        json!({
            "type": "Warning", "reason": "BackOff", "message": BACKOFF,
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                               "name": "web-1"},
            "namespace": "default", "count": 3, "source": {"component": "kubelet"},
            "firstTimestamp": first, "lastTimestamp": last,
        })
    );
    assert_eq!(hooked["web-1"][0].path, "/events");
    assert_eq!(hooked["web-2"][0].body["reason"], "FailedScheduling");
    assert_eq!(hooked["web-2"][0].body["message"], UNSCHEDULABLE);
    assert_eq!(
        hooked["web-2"][0].body["source"],
        json!({"component": "default-scheduler"})
    );
    let posted = delivered_by_pod(slack, 2, slack_pod).await;
    assert_eq!(posted["web-1"][0].path, "/services/T0/B0/s3cret");
    assert_eq!(
        posted["web-1"][0].body["text"],
        format!("Warning BackOff on Pod default/web-1: {BACKOFF}")
    );
    assert_eq!(
        posted["web-2"][0].body["text"],
        format!("Warning FailedScheduling on Pod default/web-2: {UNSCHEDULABLE}")
    );
    let counted = routes_delivered(t).await;
    assert_eq!(counted[WEBHOOK], 2, "{counted:?}");
    assert_eq!(counted[SLACK], 2, "{counted:?}");
    assert_eq!(webhook.received().len(), 2);
    assert_eq!(slack.received().len(), 2);
}

/// The outage: the webhook answers 503; Slack's connection is dropped and its port closed,
/// so every new connection is refused. A Normal Event and [`DURING`]'s Warnings are made,
/// and the outage lasts until both handlers are quarantined (their Warnings wait without
/// spending retries) and one call each has tried its receiver again in vain (the
/// quarantine's backoff doubled from 5 s to 10 s): longer than the default `max_retries`
/// (5 retries, 3.1 s) would have kept them. Returns the port Slack listened on.
async fn go_down_for_a_while(t: &TestDaemon, webhook: &Receiver, slack: Receiver) -> u16 {
    webhook.set(Mode::Down);
    slack.set(Mode::Reset);
    let slack_port = slack.port();
    drop(slack);
    create_event(t, "web-6", "Normal", "Started", "Started container app").await;
    for (pod, reason, message) in DURING {
        create_event(t, pod, "Warning", reason, message).await;
    }
    support::eventually(
        "a failed try in quarantine on each handler",
        WAIT,
        async || {
            let (_, status) = t.get("/status").await;
            let handlers = status["handlers"].as_array().cloned().unwrap_or_default();
            let retried = handlers
                .iter()
                .filter(|h| h["quarantine"]["backoff_seconds"].as_f64() >= Some(10.0))
                .count();
            (retried == 2).then_some(())
        },
    )
    .await;
    let errors = last_errors(t, WEBHOOK).await;
    assert!(
        errors
            .iter()
            .any(|e| e.contains("the receiver answered 503")),
        "{errors:#?}"
    );
    let errors = last_errors(t, SLACK).await;
    assert!(
        errors.iter().any(|e| e.contains("ConnectionRefused")),
        "{errors:#?}"
    );
    slack_port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_reach_the_webhook_and_slack_normal_events_do_not_and_an_outage_loses_none() {
    let webhook = Receiver::start().await;
    let slack = Receiver::start().await;
    let t = TestDaemon::builder(&fragment(&webhook, &slack))
        .start()
        .await;
    create_secret(&t, &webhook, &slack).await;
    warnings_arrive_and_normal_events_do_not(&t, &webhook, &slack).await;
    let slack_port = go_down_for_a_while(&t, &webhook, slack).await;

    // Back: every Warning made meanwhile arrives at each, once; the Normal one at neither.
    webhook.set(Mode::Ok);
    let slack = Receiver::start_on(slack_port).await;
    let hooked = delivered_by_pod(&webhook, 5, webhook_pod).await;
    let posted = delivered_by_pod(&slack, 3, slack_pod).await;
    for (pod, reason, message) in DURING {
        assert_eq!(hooked[pod].len(), 1, "{pod}: {:#?}", hooked[pod]);
        assert_eq!(hooked[pod][0].body["reason"], reason);
        assert_eq!(hooked[pod][0].body["message"], message);
        assert_eq!(posted[pod].len(), 1, "{pod}: {:#?}", posted[pod]);
        assert_eq!(
            posted[pod][0].body["text"],
            format!("Warning {reason} on Pod default/{pod}: {message}")
        );
    }
    assert_eq!(hooked.len(), 5, "{:?}", hooked.keys());
    assert_eq!(posted.len(), 3, "{:?}", posted.keys());
    for handler in [WEBHOOK, SLACK] {
        let (_, letters) = t.get(&format!("/handlers/{handler}/dead-letters")).await;
        assert_eq!(letters["dead_letters"], json!([]), "{handler}: {letters:#}");
    }
    let counted = routes_delivered(&t).await;
    assert_eq!(counted[WEBHOOK], 5, "{counted:?}");
    assert_eq!(counted[SLACK], 5, "{counted:?}");
    t.stop().await;
}

/// kubernetes-event-exporter replaced: its pod is replaced (a config edit) with no
/// `state_dir`. The Warnings there are posted once, not again after the restart; a Warning
/// made after it is posted, one that last happened two hours before is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_state_posts_no_warning_again_and_an_old_warning_not_at_all() {
    let webhook = Receiver::start().await;
    let slack = Receiver::start().await;
    let mut t = TestDaemon::builder(&fragment(&webhook, &slack))
        .start()
        .await;
    create_secret(&t, &webhook, &slack).await;
    create_event(&t, "web-1", "Warning", "BackOff", BACKOFF).await;
    create_event(&t, "web-2", "Warning", "FailedScheduling", UNSCHEDULABLE).await;
    delivered_by_pod(&webhook, 2, webhook_pod).await;
    delivered_by_pod(&slack, 2, slack_pod).await;

    t.restart().await;
    let (_, routes) = t.get("/routes").await;
    for route in routes["routes"].as_array().unwrap() {
        assert_eq!(route["initial_skipped"], 2, "{routes:#}");
        assert_eq!(route["delivered"], 0, "{routes:#}");
    }
    let hours_ago = |h: i64| {
        let at = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap()
            - jiff::SignedDuration::from_hours(h);
        at.to_string()
    };
    create_event_at(
        &t.client(),
        "web-7",
        "Warning",
        "BackOff",
        "Back-off restarting failed container app",
        (hours_ago(3), hours_ago(2)),
    )
    .await;
    create_event(&t, "web-8", "Warning", "Unhealthy", "Liveness probe failed").await;
    // The routes see the old Warning before the new one: once the new one is posted, the
    // old one was left out.
    let hooked = delivered_by_pod(&webhook, 3, webhook_pod).await;
    let posted = delivered_by_pod(&slack, 3, slack_pod).await;
    for by_pod in [&hooked, &posted] {
        let pods: Vec<(&str, usize)> = by_pod.iter().map(|(p, r)| (p.as_str(), r.len())).collect();
        assert_eq!(pods, [("web-1", 1), ("web-2", 1), ("web-8", 1)]);
    }
    let counted = routes_delivered(&t).await;
    assert_eq!(counted[WEBHOOK], 1, "{counted:?}");
    assert_eq!(counted[SLACK], 1, "{counted:?}");
    assert_eq!(webhook.received().len(), 3);
    assert_eq!(slack.received().len(), 3);
    t.stop().await;
}

/// The recipe from the binary alone, as `cargo install` leaves it: its fragment (the
/// allow-lists naming the receivers) in a folder outside the checkout with no plugins folder
/// and nothing built, run by `switchyard run` against the simulator. A Warning reaches both
/// receivers through the sinks the binary carries; after a restart without `state_dir`,
/// nothing is posted again, and a new Warning is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_runs_from_the_binary_alone_outside_the_checkout_and_restarts_quietly() {
    let webhook = Receiver::start().await;
    let slack = Receiver::start().await;
    let sim = support::start_sim().await;
    let client = sim.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    assert!(!dir.path().starts_with(support::root()));
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    std::fs::write(
        dir.path().join("admin-token"),
        format!("{}\n", support::TOKEN),
    )
    .unwrap();
    let yaml = format!(
        "admin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n  token_file: admin-token\n{}",
        fragment(&webhook, &slack)
    );
    std::fs::write(dir.path().join("switchyard.yaml"), yaml).unwrap();
    create_secret_with(&client, &webhook, &slack).await;
    create_event_at(&client, "web-1", "Warning", "BackOff", BACKOFF, just_now()).await;
    let first = crate::state::Child::start(dir.path(), &kubeconfig).await;
    // Made after the start: posted (the one before it is passed over).
    create_event_at(&client, "web-2", "Warning", "BackOff", BACKOFF, just_now()).await;
    let hooked = delivered_by_pod(&webhook, 1, webhook_pod).await;
    let posted = delivered_by_pod(&slack, 1, slack_pod).await;
    assert_eq!(hooked.keys().collect::<Vec<_>>(), ["web-2"]);
    assert_eq!(posted.keys().collect::<Vec<_>>(), ["web-2"]);
    let plugins = first.status().await["handlers"].clone();
    for handler in plugins.as_array().unwrap() {
        assert!(
            handler["plugin"].as_str().unwrap().starts_with("builtin:"),
            "{handler:#}"
        );
    }
    first.process.terminate(WAIT);

    let second = crate::state::Child::start(dir.path(), &kubeconfig).await;
    support::eventually("the restarted daemon synced", WAIT, async || {
        let status = second.status().await;
        (status["informers"][0]["synced"] == true).then_some(())
    })
    .await;
    create_event_at(
        &client,
        "web-3",
        "Warning",
        "Unhealthy",
        "Liveness probe failed",
        just_now(),
    )
    .await;
    let hooked = delivered_by_pod(&webhook, 2, webhook_pod).await;
    let posted = delivered_by_pod(&slack, 2, slack_pod).await;
    for by_pod in [&hooked, &posted] {
        let pods: Vec<(&str, usize)> = by_pod.iter().map(|(p, r)| (p.as_str(), r.len())).collect();
        assert_eq!(pods, [("web-2", 1), ("web-3", 1)]);
    }
    drop(second);
    sim.stop().await;
}

/// The components the binary carries were built from the sources as they are: the digest
/// `scripts/update-builtin-plugins.sh` recorded is that of the sinks, the SDK and the
/// contract now.
#[test]
fn the_builtin_sinks_were_built_from_the_sources_as_they_are() {
    let output = std::process::Command::new("bash")
        .arg(support::root().join("scripts/builtin-sources-digest.sh"))
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        switchyard::plugin::builtin::SOURCES_DIGEST.trim(),
        "a sink, the SDK or the contract changed since src/plugin/builtin/ was built: run \
         scripts/update-builtin-plugins.sh"
    );
}

#[test]
fn rbac_grants_reading_events_and_the_one_secret_nothing_more() {
    assert_eq!(
        super::granted(RECIPE),
        [
            "ClusterRole core events get,list,watch",
            "Role/default core secrets names=warning-events get,list,watch",
        ]
    );
}
