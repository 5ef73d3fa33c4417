//! The sinks for hosted services (PagerDuty, Opsgenie, Microsoft Teams, Discord), carried in
//! the binary, against a receiver on loopback that checks each request against the
//! vendor's documented format (no such service runs here): a Warning Event reaches it after
//! 503s, the same incident key on every attempt; Discord's 429 is waited out; PagerDuty's and Opsgenie's incidents are
//! resolved or closed when the Event is deleted; a 400 is a dead letter naming the answer.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use super::{WAIT, config_for, core_event, delivered, header};
use crate::support::receiver::{Mode, Received, Receiver};
use crate::support::{self, TestDaemon};

/// A daemon running `builtin:PLUGIN` with `sink` (its URL pointing at `receiver`), on a
/// route of core v1 Events.
struct Running {
    t: TestDaemon,
    receiver: Receiver,
    events: Api<CoreEvent>,
    uid: String,
}

/// Starts `plugin`, creates a Warning Event while the receiver answers 503, lets it through,
/// and returns the requests of its attempts (the last one answered 200).
async fn warning_through_503s(
    plugin: &str,
    sink: impl Fn(&str) -> Value,
) -> (Running, Vec<Received>) {
    let receiver = Receiver::start().await;
    receiver.set(Mode::Down);
    let route = "    resource: v1/events";
    let yaml = config_for(
        plugin,
        sink(&receiver.url("http")),
        &receiver.url("http"),
        route,
    );
    let t = TestDaemon::builder(&yaml).start().await;
    let events: Api<CoreEvent> = Api::namespaced(t.client(), "default");
    let made = events
        .create(
            &PostParams::default(),
            &core_event("web-1.2", "Warning", "BackOff", "Back-off restarting app"),
        )
        .await
        .unwrap();
    support::eventually_sync("two refused attempts", WAIT, || {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    receiver.set(Mode::Ok);
    delivered(&receiver, 1).await;
    let attempts = receiver.received();
    let uid = made.metadata.uid.unwrap();
    (
        Running {
            t,
            receiver,
            events,
            uid,
        },
        attempts,
    )
}

impl Running {
    /// Deletes the Event and returns the request that reports it.
    async fn delete(&self) -> Received {
        self.events
            .delete("web-1.2", &DeleteParams::default())
            .await
            .unwrap();
        delivered(&self.receiver, 2).await.remove(1)
    }

    /// Makes the receiver answer 429 with `Retry-After: 1`, creates another Event, and
    /// checks that it is sent again after the second asked, and never dead-lettered.
    async fn rate_limited(&self) {
        let before = self.receiver.received().len();
        self.receiver.set(Mode::RateLimited);
        self.events
            .create(
                &PostParams::default(),
                &core_event("web-1.4", "Warning", "Slow", "x"),
            )
            .await
            .unwrap();
        let asked = support::eventually_sync("two 429s", WAIT, || {
            let received = self.receiver.received().split_off(before);
            (received.len() >= 2).then_some(received)
        })
        .await;
        let gap = asked[1].at - asked[0].at;
        assert!(
            gap >= Duration::from_millis(950),
            "sent again after {gap:?}"
        );
        self.receiver.set(Mode::Ok);
        support::eventually_sync("the 429ed event delivered", WAIT, || {
            let delivered = self.receiver.delivered();
            delivered
                .iter()
                .any(|r| r.body.to_string().contains("Slow"))
                .then_some(())
        })
        .await;
        let (_, letters) = self.t.get("/handlers/sink/dead-letters").await;
        assert_eq!(letters["dead_letters"], json!([]), "{letters}");
    }

    /// Makes the receiver answer 400, creates another Event, and checks that it becomes a
    /// dead letter at once, naming the answer.
    async fn refused(self) {
        self.receiver.set(Mode::Reject);
        self.events
            .create(
                &PostParams::default(),
                &core_event("web-1.3", "Warning", "Failed", "x"),
            )
            .await
            .unwrap();
        let letter = support::eventually("a dead letter", WAIT, async || {
            let (_, body) = self.t.get("/handlers/sink/dead-letters").await;
            body["dead_letters"].as_array()?.first().cloned()
        })
        .await;
        assert_eq!(
            letter["last_error"], "permanent: the receiver answered 400: invalid_payload",
            "{letter:#}"
        );
        assert_eq!(letter["attempts"], 1, "{letter:#}");
        self.t.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagerduty_triggers_with_the_event_s_uid_and_resolves_on_delete() {
    let sink = |url: &str| json!({"url": format!("{url}/v2/enqueue"), "routing_key": "R0KEY"});
    let (running, attempts) = warning_through_503s("builtin:pagerduty", sink).await;
    // Events API v2: routing_key, event_action, dedup_key, and a payload with summary,
    // source and severity (required), custom_details (optional).
    for attempt in &attempts {
        assert_eq!(attempt.path, "/v2/enqueue");
        assert_eq!(attempt.body["dedup_key"], running.uid.as_str());
    }
    let trigger = &attempts.last().unwrap().body;
    assert_eq!(trigger["routing_key"], "R0KEY");
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(
        trigger["payload"],
        json!({"summary": "Warning BackOff on Pod default/web-1", "source": "kubernetes",
               "severity": "warning", "custom_details": {
                   "Kind": "Pod", "Namespace": "default", "Name": "web-1", "Reason": "BackOff",
                   "Count": "3", "Source": "kubelet", "Message": "Back-off restarting app"}})
    );
    let resolve = running.delete().await.body;
    assert_eq!(
        resolve,
        json!({"routing_key": "R0KEY", "event_action": "resolve", "dedup_key": running.uid,
               "client": "switchyard"})
    );
    running.refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opsgenie_creates_an_alert_by_alias_and_closes_it_on_delete() {
    let sink = |url: &str| json!({"url": url, "api_key": "g-1", "tags": ["k8s"]});
    let (running, attempts) = warning_through_503s("builtin:opsgenie", sink).await;
    let create = attempts.last().unwrap();
    assert_eq!(create.path, "/v2/alerts");
    assert_eq!(header(create, "authorization"), Some("GenieKey g-1"));
    assert_eq!(
        create.body["message"],
        "Warning BackOff on Pod default/web-1"
    );
    assert_eq!(create.body["alias"], running.uid.as_str());
    assert_eq!(create.body["description"], "Back-off restarting app");
    assert_eq!(create.body["entity"], "Pod/default/web-1");
    assert_eq!(create.body["tags"], json!(["k8s"]));
    assert_eq!(create.body["details"]["Reason"], "BackOff");
    let close = running.delete().await;
    assert_eq!(
        close.path,
        format!("/v2/alerts/{}/close?identifierType=alias", running.uid)
    );
    assert_eq!(close.body["source"], "switchyard");
    running.refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_posts_an_adaptive_card_in_the_workflow_s_message_form() {
    let sink = |url: &str| {
        json!({"url": format!("{url}/workflows/1/triggers/manual"),
                                  "cluster": "test"})
    };
    let (running, attempts) = warning_through_503s("builtin:teams", sink).await;
    let message = &attempts.last().unwrap().body;
    assert_eq!(message["type"], "message");
    let attachment = &message["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    assert_eq!(card["version"], "1.4");
    assert_eq!(card["body"][0]["type"], "TextBlock");
    assert_eq!(
        card["body"][0]["text"],
        "Warning BackOff on Pod default/web-1"
    );
    assert_eq!(card["body"][1]["text"], "Back-off restarting app");
    assert_eq!(card["body"][2]["type"], "FactSet");
    assert!(
        card["body"][2]["facts"]
            .as_array()
            .unwrap()
            .contains(&json!({"title": "Cluster", "value": "test"}))
    );
    running.refused().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_posts_an_embed_to_the_webhook() {
    let sink = |url: &str| {
        json!({"url": format!("{url}/api/webhooks/1/token"),
                                  "username": "switchyard", "cluster": "test"})
    };
    let (running, attempts) = warning_through_503s("builtin:discord", sink).await;
    let message = &attempts.last().unwrap().body;
    assert_eq!(attempts.last().unwrap().path, "/api/webhooks/1/token");
    assert_eq!(message["username"], "switchyard");
    let embed = &message["embeds"][0];
    assert_eq!(embed["title"], "Warning BackOff on Pod default/web-1");
    assert_eq!(embed["description"], "Back-off restarting app");
    assert_eq!(embed["color"], 0xF0A30A);
    assert_eq!(embed["footer"]["text"], "test");
    assert_eq!(
        embed["fields"][3],
        json!({"name": "Reason", "value": "BackOff", "inline": true})
    );
    assert!(embed["timestamp"].as_str().unwrap().ends_with('Z'));
    // Discord's rate limit: a 429 with Retry-After is waited out, not a failure.
    running.rate_limited().await;
    running.refused().await;
}
