//! Each service's batch call for messages that fit in one call: SQS `SendMessageBatch`,
//! SNS `PublishBatch`, EventBridge `PutEvents`, Firehose `PutRecordBatch`, CloudWatch Logs
//! `PutLogEvents`, and what each entry of the answer means for its change.
//!
//! An entry's `Id` (SQS, SNS) is its index in the call. SQS and SNS name the entries that
//! failed and whether the sender is at fault (`SenderFault: true`: a dead letter naming
//! the code and message; otherwise a retry); EventBridge answers an entry per event, each
//! failed one with an `ErrorCode` read as for one event ([`services::eventbridge_failure`]);
//! Firehose answers a record per record, each failed one (`ErrorCode`) retried; CloudWatch
//! Logs names the events it rejected as too old or too new, retried (with a new timestamp).

use serde_json::{Value, json};
use sigv4::Credentials;
use switchyard_sdk::http::Response;
use switchyard_sdk::sink::base64;
use switchyard_sdk::{ItemOutcome, Level, log};

use crate::aws::{self, Protocol, Refusal};
use crate::batch::{for_all, retry, service_name};
use crate::config::{Config, Service};
use crate::message::{Message, fifo_id};
use crate::services::{self, eventbridge_names, group};

/// The body of one call of the service's batch API carrying `chunk`.
pub fn body(config: &Config, chunk: &[Message]) -> String {
    match config.service {
        Service::Sqs => sqs(config, chunk),
        Service::Sns => sns(config, chunk),
        Service::Eventbridge => eventbridge(config, chunk),
        Service::Firehose => firehose(config, chunk),
        Service::Logs => {
            let texts: Vec<&str> = chunk.iter().map(|m| m.text.as_str()).collect();
            services::logs_body(config, &texts)
        }
    }
}

/// Sends `body` (built by [`body`] from `chunk`) in one call of the service's batch API;
/// an outcome per message.
pub fn send(
    config: &Config,
    credentials: &Credentials,
    chunk: &[Message],
    body: &str,
) -> Result<Vec<ItemOutcome>, Refusal> {
    let call = services::caller(config, credentials);
    let service = service_name(config);
    Ok(match config.service {
        Service::Sqs => {
            let answer = call(Protocol::Json10("AmazonSQS.SendMessageBatch"), body)?;
            let answer: Value = serde_json::from_str(&answer.text()).unwrap_or_default();
            let failed = answer["Failed"].as_array().cloned().unwrap_or_default();
            by_id(&service, chunk.len(), failed.iter().map(json_failure))
        }
        Service::Sns => {
            let answer = call(Protocol::Query, body)?;
            by_id(&service, chunk.len(), xml_failures(&answer.text()))
        }
        Service::Eventbridge => {
            let answer = call(Protocol::Json11("AWSEvents.PutEvents"), body)?;
            eventbridge_answer(config, &answer, chunk.len())
        }
        Service::Firehose => {
            let answer = call(Protocol::Json11("Firehose_20150804.PutRecordBatch"), body)?;
            firehose_answer(&answer, chunk.len())
        }
        Service::Logs => logs_answer(&services::logs(config, body, &call)?, chunk.len()),
    })
}

/// SQS `SendMessageBatch`; a FIFO queue (`….fifo`) gets each message's group and its
/// change's id as deduplication id, as `SendMessage` does.
fn sqs(config: &Config, chunk: &[Message]) -> String {
    let queue = config.queue_url.as_deref().unwrap_or_default();
    let entries: Vec<Value> = chunk
        .iter()
        .enumerate()
        .map(|(i, message)| {
            let mut entry = json!({"Id": i.to_string(), "MessageBody": message.text});
            if queue.ends_with(".fifo") {
                entry["MessageGroupId"] = group(config, message).into();
                entry["MessageDeduplicationId"] = fifo_id(&message.id).into();
            }
            entry
        })
        .collect();
    json!({"QueueUrl": queue, "Entries": entries}).to_string()
}

/// SNS `PublishBatch` (query protocol): `PublishBatchRequestEntries.member.N.*`.
fn sns(config: &Config, chunk: &[Message]) -> String {
    let topic = config.topic_arn.as_deref().unwrap_or_default();
    let mut pairs = vec![
        ("Action".to_string(), "PublishBatch".to_string()),
        ("Version".to_string(), "2010-03-31".to_string()),
        ("TopicArn".to_string(), topic.to_string()),
    ];
    for (i, message) in chunk.iter().enumerate() {
        let key = |name: &str| format!("PublishBatchRequestEntries.member.{}.{name}", i + 1);
        pairs.push((key("Id"), i.to_string()));
        pairs.push((key("Message"), message.text.clone()));
        if let Some(subject) = &config.subject {
            pairs.push((key("Subject"), subject.clone()));
        }
        if topic.ends_with(".fifo") {
            pairs.push((key("MessageGroupId"), group(config, message)));
            pairs.push((key("MessageDeduplicationId"), fifo_id(&message.id)));
        }
    }
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    aws::form(&pairs)
}

/// A failed entry of SQS or SNS: its `Id`, whether the sender is at fault, code, message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    id: String,
    sender_fault: bool,
    code: String,
    message: String,
}

/// A failed entry of SQS's JSON answer.
fn json_failure(entry: &Value) -> Failure {
    let text = |key: &str| entry[key].as_str().unwrap_or_default().to_string();
    Failure {
        id: text("Id"),
        sender_fault: entry["SenderFault"].as_bool().unwrap_or(false),
        code: text("Code"),
        message: text("Message"),
    }
}

