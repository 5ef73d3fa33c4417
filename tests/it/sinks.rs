//! The shipped sink plugins (plugins/sinks: webhook, cloudevents, slack) in the daemon,
//! against a real receiver on loopback and the simulator: what each sends, that a retried
//! CloudEvent keeps its id, that a 4xx ends as a dead letter saying why, and that a route on
//! core v1 Events posts Warnings to Slack and leaves Normal ones alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod alertmanager;
mod doc_configs;
mod logstores;
mod otlp;
mod rabbitmq;
mod vendors;

use crate::support::receiver::{Mode, Received, Receiver};
use crate::support::{self, TestDaemon};

pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// A handler `sink` running `plugin` with `config` (JSON, which YAML reads as it is),
/// allowed to reach `receiver`, and a route `sink` to it, `route` giving its other lines.
/// Each worker keeps its instance (`instance: reuse`), as docs/sinks.md suggests.
fn config(plugin: &str, config: Value, receiver: &Receiver, route: &str) -> String {
    config_for(plugin, config, &receiver.url("http"), route)
}

/// [`config`] for a sink allowed to reach `allow` (`http://HOST:PORT`).
pub(crate) fn config_for(plugin: &str, config: Value, allow: &str, route: &str) -> String {
    format!(
        "
handlers:
  sink:
    plugin: {plugin}
    instance: reuse
    timeout: 2s
    max_retries: 1000
    backoff_base: 20ms
    backoff_cap: 300ms
    qps: 0
    quarantine_after: 0
    config: {config}
    capabilities:
      http: [\"{allow}\"]
routes:
  - name: sink
    handler: sink
{route}
"
    )
}

pub(crate) const CONFIGMAPS: &str = "    resource: configmaps\n    delivery: every";

async fn start(plugin: &str, yaml: &str) -> TestDaemon {
    TestDaemon::builder(yaml)
        .plugin_file(plugin, plugin)
        .start()
        .await
}

/// Waits until `receiver` answered 200 to `count` requests, and returns them.
pub(crate) async fn delivered(receiver: &Receiver, count: usize) -> Vec<Received> {
    support::eventually_sync(&format!("{count} deliveries"), WAIT, || {
        let delivered = receiver.delivered();
        (delivered.len() >= count).then_some(delivered)
    })
    .await
}

/// The value of the header `name` a receiver got, if it got one.
pub(crate) fn header<'a>(request: &'a Received, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_delivers_the_configured_subset_with_the_headers_and_dead_letters_a_4xx() {
    let receiver = Receiver::start().await;
    let sink = json!({
        "url": format!("{}/hooks/k8s?team=shop", receiver.url("http")),
        "headers": {"authorization": "Bearer s3cr3t", "x-team": "shop"},
        "body": {
            "change": "{{kind}}",
            "object": "{{object.metadata.namespace}}/{{object.metadata.name}}",
            "value": "{{object.data.v}}",
            "labels": "{{object.metadata.labels}}",
            "cluster": "test",
        },
    });
    let yaml = config("webhook", sink, &receiver, CONFIGMAPS);
    let t = start("webhook", &yaml).await;
    t.create_configmap(json!({"metadata": {"name": "a", "labels": {"app": "shop"}},
                              "data": {"v": "1"}}))
        .await;
    let request = delivered(&receiver, 1).await.remove(0);
    assert_eq!(request.path, "/hooks/k8s?team=shop");
    assert_eq!(header(&request, "authorization"), Some("Bearer s3cr3t"));
    assert_eq!(header(&request, "x-team"), Some("shop"));
    assert_eq!(header(&request, "content-type"), Some("application/json"));
    assert_eq!(
        request.body,
        json!({"change": "added", "object": "default/a", "value": "1",
               "labels": {"app": "shop"}, "cluster": "test"})
    );

    // A 4xx is permanent: no retries, a dead letter at once that says what the receiver said.
    receiver.set(Mode::Reject);
    t.create_configmap(json!({"metadata": {"name": "b"}})).await;
    let letters = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters[0]["id"], "sink/default/b", "{letters:#?}");
    assert_eq!(
        letters[0]["last_error"], "permanent: the receiver answered 400: invalid_payload",
        "{letters:#?}"
    );
    assert_eq!(letters[0]["attempts"], 1, "{letters:#?}");
    t.stop().await;
}

/// The attributes of a CloudEvent as the receiver got it, in either mode.
fn attributes(request: &Received, structured: bool) -> Value {
    let mut attributes = serde_json::Map::new();
    for name in [
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "kind",
        "name",
        "namespace",
    ] {
        let value = if structured {
            request.body[name].as_str()
        } else {
            header(request, &format!("ce-{name}"))
        };
        attributes.insert(name.into(), value.into());
    }
    Value::Object(attributes)
}

