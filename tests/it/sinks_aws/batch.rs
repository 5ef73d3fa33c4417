//! The AWS sink with `batch:` against moto: 25 changes reach each service in the calls its
//! batch API takes (SQS, SNS and EventBridge 10 at a time), each read back once with its
//! id, and a change too large for a service is a dead letter of its own while the rest
//! of its batch is delivered. A Firehose batch larger than the handler's
//! `outbound.max_request_body` arrives whole, in calls that fit the limit.

use std::collections::BTreeSet;

use super::*;

/// Changes created at once: more than one call of SQS, SNS or EventBridge takes.
const COUNT: usize = 25;

/// `handler` with one worker (so one batch holds every event ready) and `batch:`.
fn batched((handler, route): (String, String)) -> (String, String) {
    let handler = handler.replace(
        "    instance: reuse\n",
        "    instance: reuse\n    concurrency: 1\n    batch: {max_events: 100, max_wait: 2s}\n",
    );
    (handler, route)
}

/// The ids of the events in `texts` (messages' bodies), sorted.
fn ids<'a>(texts: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    texts
        .map(|t| event(t)["id"].as_str().unwrap().to_string())
        .collect()
}

/// Creates the ConfigMap `name` whose `v` is `value`; the id of its change.
async fn created(t: &TestDaemon, name: &str, value: &str) -> String {
    let made = t
        .create_configmap(json!({"metadata": {"name": name}, "data": {"v": value}}))
        .await;
    let meta = made.metadata;
    format!(
        "{}.{}.add",
        meta.uid.unwrap(),
        meta.resource_version.unwrap()
    )
}

