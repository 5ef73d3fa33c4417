//! The rabbitmq sink, carried in the binary (`builtin:rabbitmq`), against a real RabbitMQ
//! (Debian's `rabbitmq-server` with the management plugin), the messages read back through
//! the management API: a change is published with its idempotency key; a message no queue
//! takes (`routed: false`) is retried until a queue is bound; a publish RabbitMQ refuses (the
//! exchange is gone) is a dead letter naming its answer.

use serde_json::{Value, json};

use super::{CONFIGMAPS, WAIT, config_for};
use crate::support::rabbitmq::Rabbitmq;
use crate::support::{self, TestDaemon};

/// Waits for `count` messages in `queue` and returns them.
async fn messages(mq: &Rabbitmq, queue: &str, count: usize) -> Vec<Value> {
    let mut taken = Vec::new();
    support::eventually(&format!("{count} messages"), WAIT, async || {
        taken.extend(mq.take(queue).await);
        (taken.len() >= count).then(|| taken.clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_gets_each_change_retries_an_unrouted_one_and_dead_letters_a_refusal() {
    let mq = Rabbitmq::start().await;
    mq.ok(
        "PUT",
        "exchanges/%2F/k8s",
        json!({"type": "topic", "durable": false}),
    )
    .await;
    mq.ok("PUT", "queues/%2F/changes", json!({"durable": false}))
        .await;
    mq.ok(
        "POST",
        "bindings/%2F/e/k8s/q/changes",
        json!({"routing_key": "cm.a"}),
    )
    .await;
    let sink = json!({"url": mq.url(), "exchange": "k8s", "username": "guest",
                      "password": "guest", "routing_key": "cm.{{object.metadata.name}}"});
    let yaml = config_for("builtin:rabbitmq", sink, &mq.url(), CONFIGMAPS);
    let t = TestDaemon::builder(&yaml).start().await;
    let made = t
        .create_configmap(json!({"metadata": {"name": "a"}, "data": {"v": "1"}}))
        .await;
    let message = messages(&mq, "changes", 1).await.remove(0);
    assert_eq!(message["routing_key"], "cm.a");
    let key = format!(
        "{}.{}.add",
        made.metadata.uid.unwrap(),
        made.metadata.resource_version.unwrap()
    );
    assert_eq!(message["properties"]["message_id"], key.as_str());
    assert_eq!(message["properties"]["delivery_mode"], 2);
    let payload: Value = serde_json::from_str(message["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["kind"], "added");
    assert_eq!(payload["object"]["data"], json!({"v": "1"}));

    // No queue takes `cm.late`: RabbitMQ answers `routed: false`, which is retried until a
    // queue is bound for it.
    t.create_configmap(json!({"metadata": {"name": "late"}}))
        .await;
    support::eventually("two retries", WAIT, async || {
        let (_, status) = t.get("/handlers/sink").await;
        (status["retries"].as_u64() >= Some(2)).then_some(status)
    })
    .await;
    let (_, status) = t.get("/handlers/sink").await;
    let errors = status["last_errors"].to_string();
    assert!(
        errors.contains("routed the message to no queue"),
        "{errors}"
    );
    mq.ok(
        "POST",
        "bindings/%2F/e/k8s/q/changes",
        json!({"routing_key": "cm.late"}),
    )
    .await;
    let late = messages(&mq, "changes", 1).await.remove(0);
    assert_eq!(late["routing_key"], "cm.late");

    // The exchange deleted: RabbitMQ refuses the publish, a dead letter at once.
    let (status, answer) = mq.call("DELETE", "exchanges/%2F/k8s", None).await;
    assert_eq!(status, 204, "{answer}");
    t.create_configmap(json!({"metadata": {"name": "gone"}}))
        .await;
    let letter = support::eventually("a dead letter", WAIT, async || {
        let (_, body) = t.get("/handlers/sink/dead-letters").await;
        body["dead_letters"].as_array()?.first().cloned()
    })
    .await;
    let error = letter["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("permanent: the receiver answered 4"),
        "{letter:#}"
    );
    assert!(error.contains("no exchange 'k8s'"), "{letter:#}");
    assert_eq!(letter["attempts"], 1, "{letter:#}");
    t.stop().await;
    mq.stop();
}