/// A ConfigMap's delivery through 503s, then its update: both carry ApiServerSource's
/// attributes, every attempt at one change the same id, the two changes different ones.
async fn cloudevents_through_503s(mode: &str) {
    let structured = mode == "structured";
    let receiver = Receiver::start().await;
    receiver.set(Mode::Unavailable);
    let sink = json!({"url": format!("{}/default/default", receiver.url("http")), "mode": mode,
                      "source": "https://10.96.0.1:443"});
    let t = start(
        "cloudevents",
        &config("cloudevents", sink, &receiver, CONFIGMAPS),
    )
    .await;
    let made = t
        .create_configmap(json!({"metadata": {"name": "a"}, "data": {"v": "1"}}))
        .await;
    support::eventually_sync("two refused attempts", WAIT, || {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    receiver.set(Mode::Ok);
    let first = delivered(&receiver, 1).await.remove(0);
    let uid = made.metadata.uid.unwrap();
    let rv = made.metadata.resource_version.unwrap();
    assert_eq!(
        attributes(&first, structured),
        json!({
            "specversion": "1.0",
            "id": format!("{uid}.{rv}.add"),
            "source": "https://10.96.0.1:443",
            "type": "dev.knative.apiserver.resource.add",
            "subject": "/apis/v1/namespaces/default/configmaps/a",
            "kind": "ConfigMap",
            "name": "a",
            "namespace": "default",
        })
    );
    let ids: Vec<Value> = receiver
        .received()
        .iter()
        .map(|r| attributes(r, structured)["id"].clone())
        .collect();
    assert!(ids.len() >= 3, "{ids:?}");
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "a retry changed the id: {ids:?}"
    );
    let data = if structured {
        assert_eq!(
            header(&first, "content-type"),
            Some("application/cloudevents+json")
        );
        assert_eq!(first.body["datacontenttype"], "application/json");
        first.body["data"].clone()
    } else {
        assert_eq!(header(&first, "content-type"), Some("application/json"));
        first.body.clone()
    };
    assert_eq!(data["metadata"]["name"], "a");
    assert_eq!(data["data"], json!({"v": "1"}));

    let patched: ConfigMap = t
        .configmaps("default")
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    let update = delivered(&receiver, 2).await.remove(1);
    let attributes = attributes(&update, structured);
    assert_eq!(attributes["type"], "dev.knative.apiserver.resource.update");
    assert_eq!(
        attributes["id"],
        format!(
            "{uid}.{}.update",
            patched.metadata.resource_version.unwrap()
        )
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_binary_carries_ce_headers_and_keeps_its_id_across_retries() {
    cloudevents_through_503s("binary").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_structured_carries_the_envelope_and_keeps_its_id_across_retries() {
    cloudevents_through_503s("structured").await;
}

/// A core v1 Event of `event_type` about the Pod `pod`.
pub(crate) fn core_event(name: &str, event_type: &str, reason: &str, message: &str) -> CoreEvent {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "type": event_type,
        "reason": reason,
        "message": message,
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                           "name": "web-1"},
        "source": {"component": "kubelet"},
        "count": 3,
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_posts_a_warning_event_and_nothing_for_a_normal_one() {
    let receiver = Receiver::start().await;
    let sink = json!({"url": format!("{}/services/T0/B0/secret", receiver.url("http")),
                      "cluster": "test"});
    let route = "    resource: v1/events\n    fields: type=Warning\n    events: [added, updated]";
    let t = start("slack", &config("slack", sink, &receiver, route)).await;
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    // The Normal one first: the route's watch sees the two in this order, so had it let the
    // Normal one through, it would have counted it before the Warning was posted.
    for (name, event_type, reason, message) in [
        ("web-1.1", "Normal", "Pulled", "Successfully pulled image"),
        (
            "web-1.2",
            "Warning",
            "BackOff",
            "Back-off restarting failed container app",
        ),
    ] {
        events
            .create(
                &PostParams::default(),
                &core_event(name, event_type, reason, message),
            )
            .await
            .unwrap();
    }
    let posted = delivered(&receiver, 1).await.remove(0);
    assert_eq!(posted.path, "/services/T0/B0/secret");
    assert_eq!(
        posted.body["text"],
        "Warning BackOff on Pod default/web-1: Back-off restarting failed container app"
    );
    assert_eq!(
        posted.body["blocks"],
        json!([
            {"type": "section", "text": {"type": "mrkdwn",
             "text": ":warning: *Warning* `BackOff` on *Pod default/web-1*"}},
            {"type": "section", "text": {"type": "mrkdwn",
             "text": "Back-off restarting failed container app"}},
            {"type": "context", "elements": [{"type": "mrkdwn",
             "text": "cluster *test* · seen 3 times · from kubelet"}]},
        ])
    );
    let (_, routes) = t.get("/routes").await;
    assert_eq!(routes["routes"][0]["delivered"], 1, "{routes:#}");
    assert_eq!(receiver.received().len(), 1);
    t.stop().await;
}

/// The sinks ignored `Retry-After` (attempts at 0, 0.1, 0.3 s ... then a
/// dead letter before the time the receiver asked for). A 429 now comes back after the
/// wait it asks for, and does not count toward `max_retries`; each attempt carries the same
/// `Idempotency-Key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_waits_as_a_429_asks_and_never_dead_letters_for_it() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::RateLimited);
    let sink = json!({"url": format!("{}/hooks", receiver.url("http"))});
    let yaml = config("webhook", sink, &receiver, CONFIGMAPS)
        .replace("max_retries: 1000", "max_retries: 1");
    let t = start("webhook", &yaml).await;
    let made = t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let asked = support::eventually_sync("three 429s", WAIT, || {
        let received = receiver.received();
        (received.len() >= 3).then_some(received)
    })
    .await;
    // Every attempt at the change carries its idempotency key: uid, resourceVersion, change.
    let key = format!(
        "{}.{}.add",
        made.metadata.uid.unwrap(),
        made.metadata.resource_version.unwrap()
    );
    for request in &asked {
        assert_eq!(header(request, "idempotency-key"), Some(key.as_str()));
    }
    for pair in asked.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(950),
            "sent again after {gap:?}, not the 1 s asked"
        );
    }
    let (_, letters) = t.get("/handlers/sink/dead-letters").await;
    assert_eq!(letters["dead_letters"], json!([]), "{letters}");
    receiver.set(Mode::Ok);
    let request = delivered(&receiver, 1).await.remove(0);
    assert_eq!(request.body["object"]["metadata"]["name"], "a");
    let (_, letters) = t.get("/handlers/sink/dead-letters").await;
    assert_eq!(letters["dead_letters"], json!([]), "{letters}");
    t.stop().await;
}

/// The default body of an update (object and old object) over
/// `outbound.max_request_body` was retried until dead-lettered though no retry could send
/// it; now it is a dead letter at once that names the limit and the template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_dead_letters_a_request_too_large_at_once_saying_what_to_change() {
    let receiver = Receiver::start().await;
    let sink = json!({"url": format!("{}/hooks", receiver.url("http"))});
    let yaml = config("webhook", sink, &receiver, CONFIGMAPS).replace(
        "    capabilities:",
        "    outbound: {max_request_body: 4Ki}\n    capabilities:",
    );
    let t = start("webhook", &yaml).await;
    t.create_configmap(json!({"metadata": {"name": "big"}, "data": {"v": "x".repeat(3000)}}))
        .await;
    delivered(&receiver, 1).await;
    t.configmaps("default")
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "y".repeat(3000)}})),
        )
        .await
        .unwrap();
    let letters = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters[0]["attempts"], 1, "{letters:#?}");
    let error = letters[0]["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("permanent: too large: HttpRequestBodySize"),
        "{error}"
    );
    assert!(error.contains("outbound.max_request_body"), "{error}");
    assert!(error.contains("`body:` template"), "{error}");
    assert_eq!(receiver.received().len(), 1);
    t.stop().await;
}

