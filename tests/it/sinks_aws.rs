//! The AWS sink (`builtin:aws`) in the daemon against moto's server (a real implementation
//! of the AWS APIs, from PyPI) and the simulator: a ConfigMap's change reaches SNS (and the
//! queue subscribed to it), an SQS FIFO queue, EventBridge (and the queue its rule
//! targets), Firehose (and the S3 bucket it writes to) and CloudWatch Logs (a stream the
//! sink creates), read back with boto3; a refusal is a dead letter naming AWS's code, and
//! so is a message too large; a throttling, then failing endpoint is retried with the same
//! deduplication id; a web identity token read from a file is exchanged with moto's STS.

mod batch;
mod moto;

use std::time::Duration;

use serde_json::{Value, json};

use crate::sinks::header;
use crate::support::receiver::{Mode, Receiver};
use crate::support::{self, TestDaemon};
use moto::Moto;

const WAIT: Duration = Duration::from_secs(60);

const KEYS: &str = "{access_key_id: AKIDEXAMPLE, secret_access_key: secret}";

/// A handler `NAME` on `builtin:aws` with `settings` (YAML flow mappings' entries), allowed
/// to reach `allow`, and a route on ConfigMaps to it.
fn handler(name: &str, settings: &str, allow: &str) -> (String, String) {
    let handler = format!(
        "
  {name}:
    plugin: builtin:aws
    instance: reuse
    timeout: 5s
    max_retries: 1000
    backoff_base: 20ms
    backoff_cap: 300ms
    qps: 0
    quarantine_after: 0
    config: {{region: us-east-1, {settings}}}
    capabilities:
      http: [\"{allow}\"]"
    );
    let route = format!(
        "
  - name: {name}
    resource: configmaps
    handler: {name}"
    );
    (handler, route)
}

/// A config of `handlers` (from [`handler`]).
fn config(handlers: &[(String, String)]) -> String {
    let (h, r): (Vec<&str>, Vec<&str>) = handlers
        .iter()
        .map(|(h, r)| (h.as_str(), r.as_str()))
        .unzip();
    format!("handlers:{}\nroutes:{}\n", h.concat(), r.concat())
}

/// The event a message carries, parsed from its text.
fn event(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_sns_sqs_eventbridge_firehose_and_cloudwatch_logs_read_back_with_boto3() {
    let moto = Moto::start().await;
    let made = moto.boto(json!({"action": "setup"}));
    let queues = &made["queues"];
    let m = &moto.endpoint;
    let endpoint = |extra: &str| format!("endpoint: \"{m}\", credentials: {KEYS}, {extra}");
    let yaml = config(&[
        handler(
            "sns",
            &endpoint(&format!(
                "service: sns, topic_arn: \"{}\"",
                made["topic"].as_str().unwrap()
            )),
            m,
        ),
        handler(
            "sqs",
            &endpoint(&format!(
                "service: sqs, queue_url: \"{}\"",
                queues["fifo"].as_str().unwrap()
            )),
            m,
        ),
        handler(
            "events",
            &endpoint("service: eventbridge, event_bus: k8s"),
            m,
        ),
        handler(
            "firehose",
            &endpoint("service: firehose, delivery_stream: to-s3"),
            m,
        ),
        handler(
            "logs",
            &endpoint("service: logs, log_group: /k8s, log_stream: changes"),
            m,
        ),
    ]);
    let t = TestDaemon::start(&yaml).await;
    let made_cm = t
        .create_configmap(json!({"metadata": {"name": "a"}, "data": {"v": "1"}}))
        .await;
    let id = format!(
        "{}.{}.add",
        made_cm.metadata.uid.unwrap(),
        made_cm.metadata.resource_version.unwrap()
    );
    let read = support::eventually("the change in every destination", WAIT, async || {
        let read = moto.boto(json!({"action": "read", "queues": queues}));
        let q = &read["queues"];
        let everywhere = ["from-sns", "fifo", "from-events"]
            .iter()
            .all(|name| !q[*name].as_array().unwrap().is_empty())
            && !read["s3"].as_array().unwrap().is_empty()
            && !read["logs"].as_array().unwrap().is_empty();
        if !everywhere {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        everywhere.then_some(read)
    })
    .await;
    let q = &read["queues"];
    // SNS, delivered raw to the queue subscribed to the topic.
    let from_sns = event(q["from-sns"][0]["body"].as_str().unwrap());
    assert_eq!(from_sns["kind"], "added");
    assert_eq!(from_sns["id"], id);
    assert_eq!(from_sns["object"]["data"], json!({"v": "1"}));
    // SQS FIFO: the object as the group, the change's id as deduplication id.
    let fifo = &q["fifo"][0];
    assert_eq!(event(fifo["body"].as_str().unwrap())["id"], id);
    assert_eq!(fifo["attributes"]["MessageGroupId"], "default/a");
    assert_eq!(fifo["attributes"]["MessageDeduplicationId"], id);
    // EventBridge: the rule on the bus sends the whole event to its queue target.
    let bridged = event(q["from-events"][0]["body"].as_str().unwrap());
    assert_eq!(bridged["source"], "switchyard");
    assert_eq!(bridged["detail-type"], "Kubernetes ConfigMap added");
    assert_eq!(bridged["detail"]["id"], id);
    // Firehose wrote the record, newline-terminated, to the bucket.
    let object = read["s3"][0].as_str().unwrap();
    assert!(object.ends_with('\n'), "{object:?}");
    assert_eq!(event(object)["id"], id);
    // CloudWatch Logs: the stream did not exist; the sink made it.
    assert_eq!(read["log_streams"], json!(["changes"]));
    assert_eq!(event(read["logs"][0].as_str().unwrap())["id"], id);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_and_a_message_too_large_are_dead_letters_saying_why() {
    let moto = Moto::start().await;
    let m = &moto.endpoint;
    let settings = format!(
        "service: sqs, endpoint: \"{m}\", credentials: {KEYS}, queue_url: \"{m}/123456789012/missing\""
    );
    let t = TestDaemon::start(&config(&[handler("sqs", &settings, m)])).await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    // Larger than SQS takes, even without an old object: refused before it is sent.
    t.create_configmap(json!({"metadata": {"name": "big"}, "data": {"v": "x".repeat(300_000)}}))
        .await;
    let letters = support::eventually("two dead letters", WAIT, async || {
        let (_, body) = t.get("/handlers/sqs/dead-letters").await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        (letters.len() == 2).then_some(letters)
    })
    .await;
    let letter = |id: &str| letters.iter().find(|l| l["id"] == id).unwrap();
    let missing = letter("sqs/default/a");
    assert_eq!(
        missing["last_error"],
        "permanent: AWS answered 400 QueueDoesNotExist: The specified queue does not exist.",
        "{letters:#?}"
    );
    assert_eq!(missing["attempts"], 1, "{letters:#?}");
    let big = letter("sqs/default/big")["last_error"].as_str().unwrap();
    assert!(
        big.starts_with("permanent: the message is 300")
            && big.ends_with("more than SQS takes (262144 bytes) even without the old object"),
        "{big}"
    );
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_then_failing_endpoint_is_retried_with_the_same_deduplication_id_until_it_answers()
 {
    let receiver = Receiver::start().await;
    receiver.set(Mode::RateLimited);
    let r = receiver.url("http");
    let settings = format!(
        "service: sqs, endpoint: \"{r}\", credentials: {KEYS}, queue_url: \"{r}/1/q.fifo\""
    );
    let t = TestDaemon::start(&config(&[handler("sqs", &settings, &r)])).await;
    let mut logs = t.logs.resubscribe();
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    // A 429 with `Retry-After: 1` is waited out, logged, and no failure.
    support::wait_for_log(&mut logs, WAIT, |l| {
        l.message == "SQS asked to slow down: sending again in 1000 ms"
    })
    .await;
    support::eventually_sync("two throttled attempts", WAIT, || {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    receiver.set(Mode::InternalError);
    support::eventually_sync("three failed attempts", WAIT, || {
        (receiver.received().len() >= 5).then_some(())
    })
    .await;
    receiver.set(Mode::Ok);
    support::eventually_sync("a delivery", WAIT, || {
        (!receiver.delivered().is_empty()).then_some(())
    })
    .await;
    let received = receiver.received();
    let ids: Vec<&Value> = received
        .iter()
        .map(|r| &r.body["MessageDeduplicationId"])
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0] && id.is_string()),
        "{ids:?}"
    );
    for request in &received {
        assert_eq!(
            header(request, "x-amz-target"),
            Some("AmazonSQS.SendMessage")
        );
        let authorization = header(request, "authorization").unwrap();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                && authorization.contains("/us-east-1/sqs/aws4_request"),
            "{authorization}"
        );
    }
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_identity_token_file_is_exchanged_with_sts_for_the_credentials_that_sign() {
    let moto = Moto::start().await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl\n").unwrap();
    let r = receiver.url("http");
    let m = &moto.endpoint;
    let settings = format!(
        "service: sqs, endpoint: \"{r}\", queue_url: \"{r}/1/q\", credentials: {{web_identity: \
         {{role_arn: \"arn:aws:iam::123456789012:role/switchyard\", sts_endpoint: \"{m}\", \
         token: {{valueFrom: {{file: \"{}\"}}}}}}}}",
        token.display()
    );
    let (handler, route) = handler("sqs", &settings, &r);
    let handler = handler.replace(
        &format!("http: [\"{r}\"]"),
        &format!("http: [\"{r}\", \"{m}\"]"),
    );
    let t = TestDaemon::start(&config(&[(handler, route)])).await;
    t.create_configmap(json!({"metadata": {"name": "a"}})).await;
    let request = support::eventually_sync("a delivery", WAIT, || {
        receiver.delivered().into_iter().next()
    })
    .await;
    // moto's STS hands out temporary keys (ASIA…) and a session token; both sign.
    let authorization = header(&request, "authorization").unwrap();
    assert!(authorization.contains("Credential=ASIA"), "{authorization}");
    assert!(
        authorization.contains("x-amz-security-token"),
        "{authorization}"
    );
    assert!(header(&request, "x-amz-security-token").is_some_and(|t| !t.is_empty()));
    t.stop().await;
}

#[test]
fn the_documented_config_of_every_service_is_a_valid_config() {
    let text = std::fs::read_to_string(support::root().join("docs/sinks.md")).unwrap();
    let config = crate::docs::yaml_block(&text, "### A complete config per service");
    let dir = tempfile::tempdir().unwrap();
    let loaded = switchyard::config::validate(&dir.path().join("switchyard.yaml"), config);
    let config = loaded.unwrap_or_else(|e| panic!("{e}"));
    let mut services: Vec<&str> = config
        .handlers
        .iter()
        .map(|h| h.config["service"].as_str().unwrap())
        .collect();
    services.sort();
    assert_eq!(services, ["eventbridge", "firehose", "logs", "sns", "sqs"]);
}
