//! Batches (`handle-batch`) as the [`TestHost`] records them: each service's batch call, the
//! splits at its limits, and what each entry of an answer (and a whole answer) becomes.
//! moto never fails a single entry of what the sink sends, so the per-entry mapping is
//! shown here; the batches against moto's server are in tests/it/sinks_aws.rs.

use serde_json::{Value, json};
use switchyard_sdk::http::{Error, Request, Response};
use switchyard_sdk::sink::base64;
use switchyard_sdk::testing::{Report, TestHost, event};
use switchyard_sdk::{Event, EventKind, ItemOutcome};

use super::*;

/// A ConfigMap `name` whose data is `size` bytes.
fn cm(name: &str, size: usize) -> Value {
    json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop",
           "uid": format!("u-{name}"), "resourceVersion": "7"}, "data": {"v": "x".repeat(size)}})
}

/// `count` added ConfigMaps `c0`, `c1`, ... of `size` bytes each.
fn events(count: usize, size: usize) -> Vec<Event> {
    (0..count)
        .map(|i| event(EventKind::Added, cm(&format!("c{i}"), size)))
        .collect()
}

fn config(service: &str, settings: Value) -> Value {
    let mut config = json!({
        "service": service,
        "region": "eu-west-1",
        "credentials": {"access_key_id": "AKIDEXAMPLE", "secret_access_key": "secret"},
    });
    for (k, v) in settings.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

fn batch(
    config: Value,
    response: Result<Response, Error>,
    events: Vec<Event>,
) -> Report<Vec<ItemOutcome>> {
    let host = TestHost::new().config(config);
    let host = match response {
        Ok(response) => host.http("https://", response),
        Err(error) => host.http_error("https://", error),
    };
    host.handle_batch::<Aws>(events)
}

fn json_body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// The number of entries under `key` (`Entries`, `logEvents`, ...) in each request.
fn entries<T>(report: &Report<T>, key: &str) -> Vec<usize> {
    report
        .requests
        .iter()
        .map(|r| json_body(r)[key].as_array().unwrap().len())
        .collect()
}

fn target(request: &Request) -> &str {
    request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-amz-target"))
        .map_or("", |(_, v)| v.as_str())
}

const FIFO: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/changes.fifo";

#[test]
fn sqs_sends_25_changes_in_calls_of_10_and_maps_each_failed_entry() {
    let answer = json!({"Successful": [], "Failed": [
        {"Id": "3", "SenderFault": true, "Code": "InvalidParameterValue", "Message": "bad body"},
        {"Id": "4", "SenderFault": false, "Code": "InternalError", "Message": "try again"},
    ]});
    let report = batch(
        config("sqs", json!({"queue_url": FIFO})),
        Ok(Response::new(200, answer.to_string())),
        events(25, 10),
    );
    let calls: Vec<Value> = report.requests.iter().map(json_body).collect();
    let sizes: Vec<usize> = calls
        .iter()
        .map(|c| c["Entries"].as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [10, 10, 5]);
    assert!(
        report
            .requests
            .iter()
            .all(|r| target(r) == "AmazonSQS.SendMessageBatch")
    );
    let entry = &calls[1]["Entries"][2];
    assert_eq!(entry["Id"], "2");
    assert_eq!(entry["MessageGroupId"], "shop/c12");
    assert_eq!(entry["MessageDeduplicationId"], "u-c12.7.add");
    let body: Value = serde_json::from_str(entry["MessageBody"].as_str().unwrap()).unwrap();
    assert_eq!(body["id"], "u-c12.7.add");
    // Each call's answer names its entries 3 (the sender's fault) and 4 (not).
    let outcomes = report.outcome.unwrap();
    let letter =
        ItemOutcome::DeadLetter("SQS refused the message: InvalidParameterValue: bad body".into());
    for (i, outcome) in outcomes.iter().enumerate() {
        let expected = match i % 10 {
            3 => letter.clone(),
            4 => ItemOutcome::Retry(None),
            _ => ItemOutcome::Done,
        };
        assert_eq!(*outcome, expected, "item {i}");
    }
}

#[test]
fn sqs_calls_stop_at_256_kib_of_bodies() {
    let report = batch(
        config("sqs", json!({"queue_url": FIFO})),
        Ok(Response::new(200, r#"{"Successful": []}"#)),
        events(5, 100_000),
    );
    let sizes = entries(&report, "Entries");
    assert_eq!(sizes, [2, 2, 1]);
    assert_eq!(report.outcome, Ok(vec![ItemOutcome::Done; 5]));
}

#[test]
fn a_change_too_large_is_a_dead_letter_and_the_others_are_sent() {
    let mut changes = events(3, 10);
    changes.insert(1, event(EventKind::Added, cm("big", 300_000)));
    let report = batch(
        config("sqs", json!({"queue_url": FIFO})),
        Ok(Response::new(200, "{}")),
        changes,
    );
    let outcomes = report.outcome.unwrap();
    let ItemOutcome::DeadLetter(reason) = &outcomes[1] else {
        panic!("{outcomes:?}")
    };
    assert!(
        reason.starts_with("the message is 300")
            && reason.ends_with("more than SQS takes (262144 bytes) even without the old object"),
        "{reason}"
    );
    assert_eq!(outcomes[0], ItemOutcome::Done);
    assert_eq!(outcomes[2..], [ItemOutcome::Done, ItemOutcome::Done]);
    assert_eq!(report.requests.len(), 1);
    assert_eq!(
        json_body(&report.requests[0])["Entries"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn a_whole_call_refused_dead_letters_its_changes_and_a_failed_one_retries_them_all() {
    let sqs = || config("sqs", json!({"queue_url": FIFO}));
    let missing = Response::new(
        400,
        r#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"no queue"}"#,
    );
    let refused = batch(sqs(), Ok(missing), events(12, 10));
    let letter = ItemOutcome::DeadLetter("AWS answered 400 QueueDoesNotExist: no queue".into());
    assert_eq!(refused.outcome, Ok(vec![letter; 12]));
    // No answer: the first call's changes and those of the calls not made are retried.
    let down = batch(
        sqs(),
        Err(Error::Connection("refused".into())),
        events(12, 10),
    );
    assert_eq!(down.outcome, Ok(vec![ItemOutcome::Retry(None); 12]));
    assert_eq!(down.requests.len(), 1);
    assert!(
        down.logs
            .iter()
            .any(|(_, l)| l.contains("connection failed: refused")),
        "{:?}",
        down.logs
    );
    let too_large = batch(
        sqs(),
        Err(Error::TooLarge("HttpRequestBodySize(1048577)".into())),
        events(2, 10),
    );
    let Ok(outcomes) = too_large.outcome else {
        panic!("{:?}", too_large.outcome)
    };
    assert!(
        matches!(&outcomes[0], ItemOutcome::DeadLetter(r) if r.contains("outbound.max_request_body")),
        "{outcomes:?}"
    );
    let throttled = batch(
        sqs(),
        Ok(Response::new(503, "").header("retry-after", "2")),
        events(3, 10),
    );
    assert_eq!(
        throttled.outcome,
        Ok(vec![ItemOutcome::Retry(Some(2000)); 3])
    );
}

#[test]
fn sns_publishes_batches_of_10_and_reads_failed_members_from_the_xml_answer() {
    let topic = "arn:aws:sns:eu-west-1:123456789012:changes.fifo";
    let xml = "<PublishBatchResponse><PublishBatchResult><Successful><member><Id>0</Id>\
               <MessageId>m</MessageId></member></Successful><Failed><member><Id>1</Id>\
               <Code>InvalidParameter</Code><Message>too &lt;long&gt;</Message>\
               <SenderFault>true</SenderFault></member><member><Id>2</Id>\
               <Code>InternalError</Code><Message>x</Message><SenderFault>false</SenderFault>\
               </member></Failed></PublishBatchResult></PublishBatchResponse>";
    let report = batch(
        config("sns", json!({"topic_arn": topic})),
        Ok(Response::new(200, xml)),
        events(11, 10),
    );
    assert_eq!(report.requests.len(), 2);
    let body = String::from_utf8(report.requests[0].body.clone()).unwrap();
    assert!(
        body.starts_with("Action=PublishBatch&Version=2010-03-31&TopicArn="),
        "{body}"
    );
    for key in [
        "PublishBatchRequestEntries.member.10.Id=9",
        "PublishBatchRequestEntries.member.1.MessageGroupId=shop%2Fc0",
        "PublishBatchRequestEntries.member.2.MessageDeduplicationId=u-c1.7.add",
    ] {
        assert!(body.contains(key), "{key} in {body}");
    }
    let outcomes = report.outcome.unwrap();
    assert_eq!(outcomes[0], ItemOutcome::Done);
    assert_eq!(
        outcomes[1],
        ItemOutcome::DeadLetter("SNS refused the message: InvalidParameter: too <long>".into())
    );
    assert_eq!(outcomes[2], ItemOutcome::Retry(None));
    assert_eq!(outcomes[10], ItemOutcome::Done);
}

#[test]
fn eventbridge_puts_an_entry_per_change_and_reads_each_error_code() {
    let answer = json!({"FailedEntryCount": 3, "Entries": [
        {"EventId": "e0"},
        {"ErrorCode": "MalformedDetail", "ErrorMessage": "Detail is malformed."},
        {"ErrorCode": "InternalFailure", "ErrorMessage": "oops"},
        {"ErrorCode": "ThrottlingException", "ErrorMessage": "slow"},
    ]});
    let report = batch(
        config("eventbridge", json!({"event_bus": "k8s"})),
        Ok(Response::new(200, answer.to_string())),
        events(4, 10),
    );
    let body = json_body(&report.requests[0]);
    assert_eq!(target(&report.requests[0]), "AWSEvents.PutEvents");
    assert_eq!(body["Entries"].as_array().unwrap().len(), 4);
    assert_eq!(
        body["Entries"][3]["DetailType"],
        "Kubernetes ConfigMap added"
    );
    assert_eq!(body["Entries"][3]["EventBusName"], "k8s");
    let outcomes = report.outcome.unwrap();
    assert_eq!(outcomes[0], ItemOutcome::Done);
    assert_eq!(
        outcomes[1],
        ItemOutcome::DeadLetter("AWS answered 400 MalformedDetail: Detail is malformed.".into())
    );
    assert_eq!(outcomes[2], ItemOutcome::Retry(None));
    assert!(
        matches!(outcomes[3], ItemOutcome::Retry(Some(_))),
        "{outcomes:?}"
    );
}

#[test]
fn firehose_puts_a_record_batch_and_retries_each_failed_record() {
    let answer = json!({"FailedPutCount": 1, "RequestResponses": [
        {"RecordId": "r0"},
        {"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "slow down"},
        {"RecordId": "r2"},
    ]});
    let report = batch(
        config("firehose", json!({"delivery_stream": "to-s3"})),
        Ok(Response::new(200, answer.to_string())),
        events(3, 10),
    );
    let body = json_body(&report.requests[0]);
    assert_eq!(
        target(&report.requests[0]),
        "Firehose_20150804.PutRecordBatch"
    );
    assert_eq!(body["DeliveryStreamName"], "to-s3");
    assert_eq!(body["Records"].as_array().unwrap().len(), 3);
    assert_eq!(
        report.outcome,
        Ok(vec![
            ItemOutcome::Done,
            ItemOutcome::Retry(None),
            ItemOutcome::Done
        ])
    );
    assert!(
        report
            .logs
            .iter()
            .any(|(_, l)| l.contains("ServiceUnavailableException: slow down")),
        "{:?}",
        report.logs
    );
}

#[test]
fn logs_puts_the_batch_in_one_call_in_order_and_retries_rejected_events() {
    let answer =
        r#"{"rejectedLogEventsInfo":{"tooOldLogEventEndIndex":1,"tooNewLogEventStartIndex":3}}"#;
    let report = batch(
        config(
            "logs",
            json!({"log_group": "/k8s", "log_stream": "changes"}),
        ),
        Ok(Response::new(200, answer)),
        events(4, 10),
    );
    let body = json_body(&report.requests[0]);
    let put = body["logEvents"].as_array().unwrap();
    let names: Vec<Value> = put
        .iter()
        .map(|e| serde_json::from_str::<Value>(e["message"].as_str().unwrap()).unwrap()["object"]["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("c0"), json!("c1"), json!("c2"), json!("c3")]);
    assert!(
        put.windows(2)
            .all(|w| w[0]["timestamp"].as_u64() <= w[1]["timestamp"].as_u64())
    );
    let retry = ItemOutcome::Retry(None);
    assert_eq!(
        report.outcome,
        Ok(vec![
            retry.clone(),
            ItemOutcome::Done,
            ItemOutcome::Done,
            retry
        ])
    );
}

#[test]
fn firehose_calls_stop_at_500_records_and_logs_calls_at_1_mib() {
    let records = |r: &Request| json_body(r)["Records"].as_array().unwrap().len();
    let firehose = batch(
        config("firehose", json!({"delivery_stream": "to-s3"})),
        Ok(Response::new(200, r#"{"FailedPutCount": 0}"#)),
        events(501, 10),
    );
    let sizes: Vec<usize> = firehose.requests.iter().map(records).collect();
    assert_eq!(sizes, [500, 1]);
    let logs = batch(
        config(
            "logs",
            json!({"log_group": "/k8s", "log_stream": "changes"}),
        ),
        Ok(Response::new(200, "{}")),
        events(6, 200_000),
    );
    let sizes = entries(&logs, "logEvents");
    assert_eq!(
        sizes,
        [5, 1],
        "5 events of 200 KB and their 26 bytes fit in 1 MiB"
    );
    assert_eq!(logs.outcome, Ok(vec![ItemOutcome::Done; 6]));
}

/// The handler's `outbound.max_request_body` in the tests below.
const LIMIT: usize = 65_536;

/// A host that refuses a request whose body is larger than [`LIMIT`] as the daemon does
/// (naming the limit when `named`), and answers any other with `answer`.
fn limited(config: Value, named: bool, answer: fn(&Request) -> Response) -> TestHost {
    TestHost::new()
        .config(config)
        .http_with("https://", move |request| {
            if request.body.len() <= LIMIT {
                return Ok(answer(request));
            }
            let limit = if named {
                format!("Some({LIMIT})")
            } else {
                "None".into()
            };
            Err(Error::TooLarge(format!("HttpRequestBodySize({limit})")))
        })
}

/// The names of the ConfigMaps in a Firehose call's records.
fn record_names(request: &Request) -> Vec<String> {
    let body = json_body(request);
    body["Records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let data = base64_decode(r["Data"].as_str().unwrap());
            let message: Value = serde_json::from_slice(&data).unwrap();
            message["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Standard base64 decoded (the records' `Data`).
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let values: Vec<u32> = text
        .bytes()
        .filter(|b| *b != b'=')
        .map(|b| ALPHABET.iter().position(|a| *a == b).unwrap() as u32)
        .collect();
    let mut out = Vec::new();
    for group in values.chunks(4) {
        let n = group
            .iter()
            .enumerate()
            .fold(0, |n, (i, v)| n | v << (18 - 6 * i));
        out.extend(&n.to_be_bytes()[1..group.len()]);
    }
    out
}

/// Firehose's answer to a call: every record put but the second, refused.
fn second_record_fails(request: &Request) -> Response {
    let count = json_body(request)["Records"].as_array().unwrap().len();
    let responses: Vec<Value> = (0..count)
        .map(|i| match i {
            1 => json!({"ErrorCode": "ServiceUnavailableException", "ErrorMessage": "slow"}),
            _ => json!({"RecordId": format!("r{i}")}),
        })
        .collect();
    let failed = usize::from(count > 1);
    Response::new(
        200,
        json!({"FailedPutCount": failed, "RequestResponses": responses}).to_string(),
    )
}

#[test]
fn a_call_refused_as_larger_than_the_named_limit_is_sent_again_in_calls_that_fit_it() {
    let firehose = config("firehose", json!({"delivery_stream": "to-s3"}));
    // 20 records of about 13.5 KB in base64: 270 KB in one call, 4 fit in 64 KiB.
    let report = limited(firehose.clone(), true, second_record_fails)
        .handle_batch::<Aws>(events(20, 10_000));
    let sizes: Vec<usize> = report.requests.iter().map(|r| r.body.len()).collect();
    assert!(sizes[0] > LIMIT, "the whole batch first: {sizes:?}");
    let calls = &report.requests[1..];
    assert_eq!(calls.len(), 5, "{sizes:?}");
    assert!(sizes[1..].iter().all(|s| *s <= LIMIT), "{sizes:?}");
    // Each call as full as the limit allows: its records and the next one's are too many.
    let one = base64(format!("{}\n", "x".repeat(10_000)).as_bytes()).len();
    assert!(sizes[1..5].iter().all(|s| s + one > LIMIT), "{sizes:?}");
    let names: Vec<String> = calls.iter().flat_map(record_names).collect();
    let expected: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    assert_eq!(names, expected, "every record once, in order");
    // Each call's second record was refused and is retried; every other one is done.
    let mut outcomes = Vec::new();
    for call in calls {
        let count = record_names(call).len();
        outcomes.extend((0..count).map(|i| match i {
            1 => ItemOutcome::Retry(None),
            _ => ItemOutcome::Done,
        }));
    }
    assert_eq!(report.outcome, Ok(outcomes));
    assert!(
        report
            .logs
            .iter()
            .any(|(_, l)| l.contains("FIREHOSE: a call of 20 changes (2")
                && l.contains("outbound.max_request_body (65536 bytes): sending it in 5 calls")),
        "{:?}",
        report.logs
    );
}

#[test]
fn a_change_whose_call_alone_is_larger_than_the_limit_is_a_dead_letter_naming_it() {
    let firehose = config("firehose", json!({"delivery_stream": "to-s3"}));
    let mut changes = events(4, 10_000);
    changes.insert(2, event(EventKind::Added, cm("big", 60_000)));
    let done = |_: &Request| Response::new(200, r#"{"FailedPutCount": 0}"#);
    let report = limited(firehose, true, done).handle_batch::<Aws>(changes);
    let outcomes = report.outcome.unwrap();
    let ItemOutcome::DeadLetter(reason) = &outcomes[2] else {
        panic!("{outcomes:?}")
    };
    assert!(
        reason.starts_with("the call for this change alone is 80")
            && reason.ends_with(
                "bytes, more than the handler's outbound.max_request_body (65536 bytes): \
                 raise that limit"
            ),
        "{reason}"
    );
    assert_eq!(
        outcomes.iter().filter(|o| **o == ItemOutcome::Done).count(),
        4
    );
    // Once the limit is known, the large change is never sent alone.
    let names: Vec<Vec<String>> = report.requests[1..].iter().map(record_names).collect();
    assert_eq!(names, [["c0", "c1"], ["c2", "c3"]]);
}

#[test]
fn a_call_refused_as_too_large_without_a_limit_is_sent_again_in_halves() {
    let logs = config(
        "logs",
        json!({"log_group": "/k8s", "log_stream": "changes"}),
    );
    let done = |_: &Request| Response::new(200, "{}");
    // 8 events of about 20 KB: 160 KB, then two calls of 80 KB, then four of 40 KB.
    let report = limited(logs, false, done).handle_batch::<Aws>(events(8, 20_000));
    let counts = entries(&report, "logEvents");
    assert_eq!(counts, [8, 4, 2, 2, 4, 2, 2]);
    assert_eq!(report.outcome, Ok(vec![ItemOutcome::Done; 8]));
    // A change too large alone, with no limit named: a dead letter after its call alone.
    let one = limited(
        config(
            "logs",
            json!({"log_group": "/k8s", "log_stream": "changes"}),
        ),
        false,
        done,
    )
    .handle_batch::<Aws>(events(1, 100_000));
    let outcomes = one.outcome.unwrap();
    assert!(
        matches!(&outcomes[0], ItemOutcome::DeadLetter(r)
            if r.ends_with("more than the handler's outbound.max_request_body: raise that limit")),
        "{outcomes:?}"
    );
    assert_eq!(one.requests.len(), 1);
}

#[test]
fn sqs_calls_split_at_the_limit_keep_each_entry_s_outcome() {
    let sqs = config("sqs", json!({"queue_url": FIFO}));
    // Every call's entry "1" fails at the sender's fault.
    let answer = |_: &Request| {
        let failed = json!({"Failed": [{"Id": "1", "SenderFault": true, "Code": "Invalid",
                                        "Message": "no"}]});
        Response::new(200, failed.to_string())
    };
    let report = limited(sqs, true, answer).handle_batch::<Aws>(events(6, 20_000));
    let counts = entries(&report, "Entries");
    assert_eq!(counts, [6, 3, 3]);
    let letter = ItemOutcome::DeadLetter("SQS refused the message: Invalid: no".into());
    let done = ItemOutcome::Done;
    assert_eq!(
        report.outcome,
        Ok(vec![
            done.clone(),
            letter.clone(),
            done.clone(),
            done.clone(),
            letter,
            done
        ])
    );
}