/// An Event with a 5,000-character `reason` or a 4,000-character
/// `source.component` made a Block Kit text element longer than Slack's 3,000 characters
/// (answered `invalid_blocks`, a dead letter at once); every element now fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_cuts_long_event_fields_to_block_kit_s_limits() {
    let receiver = Receiver::start().await;
    let sink = json!({"url": format!("{}/services/T0/B0/secret", receiver.url("http")),
                      "cluster": "c".repeat(4000)});
    let route = "    resource: v1/events\n    events: [added, updated]";
    let t = start("slack", &config("slack", sink, &receiver, route)).await;
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    let mut event = core_event("web-1.3", "Warning", &"R".repeat(5000), &"m".repeat(5000));
    event.source.as_mut().unwrap().component = Some("k".repeat(4000));
    events.create(&PostParams::default(), &event).await.unwrap();
    let posted = delivered(&receiver, 1).await.remove(0);
    let mut texts = Vec::new();
    for block in posted.body["blocks"].as_array().unwrap() {
        texts.extend(block["text"]["text"].as_str());
        for element in block["elements"].as_array().into_iter().flatten() {
            texts.extend(element["text"].as_str());
        }
    }
    assert_eq!(texts.len(), 3, "{:#}", posted.body);
    for text in texts {
        assert!(
            text.chars().count() <= 3000,
            "{} characters: {text}",
            text.chars().count()
        );
    }
    assert!(posted.body["text"].as_str().unwrap().chars().count() <= 4000);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_sends_a_batch_in_one_ndjson_request_retries_it_as_a_503_asks_and_dead_letters_a_4xx()
 {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Unavailable);
    let sink = json!({
        "url": format!("{}/bulk", receiver.url("http")),
        "batch_format": "ndjson",
        "body": {"change": "{{kind}}", "name": "{{object.metadata.name}}"},
    });
    let yaml = config("webhook", sink, &receiver, CONFIGMAPS).replace(
        "    instance: reuse\n",
        "    instance: reuse\n    concurrency: 1\n    batch:\n      max_events: 10\n      max_wait: 1s\n",
    );
    // One worker, so one batch holds every event ready (two would share them).
    let t = start("webhook", &yaml).await;
    for name in ["a", "b", "c"] {
        t.create_configmap(json!({"metadata": {"name": name}}))
            .await;
    }
    // The first request carries the three events; the receiver answers 503 with
    // `Retry-After: 1`, so the same three come again a second later at the earliest.
    let first = support::eventually_sync("the first request", WAIT, || {
        receiver.received().first().cloned()
    })
    .await;
    receiver.set(Mode::Ok);
    let lines = |request: &Received| {
        let mut names: Vec<Value> = String::from_utf8(request.raw.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["name"].clone())
            .collect();
        names.sort_by_key(|n| n.to_string());
        names
    };
    assert_eq!(lines(&first), [json!("a"), json!("b"), json!("c")]);
    assert_eq!(header(&first, "content-type"), Some("application/x-ndjson"));
    assert_eq!(header(&first, "idempotency-key"), None);
    let again = delivered(&receiver, 1).await.remove(0);
    assert_eq!(lines(&again), lines(&first));
    assert!(
        again.at - first.at >= Duration::from_secs(1),
        "sent again after {:?}, not the Retry-After of 1 s",
        again.at - first.at
    );
    support::eventually("three events done", WAIT, async || {
        let status = t.status_json().await;
        (status["handlers"][0]["processed"] == 3).then_some(())
    })
    .await;
    assert_eq!(receiver.received().len(), 2, "one request per batch");

    // A 4xx answer moves every event of its batch to the dead letters, saying why.
    receiver.set(Mode::Reject);
    t.create_configmap(json!({"metadata": {"name": "d"}})).await;
    let letters = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (!letters.is_empty()).then_some(letters)
    })
    .await;
    assert_eq!(letters[0]["id"], "sink/default/d", "{letters:#?}");
    assert_eq!(
        letters[0]["last_error"], "permanent: the receiver answered 400: invalid_payload",
        "{letters:#?}"
    );
    assert_eq!(letters[0]["attempts"], 1, "{letters:#?}");
    t.stop().await;
}