/// The changes one call carried, from the log line `delivered D of N in one call to …`.
fn call_size(message: &str) -> Option<usize> {
    let rest = message.strip_prefix("delivered ")?;
    let (_, rest) = rest.split_once(" of ")?;
    rest.split_once(" in one call")?.0.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_25_changes_is_split_into_the_calls_each_service_takes_and_arrives_whole() {
    let moto = Moto::start().await;
    let made = moto.boto(json!({"action": "setup"}));
    let queues = &made["queues"];
    let m = &moto.endpoint;
    let endpoint = |extra: &str| format!("endpoint: \"{m}\", credentials: {KEYS}, {extra}");
    let topic = made["topic"].as_str().unwrap();
    let fifo = queues["fifo"].as_str().unwrap();
    let yaml = config(&[
        batched(handler(
            "sns",
            &endpoint(&format!("service: sns, topic_arn: \"{topic}\"")),
            m,
        )),
        batched(handler(
            "sqs",
            &endpoint(&format!("service: sqs, queue_url: \"{fifo}\"")),
            m,
        )),
        batched(handler(
            "events",
            &endpoint("service: eventbridge, event_bus: k8s"),
            m,
        )),
        batched(handler(
            "firehose",
            &endpoint("service: firehose, delivery_stream: to-s3"),
            m,
        )),
        batched(handler(
            "logs",
            &endpoint("service: logs, log_group: /k8s, log_stream: changes"),
            m,
        )),
    ]);
    let mut t = TestDaemon::start(&yaml).await;
    let mut expected = BTreeSet::new();
    for i in 0..COUNT {
        expected.insert(created(&t, &format!("c{i}"), "1").await);
    }
    // Larger than SNS, SQS, EventBridge and CloudWatch Logs take; Firehose takes it.
    t.create_configmap(json!({"metadata": {"name": "big"}, "data": {"v": "x".repeat(300_000)}}))
        .await;
    let drain = json!({"from-sns": queues["from-sns"], "fifo": fifo,
                       "from-events": queues["from-events"]});
    let mut drained: Vec<Value> = Vec::new();
    let read = support::eventually("every change in every destination", WAIT, async || {
        drained.push(moto.boto(json!({"action": "drain", "queues": drain}))["queues"].clone());
        let count = |name: &str| {
            drained
                .iter()
                .map(|d| d[name].as_array().unwrap().len())
                .sum::<usize>()
        };
        let read = moto.boto(json!({"action": "read", "queues": {}}));
        let lines: usize = read["s3"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().lines().count())
            .sum();
        let done = ["from-sns", "fifo", "from-events"]
            .iter()
            .all(|q| count(q) >= COUNT)
            && lines > COUNT
            && read["logs"].as_array().unwrap().len() >= COUNT;
        if !done {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        done.then_some(read)
    })
    .await;
    let bodies = |name: &str| -> Vec<Value> {
        drained
            .iter()
            .flat_map(|d| d[name].as_array().unwrap().clone())
            .collect()
    };
    for queue in ["from-sns", "fifo"] {
        let got = bodies(queue);
        assert_eq!(
            ids(got.iter().map(|m| m["body"].as_str().unwrap())),
            expected,
            "{queue}"
        );
        assert_eq!(got.len(), COUNT, "{queue}: each change once");
    }
    // The FIFO queue: each object its group, each change's id its deduplication id.
    for message in bodies("fifo") {
        let body = event(message["body"].as_str().unwrap());
        let attributes = &message["attributes"];
        assert_eq!(attributes["MessageDeduplicationId"], body["id"]);
        assert_eq!(
            attributes["MessageGroupId"],
            format!(
                "default/{}",
                body["object"]["metadata"]["name"].as_str().unwrap()
            )
        );
    }
    let bridged: Vec<Value> = bodies("from-events")
        .iter()
        .map(|m| event(m["body"].as_str().unwrap()))
        .collect();
    let bridged_ids: BTreeSet<String> = bridged
        .iter()
        .map(|e| e["detail"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bridged_ids, expected);
    assert_eq!(bridged.len(), COUNT);
    // Firehose took the large change too: 26 records, newline-delimited.
    let records: Vec<&str> = read["s3"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|o| o.as_str().unwrap().lines())
        .collect();
    assert_eq!(records.len(), COUNT + 1);
    let mut with_big = ids(records.iter().copied());
    with_big.retain(|id| expected.contains(id));
    assert_eq!(with_big, expected);
    let logged = read["logs"].as_array().unwrap();
    assert_eq!(ids(logged.iter().map(|l| l.as_str().unwrap())), expected);
    assert_eq!(logged.len(), COUNT);
    // The large change is a dead letter of its own wherever it was too large.
    for name in ["sns", "sqs", "events", "logs"] {
        let (_, body) = t.get(&format!("/handlers/{name}/dead-letters")).await;
        let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
        assert_eq!(letters.len(), 1, "{name}: {letters:#?}");
        assert_eq!(letters[0]["id"], format!("{name}/default/big"));
        let error = letters[0]["last_error"].as_str().unwrap();
        assert!(
            error.starts_with("permanent: the message is 300"),
            "{name}: {error}"
        );
    }
    // SQS, SNS and EventBridge took the batch 10 at a time: some call carried 10, none more.
    let mut calls: Vec<(String, usize)> = Vec::new();
    while let Ok(line) = t.logs.try_recv() {
        if let Some(sent) = call_size(&line.message) {
            calls.push((line.handler.clone(), sent));
        }
    }
    for name in ["sns", "sqs", "events"] {
        let sizes: Vec<usize> = calls
            .iter()
            .filter(|(h, _)| h == name)
            .map(|(_, n)| *n)
            .collect();
        assert!(
            sizes.contains(&10) && sizes.iter().all(|n| *n <= 10),
            "{name}: {sizes:?}"
        );
    }
    t.stop().await;
}

/// Records in the Firehose batch below, each about 13.5 KB in base64: all of them are more
/// than the handler's `outbound.max_request_body` of 64 KiB takes in one call.
const RECORDS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firehose_batch_larger_than_max_request_body_arrives_whole_in_calls_that_fit_it() {
    let moto = Moto::start().await;
    moto.boto(json!({"action": "setup"}));
    let m = &moto.endpoint;
    let (handler, route) = batched(handler(
        "firehose",
        &format!(
            "endpoint: \"{m}\", credentials: {KEYS}, service: firehose, delivery_stream: to-s3"
        ),
        m,
    ));
    let handler = handler.replace(
        "    instance: reuse\n",
        "    instance: reuse\n    outbound: {max_request_body: 64Ki}\n",
    );
    let mut t = TestDaemon::start(&config(&[(handler, route)])).await;
    let mut expected = BTreeSet::new();
    for i in 0..RECORDS {
        expected.insert(created(&t, &format!("r{i}"), &"x".repeat(10_000)).await);
    }
    let records = support::eventually("every record in S3", WAIT, async || {
        let read = moto.boto(json!({"action": "read", "queues": {}}));
        let records: Vec<String> = read["s3"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|o| {
                o.as_str()
                    .unwrap()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        if records.len() < RECORDS {
            tokio::time::sleep(Duration::from_millis(500)).await;
            return None;
        }
        Some(records)
    })
    .await;
    assert_eq!(records.len(), RECORDS, "each record once");
    assert_eq!(ids(records.iter().map(String::as_str)), expected);
    let (_, body) = t.get("/handlers/firehose/dead-letters").await;
    let letters = body["dead_letters"].as_array().cloned().unwrap_or_default();
    assert!(letters.is_empty(), "{letters:#?}");
    // Refused as too large, the calls were split to fit: at most 4 records of 13.5 KB each.
    let (mut split, mut calls) = (false, Vec::new());
    while let Ok(line) = t.logs.try_recv() {
        split |= line
            .message
            .contains("outbound.max_request_body (65536 bytes): sending it in");
        calls.extend(call_size(&line.message));
    }
    assert!(split, "no call was split");
    assert_eq!(calls.iter().sum::<usize>(), RECORDS, "{calls:?}");
    assert!(
        calls.iter().all(|n| *n <= 4) && calls.len() >= 3,
        "{calls:?}"
    );
    t.stop().await;
}

#[test]
fn the_documented_batch_configs_are_valid_configs() {
    let text = std::fs::read_to_string(support::root().join("docs/sinks.md")).unwrap();
    let config = crate::docs::yaml_block(&text, "### Batches of changes");
    let dir = tempfile::tempdir().unwrap();
    let loaded = switchyard::config::validate(&dir.path().join("switchyard.yaml"), config);
    let config = loaded.unwrap_or_else(|e| panic!("{e}"));
    let mut services: Vec<(&str, bool)> = config
        .handlers
        .iter()
        .map(|h| (h.config["service"].as_str().unwrap(), h.batch.is_some()))
        .collect();
    services.sort();
    assert_eq!(
        services,
        [("firehose", true), ("logs", true), ("sqs", true)]
    );
}