/// The failed entries of SNS's XML answer (`<Failed><member>…</member></Failed>`).
fn xml_failures(xml: &str) -> Vec<Failure> {
    let Some(failed) = aws::xml_tag(xml, "Failed") else {
        return Vec::new();
    };
    failed
        .split("<member>")
        .skip(1)
        .map(|member| {
            let text = |tag| aws::xml_tag(member, tag).map(aws::xml_unescape);
            Failure {
                id: text("Id").unwrap_or_default(),
                sender_fault: text("SenderFault").is_some_and(|f| f.trim() == "true"),
                code: text("Code").unwrap_or_default(),
                message: text("Message").unwrap_or_default(),
            }
        })
        .collect()
}

/// Done for each of `count` entries but those `failures` name by `Id`.
fn by_id(
    service: &str,
    count: usize,
    failures: impl IntoIterator<Item = Failure>,
) -> Vec<ItemOutcome> {
    let mut outcomes = vec![ItemOutcome::Done; count];
    for failure in failures {
        let Some(outcome) = failure
            .id
            .parse::<usize>()
            .ok()
            .and_then(|i| outcomes.get_mut(i))
        else {
            log(
                Level::Warn,
                &format!("{service} named an entry {:?} it was not sent", failure.id),
            );
            continue;
        };
        let text = format!(
            "{service} refused the message: {}: {}",
            failure.code, failure.message
        );
        *outcome = if failure.sender_fault {
            ItemOutcome::DeadLetter(text)
        } else {
            retry(service, &text)
        };
    }
    outcomes
}

/// EventBridge `PutEvents` with an entry per message.
fn eventbridge(config: &Config, chunk: &[Message]) -> String {
    let bus = config.event_bus.as_deref().unwrap_or("default");
    let entries: Vec<Value> = chunk
        .iter()
        .map(|message| {
            let (source, detail_type) = eventbridge_names(config, &message.kind, message.change);
            json!({"Source": source, "DetailType": detail_type, "Detail": message.text,
                   "EventBusName": bus})
        })
        .collect();
    json!({ "Entries": entries }).to_string()
}

/// `PutEvents`' answer: an entry per event, in order; a failed one has an `ErrorCode`.
fn eventbridge_answer(config: &Config, answer: &Response, count: usize) -> Vec<ItemOutcome> {
    let answer: Value = serde_json::from_str(&answer.text()).unwrap_or_default();
    let entries = answer["Entries"].as_array().cloned().unwrap_or_default();
    (0..count)
        .map(|i| match entries.get(i) {
            Some(entry) if entry["ErrorCode"].is_string() => {
                for_all(config, services::eventbridge_failure(entry))
            }
            _ => ItemOutcome::Done,
        })
        .collect()
}

/// Firehose `PutRecordBatch`: a record per message, each the message and a newline.
fn firehose(config: &Config, chunk: &[Message]) -> String {
    let records: Vec<Value> = chunk
        .iter()
        .map(|m| json!({"Data": base64(format!("{}\n", m.text).as_bytes())}))
        .collect();
    json!({"DeliveryStreamName": config.delivery_stream, "Records": records}).to_string()
}

/// `PutRecordBatch`'s answer: `FailedPutCount`, and a response per record, in order; a
/// failed record (`ErrorCode`, `ErrorMessage`) is retried.
fn firehose_answer(answer: &Response, count: usize) -> Vec<ItemOutcome> {
    let answer: Value = serde_json::from_str(&answer.text()).unwrap_or_default();
    if answer["FailedPutCount"].as_u64().unwrap_or(0) == 0 {
        return vec![ItemOutcome::Done; count];
    }
    let responses = answer["RequestResponses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (0..count)
        .map(|i| match responses.get(i) {
            Some(r) if r["ErrorCode"].is_string() => {
                let why = format!(
                    "FIREHOSE refused the record: {}: {}",
                    r["ErrorCode"].as_str().unwrap_or_default(),
                    r["ErrorMessage"].as_str().unwrap_or_default()
                );
                retry("FIREHOSE", &why)
            }
            _ => ItemOutcome::Done,
        })
        .collect()
}

/// `PutLogEvents`' answer: `rejectedLogEventsInfo` names the events before
/// `tooOldLogEventEndIndex` or `expiredLogEventEndIndex` and from `tooNewLogEventStartIndex`
/// on, each retried (a new attempt has a new timestamp).
fn logs_answer(answer: &Response, count: usize) -> Vec<ItemOutcome> {
    let answer: Value = serde_json::from_str(&answer.text()).unwrap_or_default();
    let info = &answer["rejectedLogEventsInfo"];
    let index = |key: &str| info[key].as_u64().and_then(|i| usize::try_from(i).ok());
    let old = [
        index("tooOldLogEventEndIndex"),
        index("expiredLogEventEndIndex"),
    ]
    .into_iter()
    .flatten()
    .max();
    let new = index("tooNewLogEventStartIndex");
    (0..count)
        .map(|i| {
            let too_old = old.is_some_and(|end| i < end);
            let too_new = new.is_some_and(|start| i >= start);
            if too_old || too_new {
                retry("LOGS", "CloudWatch Logs rejected the event's timestamp")
            } else {
                ItemOutcome::Done
            }
        })
        .collect()
}