/// A change the receiver could not take before the daemon was killed is sent again by the
/// next daemon (with `state_dir`) under the same `Idempotency-Key`, so a receiver that took
/// it after all can tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_sends_a_change_again_after_a_restart_under_the_same_idempotency_key() {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Down);
    let sim = support::start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let sink = json!({"url": format!("{}/hooks", receiver.url("http"))});
    let yaml = format!(
        "state_dir: state\nadmin:\n  listen: 127.0.0.1:0\n  probes_listen: null\n{}",
        config("builtin:webhook", sink, &receiver, CONFIGMAPS)
    );
    support::write_config(dir.path(), &yaml);
    let first = crate::state::Child::start(dir.path(), &kubeconfig).await;
    let client = sim.client().unwrap();
    support::create_configmap(&client, "default", json!({"metadata": {"name": "a"}})).await;
    let tried =
        support::eventually_sync("a tried", WAIT, || receiver.received().first().cloned()).await;
    let key = header(&tried, "idempotency-key")
        .expect("a key")
        .to_string();
    first.process.kill();
    receiver.set(Mode::Ok);
    let _second = crate::state::Child::start(dir.path(), &kubeconfig).await;
    let sent = delivered(&receiver, 1).await;
    assert_eq!(header(&sent[0], "idempotency-key"), Some(key.as_str()));
    sim.stop().await;
}
